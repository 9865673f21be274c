"""Authenticated TCP endpoints of a mesh: the listener and the dialer.

Contract
--------
:class:`Listener` binds ``(host, 0)``, where ``host`` is the worker's own
contact interface (never a wildcard address), and keeps that port open
for the mesh's whole lifetime, served by a daemon thread. Every incoming
connection gets the mutual HMAC handshake of :mod:`dbfs.bfs.dask.mesh.handshake`
in a short-lived thread of its own (at most :data:`MAX_HANDSHAKES` at
once, each bounded by a timeout), so a silent or slow client cannot stall
the others. While the mesh is being set up, a connection that proves the
key with a rank this worker expects (and has not seen yet) is handed to
:meth:`Listener.take`; every other connection (garbage, wrong key, replay
of an earlier handshake, unexpected or duplicate rank, timeout, and any
connection after setup) is closed and reported through ``on_reject(reason,
detail, peer_address)``. Nothing it does touches the mesh's established
connections, so a running search is not disturbed.

:func:`connect_peers` makes one worker's connections: it dials every peer
of lower mesh index (proving the key and checking the peer's proof) and
takes the authenticated connections of the higher ones from its listener.
"""
from __future__ import annotations

import socket
import threading
import time

from dbfs.bfs.dask.mesh.handshake import HandshakeError, accept_handshake, dial_handshake, send_proof
from dbfs.bfs.dask.mesh.transport import _PeerLost, _recv_exact

__all__ = ["Listener", "connect_peers", "MAX_HANDSHAKES", "HANDSHAKE_TIMEOUT"]

MAX_HANDSHAKES = 16          # handshakes in progress at once per listener
HANDSHAKE_TIMEOUT = 10.0     # seconds a connection may take to complete its handshake
_WILDCARDS = ("", "0.0.0.0", "::", "0:0:0:0:0:0:0:0")


class Listener:
    """The listening endpoint of mesh worker ``widx`` (see the module docstring).

    Parameters
    ----------
    mesh_id : str
        The mesh (part of every MAC).
    widx : int
        This worker's mesh index.
    host : str
        The interface to bind: the host of the worker's contact address.
    key : bytes
        The mesh key.
    expect : iterable of int
        Mesh indices that dial this worker during setup.
    on_reject : callable
        ``on_reject(reason, detail, peer_address)`` for every refused connection.
    handshake_timeout : float
        Seconds a connection may take to finish its handshake.
    """

    def __init__(self, mesh_id, widx, host, key, expect, on_reject, handshake_timeout=HANDSHAKE_TIMEOUT):
        if host in _WILDCARDS:
            raise ValueError(f"refusing to bind the mesh to the wildcard address {host!r}")
        self.mesh_id, self.widx, self.key = mesh_id, widx, key
        self.on_reject = on_reject
        self.handshake_timeout = handshake_timeout
        fam = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(fam, socket.SOCK_STREAM)
        self.sock.bind((host, 0))
        self.sock.listen(128)
        self.sock.settimeout(0.5)               # the serving thread notices close() within this
        self.address = (host, self.sock.getsockname()[1])
        self.cond = threading.Condition()
        self.pending = set(expect)              # ranks still to arrive during setup
        self.peers = {}                         # rank -> authenticated socket, until taken
        self.setup = True
        self.closed = False
        self.seen = set()                       # dialer nonces of handshakes that passed
        self.slots = threading.BoundedSemaphore(MAX_HANDSHAKES)
        self.thread = threading.Thread(target=self._serve, daemon=True, name=f"dbfs-listen-{mesh_id[:8]}-{widx}")
        self.thread.start()

    def _serve(self):
        while not self.closed:
            try:
                c, addr = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                if self.closed:
                    return
                time.sleep(0.05)                # e.g. out of file descriptors: try again
                continue
            if not self.slots.acquire(blocking=False):
                c.close()
                self.on_reject("busy", f"{MAX_HANDSHAKES} handshakes already in progress", addr)
                continue
            threading.Thread(target=self._handshake, args=(c, addr), daemon=True,
                             name=f"dbfs-handshake-{self.mesh_id[:8]}-{self.widx}").start()

    def _handshake(self, c, addr):
        try:
            c.settimeout(self.handshake_timeout)
            try:
                rank, nonce_d, nonce_a = accept_handshake(c, self.key, self.mesh_id, self.widx, self.seen,
                                                          _recv_exact)
                with self.cond:
                    ok = self.setup and not self.closed and rank in self.pending
                    if ok:
                        self.pending.discard(rank)
                if not ok:
                    raise HandshakeError("refused", f"rank {rank} is not expected now (unknown, duplicate, or "
                                                    f"the mesh is complete)")
                send_proof(c, self.key, self.mesh_id, self.widx, rank, nonce_d, nonce_a)
            except HandshakeError as exc:
                c.close()
                self.on_reject(exc.reason, str(exc), addr)
                return
            except OSError as exc:
                c.close()
                self.on_reject("closed", f"during the handshake: {exc}", addr)
                return
            except Exception as exc:  # never let a peer's bytes kill the serving thread
                c.close()
                self.on_reject("error", f"during the handshake: {exc!r}", addr)
                return
            with self.cond:
                if self.closed:
                    c.close()
                    return
                self.peers[rank] = c
                self.cond.notify_all()
        finally:
            self.slots.release()

    def take(self, n: int, timeout: float) -> dict:
        """Wait for ``n`` authenticated peers (at most ``timeout`` s); returns
        {rank: socket} and ends the setup: later connections are refused."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while len(self.peers) < n and not self.closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.cond.wait(min(left, 0.5))
            self.setup = False
            peers, self.peers = self.peers, {}
        if len(peers) < n:
            for s in peers.values():
                s.close()
            raise _PeerLost(f"mesh setup on worker {self.widx}: {len(peers)} of {n} peers connected "
                            f"within {timeout:.0f} s")
        return peers

    def close(self) -> None:
        """Stop listening and close connections nobody took."""
        with self.cond:
            self.closed = True
            left, self.peers = list(self.peers.values()), {}
            self.cond.notify_all()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        for s in left:
            s.close()


def connect_peers(listener: Listener, widx: int, addrs: list, timeout: float) -> dict:
    """Worker ``widx``'s authenticated connections {peer: socket}: it dials
    the peers of lower index and takes the higher ones from ``listener``."""
    socks = {}
    try:
        for j in range(widx):
            s = socket.create_connection(tuple(addrs[j]), timeout=timeout)
            socks[j] = s
            s.settimeout(min(timeout, HANDSHAKE_TIMEOUT))
            dial_handshake(s, listener.key, listener.mesh_id, widx, j, _recv_exact)
        socks.update(listener.take(len(addrs) - 1 - widx, timeout))
    except (OSError, HandshakeError) as exc:
        for s in socks.values():
            s.close()
        raise _PeerLost(f"mesh setup failed on worker {widx}: {exc}") from None
    return socks

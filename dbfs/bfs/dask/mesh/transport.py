"""Message rounds between the workers of one mesh (the transports).

Contract
--------
A mesh connects W workers (mesh indices 0..W-1). ``mesh.exchange(kind,
out)`` is one *round*: this worker sends ``out[j]`` (a list of 1-D arrays)
to every peer j as one frame of ``kind`` (:mod:`dbfs.bfs.dask.mesh.frames`) and
returns ``{j: arrays}`` received from each; every worker calls it the same
number of times with the same kinds (the level loop is bulk-synchronous),
so frames carry the round number and a receiver checks kind, round and
sender of each. A lost peer, a closed mesh, a frame that fails its checks
or a round longer than ``timeout`` raises :class:`_PeerLost`.

Transports
----------
- ``"tcp"`` (:class:`_SelectMesh`): one authenticated TCP connection per
  pair of workers; the task thread itself sends and receives on
  non-blocking sockets through one ``selectors`` poll (progress on every
  peer at once, so large messages cannot deadlock; no thread hand-off).
- ``"tcp-threads"`` (:class:`_ThreadedTcpMesh`): the same connections with
  one reader thread per peer feeding a queue.
- ``"dask"`` (:class:`_DaskMesh`): the same frames through distributed's
  comm layer (any comm distributed speaks, TLS included), one comm per
  peer, delivered to the ``dbfs_bsp`` handler the worker plugin registers.

The TCP connections are made and authenticated by :mod:`dbfs.bfs.dask.mesh.listener`.
"""
from __future__ import annotations

import asyncio
import hmac
import queue as _queue
import selectors
import socket
import threading
import time
from urllib.parse import urlparse

import numpy as np
from distributed.comm import connect
from distributed.protocol import to_serialize

from dbfs.bfs.dask.mesh.frames import Expect, FrameError, FrameReader, Limits, decode_parts, encode, read_frame

__all__ = ["TRANSPORTS", "_PeerLost", "_ThreadedTcpMesh", "_SelectMesh", "_DaskMesh", "_LocalMesh", "_Timed"]

TRANSPORTS = ("tcp", "tcp-threads", "dask")


class _PeerLost(ConnectionError):
    """A peer worker vanished (or the mesh was closed, or sent a bad frame) during a search."""


def _recv_exact(sock, view):
    n = 0
    size = len(view)
    while n < size:
        k = sock.recv_into(view[n:], size - n)
        if k == 0:
            raise ConnectionError("peer closed the connection")
        n += k


def _host_of(address: str) -> str:
    """The host of a worker's contact address (its own interface); 127.0.0.1 for in-process comms."""
    u = urlparse(address)
    if u.scheme in ("tcp", "tls", "ws", "wss", "ucx") and u.hostname:
        return u.hostname
    return "127.0.0.1"


def _shutdown(socks) -> None:
    """Shut down and close sockets; a select or recv in progress wakes up."""
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()


class _Rounds:
    """How every transport's exchange starts: refused once the mesh is closed, rounds numbered from 0."""

    closed = False
    round = 0

    def _next_round(self) -> int:
        if self.closed:
            raise _PeerLost("mesh closed")
        self.round += 1
        return self.round - 1


class _ThreadedTcpMesh(_Rounds):
    """Transport 'tcp-threads': all-to-all message rounds over one TCP connection per peer.

    Every round each worker sends exactly one frame to every peer and
    receives exactly one from each; per-connection FIFO order keeps rounds
    aligned. One daemon reader thread per peer drains its socket into a
    queue, checking each frame's round and sender; the kind is checked by
    :meth:`exchange`.
    """

    def __init__(self, mesh_id, widx, W, socks, timeout, limits: Limits):
        self.mesh_id, self.widx, self.W, self.timeout, self.limits = mesh_id, widx, W, timeout, limits
        self.socks = socks
        self.inbox = {j: _queue.Queue() for j in socks}
        self.closed = False
        self.round = 0
        self.threads = []
        for j, s in socks.items():
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.settimeout(None)
            t = threading.Thread(target=self._reader, args=(j, s), daemon=True,
                                 name=f"dbfs-mesh-{mesh_id[:8]}-{widx}<-{j}")
            t.start()
            self.threads.append(t)

    def _reader(self, j, s):
        rd = FrameReader(Expect(None, 0, j, self.limits))
        try:
            rnd = 0
            while True:
                rd.reset(None, rnd)
                self.inbox[j].put(read_frame(s, rd, _recv_exact))
                rnd += 1
        except (OSError, FrameError) as exc:
            if isinstance(exc, FrameError):
                _shutdown([s])
            self.inbox[j].put(_PeerLost(f"connection to worker {j} lost: {exc}"))

    def _send(self, j, frames):
        s = self.socks[j]
        try:
            for f in frames:
                s.sendall(f)
        except OSError as exc:
            raise _PeerLost(f"sending to worker {j} failed: {exc}") from None

    def _recv(self, j, kind):
        try:
            msg = self.inbox[j].get(timeout=self.timeout)
        except _queue.Empty:
            raise _PeerLost(f"no message from worker {j} within {self.timeout:.0f} s") from None
        if isinstance(msg, Exception):
            raise msg
        if msg[0] != kind:
            _shutdown([self.socks[j]])
            raise _PeerLost(f"worker {j} sent a frame of kind {msg[0]} in a round of kind {kind}")
        return msg[1]

    def exchange(self, kind, out):
        """Send ``out[j]`` (arrays) to every peer j as a ``kind`` frame; return {j: arrays} received."""
        rnd = self._next_round()
        for j in self.socks:
            self._send(j, encode(kind, rnd, self.widx, out[j]))
        return {j: self._recv(j, kind) for j in self.socks}

    def close(self):
        self.closed = True
        _shutdown(self.socks.values())
        for q in self.inbox.values():
            q.put(_PeerLost("mesh closed"))


class _SelectMesh(_Rounds):
    """Transport 'tcp' (the default): the same rounds as
    :class:`_ThreadedTcpMesh` without reader threads: the
    task thread itself sends and receives on non-blocking sockets through one
    ``selectors`` poll (progress on every peer at once, so large messages
    cannot deadlock), saving a thread hand-off per message. A socket is
    watched only while its peer owes this round a message or is still being
    sent to, so data of the next round waiting in the kernel never spins the
    poll."""

    def __init__(self, mesh_id, widx, W, socks, timeout, limits: Limits):
        self.mesh_id, self.widx, self.W, self.timeout, self.limits = mesh_id, widx, W, timeout, limits
        self.socks = socks
        self.closed = False
        self.round = 0
        self.readers = {j: FrameReader(Expect(None, 0, j, limits)) for j in socks}
        self.sel = selectors.DefaultSelector()
        self._R, self._W = selectors.EVENT_READ, selectors.EVENT_WRITE
        for s in socks.values():
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.setblocking(False)

    @staticmethod
    def _push(j, s, frames):
        """Send what the socket takes now; True when ``frames`` are all sent."""
        try:
            while frames:
                n = s.send(frames[0])
                if n < len(frames[0]):
                    frames[0] = frames[0][n:]
                    return False
                frames.pop(0)
        except BlockingIOError:
            return False
        except OSError as exc:
            raise _PeerLost(f"sending to worker {j} failed: {exc}") from None
        return True

    def exchange(self, kind, out):
        rnd = self._next_round()
        sends = {}
        for j, s in self.socks.items():
            frames = encode(kind, rnd, self.widx, out[j])
            if not self._push(j, s, frames):       # most messages leave in one call
                sends[j] = frames
        st = self.readers
        for rd in st.values():
            rd.reset(kind, rnd)
        got = {}
        watched = {}
        for j, s in self.socks.items():
            watched[j] = self._R | (self._W if j in sends else 0)
            self.sel.register(s, watched[j], j)
        try:
            self._poll(watched, sends, st, got)
        finally:
            for j in list(watched):
                try:
                    self.sel.unregister(self.socks[j])
                except (KeyError, ValueError, OSError):
                    pass
        return got

    def _poll(self, watched, sends, st, got):
        """Select until every send is done and every peer's frame is in ``got``."""
        deadline = time.monotonic() + self.timeout
        while watched:
            if self.closed:
                raise _PeerLost("mesh closed")
            left = deadline - time.monotonic()
            if left <= 0:
                raise _PeerLost(f"no complete round within {self.timeout:.0f} s")
            try:
                events = self.sel.select(min(left, 1.0))
            except (OSError, ValueError) as exc:      # sockets closed under us by close()
                raise _PeerLost(f"mesh closed: {exc}") from None
            for key, mask in events:
                j, s = key.data, key.fileobj
                ev = watched[j]
                if mask & self._W and self._push(j, s, sends[j]):
                    del sends[j]
                    ev &= ~self._W
                if mask & self._R:
                    self._progress(j, s, st[j], got)
                    if j in got:
                        ev &= ~self._R
                if ev != watched[j]:
                    if ev:
                        self.sel.modify(s, ev, j)
                        watched[j] = ev
                    else:
                        self.sel.unregister(s)
                        del watched[j]

    def _progress(self, j, s, rd, got):
        """Read what is there from peer j into its frame reader ``rd``."""
        while not rd.done:
            if rd.filled < len(rd.view):
                try:
                    n = s.recv_into(rd.view[rd.filled:])
                except BlockingIOError:
                    return
                except OSError as exc:
                    raise _PeerLost(f"connection to worker {j} lost: {exc}") from None
                if n == 0:
                    raise _PeerLost(f"connection to worker {j} lost: peer closed the connection")
                rd.filled += n
                if rd.filled < len(rd.view):
                    continue
            try:
                rd.advance()
            except FrameError as exc:
                _shutdown([s])
                raise _PeerLost(f"worker {j} sent a bad frame: {exc}") from None
        got[j] = rd.arrays

    def close(self):
        """(any thread) shut the sockets down: a select in progress wakes and raises _PeerLost."""
        self.closed = True
        _shutdown(self.socks.values())


class _DaskMesh(_Rounds):
    """The same rounds through distributed's comm layer: one comm per peer,
    opened from this worker's event loop with distributed's ``connect`` (so
    any comm distributed speaks, TLS included), carrying one-way messages
    (``reply=False``) to the ``dbfs_bsp`` handler of the worker plugin.
    A message carries the mesh id, the sender's token (an HMAC of the mesh
    key, checked with ``compare_digest``) and the frame as bytes plus raw
    buffers, decoded with the same checks as the TCP frames."""

    def __init__(self, mesh_id, widx, W, addrs, timeout, limits: Limits, tokens, worker):
        self.mesh_id, self.widx, self.W, self.timeout, self.limits = mesh_id, widx, W, timeout, limits
        self.addrs = addrs
        self.tokens = tokens                  # mesh index -> that worker's token
        self.peers = [j for j in range(W) if j != widx]
        self.worker = worker
        self.loop = worker.loop.asyncio_loop
        self.cond = threading.Condition()
        self.box = {}              # src -> its frames received so far (FIFO: one comm per sender)
        self.round = 0
        self.pending = []
        self.comms = {}
        self.locks = {}
        self.closed = False

    def deliver(self, src, token, parts) -> str:
        """(event loop) file one received message; returns '' or why it was refused."""
        if not isinstance(src, int) or src not in self.tokens or src == self.widx:
            return f"unknown sender {src!r}"
        if not isinstance(token, bytes) or not hmac.compare_digest(token, self.tokens[src]):
            return f"bad token for sender {src}"
        if not isinstance(parts, (list, tuple)) or not parts:
            return f"malformed message from worker {src}"
        with self.cond:
            self.box.setdefault(src, []).append(parts)
            self.cond.notify_all()
        return ""

    async def _send_async(self, j, parts):
        lock = self.locks.get(j)
        if lock is None:
            lock = self.locks[j] = asyncio.Lock()
        async with lock:                       # one writer per comm, rounds in order
            comm = self.comms.get(j)
            if comm is None:
                comm = self.comms[j] = await connect(self.addrs[j], timeout=self.timeout,
                                                     **self.worker.connection_args)
            await comm.write({"op": "dbfs_bsp", "reply": False, "mesh": self.mesh_id, "src": self.widx, "dst": j,
                              "token": self.tokens[self.widx],
                              "parts": [bytes(parts[0])] + [to_serialize(p) for p in parts[1:]]})

    def _check_sends(self):
        still = []
        for f in self.pending:
            if f.done():
                exc = f.exception()
                if exc is not None:
                    raise _PeerLost(f"sending to a peer failed: {exc}")
            else:
                still.append(f)
        self.pending = still

    def exchange(self, kind, out):
        rnd = self._next_round()
        for j in self.peers:
            parts = encode(kind, rnd, self.widx, out[j])
            self.pending.append(asyncio.run_coroutine_threadsafe(self._send_async(j, parts), self.loop))
        got = {}
        deadline = time.monotonic() + self.timeout
        with self.cond:
            for j in self.peers:
                while not self.box.get(j):
                    if self.closed:
                        raise _PeerLost("mesh closed")
                    self._check_sends()
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise _PeerLost(f"no message from worker {j} within {self.timeout:.0f} s")
                    self.cond.wait(min(left, 0.05))
                parts = self.box[j].pop(0)
                try:
                    got[j] = decode_parts(parts, Expect(kind, rnd, j, self.limits))[1]
                except (FrameError, TypeError, ValueError) as exc:
                    raise _PeerLost(f"worker {j} sent a bad frame: {exc}") from None
        self._check_sends()
        return got

    async def _close_comms(self):
        for c in self.comms.values():
            c.abort()

    def close(self):
        self.closed = True
        with self.cond:
            self.cond.notify_all()
        try:
            asyncio.run_coroutine_threadsafe(self._close_comms(), self.loop)
        except RuntimeError:
            pass


def _payload_bytes(out) -> int:
    """Bytes of the arrays in one round's messages (``out``: peer -> list of arrays and small lists): what
    this worker hands the mesh, frame headers and the small lists of ids and offsets left out."""
    return sum(int(a.nbytes) for msg in out.values() if msg for a in msg if isinstance(a, np.ndarray))


class _Timed:
    """Counts a mesh's rounds, the seconds spent in them and the array bytes sent (:func:`_payload_bytes`)."""

    def __init__(self, mesh):
        self.mesh, self.rounds, self.seconds, self.sent = mesh, 0, 0.0, 0

    def exchange(self, kind, out):
        t = time.perf_counter()
        self.sent += _payload_bytes(out)
        try:
            return self.mesh.exchange(kind, out)
        finally:
            self.seconds += time.perf_counter() - t
            self.rounds += 1


class _LocalMesh:
    """W = 1: nothing to exchange."""

    W = 1
    widx = 0

    def exchange(self, kind, out):
        return {}

    def close(self):
        pass

"""Connection handshake of the worker-to-worker mesh (mutual HMAC-SHA256).

Contract
--------
A TCP connection of a mesh carries frames (:mod:`dbfs.bfs.dask.mesh.frames`)
only after both ends have shown that they hold the mesh's 32-byte key,
which the client makes per mesh (:func:`new_key`) and hands every worker
through the scheduler. Anything else raises :class:`HandshakeError` with a
``reason`` (garbage, bad key, replay, refused, timeout, closed), and the
caller closes the connection.

Method: a challenge-response in both directions (HMAC, RFC 2104, over
SHA-256), fixed-size messages::

    acceptor -> dialer   b"DBFSHELO" | nonce_a (32)
    dialer -> acceptor   b"DBFSDIAL" | rank i32 | nonce_d (32)
                         | HMAC(key, "dial" mesh_id nonce_a nonce_d rank peer)
    acceptor -> dialer   b"DBFSPROF" | HMAC(key, "accept" mesh_id nonce_d nonce_a peer rank)

Both MACs are checked with :func:`hmac.compare_digest`. The acceptor's
fresh nonce makes an answer recorded from an earlier handshake useless
(and a dialer nonce seen before is refused as a replay); the acceptor
answers only a dialer whose rank it expects, so the dialer learns it
reached a worker of the same mesh. There is no per-frame MAC:
authentication is per connection.
"""
from __future__ import annotations

import hashlib
import hmac
import secrets
import struct

__all__ = ["HandshakeError", "new_key", "dial_handshake", "accept_handshake", "send_proof", "HELLO", "ANSWER",
           "PROOF"]


class HandshakeError(ConnectionError):
    """A connection that failed the mesh handshake (``reason`` says how)."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}{': ' + detail if detail else ''}")
        self.reason = reason


HELLO = struct.Struct("<8s32s")        # acceptor: magic, nonce_a
ANSWER = struct.Struct("<8si32s32s")   # dialer: magic, rank, nonce_d, mac
PROOF = struct.Struct("<8s32s")        # acceptor: magic, mac
_HELLO, _ANSWER, _PROOF = b"DBFSHELO", b"DBFSDIAL", b"DBFSPROF"


def new_key() -> bytes:
    """A fresh per-mesh key (32 random bytes)."""
    return secrets.token_bytes(32)


def _mac(key: bytes, label: bytes, mesh_id: str, *parts: bytes) -> bytes:
    return hmac.new(key, b"|".join((label, mesh_id.encode()) + parts), hashlib.sha256).digest()


def _ranks(a: int, b: int) -> bytes:
    return struct.pack("<ii", a, b)


def _recv_struct(sock, st: struct.Struct, magic: bytes, recv_exact) -> tuple:
    buf = bytearray(st.size)
    try:
        recv_exact(sock, memoryview(buf))
    except TimeoutError:
        raise HandshakeError("timeout", "no handshake within the time limit") from None
    except OSError as exc:
        raise HandshakeError("closed", str(exc)) from None
    fields = st.unpack(buf)
    if fields[0] != magic:
        raise HandshakeError("garbage", "not a dbfs handshake")
    return fields[1:]


def dial_handshake(sock, key: bytes, mesh_id: str, rank: int, peer: int, recv_exact) -> None:
    """Dialer side: prove the key as mesh worker ``rank`` to worker ``peer``
    and check its proof; HandshakeError when it fails."""
    (nonce_a,) = _recv_struct(sock, HELLO, _HELLO, recv_exact)
    nonce_d = secrets.token_bytes(32)
    sock.sendall(ANSWER.pack(_ANSWER, rank, nonce_d, _mac(key, b"dial", mesh_id, nonce_a, nonce_d,
                                                          _ranks(rank, peer))))
    (mac,) = _recv_struct(sock, PROOF, _PROOF, recv_exact)
    if not hmac.compare_digest(mac, _mac(key, b"accept", mesh_id, nonce_d, nonce_a, _ranks(peer, rank))):
        raise HandshakeError("bad key", f"worker {peer} did not prove the mesh key")


def accept_handshake(sock, key: bytes, mesh_id: str, rank: int, seen: set, recv_exact) -> tuple:
    """Acceptor side, up to the dialer's answer: returns (dialer rank, nonce_d,
    nonce_a) once its MAC checks out; HandshakeError (garbage, bad key,
    replay, timeout) otherwise. ``seen``: dialer nonces already used. The
    caller decides whether it wants that rank and then calls :func:`send_proof`."""
    nonce_a = secrets.token_bytes(32)
    sock.sendall(HELLO.pack(_HELLO, nonce_a))
    peer, nonce_d, mac = _recv_struct(sock, ANSWER, _ANSWER, recv_exact)
    if nonce_d in seen:
        raise HandshakeError("replay", f"dialer nonce of an earlier handshake (claimed rank {peer})")
    if not hmac.compare_digest(mac, _mac(key, b"dial", mesh_id, nonce_a, nonce_d, _ranks(peer, rank))):
        raise HandshakeError("bad key", f"claimed rank {peer}")
    seen.add(nonce_d)
    return peer, nonce_d, nonce_a


def send_proof(sock, key: bytes, mesh_id: str, rank: int, peer: int, nonce_d: bytes, nonce_a: bytes) -> None:
    """Acceptor side, last step: prove the key to the accepted dialer ``peer``."""
    sock.sendall(PROOF.pack(_PROOF, _mac(key, b"accept", mesh_id, nonce_d, nonce_a, _ranks(rank, peer))))

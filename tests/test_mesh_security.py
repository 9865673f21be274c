"""The distributed BFS's worker-to-worker mesh is safe to expose (``dbfs.bfs.dask``).

Rules checked:

- frames: a frame whose magic, version, kind, round, sender, dtype code,
  element count, array count or layout differs from what the round expects
  is refused before anything is allocated; network bytes are never
  unpickled;
- handshake: only a peer holding the mesh key gets a connection, both ends
  prove it (HMAC challenge-response), a recorded answer cannot be replayed,
  and every refusal is logged on ``dbfs.mesh`` and counted;
- on a live cluster (``distributed`` marker): attacks on a mesh port while
  searches run (garbage, a pickle that would create a file, a handshake with
  a wrong key, a replayed handshake) are refused and counted on the worker,
  the file never appears and every search still validates; the listener is
  bound to the worker's interface (127.0.0.1 on a LocalCluster); on a TLS
  cluster the mesh is never plaintext TCP.
"""
from __future__ import annotations

import os
import pickle
import secrets
import socket
import struct
import subprocess
import threading
import time

import numpy as np
import pytest

from dbfs.bfs.dask.mesh import frames as F
from dbfs.bfs.dask.mesh import handshake as H
from dbfs.bfs.dask.mesh.listener import Listener, connect_peers
from dbfs.bfs.dask.mesh.transport import _PeerLost, _recv_exact
from dbfs.workers_info import workers_info

LIMITS = F.Limits.for_graph(1000, 4)


# ------------------------------------------------------------------ helpers
class _Evil:
    """Unpickling this runs ``touch path``: proof that nobody unpickled it is that the file is absent."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return os.system, (f"touch {self.path}",)


def _joined(kind=F.COUNTS, rnd=0, sender=1, arrays=None):
    arrays = [np.zeros(3, np.int64), np.zeros(1, np.float64)] if arrays is None else arrays
    return bytes(b"".join(bytes(p) for p in F.encode(kind, rnd, sender, arrays)))


def _front():
    return _joined(F.FRONT, 0, 1, [np.array([0], np.int64), np.zeros(2, np.int64)])


def _patched(buf, offset, fmt, value):
    b = bytearray(buf)
    struct.pack_into(fmt, b, offset, value)
    return bytes(b)


def _decode(buf, kind=F.COUNTS, rnd=0, sender=1, limits=LIMITS):
    return F.decode_parts([buf], F.Expect(kind, rnd, sender, limits))


def _stream_decode(buf, kind=F.COUNTS, rnd=0, sender=1, limits=LIMITS):
    """The same bytes through the incremental reader the TCP transports use."""
    rd = F.FrameReader(F.Expect(None, 0, sender, limits))
    rd.reset(kind, rnd)
    pos = 0
    while not rd.done:
        n = len(rd.view) - rd.filled
        rd.view[rd.filled:] = buf[pos:pos + n]
        rd.filled += n
        pos += n
        rd.advance()
    return rd.kind, rd.arrays


# --------------------------------------------------------------- frame codec
@pytest.mark.parametrize("decode", [_decode, _stream_decode])
def test_frame_roundtrip(decode):
    L = np.arange(5, dtype=np.int32)
    arrays = [(2, 3), L, L + 1, L[:2], L[:2] + 7]
    kind, got = decode(_joined(F.PAIRS, 4, 2, arrays), F.PAIRS, 4, 2)
    assert kind == F.PAIRS and got[0] == (2, 3)                   # head arrays decode to tuples
    assert all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(arrays[1:], got[1:]))
    big = [(1, 2, 3), (0.5,), (0,), np.arange(20000, dtype=np.int64)]
    parts = F.encode(F.COUNTS_FRONT, 9, 0, big)
    assert len(parts) == 2 and np.shares_memory(np.frombuffer(parts[-1], np.int64), big[3])     # zero-copy
    for kind, got in (F.decode_parts(parts, F.Expect(F.COUNTS_FRONT, 9, 0, F.Limits(20064, 8))),
                      decode(b"".join(bytes(p) for p in parts), F.COUNTS_FRONT, 9, 0, F.Limits(20064, 8))):
        assert got[:3] == big[:3] and np.array_equal(got[3], big[3])


@pytest.mark.parametrize("decode", [_decode, _stream_decode])
def test_pull_frame(decode):
    """PULL (pairs left in device memory): three int64 lists of one length, nothing else."""
    arrays = [(0, 2), (10, 40), (40, 45)]
    kind, got = decode(_joined(F.PULL, 3, 1, arrays), F.PULL, 3, 1)
    assert kind == F.PULL and got == arrays
    kind, got = decode(_joined(F.PULL, 3, 1, [(), (), ()]), F.PULL, 3, 1)
    assert got == [(), (), ()]
    with pytest.raises(F.FrameError):                   # lists of unequal length
        decode(_joined(F.PULL, 3, 1, [(0, 2), (10,), (40, 45)]), F.PULL, 3, 1)


@pytest.mark.parametrize("decode", [_decode, _stream_decode])
@pytest.mark.parametrize("case", ["magic", "version", "kind", "round", "sender", "dtype", "count", "arrays",
                                  "layout", "pair-dtypes"])
def test_frame_refused(decode, case):
    """Each way a frame can differ from what its round expects is refused (FrameError)."""
    good = _joined()
    H = F.HEADER.size
    bad = {
        "magic": lambda: b"XXXX" + good[4:],
        "version": lambda: _patched(good, 4, "<B", 99),
        "kind": lambda: _patched(good, 5, "<B", F.PAIRS),           # a valid kind, not this round's
        "round": lambda: _patched(good, 8, "<q", 1),
        "sender": lambda: _patched(good, 16, "<i", 3),
        "dtype": lambda: _patched(_front(), H + F.DESCR.size, "<B", 9),   # code outside the table
        "count": lambda: _joined(F.FRONT, 0, 1, [np.array([0], np.int64), np.zeros(LIMITS.max_elems + 1, np.int64)]),
        "arrays": lambda: _patched(good, 20, "<I", LIMITS.max_arrays + 1),
        "layout": lambda: _patched(_front(), 5, "<B", F.COUNTS),      # a FRONT frame's arrays as COUNTS
        "pair-dtypes": lambda: _joined(F.PAIRS, 0, 1, [np.array([0], np.int64), np.zeros(2, np.int32),
                                                       np.zeros(2, np.int64)]),
    }[case]()
    kind = {"count": F.FRONT, "pair-dtypes": F.PAIRS, "dtype": F.FRONT}.get(case, F.COUNTS)
    with pytest.raises(F.FrameError):
        decode(bad, kind)


def test_frame_refuses_pickle_and_unknown_dtypes(tmp_path):
    target = tmp_path / "pwned"
    blob = pickle.dumps(_Evil(target))
    for buf in (blob, struct.pack("<qq", len(blob), 0) + blob + bytes(64)):
        with pytest.raises(F.FrameError):
            _decode(buf)
    with pytest.raises(F.FrameError, match="dtype"):
        F.encode(F.FRONT, 0, 0, [(0,), np.zeros(1, object)])
    with pytest.raises(F.FrameError, match="cannot hold"):
        F.encode(F.COUNTS, 0, 0, [(1.5, 2, 3), (0.0,)])             # a float where int64 counts go
    with pytest.raises(F.FrameError, match="elements"):
        F.encode(F.COUNTS, 0, 0, [(1, 2), (0.0,)])
    assert not target.exists()


# ------------------------------------------------------ coded frames (hosts)
@pytest.mark.parametrize("decode", [_decode, _stream_decode])
def test_coded_frames_round_trip(decode):
    """BEGIN and the coded kinds: head lists decode to tuples, streams to uint8 arrays."""
    s1, s2 = np.arange(7, dtype=np.uint8), np.zeros(0, np.uint8)
    cases = [(F.BEGIN, [(5, 1)]), (F.PAIRS_Z, [(2, 3), (4, 1), s1, s2]), (F.FRONT_Z, [(1,), (2,), s1]),
             (F.COUNTS_FRONT_Z, [(1, 2, 3), (0.5,), (0, 1), (1, 0), s2, s1]), (F.PAIRS_Z, [(), ()])]
    for kind, arrays in cases:
        k, got = decode(_joined(kind, 2, 1, arrays), kind, 2, 1)
        n_head = sum(not isinstance(a, np.ndarray) for a in arrays)
        assert k == kind and got[:n_head] == arrays[:n_head]
        assert all(g.dtype == np.uint8 and np.array_equal(g, a) for g, a in zip(got[n_head:], arrays[n_head:]))


@pytest.mark.parametrize("decode", [_decode, _stream_decode])
@pytest.mark.parametrize("case", ["u8-in-front", "u8-in-pairs", "int64-stream", "lists-unequal", "streams-fewer",
                                  "streams-more", "begin-short", "stream-too-long"])
def test_coded_layouts_refused(decode, case):
    """The coded kinds admit exactly k uint8 streams after head lists of one length k; the int64 kinds
    (which GPU workers send) admit no uint8 array; BEGIN is two int64."""
    u8 = np.zeros(3, np.uint8)
    kind, arrays = {
        "u8-in-front": (F.FRONT, [(0,), u8]),
        "u8-in-pairs": (F.PAIRS, [(0,), u8, u8]),
        "int64-stream": (F.FRONT_Z, [(0,), (1,), np.zeros(3, np.int64)]),
        "lists-unequal": (F.PAIRS_Z, [(0, 1), (3,), u8, u8]),
        "streams-fewer": (F.FRONT_Z, [(0, 1), (1, 1), u8]),
        "streams-more": (F.COUNTS_FRONT_Z, [(1, 2, 3), (0.5,), (0,), (1,), u8, u8]),
        "begin-short": (F.START, [(0,)]),
        "stream-too-long": (F.FRONT_Z, [(0,), (1,), np.zeros(F.Limits(10, 8).max_stream + 1, np.uint8)]),
    }[case]
    expect = F.BEGIN if case == "begin-short" else kind
    buf = _joined(kind, 0, 1, arrays)
    if case == "begin-short":                                  # a START frame in a BEGIN round's place
        buf = _patched(buf, 5, "<B", F.BEGIN)
    with pytest.raises(F.FrameError):
        decode(buf, expect, limits=F.Limits(10, 8))


def _slice_front(stream, tag, n=1000, pad=5):
    """Decode ``stream`` as the slice of a rank of n rows (pad, base 64) into a fresh global bitmap."""
    from dbfs.bfs.dask.mesh import codec as C

    front = np.zeros(((64 + pad + n + 63) >> 6) + 1, np.int64)
    return C.decode_slice_or(np.asarray(stream, np.uint8), tag, front, pad, n, 0, 1, 0, 64), front


_MALFORMED_SLICES = {
    "truncated": (1, [5, 0x83]),                       # the last varint's continuation bit set, no byte after
    "overlong": (1, [0x80, 0x00]),                     # 0 in two bytes
    "overlong-tail": (1, [3, 0x85, 0x80, 0x00]),
    "ten-bytes": (1, [0xFF] * 9 + [0x01]),             # more than 63 bits
    "past-the-rows": (1, [0xE8, 0x07]),                # row 1000 of 1000
    "gap-past-the-rows": (1, [10, 0xDD, 0x07]),        # 10, then a gap to row 1000
    "gap-overflow": (1, [1] + [0xFF] * 8 + [0x7F]),    # a gap of 2^63 - 1: past any row, no wrap-around
    "clear-past-the-rows": (2, [0xE7, 0x07, 0]),       # row 999, then one more
    "bitmap-short": (0, [0] * 8 * 15),                 # 15 words where the rank has 16
    "bitmap-pad-bit": (0, [1] + [0] * (8 * 16 - 1)),   # a pad row's bit (another rank's vertex)
    "bitmap-tail-bit": (0, [0] * (8 * 16 - 1) + [0x80]),
    "unknown-form": (3, [1]),
}


@pytest.mark.parametrize("case", sorted(_MALFORMED_SLICES))
def test_malformed_slice_streams_refused(case):
    """A malformed frontier slice is refused (-1), and no bit outside its rank's rows is ever written."""
    tag, stream = _MALFORMED_SLICES[case]
    k, front = _slice_front(stream, tag)
    bits = np.unpackbits(front.view(np.uint8), bitorder="little")
    assert k == -1 and not bits[:64 + 5].any() and not bits[64 + 5 + 1000:].any()


def test_well_formed_slice_streams_decode():
    """The controls of the malformed cases: one byte less wrong, and they decode."""
    assert _slice_front([5, 0x03], 1)[0] == 2
    assert _slice_front([0xE7, 0x07], 1)[0] == 1
    assert _slice_front([0xE7, 0x07], 2)[0] == 999
    assert _slice_front([0] * 8 * 16, 0)[0] == 0


_MALFORMED_PAIRS = {
    "short": lambda s: s[:-1],
    "long": lambda s: np.concatenate([s, [0]]),
    "padding-bit": lambda s: np.concatenate([s[:-1], [s[-1] | 0x80]]),
}


@pytest.mark.parametrize("case", ["short", "long", "padding-bit", "index", "parent", "count"])
def test_malformed_pair_streams_refused(case):
    from dbfs.bfs.dask.mesh import codec as C

    n, N = 500, 1000
    b1, b2 = C.pair_widths(n, N)
    L, U = np.array([3, 499, 7], np.int32), np.array([0, 999, 5], np.int32)
    if case == "index":
        L[1] = 500                                      # fits b1 bits, past the rank's rows
    if case == "parent":
        U[1] = 1000                                     # fits b2 bits, not a vertex
    s = C.pack_pairs(L, U, 0, 3, b1, b2)
    assert (b1, b2) == (9, 10) and s.size == 8         # 57 bits: the last byte has 7 padding bits
    s = _MALFORMED_PAIRS.get(case, lambda x: x)(s).astype(np.uint8)
    assert C.unpack_pairs(s, 4 if case == "count" else 3, b1, b2, n, N, np.int32) is None
    good = C.pack_pairs(np.array([3, 499, 7], np.int32), U % N, 0, 3, b1, b2)
    assert C.unpack_pairs(good, 3, b1, b2, n, N, np.int32) is not None


class _NoWorker:
    address = "tcp://127.0.0.1:1"
    handlers: dict = {}


class _OnePeer:
    """Worker 0's mesh whose one peer (worker 1) answers each round with ``answers[kind]``: frames made by the
    real encoder and decoded by the real decoder (the checks of the wire), then handed to the level step."""

    def __init__(self, answers):
        self.answers, self.round = answers, 0

    def exchange(self, kind, out):
        assert set(out) == {1}
        buf = b"".join(bytes(p) for p in F.encode(kind, self.round, 1, self.answers[kind]))
        got = F.decode_parts([buf], F.Expect(kind, self.round, 1, F.Limits.for_graph(1000, 2)))[1]
        self.round += 1
        return {1: got}


def _one_rank_search(answers, coded=True):
    """A real level loop's state for rank 0 of a 1000-vertex ring in 2 blocks (rank 1 on the scripted peer),
    started from vertex 3 with the peer speaking the coded kinds (``coded``) or the int64 ones."""
    from dbfs.bfs.cpu import hub_by_degree
    from dbfs.bfs.dask.search.bsp import _Search
    from dbfs.bfs.dask.mesh.plugin import MeshPlugin
    from dbfs.bfs.dask.layout.worker import _Part

    v = np.arange(500)
    indices = np.stack([(v - 1) % 1000, v + 1], 1).ravel().astype(np.int32)
    meta = {"rank": 0, "P": 2, "partitioning": "block", "n_vertices": 1000, "vertex_range": range(0, 500),
            "nnz": 1000, "load_time": 0.0, "variant": "p2-block"}
    p = _Part(np.arange(0, 1001, 2), indices, meta)
    p.hub = hub_by_degree(p.indptr, p.indices, np.full(1000, 2, np.int64))
    plugin = MeshPlugin()
    plugin.setup(_NoWorker())
    s = _Search(_OnePeer({F.BEGIN: [(2, int(coded))], **answers}), 0, [[0], [1]], [p], plugin, None)
    assert s.start(3) == 2 and s.coded == coded
    s.visit_root(3)
    return s


def _pairs_for_rank1(L, U, cnt=None, rank=1):
    from dbfs.bfs.dask.mesh import codec as C

    b1, b2 = C.pair_widths(500, 1000)
    L, U = np.array(L, np.int32), np.array(U, np.int32)
    return [(rank,), (len(L) if cnt is None else cnt,), C.pack_pairs(L, U, 0, len(L), b1, b2)]


_BAD_ROUNDS = {   # step -> the peer's answer that makes it a lost peer
    "front: truncated varint": ("front", {F.FRONT_Z: [(1,), (1,), np.array([0x83], np.uint8)]}),
    "front: overlong varint": ("front", {F.FRONT_Z: [(1,), (1,), np.array([0x80, 0], np.uint8)]}),
    "front: id past the rank": ("front", {F.FRONT_Z: [(1,), (1,), np.array([0xF4, 0x03], np.uint8)]}),
    "front: gap overflow": ("front", {F.FRONT_Z: [(1,), (1,), np.array([1] + [0xFF] * 8 + [0x7F], np.uint8)]}),
    "front: bitmap pad bit": ("front", {F.FRONT_Z: [(1,), (0,), np.r_[np.uint8(1), np.zeros(8 * 9 - 1, np.uint8)]]}),
    "front: unknown form": ("front", {F.FRONT_Z: [(1,), (9,), np.zeros(1, np.uint8)]}),
    "front: another's rank": ("front", {F.FRONT_Z: [(0,), (1,), np.zeros(1, np.uint8)]}),
    "pairs: rank not held": ("td", {F.PAIRS_Z: _pairs_for_rank1([1], [500], rank=1)}),
    "pairs: index past the rank": ("td", {F.PAIRS_Z: _pairs_for_rank1([500], [501], rank=0)}),
    "pairs: parent not a vertex": ("td", {F.PAIRS_Z: _pairs_for_rank1([4], [1000], rank=0)}),
    "pairs: count over the rank": ("td", {F.PAIRS_Z: [(0,), (501,), np.zeros(8, np.uint8)]}),
    "pairs: count too small": ("td", {F.PAIRS_Z: _pairs_for_rank1([4, 5], [501, 502], cnt=1, rank=0)}),
    "counts disagree": ("bu", {F.FRONT_Z: [(1,), (1,), np.zeros(0, np.uint8)],
                               F.COUNTS_FRONT_Z: [(2, 4, 0), (0.0,), (1,), (1,), np.array([0], np.uint8)]}),
}


@pytest.mark.parametrize("case", sorted(_BAD_ROUNDS))
def test_malformed_coded_rounds_are_a_lost_peer(case):
    """Every malformed stream or stream list a peer sends makes the level step raise _PeerLost, no other
    exception (the search closes that mesh and the client reruns it)."""
    step, answers = _BAD_ROUNDS[case]
    s = _one_rank_search({F.COUNTS: [(0, 0, 0), (0.0,)], **answers})
    with pytest.raises(_PeerLost, match="bad frame"):
        if step == "front":
            s.to_bitmaps()
        elif step == "td":
            s.td_level(0, 0.0)
        else:
            s.to_bitmaps()
            s.bu_level(0.0)


def test_well_formed_coded_rounds_are_absorbed():
    """The controls: the same rounds well formed are absorbed (a peer's pair claims vertex 4 for rank 0,
    its frontier slice holds vertex 500, its counts agree)."""
    s = _one_rank_search({F.PAIRS_Z: _pairs_for_rank1([4, 250], [501, 502], rank=0),
                          F.COUNTS: [(0, 0, 0), (0.0,)]})
    totals, _ = s.td_level(0, 0.0)
    st = s.states[0]
    assert sorted(st.queue.tolist()) == [2, 4, 250] and st.parent[250] == 502 and totals[0][0] == 3
    s = _one_rank_search({F.FRONT_Z: [(1,), (1,), np.array([0], np.uint8)],
                          F.COUNTS_FRONT_Z: [(1, 2, 2), (0.0,), (1,), (1,), np.array([1], np.uint8)]})
    s.to_bitmaps()
    assert s.front[500 >> 6] >> (500 & 63) & 1
    totals, _ = s.bu_level(0.0)
    assert [t[0] for t in totals] == [3, 1]     # 2, 4 and 499 here (next to 3 and to the peer's 500), 501 there
    assert sorted(np.flatnonzero(np.unpackbits(s.states[0].fbm.view(np.uint8), bitorder="little"))) == [2, 4, 499]


@pytest.mark.parametrize("case", ["index past the rank", "negative index", "parent not a vertex", "control"])
def test_int64_pairs_outside_the_rank_are_a_lost_peer(case):
    """The int64 PAIRS round (a peer that does not speak the coded kinds, e.g. a GPU worker): an owner-local
    index outside the rank's rows or a parent that is no vertex is refused before the absorb kernel indexes by
    it; the control is absorbed."""
    L, U = {"index past the rank": ([500], [501]), "negative index": ([-1], [501]),
            "parent not a vertex": ([4], [1000]), "control": ([250], [502])}[case]
    s = _one_rank_search({F.COUNTS: [(0, 0, 0), (0.0,)]}, coded=False)
    dt = s.scratch.dtype
    s.mesh.mesh.answers[F.PAIRS] = [(0,), np.array(L, dt), np.array(U, dt)]
    if case == "control":
        s.td_level(0, 0.0)
        assert s.states[0].parent[250] == 502
    else:
        with pytest.raises(_PeerLost, match="bad frame"):
            s.td_level(0, 0.0)


# ----------------------------------------------------------------- handshake
def _pair():
    a, b = socket.socketpair()
    a.settimeout(5)
    b.settimeout(5)
    return a, b


def test_handshake_mutual_and_replay():
    key, mid = H.new_key(), "m" * 32
    seen = set()
    a, d = _pair()
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("r", H.accept_handshake(a, key, mid, 0, seen, _recv_exact)))
    t.start()
    # a dialer that records its answer
    nonce_a = H.HELLO.unpack(_read(d, H.HELLO.size))[1]
    nonce_d = secrets.token_bytes(32)
    answer = H.ANSWER.pack(b"DBFSDIAL", 1, nonce_d, H._mac(key, b"dial", mid, nonce_a, nonce_d, H._ranks(1, 0)))
    d.sendall(answer)
    t.join(5)
    peer, nd, na = out["r"]
    assert peer == 1 and nd == nonce_d and na == nonce_a
    H.send_proof(a, key, mid, 0, 1, nd, na)
    mac = H.PROOF.unpack(_read(d, H.PROOF.size))[1]
    assert mac == H._mac(key, b"accept", mid, nonce_d, nonce_a, H._ranks(0, 1))
    # the recorded answer, replayed on a new connection (fresh nonce_a): refused
    a2, d2 = _pair()
    res = {}
    t = threading.Thread(target=_accept_into, args=(a2, key, mid, seen, res))
    t.start()
    _read(d2, H.HELLO.size)
    d2.sendall(answer)
    t.join(5)
    assert res["err"].reason == "replay"
    # a fresh answer to the fresh nonce but with a wrong key: refused
    a3, d3 = _pair()
    t = threading.Thread(target=_accept_into, args=(a3, key, mid, seen, res))
    t.start()
    t3 = H.HELLO.unpack(_read(d3, H.HELLO.size))[1]
    nd3 = secrets.token_bytes(32)
    d3.sendall(H.ANSWER.pack(b"DBFSDIAL", 1, nd3, H._mac(H.new_key(), b"dial", mid, t3, nd3, H._ranks(1, 0))))
    t.join(5)
    assert res["err"].reason == "bad key"
    for s in (a, d, a2, d2, a3, d3):
        s.close()


def _read(s, n):
    buf = bytearray(n)
    _recv_exact(s, memoryview(buf))
    return bytes(buf)


def _accept_into(sock, key, mid, seen, res):
    try:
        H.accept_handshake(sock, key, mid, 0, seen, _recv_exact)
        res["err"] = None
    except H.HandshakeError as exc:
        res["err"] = exc


def test_listener_refuses_and_logs(caplog):
    """An in-process listener: the expected peer gets in; garbage, a wrong key, a wrong
    or duplicate rank, a replay and a silent client are refused, counted and logged."""
    from dbfs.bfs.dask.mesh.plugin import MeshPlugin

    class _Worker:
        address = "tcp://127.0.0.1:1"
        handlers = {}

    plugin = MeshPlugin()
    plugin.setup(_Worker())
    key, mid = H.new_key(), secrets.token_hex(16)
    lst = Listener(mid, 0, "127.0.0.1", key, [1], plugin.reject, handshake_timeout=0.5)
    assert lst.address[0] == "127.0.0.1"
    try:
        with caplog.at_level("WARNING", logger="dbfs.mesh"):
            _attack(lst.address, b"\x00garbage" * 20)
            _attack_handshake(lst.address, H.new_key(), mid, rank=1, peer=0)            # wrong key
            _attack_handshake(lst.address, key, mid, rank=5, peer=0)                    # unexpected rank
            with socket.create_connection(lst.address) as s:                           # silent client
                time.sleep(0.8)
            # the real peer still gets in, once
            d = socket.create_connection(lst.address, timeout=5)
            H.dial_handshake(d, key, mid, 1, 0, _recv_exact)
            socks = lst.take(1, 5)
            assert list(socks) == [1]
            answer = _attack_handshake(lst.address, key, mid, rank=1, peer=0)          # duplicate / after setup
            _attack_handshake(lst.address, key, mid, rank=1, peer=0, answer=answer)    # replayed answer
            _wait_for(lambda: sum(plugin.rejected.values()) >= 6)
        assert {"garbage", "bad key", "refused", "timeout", "replay"} <= set(plugin.rejected), plugin.rejected
        assert sum(1 for r in caplog.records if r.name == "dbfs.mesh" and r.levelname == "WARNING") >= 6
        # the accepted connection is intact: the authenticated peers talk
        d.sendall(b"ping")
        assert _read(socks[1], 4) == b"ping"
        d.close()
        socks[1].close()
    finally:
        lst.close()
        plugin.teardown(_Worker())


def test_dialer_refuses_an_impostor():
    """A listener that does not hold the key cannot pass as a peer."""
    impostor = Listener("i" * 32, 0, "127.0.0.1", H.new_key(), [1], lambda *a: None)
    real = Listener("i" * 32, 1, "127.0.0.1", H.new_key(), [], lambda *a: None)
    try:
        with pytest.raises(_PeerLost, match="mesh setup failed"):
            connect_peers(real, 1, [impostor.address, real.address], 2.0)
    finally:
        impostor.close()
        real.close()


def test_dask_transport_checks_tokens():
    """The "dask" transport files a message only with the sender's token of this mesh."""
    from dbfs.bfs.dask.mesh.plugin import token_of
    from dbfs.bfs.dask.mesh.transport import _DaskMesh

    class _Loop:
        asyncio_loop = None

    class _Worker:
        loop = _Loop()

    key, mid = H.new_key(), "d" * 32
    tokens = {j: token_of(key, mid, j) for j in range(2)}
    m = _DaskMesh(mid, 0, 2, ["a", "b"], 1.0, LIMITS, tokens, _Worker())
    assert m.deliver(1, token_of(H.new_key(), mid, 1), [b"x"]) == "bad token for sender 1"
    assert m.deliver(0, tokens[0], [b"x"]) and m.deliver(7, tokens[1], [b"x"])
    assert not m.box
    assert m.deliver(1, tokens[1], [_joined(F.COUNTS, 0, 1)]) == ""
    assert list(m.box) == [1]


# ---------------------------------------------------------------- attackers
def _attack(addr, payload, read_hello=True):
    """Connect, (read the hello,) send ``payload``, close."""
    try:
        with socket.create_connection(addr, timeout=5) as s:
            if read_hello:
                _read(s, H.HELLO.size)
            s.sendall(payload)
            s.shutdown(socket.SHUT_WR)
            s.recv(64)
    except OSError:
        pass


def _attack_handshake(addr, key, mid, rank, peer, answer=None):
    """A well-formed handshake answer (MAC under ``key``; or a recorded ``answer``); returns the answer sent."""
    try:
        with socket.create_connection(addr, timeout=5) as s:
            nonce_a = H.HELLO.unpack(_read(s, H.HELLO.size))[1]
            if answer is None:
                nd = secrets.token_bytes(32)
                answer = H.ANSWER.pack(b"DBFSDIAL", rank, nd, H._mac(key, b"dial", mid, nonce_a, nd,
                                                                     H._ranks(rank, peer)))
            s.sendall(answer)
            s.sendall(_joined(F.COUNTS, 0, rank))              # and a frame behind it
            s.recv(64)
    except OSError:
        pass
    return answer


def _wait_for(cond, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


# ------------------------------------------------------- on a live cluster
@pytest.fixture(scope="module")
def kron12(tmp_path_factory, client):
    from dbfs import kernel1, store
    from dbfs.spec import GraphSpec

    ds, _ = store.generate(GraphSpec.make("kronecker", 12, 16, 2, 3), root=tmp_path_factory.mktemp("mesh-sec"),
                           client=None, quiet=True)
    kernel1.build_partitioned(ds.path, P=2, partitioning="block", client=client, progress=False)
    edges = np.asarray(ds.edges()[:], np.int64)
    deg = np.bincount(edges.ravel(), minlength=ds.n_vertices)
    roots = np.random.default_rng(5).choice(np.flatnonzero(deg > 0), 6, replace=False).tolist()
    return ds.path, edges, kernel1.variant_name(2, "block"), roots


def _mesh_state(mesh_id, dask_worker=None):
    from dbfs.bfs.dask.mesh.plugin import get_plugin

    p = get_plugin(dask_worker)
    st = p.status()
    st["key"] = p.keys.get(mesh_id)
    return st


@pytest.mark.distributed
def test_attacks_on_a_live_mesh(client, kron12, tmp_path):
    import dbfs.bfs.dask as D
    from dbfs.validate import validate

    path, edges, variant, roots = kron12
    target = tmp_path / "pwned"
    evil = pickle.dumps(_Evil(target))
    with D.load_distributed(client, path, variant) as dg:
        assert dg.transport == "tcp" and len(dg.mesh_workers) == 2
        states = client.run(_mesh_state, dg.mesh_id)
        before = {w: sum(s["rejected"].values()) for w, s in states.items()}
        targets = []
        for w, st in states.items():
            (name, addr), = [(k, v) for k, v in st["listeners"].items() if k.startswith(dg.mesh_id)]
            assert addr[0] == "127.0.0.1"                     # the worker's own interface, not 0.0.0.0
            targets.append((tuple(addr), int(name.split("/")[1]), st["key"]))
        errors = []

        def attacker():
            try:
                for _ in range(3):
                    for addr, widx, key in targets:
                        _attack(addr, os.urandom(200))
                        _attack(addr, struct.pack("<qq", len(evil), 0) + evil * 3, read_hello=False)
                        _attack(addr, evil * 3)
                        _attack_handshake(addr, H.new_key(), dg.mesh_id, rank=widx + 1, peer=widx)
                        rec = _attack_handshake(addr, key, dg.mesh_id, rank=widx + 1, peer=widx)
                        _attack_handshake(addr, key, dg.mesh_id, rank=widx + 1, peer=widx, answer=rec)
                        time.sleep(0.05)
            except Exception as exc:  # reported by the main thread
                errors.append(exc)

        th = threading.Thread(target=attacker, daemon=True)
        th.start()
        n = 0
        while th.is_alive() or n < 3:
            root = roots[n % len(roots)]
            res, _, _ = D.search(dg, root)
            v = validate(edges, root, D.gather_parent(res))
            assert v.ok, v.summary()
            assert res.attempts == 1 and not res.events
            n += 1
        th.join()
        assert not errors, errors
        vd = D.validate_distributed(client, path, dg, res, root)
        assert vd.ok and vd.nedge == v.nedge

        def refused():
            st = client.run(_mesh_state, dg.mesh_id)
            return all(sum(s["rejected"].values()) - before[w] >= 3 * 6 for w, s in st.items())

        _wait_for(refused)
        for w, st in client.run(_mesh_state, dg.mesh_id).items():
            assert {"garbage", "bad key", "refused", "replay"} <= set(st["rejected"]), st["rejected"]
    assert not target.exists(), "a pickle from the network was loaded"


@pytest.mark.distributed
def test_listener_binds_the_worker_interface(client, kron12):
    """Each worker's mesh listener is bound to the host of its own address (127.0.0.1 on a LocalCluster)."""
    import dbfs.bfs.dask as D

    path, _, variant, _ = kron12
    with D.load_distributed(client, path, variant) as dg:
        states = client.run(_mesh_state, dg.mesh_id)
        for w, st in states.items():
            addrs = [tuple(a) for k, a in st["listeners"].items() if k.startswith(dg.mesh_id)]
            assert len(addrs) == 1 and addrs[0][0] == "127.0.0.1" == w.split("://")[1].rsplit(":", 1)[0]
            assert addrs[0][0] not in ("0.0.0.0", "::", "")


def _openssl_cert(d):
    key, cert = d / "key.pem", d / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "2", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return str(key), str(cert)


@pytest.mark.distributed
def test_tls_cluster_never_uses_plaintext(kron12, tmp_path):
    import shutil

    from distributed import Client, LocalCluster
    from distributed.security import Security

    import dbfs.bfs.dask as D
    from dbfs.errors import DbfsError
    from dbfs.validate import validate

    if shutil.which("openssl") is None:
        pytest.skip("no openssl CLI to make a test certificate")
    key, cert = _openssl_cert(tmp_path)
    sec = Security(tls_ca_file=cert, tls_client_cert=cert, tls_client_key=key, tls_scheduler_cert=cert,
                   tls_scheduler_key=key, tls_worker_cert=cert, tls_worker_key=key, require_encryption=True)
    path, edges, variant, roots = kron12
    env = {"NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, protocol="tls://", security=sec,
                      dashboard_address=None, env=env, silence_logs=40) as cluster, \
            Client(cluster, security=sec) as c:
        ws = sorted(workers_info(c))
        assert all(w.startswith("tls://") for w in ws)
        with pytest.raises(DbfsError, match="plaintext"):
            D.open_mesh(c, ws, "tcp")
        with D.load_distributed(c, path, variant) as dg:
            assert dg.transport == "dask" and dg.transport_requested == "tcp"
            assert dg.events and dg.events[0]["event"] == "transport" and "TLS" in dg.events[0]["reason"]
            for st in c.run(_mesh_state, dg.mesh_id).values():
                assert not st["listeners"]                       # no TCP socket of ours is open
            for root in roots[:2]:
                res, _, _ = D.search(dg, root)
                v = validate(edges, root, D.gather_parent(res))
                assert v.ok, v.summary()

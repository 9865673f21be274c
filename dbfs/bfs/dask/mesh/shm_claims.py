"""A large top-down level's claims shared by the CPU workers of one host (``/dev/shm``), no pairs sent.

Contract
--------
When the mesh's frontier is shared on its host (:mod:`dbfs.bfs.dask.mesh.shm`:
every worker on one host, block partitions), each worker also keeps its
top-down claims where its peers can read them: :class:`_ShmClaims` holds
the worker's claim bits ``front`` (a bitmap over global ids: the vertices
it claimed in the level) and its claim scratch ``scratch`` (``scratch[v]``:
the frontier vertex that claimed ``v``, for every ``v`` of another
worker's rows) in one file mapping of its own, and every peer's mapped
read-only. A level that :func:`takes_shared` sends no pairs: each worker
leaves its claims there (:func:`or_claims` for a level whose claims came
back as a list), a payload-free round is the barrier, then each worker
takes, over its own rows' words, the peers' claim bits of vertices not yet
visited with the parent from that peer's scratch (:func:`take_peers`,
first peer in worker order first), which marks them as
:func:`dbfs.bfs.cpu.rowclaims.mark_pairs` would (global bit and parent;
:func:`~dbfs.bfs.cpu.rowclaims.take_bits` takes them). The count round
that ends the level is the barrier after which a worker may write its
``front`` and ``scratch`` again: every peer read them before sending its
counts. ``front`` must hold, at the barrier, this level's claims and
otherwise only vertices visited before the level (its frontier copies and
earlier claims qualify: they are masked by the owner's visited bits), so
it is cleared once per search, not per level.

Set-up (at mesh set-up, never inside a search; :func:`dbfs.bfs.dask.mesh._open_claims`):
each worker creates its file (``O_CREAT | O_EXCL``, mode 0o600) and maps it
read-write (:meth:`_ShmClaims.__init__`), then maps every peer's file
read-only (:meth:`_ShmClaims.map_peers`: a regular file of this user and of
the expected size, no symlink followed), then the names are unlinked: the
memory lives as long as a mapping does. Nothing crosses a socket.

Encoding: one file a worker, ``gwords`` int64 words of claim bits (vertex v
is bit ``v & 63`` of word ``v >> 6``), then ``N`` claim entries of
:func:`dbfs.graph.id_dtype` of N (the worker's claim scratch dtype), rounded
up to 8 bytes; then the pairs box: ``P + 1`` int64 offsets (rank r's pairs
are ``[off[r], off[r + 1])``), ``cap`` owner-local indices and ``cap``
parents of the claim dtype (:func:`box_cap`), rounded up to 8 bytes.

Pairs box: a top-down level that does not take the shared claims but whose
frontier edges (every worker's same global count) fit the box leaves its
pairs, bucketed by owner rank as they would be sent, in its box; a
payload-free round is the barrier; each worker reads its ranks' pairs from
the peers' boxes (views, no copy) and absorbs them as received pairs. The
count round that ends the level frees the boxes again. Peers are reached in the kernel through
their addresses (as :mod:`dbfs.bfs.cpu.rowtable` reaches a slot's arrays).

Method: the shared-memory counterpart of the 1-D top-down exchange of
Buluc and Madduri ("Parallel Breadth-First Search on Distributed Memory
Systems", SC'11): the owner reads the claims where they were made instead
of receiving them; any claimer is a valid parent (the argument of GAP's
top-down step, Beamer et al.), so racing claims need no atomics but the
global bit's.
"""
from __future__ import annotations

import mmap
import os
import stat

import numpy as np
from numba import njit, prange

from dbfs.bfs.cpu.primitives import _cttz, atomic_or
from dbfs.bfs.cpu.rowclaims import _WORDS_PER_VERTEX, by_bits
from dbfs.bfs.cpu.rowtable import _view
from dbfs.bfs.cpu.topdown import _TD_SERIAL_EDGES
from dbfs.bfs.dask.mesh.shm import _shm_path, _unlink

__all__ = ["_ShmClaims", "box_cap", "box_pairs", "fill_box", "claims_bytes", "claims_paths", "takes_shared",
           "or_claims", "take_peers", "warm_claims", "_unlink_all"]

# worker words per chunk of the peers' pass
_WORD_GRAIN = 1024


def claims_bytes(n: int, dtype, P: int = 0, cap: int = 0) -> int:
    """Bytes of one worker's claims file for ``n`` vertices and claim dtype ``dtype``, with a pairs box of
    ``cap`` pairs for ``P`` ranks (none when ``cap`` is 0)."""
    head = (((n + 63) >> 6) * 8 + n * np.dtype(dtype).itemsize + 7) & ~7
    return head + ((((P + 1) * 8 + 2 * cap * np.dtype(dtype).itemsize + 7) & ~7) if cap else 0)


def box_cap(gwords: int) -> int:
    """The pairs box's room: the most frontier edges of a top-down level that does not :func:`takes_shared`
    (so of its claims) on a graph of ``gwords`` bitmap words."""
    return max(_TD_SERIAL_EDGES, gwords // _WORDS_PER_VERTEX) + 1


def claims_paths(mesh_id: str, W: int, size: int):
    """Where the ``W`` workers' files go: beside the shared frontier in /dev/shm when it has room for twice
    their sizes (:func:`dbfs.bfs.dask.mesh.shm._shm_path`), else None."""
    base = _shm_path(mesh_id, W * size)
    return None if base is None else [f"{base}-claims{i}" for i in range(W)]


def _unlink_all(paths):
    """(client.run) remove the files' names (the memory lives while mapped)."""
    for p in paths:
        _unlink(p)


def takes_shared(edges: int, gwords: int) -> bool:
    """Whether a top-down level whose frontier has ``edges`` edges (every worker's same global count) takes
    its claims from shared memory: a level past the serial claims' size (smaller ones keep their pairs) that
    would take its vertices by a pass over the words (:func:`dbfs.bfs.cpu.rowclaims.by_bits` of the global
    bitmap's ``gwords`` words)."""
    return edges > _TD_SERIAL_EDGES and by_bits(True, edges, gwords)


class _ShmClaims:
    """A worker's claim bits and scratch in a file mapping of its own, and its peers' mapped read-only (see the
    module docstring).

    Attributes
    ----------
    front : ndarray of int64
        This worker's claim bits (``gwords`` words), read-write.
    scratch : ndarray
        This worker's claim scratch (``n`` entries of ``dtype``), read-write.
    fronts, scratches : ndarray of int64
        After :meth:`map_peers`: the addresses of the peers' claim bits and scratch, in worker order (this
        worker left out); the mappings are kept here.
    """

    def __init__(self, path, n, dtype, widx, P: int = 0, cap: int = 0):
        self.n, self.gwords, self.dtype, self.widx = int(n), (int(n) + 63) >> 6, np.dtype(dtype), int(widx)
        self.P, self.cap = int(P), int(cap)
        self.size = claims_bytes(self.n, self.dtype, self.P, self.cap)
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_NOFOLLOW, 0o600)
        try:
            os.ftruncate(fd, self.size)
            self._mm = mmap.mmap(fd, self.size)
        finally:
            os.close(fd)
        self.front, self.scratch, self.box = self._views(self._mm)
        self.front.fill(0)                 # allocates the pages now, not inside a search
        self.scratch.fill(0)
        for b in self.box:
            b.fill(0)
        self._peers = []
        self.fronts = self.scratches = np.empty(0, np.int64)
        self.boxes = {}

    def _views(self, mm):
        """(claim bits, claim scratch, (pairs box offsets, indices, parents)) of a file's mapping."""
        a = np.frombuffer(mm, np.uint8)
        g, isz = self.gwords * 8, self.dtype.itemsize
        at = (g + self.n * isz + 7) & ~7
        box = ()
        if self.cap:
            c = at + (self.P + 1) * 8
            box = (a[at:c].view(np.int64), a[c:c + self.cap * isz].view(self.dtype),
                   a[c + self.cap * isz:c + 2 * self.cap * isz].view(self.dtype))
        return a[:g].view(np.int64), a[g:g + self.n * isz].view(self.dtype), box

    def map_peers(self, paths) -> None:
        """Map every other worker's file (``paths`` in worker order) read-only."""
        fronts, scratches, keep = [], [], []
        for j, path in enumerate(paths):
            if j == self.widx:
                continue
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_size != self.size:
                    raise ValueError(f"{path}: not a {self.size}-byte file of this user")
                mm = mmap.mmap(fd, self.size, access=mmap.ACCESS_READ)
            finally:
                os.close(fd)
            f, s, box = self._views(mm)
            int(f[::512].sum()) + int(s[::1024].sum())      # maps the pages now
            keep.append((mm, f, s))
            fronts.append(f.ctypes.data)
            scratches.append(s.ctypes.data)
            if box:
                self.boxes[j] = box
        self._peers = keep
        self.fronts = np.asarray(fronts, np.int64)
        self.scratches = np.asarray(scratches, np.int64)


def fill_box(cl: _ShmClaims, L, U, cnt) -> None:
    """A level's pairs for other workers (``L``/``U`` bucketed by owner rank at the ``P + 1`` offsets
    ``cnt``) into this worker's pairs box."""
    off, bl, bu = cl.box
    M = int(cnt[-1])
    off[:] = cnt
    bl[:M] = L[:M]
    bu[:M] = U[:M]


def box_pairs(cl: _ShmClaims, ranks) -> dict:
    """After the barrier: each peer's pairs for ``ranks`` (this worker's), read in place from its box, as the
    arrays of a received PAIRS frame (peer -> [ranks, indices, parents, ...])."""
    got = {}
    for j, (o, pl, pu) in cl.boxes.items():
        dst = [d for d in ranks if o[d + 1] > o[d]]
        got[j] = [dst] + [x for d in dst for x in (pl[o[d]:o[d + 1]], pu[o[d]:o[d + 1]])]
    return got


@njit(parallel=True, nogil=True, cache=True)
def _or_claims(front, claimed, C):
    m = claimed.shape[0]
    for c in prange(C):
        for k in range(c * m // C, (c + 1) * m // C):
            v = claimed[k]
            atomic_or(front, v >> 6, np.int64(1) << (v & 63))


def or_claims(front, claimed, C):
    """Set the bits of the claims ``claimed`` (global ids, a level's list) in ``front``; ``C`` chunks."""
    if claimed.shape[0]:
        _or_claims(front, claimed, C)


@njit(parallel=True, nogil=True, cache=True)
def _take_peers(off, gb, fronts, scratches, claim0, gvis, visited, parent, gwords, n, C):
    """Worker words in ``C`` chunks, peer by peer, slot by slot (slot ``s``: worker rows ``[off[s],
    off[s + 1])``, global id ``gb[s] - off[s] + x`` of worker row ``x``): a peer's claim bits clear in
    ``visited`` (worker rows) and ``gvis`` (global ids) get their global bit and ``parent[x]`` from the
    peer's scratch."""
    WW = off[off.shape[0] - 1] >> 6
    for c in prange(C):
        a = c * WW // C
        b = (c + 1) * WW // C
        for j in range(fronts.shape[0]):
            fr = _view(fronts[j], gwords, gvis)
            sc = _view(scratches[j], n, claim0)
            s = np.searchsorted(off, a << 6, side="right") - 1 if a < b else 0
            x = a
            while x < b:
                o = off[s]
                stop = min(b, off[s + 1] >> 6)
                g0 = (gb[s] >> 6) - (o >> 6)
                v0 = gb[s] - o
                for w in range(x, stop):
                    g = g0 + w
                    y = fr[g] & ~(visited[w] | gvis[g])
                    if y == 0:
                        continue
                    # two slots may share a global word (chunks of both run at once): disjoint bits, one atomic
                    atomic_or(gvis, g, y)
                    r0 = w << 6
                    while y != 0:
                        r = r0 + _cttz(y)
                        y &= y - 1
                        parent[r] = sc[v0 + r]
                x = stop
                s += 1


def take_peers(cl: _ShmClaims, t, gvis, visited, parent) -> None:
    """After the barrier: the peers' claims of this worker's rows (row table ``t``, block slots) not yet
    visited, marked as :func:`dbfs.bfs.cpu.rowclaims.mark_pairs` marks pairs (module docstring)."""
    WW = int(t.off[-1]) >> 6
    _take_peers(t.off, t.gb, cl.fronts, cl.scratches, cl.scratch, gvis, visited, parent, cl.gwords, cl.n,
                min(max(WW // _WORD_GRAIN, 1), 256))


def warm_claims(claim_dtype) -> None:
    """Load :func:`take_peers`'s and :func:`or_claims`'s kernels for a claim scratch of ``claim_dtype`` (one
    peer of 64 vertices, a slot of 64 rows)."""
    peer = np.zeros(1, np.int64)
    or_claims(peer, np.ones(1, np.int64), 1)
    sc = np.zeros(64, claim_dtype)
    _take_peers(np.asarray([0, 64], np.int64), np.zeros(1, np.int64), np.asarray([peer.ctypes.data], np.int64),
                np.asarray([sc.ctypes.data], np.int64), sc, np.zeros(1, np.int64), np.zeros(1, np.int64),
                np.full(64, -1, np.int64), 1, 64, 1)

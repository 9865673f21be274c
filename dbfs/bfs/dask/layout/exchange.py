"""Exchange kernels of a top-down / bottom-up level (Numba, per worker).

Contract
--------
- :func:`_bucket_pairs`: a partition's claimed vertices -> (owner-local
  index, global parent) pairs grouped by owning rank (a parallel, stable
  counting sort; ownership by :func:`dbfs.partition.owner_local`).
- :func:`_absorb`: the owner keeps the first parent of each unvisited
  vertex among received pairs (an atomic OR on its visited bit picks one
  winner among racing pairs) and appends it to the next local queue.
- :func:`_or_slice` / :func:`_or_into`: build the global frontier bitmap
  from partitions' local bitmaps (block slices are runs of global words
  starting at word ``base >> 6``; cyclic slices are scattered).

Encoding: pairs have the claim scratch's dtype (:func:`dbfs.graph.id_dtype`
of N); a block partition's local rows are padded at the front to a
multiple of 64 (:func:`_base_of`), so local row ``i`` is global vertex
``base + i`` (block) or ``i * P + rank`` (cyclic). The 1-D
distributed top-down exchange of Buluc and Madduri, "Parallel
Breadth-First Search on Distributed Memory Systems" (SC 2011); the
bottom-up side as in Beamer, Buluc, Asanovic and Patterson, "Distributed
Memory Breadth-First Search Revisited: Enabling Bottom-Up Search"
(IPDPS Workshops 2013).
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from dbfs.bfs.cpu import atomic_or
from dbfs.partition import owner_local

__all__ = ["_bucket_pairs", "_absorb", "_or_slice", "_or_into", "_chunks", "_base_of"]

_PAIR_GRAIN = 8192                 # pairs per chunk of the parallel bucket / absorb loops


def _chunks(m: int) -> int:
    return min(max(m // _PAIR_GRAIN, 1), 256)


@njit(parallel=True, nogil=True, cache=True)
def _bucket_pairs(newv, scratch, code, P, q, r, rank, base, C):
    """Claimed vertices -> (owner-local index, global parent) pairs grouped by
    owner rank (a parallel, stable counting sort over ``C`` chunks: pairs keep
    ``newv``'s order inside a bucket), and ``cnt`` (P + 1 offsets).
    ``scratch[v]`` holds the claiming vertex's LOCAL row (td_step ran on local
    ids); map it to its global id. Pairs have ``scratch``'s dtype (int32
    while N < 2**31: 8 bytes a pair on the wire)."""
    m = newv.shape[0]
    own = np.empty(m, np.int32)
    loc = np.empty(m, scratch.dtype)
    hist = np.zeros((C, P), np.int64)
    for c in prange(C):
        for k in range(c * m // C, (c + 1) * m // C):
            o, l = owner_local(newv[k], code, P, q, r)
            own[k] = o
            loc[k] = l
            hist[c, o] += 1
    cnt = np.zeros(P + 1, np.int64)
    pos = np.empty((C, P), np.int64)
    s = 0
    for o in range(P):
        cnt[o] = s
        for c in range(C):
            pos[c, o] = s
            s += hist[c, o]
    cnt[P] = s
    L = np.empty(m, scratch.dtype)
    U = np.empty(m, scratch.dtype)
    for c in prange(C):
        for k in range(c * m // C, (c + 1) * m // C):
            o = own[k]
            p = pos[c, o]
            L[p] = loc[k]
            u = np.int64(scratch[newv[k]])
            U[p] = u + base if code == 0 else u * P + rank
            pos[c, o] = p + 1
    return L, U, cnt


@njit(parallel=True, nogil=True, cache=True)
def _absorb(L, U, pad, parent, visited, indptr, gvis, code, P, rank, base, tmp, out, w, C):
    """Owner side of a top-down level, one source's pairs (no vertex twice in
    one source), ``C`` chunks in parallel: keep the first parent of each
    unvisited vertex (its visited bit is claimed with an atomic OR, so of
    pairs racing for one vertex exactly one wins), set its bit in the
    worker's global bitmap ``gvis`` too, and append its local row to ``out``
    from position ``w`` (``tmp``: scratch of at least len(L) entries).
    Returns (new write position, sum of the new vertices' degrees)."""
    m = L.shape[0]
    cnt = np.zeros(C, np.int64)
    deg = np.zeros(C, np.int64)
    for c in prange(C):
        k0 = c * m // C
        k = k0
        s = 0
        for j in range(k0, (c + 1) * m // C):
            i = np.int64(L[j]) + pad
            bit = np.int64(1) << (i & 63)
            if visited[i >> 6] & bit:
                continue
            if atomic_or(visited, i >> 6, bit) & bit:
                continue
            parent[i] = U[j]
            v = i + base if code == 0 else i * P + rank
            atomic_or(gvis, v >> 6, np.int64(1) << (v & 63))
            s += indptr[i + 1] - indptr[i]
            tmp[k] = i
            k += 1
        cnt[c] = k - k0
        deg[c] = s
    offs = np.empty(C, np.int64)
    t = w
    for c in range(C):
        offs[c] = t
        t += cnt[c]
    for c in prange(C):
        k0 = c * m // C
        o = offs[c]
        for k in range(cnt[c]):
            out[o + k] = tmp[k0 + k]
    return t, deg.sum()


@njit(nogil=True, cache=True)
def _or_slice(front, sl, code, P, rank, base):
    """OR one partition's local frontier bitmap into the global one."""
    if code == 0:
        w0 = base >> 6
        for w in range(sl.shape[0]):
            front[w0 + w] |= sl[w]
    else:
        for w in range(sl.shape[0]):
            x = sl[w]
            if x == 0:
                continue
            for b in range(64):
                if (x >> b) & 1:
                    v = ((w << 6) + b) * P + rank
                    front[v >> 6] |= np.int64(1) << (v & 63)


@njit(nogil=True, cache=True)
def _or_into(dst, src):
    for w in range(dst.shape[0]):
        dst[w] |= src[w]


def _base_of(part, rank: int) -> int:
    """Global id of local row 0 of ``rank``'s padded rows: its first vertex
    rounded down to a multiple of 64 (block), 0 (cyclic)."""
    if part.code != 0:
        return 0
    return part.vertex_range(rank).start & ~63

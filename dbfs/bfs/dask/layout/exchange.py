"""Frontier-slice kernels of a level and the geometry of a partition's rows (Numba, per worker).

Contract
--------
- :func:`_chunks`: how many chunks a parallel loop over ``m`` pairs takes
  (the claims are bucketed and absorbed over all of a worker's partitions
  at once: :mod:`dbfs.bfs.cpu.rowtable`).
- :func:`_or_slice` / :func:`_or_into`: build the global frontier bitmap
  from partitions' local bitmaps (block slices are runs of global words
  starting at word ``base >> 6``; cyclic slices are scattered).

Encoding: a block partition's local rows are padded at the front to a
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
from numba import njit


__all__ = ["_or_slice", "_or_into", "_chunks", "_base_of"]

_PAIR_GRAIN = 8192                 # pairs per chunk of the parallel bucket / absorb loops (rowtable)


def _chunks(m: int) -> int:
    return min(max(m // _PAIR_GRAIN, 1), 256)


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

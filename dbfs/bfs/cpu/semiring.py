"""The linear-algebra steps of the CPU ``spmv`` BFS: ``y = A x`` over the
(min, select-index) semiring, masked by the unvisited set.

Contract: after a level, ``parent[v]`` of every newly reached v is the
smallest id among v's neighbours in the previous frontier, so the parent
array of a search is deterministic (:func:`dbfs.bfs.reference.min_parents`
is its oracle). :func:`spmv_pull_step` is the pull form (dense ``x``,
SpMV: every unvisited vertex scans its row); after a push (top-down,
SpMSpV) level claimed the new frontier, :func:`min_parent_fixup` rewrites
the claimed parents to that minimum. Both return the adjacency entries
read; with ``rows_sorted`` (each row ascending) a scan stops at its first
frontier neighbour, which is then the minimum.

Method: push or pull chosen per level as GraphBLAS does (Yang, Buluc and
Owens, "Implementing Push-Pull Efficiently in GraphBLAS", ICPP'18), by the
same direction policies as ``do`` (:mod:`dbfs.bfs.policy`). The pull step
works on whole 64-vertex words per iteration, so each word is written by
one thread.

Encoding: local vertex range as in :mod:`dbfs.bfs.cpu.topdown` (rows
``v - offset``, ``indices`` global ids); bitmaps are int64 words, bit
``v & 63`` of word ``v >> 6``.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from .primitives import _cttz


@njit(parallel=True, nogil=True, cache=True)
def spmv_pull_step(indptr, indices, offset, front, parent, visited, nxt, rows_sorted):
    """Masked SpMV over (min, select-index), the pull level of ``spmv``.

    For each unvisited local v, ``parent[v] = min{u in adj(v) : u in
    front}``. With sorted rows the first hit is the minimum (early exit);
    otherwise the whole row is scanned.

    Parameters
    ----------
    indptr, indices : ndarray
        Local rows (``indices`` hold global ids).
    offset : int
        Global id of local row 0 (a multiple of 64).
    front : ndarray of int64
        GLOBAL frontier bitmap.
    parent : ndarray of int64
        Local; written for the awakened vertices only.
    visited : ndarray of int64
        Local bitmap, exact on entry; the awakened vertices' bits are set.
    nxt : ndarray of int64
        Local bitmap, overwritten with the awakened vertices.
    rows_sorted : bool
        Every row is ascending.

    Returns
    -------
    tuple of int
        (vertices awakened, edges examined, sum of their degrees).
    """
    nloc = indptr.shape[0] - 1
    nwords = (nloc + 63) >> 6
    awake = 0
    examined = 0
    awake_deg = 0
    big = np.int64(1) << 62
    for w in prange(nwords):
        vis = visited[w]
        todo = ~vis
        nb = np.int64(0)
        base = w << 6
        while todo != 0:
            b = _cttz(todo)
            todo &= todo - 1
            bit = np.int64(1) << b
            vl = base + b
            s = indptr[vl]
            e = indptr[vl + 1]
            best = big
            j = s
            while j < e:
                u = indices[j]
                j += 1
                if (front[u >> 6] >> (u & 63)) & 1:
                    if u < best:
                        best = u
                    if rows_sorted:
                        break
            examined += j - s
            if best != big:
                parent[vl] = best
                nb |= bit
                awake += 1
                awake_deg += e - s
        nxt[w] = nb
        visited[w] = vis | nb
    return awake, examined, awake_deg


@njit(nogil=True, cache=True)
def _min_frontier_neighbour(indptr, indices, r, front, rows_sorted):
    """(smallest neighbour of local row r in ``front`` or 2**62, entries read)."""
    s = indptr[r]
    e = indptr[r + 1]
    best = np.int64(1) << 62
    j = s
    while j < e:
        u = indices[j]
        j += 1
        if (front[u >> 6] >> (u & 63)) & 1:
            if u < best:
                best = u
            if rows_sorted:
                break
    return best, j - s


def min_parent_fixup(indptr, offset, indices, queue, front, parent, rows_sorted):
    """After a push (top-down) step, the min-id parents (the SpMSpV result).

    Sets ``parent[v]`` of each newly reached v to its smallest neighbour in
    the old frontier ``front``.

    Parameters
    ----------
    indptr : ndarray of int64
        Local rows.
    offset : int
        Global id of local row 0.
    indices : ndarray
        Global neighbour ids.
    queue : ndarray of int64
        The newly reached vertices (global ids of local rows).
    front : ndarray of int64
        Bitmap of the old frontier (global ids).
    parent : ndarray of int64
        Indexed by global id; ``parent[v]`` rewritten for every v in ``queue``.
    rows_sorted : bool
        Every row is ascending (a scan stops at its first hit).

    Returns
    -------
    int
        Adjacency entries read.
    """
    if queue.shape[0] > 4096:
        return int(_min_parent_fixup_parallel(indptr, offset, indices, queue, front, parent, rows_sorted))
    return int(_min_parent_fixup_serial(indptr, offset, indices, queue, front, parent, rows_sorted))


@njit(nogil=True, cache=True)
def _min_parent_fixup_serial(indptr, offset, indices, queue, front, parent, rows_sorted):
    """:func:`min_parent_fixup` on one thread."""
    examined = 0
    for i in range(queue.shape[0]):
        v = queue[i]
        best, k = _min_frontier_neighbour(indptr, indices, v - offset, front, rows_sorted)
        examined += k
        parent[v] = best
    return examined


@njit(parallel=True, nogil=True, cache=True)
def _min_parent_fixup_parallel(indptr, offset, indices, queue, front, parent, rows_sorted):
    """:func:`min_parent_fixup` over the queue in parallel."""
    examined = 0
    for i in prange(queue.shape[0]):
        v = queue[i]
        best, k = _min_frontier_neighbour(indptr, indices, v - offset, front, rows_sorted)
        examined += k
        parent[v] = best
    return examined

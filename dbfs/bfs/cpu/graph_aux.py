"""Per-graph helper structures of the CPU BFS (Kernel-1 data).

Contract: each helper depends only on the CSR and is built once per graph,
cached in ``graph.meta`` (by :func:`dbfs.bfs.cpu.prepare` inside the
construction timer, else by the first search):

- ``_hub`` (:func:`hub_neighbours`): each vertex's highest-degree
  neighbour, -1 for an empty row, tested first by the bottom-up step: on
  Kronecker graphs it finds most parents without reading the adjacency row.
- ``_multi_bitmap`` (:func:`multi_edge_bitmap`): the rows with more than
  one entry (the bottom-up step scans only these).
- ``_no_edge_bitmap`` (:func:`start_visited`): vertices without edges plus
  the padding bits, pre-marked visited so no step ever reads their rows.
- ``_rows_sorted``: whether every row is ascending (lets ``spmv`` stop at
  the first frontier neighbour).

:func:`hub_by_degree` and :func:`degree_over_bitmap` are the kernels, on any
row range (a partition passes its local rows and global degrees);
``hub_by_degree`` and ``_rows_sorted`` read ``indices`` through ``adj_at``
(one array or a :class:`~dbfs.bfs.cpu.adjacency.SplitAdjacency`).

Method: one parallel pass over the rows each (Numba ``prange``).

Encoding: bitmaps are int64 words, bit ``v & 63`` of word ``v >> 6``, over
the rows of ``indptr``; ``hub`` has the dtype of ``indices`` (int64 for unsigned
entries, which cannot hold its -1).
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from .adjacency import adj_at, sentinel_dtype


@njit(parallel=True, nogil=True, cache=True)
def hub_by_degree(indptr, indices, deg):
    """Each row's highest-degree neighbour.

    Parameters
    ----------
    indptr, indices : ndarray
        Rows (a partition's local rows, or the whole graph).
    deg : ndarray
        Degrees indexed by the ids in ``indices``: a partition passes
        GLOBAL degrees, the single-process backend ``diff(indptr)``.

    Returns
    -------
    ndarray
        ``hub[i]``, dtype of ``indices`` (int64 for unsigned ones): row i's neighbour of highest
        ``deg`` (first in row order on ties; -1 for an empty row).
    """
    n = indptr.shape[0] - 1
    hub = np.empty(n, sentinel_dtype(indices))
    for v in prange(n):
        best = -1
        bd = -1
        for j in range(indptr[v], indptr[v + 1]):
            u = adj_at(indices, j)
            d = deg[u]
            if d > bd:
                bd = d
                best = u
        hub[v] = best
    return hub


def hub_neighbours(graph):
    """The graph's hub array (Kernel-1 data, cached in ``graph.meta["_hub"]``).

    Parameters
    ----------
    graph : CSRGraph
        Built once per graph (see :func:`dbfs.bfs.cpu.prepare`).

    Returns
    -------
    ndarray
        ``hub[v]``: v's highest-degree neighbour (-1 if none), same dtype as
        ``indices``.
    """
    hub = graph.meta.get("_hub")
    if hub is None:
        hub = graph.meta["_hub"] = hub_by_degree(graph.indptr, graph.indices, np.diff(graph.indptr))
    return hub


def _deg(indptr, v):
    """Degree of row v as a Python int."""
    return int(indptr[v + 1] - indptr[v])


@njit(parallel=True, nogil=True, cache=True)
def degree_over_bitmap(indptr, k):
    """Bitmap of the rows with more than ``k`` entries.

    Parameters
    ----------
    indptr : ndarray of int64
        Rows (local or whole graph).
    k : int
        Degree threshold.

    Returns
    -------
    ndarray of int64
        One bit per row (padding bits clear).
    """
    nloc = indptr.shape[0] - 1
    nwords = (nloc + 63) >> 6
    bm = np.empty(nwords, np.int64)
    for w in prange(nwords):
        x = np.int64(0)
        for b in range(64):
            v = (w << 6) + b
            if v < nloc and indptr[v + 1] - indptr[v] > k:
                x |= np.int64(1) << b
        bm[w] = x
    return bm


def _no_edge_bitmap(indptr):
    """Bits of the vertices without edges, plus the padding bits."""
    return ~degree_over_bitmap(indptr, 0)


def multi_edge_bitmap(graph):
    """The bitmap of the vertices with more than one edge.

    ``bu_step``'s ``multi``; Kernel-1 data, cached in
    ``graph.meta["_multi_bitmap"]``.

    Parameters
    ----------
    graph : CSRGraph

    Returns
    -------
    ndarray of int64
    """
    bm = graph.meta.get("_multi_bitmap")
    if bm is None:
        bm = graph.meta["_multi_bitmap"] = degree_over_bitmap(graph.indptr, 1)
    return bm


def start_visited(graph, root, out=None):
    """The visited bitmap a search starts from.

    The root, the vertices that have no edges (never reachable, so
    bottom-up never looks at them) and the padding bits. The no-edge bitmap
    is Kernel-1 data, computed once per graph and cached in
    ``graph.meta["_no_edge_bitmap"]``.

    Parameters
    ----------
    graph : CSRGraph
    root : int
        Internal id of the search key.
    out : ndarray of int64, optional
        Written in place when given.

    Returns
    -------
    ndarray of int64
        ``out``, or a fresh bitmap.
    """
    bm = graph.meta.get("_no_edge_bitmap")
    if bm is None:
        bm = graph.meta["_no_edge_bitmap"] = _no_edge_bitmap(graph.indptr)
    if out is None:
        out = bm.copy()
    else:
        np.copyto(out, bm)
    out[root >> 6] |= np.int64(1) << (root & 63)
    return out


@njit(parallel=True, nogil=True, cache=True)
def _rows_sorted(indptr, indices):
    """Whether every row of ``indices`` is ascending."""
    n = indptr.shape[0] - 1
    bad = 0
    for v in prange(n):
        for j in range(indptr[v] + 1, indptr[v + 1]):
            if adj_at(indices, j - 1) > adj_at(indices, j):
                bad += 1
                break
    return bad == 0

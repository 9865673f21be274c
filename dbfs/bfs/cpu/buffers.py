"""Reused work arrays of the CPU BFS: the parent-array pool, per-thread
scratch bitmaps and record buffers, and the -1 fills.

Contract:

- :func:`parent_array` hands out the int64 parent array of one search
  (all -1, or arbitrary when the caller's first bottom-up level writes every
  entry); an array is handed out again only once nothing but the pool refers
  to it, so a result the caller still holds is never overwritten.
  :func:`reserve_parents` ``(graph, k)`` grows the graph's pool to ``k``
  arrays, paged in before any search, for a caller that holds up to
  ``k - 1`` results at once (the CPU backend's validation batch).
- :func:`reused_int64` and the per-thread helpers (``_record_buffer``,
  ``_held_bitmaps``, ``_seen_bitmap``, ``_scratch_bitmaps``) return arrays
  kept across levels and searches, allocated and page-faulted once; their
  contents are whatever their users left (documented per helper). Given a
  ``holder`` (a Dask worker's store), ``_record_buffer`` and ``_seen_bitmap``
  keep theirs there instead of in the calling thread.
- ``_fill_parent(n)``: a fresh unpooled array of n -1s; ``_set_unreached``
  and ``_fill_unreached`` write the -1s of unreached vertices in parallel.

Method: a memory pool, as CuPy's and RMM's are on the GPU: up to
``_PARENT_POOL_KEEP`` parent arrays per graph (``graph.meta["_parent_keep"]``
once :func:`reserve_parents` raised it) in
``graph.meta["_parent_pool"]``, an array being free when its reference count
(``sys.getrefcount``, calibrated once at import as ``_ONLY_POOLED``) shows no
holder but the pool. Per-thread state lives in one ``threading.local``
(``_SEEN``), so concurrent searches (threads of a Dask worker) never share
a buffer.

Encoding: parent arrays are int64 over internal vertex ids, -1 unreached;
bitmaps are int64 words, bit ``v & 63`` of word ``v >> 6``.
"""
from __future__ import annotations

import sys
import threading

import numpy as np
from numba import njit, prange

from .primitives import _set_lanes


#: per-thread buffers (record buffer, scratch and seen bitmaps)
_SEEN = threading.local()
_PARENT_POOL_LOCK = threading.Lock()
#: parent arrays kept per graph
_PARENT_POOL_KEEP = 2


def _refcounts(pool: list) -> list:
    """``sys.getrefcount`` of each array in ``pool``, taken the same way
    here and for ``_ONLY_POOLED``, so the count of an array nothing else
    refers to does not depend on the Python version."""
    out = []
    for a in pool:
        out.append(sys.getrefcount(a))
    return out


_ONLY_POOLED = _refcounts([np.empty(0)])[0]


def parent_array(graph, fill: bool = True) -> np.ndarray:
    """The int64 parent array of one search, from a per-graph pool.

    A memory pool, as CuPy's and RMM's are on the GPU: up to
    ``_PARENT_POOL_KEEP`` arrays per graph are kept in
    ``graph.meta["_parent_pool"]`` and one is handed out again once nothing
    but the pool refers to it (the caller dropped it and every view of it).
    A fresh ``np.empty`` of 8 bytes per vertex is a fresh mapping whenever
    the previous search's parents are still held (``p = bfs(g, r)`` in a
    loop, ``dbfs run``'s runner): its page faults, which zero the pages,
    would land inside the timed search. A caller that keeps both pooled
    arrays gets a fresh, unpooled one.

    Parameters
    ----------
    graph : CSRGraph
        The searched graph (its ``meta`` holds the pool).
    fill : bool
        All -1 when True; else arbitrary contents (for a caller whose first
        bottom-up level writes every entry).

    Returns
    -------
    ndarray of int64
        ``graph.n_vertices`` entries.
    """
    with _PARENT_POOL_LOCK:
        pool = graph.meta.setdefault("_parent_pool", [])
        free = [a for a, c in zip(pool, _refcounts(pool)) if c <= _ONLY_POOLED]
        if free:
            parent = free[0]
        else:
            parent = np.empty(graph.n_vertices, np.int64)
            if len(pool) < graph.meta.get("_parent_keep", _PARENT_POOL_KEEP):
                pool.append(parent)
        free = None
    if fill:
        _set_unreached(parent)
    return parent


def reserve_parents(graph, k: int) -> None:
    """Grow ``graph``'s parent pool (:func:`parent_array`) to ``k`` arrays, each paged in now (all -1).

    For a caller that keeps up to ``k - 1`` searches' parents while the next search runs: the CPU backend
    holds a validation batch's parents until :func:`dbfs.validate.batch_cpu.validate_many_cpu` reads them.
    A pool smaller than that hands such a search a fresh ``np.empty``, whose page faults (each zeroing a
    page, serialised in the kernel) land inside the timed search.

    Parameters
    ----------
    graph : CSRGraph
        The searched graph (its ``meta`` holds the pool).
    k : int
        Arrays to keep; fewer than the default changes nothing.
    """
    k = int(k)
    with _PARENT_POOL_LOCK:
        pool = graph.meta.setdefault("_parent_pool", [])
        graph.meta["_parent_keep"] = max(k, graph.meta.get("_parent_keep", _PARENT_POOL_KEEP))
        while len(pool) < k:
            a = np.empty(graph.n_vertices, np.int64)
            _set_unreached(a)
            pool.append(a)


def reused_int64(holder: dict, key, n: int) -> np.ndarray:
    """A reusable, pre-faulted int64 work array.

    Kept in ``holder[key]`` across levels and searches and grown by
    doubling. A fresh ``np.empty`` per level of more than glibc's 32 MiB
    mmap threshold is a fresh mapping whose page faults (parallel faults
    serialize in the kernel) would land inside the timed search.

    Parameters
    ----------
    holder : dict
        Where the array lives (a thread-local ``__dict__``, a worker's state).
    key : hashable
        Its name in ``holder``.
    n : int
        Entries needed.

    Returns
    -------
    ndarray of int64
        At least ``n`` entries, contents undefined (zero when new).
    """
    a = holder.get(key)
    if a is None or a.shape[0] < n:
        a = np.empty(max(n, 2 * (0 if a is None else a.shape[0])), np.int64)
        a.fill(0)
        holder[key] = a
    return a


def _record_buffer(n: int, holder=None) -> np.ndarray:
    """This thread's record buffer for
    :func:`~dbfs.bfs.cpu.topdown._td_claim_chunks` (see :func:`reused_int64`;
    at most ``_TD_PIECE`` entries are asked for), or the one kept in
    ``holder`` (a Dask worker's store: its searches run one at a time, on
    whichever thread of the worker takes the task, so a per-thread buffer
    would be grown again, inside timed searches, on each of them)."""
    return reused_int64(_store(holder), "rec", n)


def _store(holder) -> dict:
    """``holder``, or this thread's store when None."""
    return _SEEN.__dict__ if holder is None else holder


def _held_bitmaps(holder: dict, key, rows: int, nwords: int) -> np.ndarray:
    """The reusable (rows, nwords) int64 array ``key`` of ``holder``, zeroed
    (and its pages mapped) when (re)allocated for a new ``nwords`` and
    otherwise as its users left it: allocated and touched once, not fresh
    (page-faulting) arrays per level or search."""
    a = holder.get(key)
    if a is None or a.shape != (rows, nwords):
        a = np.empty((rows, nwords), np.int64)
        a.fill(0)
        holder[key] = a
    return a


def _seen_bitmap(nwords: int, holder=None) -> np.ndarray:
    """This thread's (or ``holder``'s, as :func:`_record_buffer`'s) all-zero
    bitmap of ``nwords`` words for the new frontier of
    :func:`~dbfs.bfs.cpu.topdown.td_step`, which leaves it all zero again."""
    return _held_bitmaps(_store(holder), "seen", 1, nwords)[0]


def _scratch_bitmaps(n):
    """This thread's three reusable bitmaps over n vertices (visited, front,
    next; contents undefined) for a search that returns none of them, in
    place of three fresh zeroed ones (two of them Numba calls) per search.
    Every step writes all the words it later reads (``bu_step`` and
    ``spmv_pull_step`` every word of ``nxt``, ``queue_to_bitmap`` and
    ``td_step`` every word of ``front``)."""
    a = _held_bitmaps(_store(None), "bitmaps", 3, (n + 63) >> 6)
    return a[0], a[1], a[2]


def _fill_parent(n):
    """A fresh int64 array of n -1s (unpooled: :func:`parent_array` for a search's parents)."""
    parent = np.empty(n, np.int64)
    _set_unreached(parent)
    return parent


@njit(parallel=True, nogil=True, cache=True)
def _set_unreached(parent):
    """``parent[:] = -1`` in parallel."""
    for i in prange(parent.shape[0]):
        parent[i] = -1


@njit(parallel=True, nogil=True, cache=True)
def _fill_unreached(parent, visited, no_edge):
    """``parent[v] = -1`` for every v not reached: clear in ``visited`` or
    without edges (the -1s of a search whose bottom-up step did not write
    them; the caller re-sets the root)."""
    n = parent.shape[0]
    for w in prange((n + 63) >> 6):
        base = w << 6
        _set_lanes(parent[base:min(base + 64, n)], ~visited[w] | no_edge[w], min(64, n - base))

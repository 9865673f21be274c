"""Kernel warm-up of the CPU BFS: every kernel a search may call, loaded once
per process and array type before the first search returns.

Contract: after :func:`warm_kernels` ``(indptr, indices)`` no ``td``, ``bu``,
``do`` or ``spmv`` search on arrays of those dtypes and writeability
(``indices`` one array, or a :class:`~dbfs.bfs.cpu.adjacency.SplitAdjacency`
of such pieces: then the ``td``, ``bu`` and ``do`` kernels only)
compiles or loads a kernel (``tests/test_bfs_cpu.py`` checks it in a fresh
process). After :func:`warm_row_kernels` ``(indptr, indices)`` (one array)
no distributed worker's level over its partitions does
(:mod:`dbfs.bfs.cpu.rowtable`, :mod:`dbfs.bfs.cpu.rowclaims`, claims into an
array of ``indices``' dtype, the worker's claim width): a search in one
process never runs those, and on a first run they are most of the
compiling, so a process that does not search partitions does not load
them. Both are idempotent and thread-safe (``_WARM_LOCK``; ``_WARMED``
holds the array types done).

Method: a search reaches its serial or parallel variants by frontier size,
so one warm-up search leaves some unloaded; this runs each kernel once on a
tiny graph (a star of 100 leaves plus 29 isolated vertices) whose arrays have
the dtypes and writeability of the caller's (Numba compiles one
specialisation per array type, read-only ones included). Kernels come from
Numba's on-disk cache (``cache=True``) when it holds them.

Encoding: the star's CSR has vertex 0 joined to 1..100, vertices 101..129
without edges; split, its adjacency meets at entry 150 (in vertex 0's
leaves' rows).
"""
from __future__ import annotations

import threading

import numpy as np

from .adjacency import SplitAdjacency, is_split
from .bottomup import bu_step
from .buffers import _fill_parent, _fill_unreached
from .frontier import (_bitmap_degrees, _bitmap_to_queue_parallel, _bitmap_to_queue_serial, _frontier_edges_parallel,
                       _frontier_edges_serial, queue_to_bitmap)
from .graph_aux import _no_edge_bitmap, _rows_sorted, degree_over_bitmap, hub_by_degree
from .primitives import _NO_CAP, num_threads
from .rowclaims import absorb_bits, absorb_rows, mark_pairs, split_claims, split_sorted, take_bits
from .rowtable import (_rows_claim_chunks, _rows_claim_serial, _rows_degree_offsets, _rows_degree_offsets_par,
                       _rows_edges, bu_rows, copy_rows, or_rows, row_table)
from .semiring import _min_parent_fixup_parallel, _min_parent_fixup_serial, spmv_pull_step
from .topdown import (_degree_offsets, _degree_offsets_par, _diff_bits, _td_claim_chunks, _td_dedupe, _td_fix_lost_bits,
                      _td_gather, _td_step_serial)


_WARM_LOCK = threading.Lock()
_WARMED: set = set()


def _like(a: np.ndarray, values) -> np.ndarray:
    """``values`` as a small array of ``a``'s dtype and writeability (Numba
    compiles one specialisation per array type, read-only ones included)."""
    out = np.ascontiguousarray(values, dtype=a.dtype)
    out.setflags(write=a.flags.writeable)
    return out


def _adjacency_like(indices, values):
    """``values`` as the star's adjacency in the form of ``indices``: one array like it, or two pieces
    like a SplitAdjacency's meeting at entry 150."""
    if not is_split(indices):
        return _like(indices, values)
    return SplitAdjacency(_like(indices.a, values[:150]), _like(indices.b, values[150:]), np.int64(150))


def _adjacency_key(indices) -> tuple:
    if is_split(indices):
        return ("split", indices.a.dtype.str, indices.b.dtype.str, indices.a.flags.writeable,
                indices.b.flags.writeable)
    return (indices.dtype.str, indices.flags.writeable)


def _star_csr(indptr, indices):
    """The star's (indptr, indices, hub, no_edge, multi) in the types of ``indptr`` / ``indices``."""
    n, k = 130, 100                       # vertex 0 joined to 1..k
    ip = _like(indptr, np.concatenate([[0, k], np.arange(k + 1, 2 * k + 1), np.full(n - k - 1, 2 * k)]))
    ix = _adjacency_like(indices, np.concatenate([np.arange(1, k + 1), np.zeros(k)]))
    return ip, ix, hub_by_degree(ip, ix, np.diff(ip)), _no_edge_bitmap(ip), degree_over_bitmap(ip, 1)


def warm_row_kernels(indptr, indices) -> None:
    """Load the row-table steps (:mod:`dbfs.bfs.cpu.rowtable` and :mod:`dbfs.bfs.cpu.rowclaims`, a distributed
    worker's level over its partitions) for CSR arrays of these types (``indices`` one array): run on two
    slots of the star (block and cyclic ids), claims into an array of the adjacency's dtype (the worker's
    claim scratch: the vertex-id width of N, as the partitions' ``indices``)."""
    key = ("rows", indptr.dtype.str, indptr.flags.writeable) + _adjacency_key(indices)
    if key in _WARMED:
        return
    with _WARM_LOCK:
        if key not in _WARMED:
            ip, ix, hub, _, multi = _star_csr(indptr, indices)
            _warm_rows(ip, ix, hub, multi)
            _WARMED.add(key)


def _warm_rows(ip, ix, hub, multi) -> None:
    for gs in (1, 2):
        tab = row_table([(ip, ix, hub, multi, 0, 0, gs), (ip, ix, hub, multi, 0, 0 if gs == 1 else 1, gs)])
        t, R = tab.t, tab.rows
        N = 2 * R
        claim = np.zeros(N, ix.dtype)
        gvis = np.zeros((N + 63) >> 6, np.int64)
        gvis[0] = 1
        q = np.array([0], np.int64)
        E = int(_rows_edges(t, q))
        pw = np.full(R, -1, np.int64)     # the worker's parents (block rows' claims write them)
        _rows_claim_serial(t, q, claim, pw, gvis.copy(), E)
        _rows_degree_offsets(t, q)
        degoff = _rows_degree_offsets_par(t, q)
        cnt = _rows_claim_chunks(t, q, claim, pw, gvis, degoff, 0, E, 2, np.empty(E, np.int64))
        claimed = np.arange(1, 3, dtype=np.int64)
        for C in (1, 2):                  # one chunk runs on the calling thread
            visited = np.zeros(R >> 6, np.int64)
            parent = np.full(R, -1, np.int64)
            # both ranks another worker's: their pairs made, then absorbed as a peer's would be
            L, U, cnt, _, _ = split_claims(t, claimed, claim, 0 if gs == 1 else 1, 2, R, 0,
                                           np.full(2, -1, np.int64), parent, visited, np.empty(2, np.int64),
                                           np.empty(R, np.int64), C)
            seg = np.zeros(1, np.int64)
            absorb_rows(t, L, U, seg, np.ones(1, np.int64), seg, parent, visited, gvis, np.empty(2, np.int64),
                        np.empty(R, np.int64), 0, C)
            if gs == 1:                   # block slots: the same levels taken from the bits (rowclaims)
                split_sorted(claimed, claim, np.array([0, R, N], np.int64), np.full(2, -1, np.int64), C)
                mark_pairs(t, L, U, seg, np.ones(1, np.int64), seg, parent, visited, gvis, C)
                absorb_bits(t, gvis, visited, parent, claim, True, np.empty(R, np.int64), 0)
                take_bits(t, gvis, visited, np.zeros(R >> 6, np.int64))
        front = np.zeros_like(gvis)
        fbm = np.zeros(R >> 6, np.int64)
        bu_rows(t, front, parent, visited, fbm.copy(), True)
        or_rows(front, fbm, t)
        copy_rows(front, fbm, t)


def warm_kernels(indptr, indices) -> None:
    """Load every kernel a ``td``, ``bu``, ``do`` or ``spmv`` search may call.

    Compiles (or loads from Numba's cache) each kernel for arrays of these
    types, once per process and type: a search reaches its parallel or
    serial variants by frontier size, so one warm-up search leaves some
    unloaded, and loading one inside a timed search would be timed. Runs
    each kernel on a tiny graph (a star of 100 leaves plus 29 isolated
    vertices) whose arrays have the dtypes and writeability of ``indptr``
    and ``indices``. ``tests/test_bfs_cpu.py`` checks that searches then
    compile nothing.

    Parameters
    ----------
    indptr : ndarray
    indices : ndarray or SplitAdjacency
        The searched graph's CSR arrays (only their types are used). A split
        adjacency loads the kernels of ``td``, ``bu`` and ``do`` (``spmv``
        reads one array).
    """
    split = is_split(indices)
    key = (indptr.dtype.str, indptr.flags.writeable) + _adjacency_key(indices)
    if key in _WARMED:
        return
    with _WARM_LOCK:
        if key in _WARMED:
            return
        ip, ix, hub, no_edge, multi = _star_csr(indptr, indices)
        n, k = ip.shape[0] - 1, int(ip[1])    # the star's vertices; vertex 0 joined to 1..k
        _rows_sorted(ip, ix)
        parent = _fill_parent(n)
        nbw = no_edge.shape[0]
        visited, front, nxt = no_edge.copy(), np.zeros(nbw, np.int64), np.zeros(nbw, np.int64)
        q = np.array([0], np.int64)
        E = int(_frontier_edges_serial(ip, 0, q, 0, 1, _NO_CAP))
        _frontier_edges_parallel(ip, 0, q, _NO_CAP, num_threads())
        _td_step_serial(ip, ix, 0, q, parent, visited.copy(), E)
        _degree_offsets(ip, 0, q)
        degoff = _degree_offsets_par(ip, 0, q)
        out = np.empty(E, np.int64)
        seen = np.zeros(nbw, np.int64)
        cnt = _td_claim_chunks(ip, ix, 0, q, parent, visited, degoff, 0, E, 2, out)
        _td_fix_lost_bits(out, cnt, E, visited)
        _diff_bits(visited, no_edge, front)
        _bitmap_to_queue_serial(front, 0)
        _bitmap_to_queue_parallel(front, 0)
        _bitmap_degrees(front, ip, _NO_CAP, num_threads())
        _td_dedupe(out, cnt, E, visited, seen)
        _td_gather(out, cnt, E, seen)
        queue_to_bitmap(q, 0, front)
        visited = no_edge.copy()
        parent = np.empty(n, np.int64)
        bu_step(ip, ix, 0, front, parent, visited, nxt, hub, no_edge, multi, True, False)
        _fill_unreached(parent, visited, no_edge)
        if split:                             # spmv reads the adjacency as one array
            _WARMED.add(key)
            return
        visited = no_edge.copy()
        parent = _fill_parent(n)
        spmv_pull_step(ip, ix, 0, front, parent, visited, nxt, True)
        leaves = np.arange(1, k + 1, dtype=np.int64)
        _min_parent_fixup_serial(ip, 0, ix, leaves, front, parent, True)
        _min_parent_fixup_parallel(ip, 0, ix, leaves, front, parent, True)
        _WARMED.add(key)

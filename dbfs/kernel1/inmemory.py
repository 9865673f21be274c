"""Kernel 1 in memory: Graph500 edge list -> undirected CSR (``build_csr``).

Contract
--------
Input is a Graph500 edge list: ``M`` tuples ``(u, v)`` of vertex ids, shape
(M, 2), uint32 or int64, self-loops and duplicate tuples included. Output is
the CSR of the undirected graph (:class:`dbfs.graph.CSRGraph`):

- both directions of every tuple are present; self-loops are dropped;
- duplicates are dropped (``dedupe=True``); with ``dedupe=False`` the
  multiplicity of ``v`` in the row of ``u`` is the number of tuples ``(u, v)``
  plus the number of tuples ``(v, u)``;
- every row is sorted ascending;
- ``indptr`` is int64; ``indices`` has the width of
  :func:`dbfs.graph.id_dtype` (int32 while ``N <= 2**31``, else int64);
- the bytes depend only on the edge multiset and the options: never on edge
  order, chunking, thread count, worker count or memory budget (every row is
  sorted at the end, which erases the order in which entries arrived).

``relabel="degree"`` renumbers vertices by descending *raw* degree, ties by
original id ascending. The raw degree of ``v`` is the number of non-self-loop
tuple endpoints equal to ``v`` (duplicates counted): that is a plain sum over
the edge list, so the in-memory and the partitioned builder compute the same
permutation without building the graph first. Rows are then sorted by new id,
i.e. heavy neighbours first. ``perm[new] = original`` and ``iperm[original] =
new`` (int64).

``n_vertices=None`` means ``max id + 1``, computed here as Graph500 requires
(Kernel 1 may only be given the edge list).

Method: counting sort into buckets, no global sort
--------------------------------------------------
1. count entries per *fine block* of source rows (``row >> shift``, at most
   2**14 blocks), one histogram per thread over a fixed slice of the input
   (Numba, parallel); ids outside ``[0, N)`` are counted apart and refused;
2. group consecutive fine blocks into *buckets* of about ``2**12..2**18``
   entries (a hub's block may be a bucket of its own; a bucket spans at most
   2**20 rows);
3. scatter every directed entry, packed as one uint64 ``(row - bucket's first
   row) << dbits | neighbour`` (``dbits`` = bits of ``N - 1``), to its
   bucket (one write cursor per (thread, bucket): race-free, no atomics);
4. per bucket, on a thread pool, largest first: sort the bucket's keys in
   place with numpy's sort (SIMD, releases the GIL), then, while the bucket is
   in cache, count each row's (distinct) neighbours and write them out (Numba,
   nogil). Sorting a packed key orders by (row, neighbour): every row comes
   out sorted, and duplicates are adjacent;
5. prefix-sum the degrees into ``indptr`` (parallel per bucket) and close the
   gaps that dropped duplicates left between buckets (one sequential pass).

Sorting a bucket is O(B log B) for a bucket of B entries; no step sorts the
whole edge list. Memory: the input plus 8 bytes per directed entry (packed
keys) plus the width of ``indices`` per directed entry. The same row builder
(:func:`_build_rows`) serves the partitioned builder's phase 2 on local rows.

Reference: Graph 500 Benchmark 1 specification 3.0.1, Kernel 1 (graph
construction), https://graph500.org/?page_id=12.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np

from dbfs.errors import DbfsError
from dbfs.graph import CSRGraph, index_dtype
from dbfs.kernel1.kernels import (_bucket_emit, _count_keys, _degree_order, _group_blocks, _indptr_compact,
                                  _invert, _minmax, _numba_threads, _scatter_packed)

__all__ = ["build_csr", "raw_degree", "degree_permutation"]

_FINE_BITS = 14                # in-memory: at most 2**14 fine blocks
_BUCKET_MIN, _BUCKET_MAX = 1 << 12, 1 << 18
_BUCKET_MAX_SPAN = 1 << 20     # vertices per bucket (its counting array is 8 B each)
_SERIAL_BELOW = 1 << 16        # inputs smaller than this run on one thread (a parallel launch costs more)


def _sort_emit(keys, eoff, vlo, vhi, dbits, dedupe, deg, out, nthreads):
    """Per bucket: sort its packed keys in place (numpy's SIMD sort, GIL released),
    then, while the bucket is in cache, count row degrees and write its kept
    neighbours at the bucket's start in ``out``. Returns kept entries per bucket.

    A bucket holds at most a few hundred thousand keys (a hub's block may hold
    more), so this is O(E log bucket), never a global sort.
    """
    nb = eoff.size - 1
    bnnz = np.zeros(nb, np.int64)

    def one(bk):
        s0, s1 = int(eoff[bk]), int(eoff[bk + 1])
        if s1 - s0 > 1:
            keys[s0:s1].sort()
        bnnz[bk] = _bucket_emit(keys, s0, s1, int(vlo[bk]), int(vhi[bk]), dbits, dedupe, deg, out)

    order = sorted(range(nb), key=lambda i: int(eoff[i]) - int(eoff[i + 1]))   # largest first
    if nthreads <= 1 or nb <= 1:
        for bk in order:
            one(bk)
    else:
        with ThreadPoolExecutor(nthreads) as ex:
            for f in [ex.submit(one, bk) for bk in order]:
                f.result()
    return bnnz


def _build_rows(pairs: list, n_rows: int, symmetric: bool, iperm, idt, dedupe: bool, dst_bound: int,
                n_check: int = -1):
    """CSR rows ``0..n_rows-1`` from entries ``pairs = [a, b]`` (consumed: the list is emptied).

    symmetric: ``(a[i], b[i])`` is an undirected tuple (both directions, loops
    dropped, ``iperm`` applied); else a directed entry from local row ``a[i]``.
    ``dst_bound``: all neighbour ids are below it (sizes the packed keys).
    ``n_check >= 0``: refuse tuples with ids outside ``[0, n_check)``.
    Returns ``(indptr int64 (n_rows+1,), indices idt)``.
    """
    a, b = pairs
    pairs.clear()
    T = numba.get_num_threads()
    n_rows = int(n_rows)
    if iperm is None:
        iperm = np.empty(0, np.int64)
    dbits = max(1, (int(dst_bound) - 1).bit_length())
    if dbits > 44:
        raise DbfsError(f"vertex ids need {dbits} bits, more than the 44 Kernel 1 packs: use fewer vertices")
    max_span = min(_BUCKET_MAX_SPAN, 1 << (64 - dbits))
    shift = max(0, (max(n_rows, 1) - 1).bit_length() - _FINE_BITS)
    nfb = max(1, -(-n_rows // (1 << shift)))
    fb_dummy = np.zeros((1, 2), np.int64)
    q = max(n_rows, 1)
    nchunks = T if a.size >= (1 << 16) else 1
    counts = _count_keys(a, b, symmetric, iperm, 0, 1, q, 0, nfb, shift, fb_dummy, nchunks, n_check)
    if counts[:, -1].any():
        raise DbfsError(f"edge list holds {int(counts[:, -1].sum())} tuples with ids outside [0, {n_check}): "
                        f"pass n_vertices above the largest id, or None to use max id + 1")
    counts = counts[:, :-1]
    tot = counts.sum(axis=0)
    E = int(tot.sum())
    if E == 0:
        return np.zeros(n_rows + 1, np.int64), np.empty(0, idt)
    target = min(_BUCKET_MAX, max(_BUCKET_MIN, E // (8 * T)))
    starts = _group_blocks(tot, target, shift, n_rows, max_span)
    nb = starts.size
    k2b = np.repeat(np.arange(nb, dtype=np.int64), np.diff(np.append(starts, nfb)))
    vlo = np.minimum(starts << shift, n_rows)
    vhi = np.append(vlo[1:], n_rows)
    bcounts = np.add.reduceat(counts, starts, axis=1)            # (nchunks, nb)
    del counts
    eoff = np.zeros(nb + 1, np.int64)
    np.cumsum(bcounts.sum(axis=0), out=eoff[1:])
    cursors = eoff[:-1] + np.cumsum(bcounts, axis=0) - bcounts   # exclusive over slices
    keys = np.empty(E, np.uint64)
    _scatter_packed(a, b, symmetric, iperm, 1, q, nfb, shift, k2b, vlo, dbits, cursors, keys)
    del a, b
    deg = np.empty(n_rows, np.int64)
    out = np.empty(E, idt)
    bnnz = _sort_emit(keys, eoff, vlo, vhi, dbits, dedupe, deg, out, T)
    del keys
    indptr = np.empty(n_rows + 1, np.int64)
    nnz = int(_indptr_compact(deg, eoff, bnnz, vlo, vhi, indptr, out))
    if nnz < E:   # dedupe dropped entries: a view of the compacted prefix (no copy)
        out = out[:nnz]
    return indptr, out


def check_edge_shape(edges) -> None:
    """A one-line DbfsError unless ``edges`` (any array with ``shape`` and ``dtype``: NumPy,
    CuPy, a stored or virtual edge reader) is (M, 2) integer vertex ids."""
    shape = tuple(edges.shape)
    if len(shape) != 2 or shape[1] != 2:
        raise DbfsError(f"edge list has shape {shape}, expected (M, 2): pass one (u, v) tuple per row")
    if np.dtype(edges.dtype).kind not in "iu":
        raise DbfsError(f"edge list has dtype {edges.dtype}: pass integer vertex ids (uint32 or int64)")


def _check_edges(edges):
    edges = np.asarray(edges)
    check_edge_shape(edges)
    return edges


def raw_degree(edges, n_vertices: int) -> np.ndarray:
    """Non-self-loop endpoint count per vertex (duplicates counted).

    Parameters
    ----------
    edges : array_like, shape (M, 2)
        Integer edge tuples.
    n_vertices : int
        Vertex count ``N``; ids outside ``[0, N)`` raise :class:`DbfsError`.

    Returns
    -------
    numpy.ndarray
        int64, shape (N,): the raw degree the ``relabel="degree"`` rule orders by.
    """
    edges = _check_edges(edges)
    n = int(n_vertices)
    T = numba.get_num_threads()
    nchunks = max(1, min(T, (1 << 27) // max(n, 1)))   # per-slice histograms cost 8 B * N each
    fb_dummy = np.zeros((1, 2), np.int64)
    counts = _count_keys(edges[:, 0], edges[:, 1], True, np.empty(0, np.int64), 0, 1, max(n, 1), 0,
                         max(n, 1), 0, fb_dummy, nchunks, n)
    if counts[:, -1].any():
        raise DbfsError(f"edge list holds {int(counts[:, -1].sum())} tuples with ids outside [0, {n}): "
                        "fix n_vertices or the edge list")
    return counts[:, :n].sum(axis=0) if nchunks > 1 else counts[0, :n].copy()


def degree_permutation(deg: np.ndarray):
    """The degree relabelling: vertices by descending ``deg``, ties by id ascending.

    Parameters
    ----------
    deg : array_like of int
        One degree per vertex (usually :func:`raw_degree`).

    Returns
    -------
    perm, iperm : numpy.ndarray
        int64, ``perm[new] = original`` and ``iperm[original] = new``.
    """
    perm = _degree_order(np.ascontiguousarray(deg, dtype=np.int64))
    return perm, _invert(perm)


def build_csr(edges, n_vertices: int | None = None, dedupe: bool = True, relabel: str = "none") -> CSRGraph:
    """Build the undirected CSR of a Graph500 edge list in memory (see the module docstring).

    Parameters
    ----------
    edges : array_like, shape (M, 2)
        Integer vertex ids (uint32 or int64), self-loops and duplicates allowed.
    n_vertices : int, optional
        Vertex count; None means max id + 1. Ids outside ``[0, n_vertices)``
        raise :class:`DbfsError`.
    dedupe : bool
        Drop duplicate entries (the Graph500 setting).
    relabel : {"none", "degree"}
        Keep the ids, or renumber by descending raw degree.

    Returns
    -------
    CSRGraph
        With ``perm``/``iperm`` when relabelled and ``meta`` holding
        ``dedupe``, ``relabel`` and ``n_edges`` (input tuples).
    """
    edges = _check_edges(edges)
    if relabel not in ("none", "degree"):
        raise DbfsError(f"unknown relabel {relabel!r}: use 'none' or 'degree'")
    a, b = edges[:, 0], edges[:, 1]
    with _numba_threads(1 if edges.shape[0] < _SERIAL_BELOW else None):
        if n_vertices is None:      # Graph500: N comes from the edge list itself
            lo, hi = _minmax(a, b, numba.get_num_threads()) if edges.shape[0] else (0, -1)
            if lo < 0:
                raise DbfsError(f"edge list holds negative vertex id {lo}: vertex ids must be >= 0")
            n = int(hi) + 1
        else:                       # ids are checked against n while counting
            n = int(n_vertices)
            if n < 0:
                raise DbfsError(f"n_vertices={n} is negative: pass a vertex count >= 0 or None")
        idt = index_dtype(n)
        perm = iperm = None
        if relabel == "degree":
            perm, iperm = degree_permutation(raw_degree(edges, n))
        indptr, indices = _build_rows([a, b], n, True, iperm, idt, dedupe, n, n_check=n)
    meta = {"dedupe": bool(dedupe), "relabel": relabel, "n_edges": int(edges.shape[0])}
    return CSRGraph(indptr, indices, n, perm=perm, iperm=iperm, meta=meta)

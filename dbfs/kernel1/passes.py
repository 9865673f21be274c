"""Kernel 1 in passes: edge chunks streamed once per owner-row range, working memory bounded by a budget.

Contract
--------
``build_csr_passes(edges, n_vertices=None, dedupe=True, memory_budget=...)``
returns a :class:`dbfs.graph.CSRGraph` whose ``indptr``/``indices`` are
byte-for-byte those of :func:`dbfs.kernel1.build_csr` with the same options
(no relabelling): both directions of every tuple, self-loops dropped,
duplicates dropped unless ``dedupe=False``, rows ascending, ``indptr`` int64,
``indices`` of width :func:`dbfs.graph.id_dtype`. The number of passes (set
by the budget) changes only how the work is cut, never the bytes (tested for
1, 2, 3 and many passes, stored and virtual datasets).

``edges`` is anything read by row slices with ``shape`` (M, 2) and integer
``dtype``: a NumPy array, or the one read interface of a dataset,
:func:`dbfs.store.open_edges` (stored zarr chunks, crc32c-checked, or a
virtual dataset's rows regenerated on the fly, :mod:`dbfs.store.virtual`).
It is read in slices of ``edges.chunks[0]`` rows (a NumPy array: views of
:data:`_NUMPY_STEP` rows), once for the degrees and once per pass. When the
reader carries ``checksum`` (``open_edges(..., verify_sum=True)``), the
degree pass checks the rows against it (:mod:`dbfs.checksum`) and a mismatch
is the reader's one-line error.

Method
------
0. *degrees*: stream the chunks, count the non-self-loop endpoints of every
   vertex (the undeduplicated row lengths) into ``raw_ptr[1:]``, prefix-sum
   them in place: ``raw_ptr[v]`` is where row ``v`` would start with every
   duplicate kept (ids outside ``[0, N)`` are refused here, before any pass);
1. *plan*: cut the vertices into consecutive ranges ``[lo, hi)`` whose pass
   cost (below) fits the budget, greedily by the prefix sum (a binary search
   per range); a single row that cannot fit is a one-line
   :class:`DbfsError` naming the budget option and the bytes it needs;
2. *per range*: stream the chunks again; every entry ``src -> dst`` (both
   directions of each tuple) with ``lo <= src < hi`` is written at its row's
   cursor (a counting sort by row, sizes known from step 0); then, rows in
   parallel (Numba ``prange``), each row is sorted in place and its
   duplicates dropped; one sequential left move closes the gaps. The block
   (``indptr`` slice + ``indices``) goes to ``sink(lo, hi, ptr, idx)``,
   by default into the whole CSR in memory.

Sorting each row is the one-pass build's rule (rows ascending, adjacent
duplicates dropped), so the bytes are the same whatever the ranges.

Memory model (bytes; ``i`` = width of ``indices``, 4 for int32 ids):

========================  ==================================================
resident (whole build)    ``8 * (N + 1)``: ``raw_ptr``
pass (each range)         ``i * E_pass + 16 * (rows + 1) + C``: the row
                          buffer of the range's raw entries, the cursors
                          and the block's ``indptr``, and ``C``
edge chunk ``C``          ``chunk_rows * max(32, 8 * e) + 256 KiB`` for
                          input width ``e`` (decoded chunk, its compressed
                          bytes or the generator's int64 rows, the slice
                          returned; the fixed part: codec state and the
                          generator's tables, within 256 KiB: sizes in
                          docs/KERNEL1.md); 0 for a NumPy list (views)
========================  ==================================================

``memory_budget`` bounds ``resident + pass`` of every pass (the degree pass
holds only ``resident + C``). The output CSR (``8 * (N + 1) + i * nnz``,
host memory, the caller's result or written by the sink) and the process
baseline are outside it. ``meta["passes"]`` reports the ranges, each pass's
planned bytes and the largest; the tests measure every pass's allocations
(tracemalloc) against its planned bytes.

References: Graph 500 Benchmark 1 specification 3.0.1, Kernel 1,
https://graph500.org/?page_id=12; the range-per-pass construction is the
out-of-core CSR builders' (e.g. GraphChi's shards, Kyrola et al., OSDI 2012,
and Totem's partitioned build).
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from dbfs.checksum import combine, partial_checksum
from dbfs.errors import DbfsError
from dbfs.graph import CSRGraph, index_dtype
from dbfs.kernel1.inmemory import check_edge_shape
from dbfs.progress import say

__all__ = ["build_csr_passes", "plan_ranges", "chunk_cost", "min_budget", "MIN_PASS_ROWS"]

_NUMPY_STEP = 1 << 20      # rows per slice of an in-memory (NumPy) edge list
_ROW_COST = 16             # per row of a range: its cursor and its block indptr entry
_READ_FIXED = 1 << 18      # per read, besides its rows: codec state, the generator's tables
MIN_PASS_ROWS = 1


@njit(nogil=True, cache=True)
def _count_into(a, b, cnt, n):
    """cnt[x + 1] += 1 for every non-loop endpoint x; returns tuples with ids outside [0, n)."""
    bad = 0
    for i in range(a.size):
        x = np.int64(a[i])
        y = np.int64(b[i])
        if x < 0 or y < 0 or x >= n or y >= n:
            bad += 1
            continue
        if x == y:
            continue
        cnt[x + 1] += 1
        cnt[y + 1] += 1
    return bad


@njit(nogil=True, cache=True)
def _max_id(a, b):
    lo = np.int64(0)
    hi = np.int64(-1)
    for i in range(a.size):
        x = np.int64(a[i])
        y = np.int64(b[i])
        lo = min(lo, x, y)
        hi = max(hi, x, y)
    return lo, hi


@njit(nogil=True, cache=True)
def _scatter_range(a, b, lo, hi, cursor, buf):
    """Entries with source in [lo, hi) at their row's cursor: buf[cursor[src - lo]++] = dst."""
    for i in range(a.size):
        x = np.int64(a[i])
        y = np.int64(b[i])
        if x == y:
            continue
        if lo <= x < hi:
            p = cursor[x - lo]
            buf[p] = y
            cursor[x - lo] = p + 1
        if lo <= y < hi:
            p = cursor[y - lo]
            buf[p] = x
            cursor[y - lo] = p + 1


@njit(parallel=True, nogil=True, cache=True)
def _sort_rows(buf, raw, base, dedupe, ptr):
    """Sort each row of the range in place, drop its duplicates; ptr[r + 1] = kept entries of row r."""
    rows = raw.size - 1
    for r in prange(rows):
        s = raw[r] - base
        e = raw[r + 1] - base
        if e - s > 1:
            buf[s:e].sort()
        k = e - s
        if dedupe and k > 1:
            w = s + 1
            for t in range(s + 1, e):
                if buf[t] != buf[w - 1]:
                    buf[w] = buf[t]
                    w += 1
            k = w - s
        ptr[r + 1] = k


@njit(nogil=True, cache=True)
def _compact(buf, raw, base, ptr):
    """Prefix-sum ptr (kept per row -> block indptr) and move each row's kept entries left to it."""
    rows = raw.size - 1
    ptr[0] = 0
    for r in range(rows):
        s = raw[r] - base
        d = ptr[r]
        k = ptr[r + 1]
        if d != s:
            for t in range(k):
                buf[d + t] = buf[s + t]
        ptr[r + 1] = d + k
    return ptr[rows]


def chunk_cost(chunk_rows: int, e_isz: int) -> int:
    """Bytes one read of ``chunk_rows`` edge rows of width ``e_isz`` may hold (module docstring)."""
    return int(chunk_rows) * max(32, 8 * int(e_isz)) + _READ_FIXED


def min_budget(raw_ptr: np.ndarray, chunk_rows: int, e_isz: int, passes: int) -> int:
    """The smallest ``memory_budget`` whose plan (:func:`plan_ranges`) has at most ``passes``
    passes over rows ``raw_ptr`` (binary search; ``chunk_rows``, ``e_isz``: the edge reads)."""
    n = raw_ptr.size - 1
    fixed = 8 * (n + 1) + chunk_cost(chunk_rows, e_isz)
    lo, hi = fixed + 64, fixed + 4 * int(raw_ptr[-1]) + 16 * (n + 2)
    while lo < hi:
        mid = (lo + hi) // 2
        try:
            k = len(plan_ranges(raw_ptr, mid, 4, fixed))
        except DbfsError:
            k = passes + 1
        lo, hi = (lo, mid) if k <= passes else (mid + 1, hi)
    return lo


def plan_ranges(raw_ptr: np.ndarray, budget: int, i_isz: int, fixed: int, budget_name: str = "memory_budget",
                row_cost: int = _ROW_COST, rows=None):
    """Consecutive row ranges whose pass cost ``fixed + i_isz * entries + row_cost * (rows + 1)`` fits ``budget``.

    Parameters
    ----------
    raw_ptr : numpy.ndarray
        int64 (N + 1,): undeduplicated row starts (step 0).
    budget : int
        Bytes for ``fixed`` plus one pass.
    i_isz : int
        Bytes per raw entry of a pass.
    fixed : int
        Bytes held besides the pass's arrays (resident arrays and the edge chunk).
    budget_name : str
        The option named in the error (e.g. ``--device-memory-limit``).
    row_cost : int
        Bytes per row of a pass.
    rows : (int, int), optional
        Plan rows ``[lo, hi)`` only (None: every row). Only the row starts at the ranges' bounds are read (a
        few dozen scalars a range), so ``raw_ptr`` may as well be a device array.

    Returns
    -------
    list of (lo, hi, planned bytes of the pass, ``fixed`` included)
    """
    lo, n = (0, raw_ptr.size - 1) if rows is None else (int(rows[0]), int(rows[1]))
    avail = int(budget) - int(fixed) - row_cost
    out = []

    def cost(v):   # cost of rows [0, v), monotone in v: ranges are found by doubling then bisection
        return i_isz * int(raw_ptr[v]) + row_cost * v

    while lo < n:
        c0 = cost(lo)
        if cost(lo + 1) - c0 > avail:
            want = int(fixed) + cost(lo + 1) - c0 + row_cost
            raise DbfsError(f"{budget_name} {int(budget)} B is too small for row {lo} "
                            f"({int(raw_ptr[lo + 1] - raw_ptr[lo])} entries): one pass needs {want} B; "
                            f"raise {budget_name} to at least {want} B")
        hi, step = lo + 1, 1
        while hi + step <= n and cost(hi + step) - c0 <= avail:
            hi += step
            step *= 2
        while step > 1:
            step //= 2
            if hi + step <= n and cost(hi + step) - c0 <= avail:
                hi += step
        out.append((lo, hi, int(fixed) + cost(hi) - c0 + row_cost))
        lo = hi
    return out


def plan_rows(raw_ptr: np.ndarray, rows, budget: int, i_isz: int, fixed: int, budget_name: str = "memory_budget",
              row_cost: int = _ROW_COST):
    """:func:`plan_ranges` over rows ``[lo, hi)`` only (``rows = (lo, hi)``; None: every row)."""
    return plan_ranges(raw_ptr, budget, i_isz, fixed, budget_name, row_cost, rows)


def check_rows(rows, n: int):
    """``rows`` as (lo, hi) within [0, n] (None stays None); else a one-line DbfsError."""
    if rows is None:
        return None
    lo, hi = (int(x) for x in rows)
    if not 0 <= lo <= hi <= n:
        raise DbfsError(f"rows [{lo}, {hi}) are not within the graph's [0, {n}): pass 0 <= lo <= hi <= n")
    return lo, hi


def _slices(edges):
    m = int(edges.shape[0])
    step = int(edges.chunks[0]) if hasattr(edges, "chunks") and not isinstance(edges, np.ndarray) else _NUMPY_STEP
    return [(a, min(a + step, m)) for a in range(0, m, max(1, step))], step


def _read(edges, a, b):
    blk = edges[a:b]
    return blk[:, 0], blk[:, 1], blk


def _degrees(edges, spans, n, checksum):
    """Step 0: raw_ptr (int64 N + 1, prefix sums of raw degrees), chunks checked against ``checksum``."""
    raw_ptr = np.zeros(n + 1, np.int64)
    parts = []
    bad = 0
    for a, b in spans:
        u, v, blk = _read(edges, a, b)
        bad += _count_into(u, v, raw_ptr, n)
        if checksum:
            parts.append(partial_checksum(blk, a))
        del u, v, blk
    if bad:
        raise DbfsError(f"edge list holds {bad} tuples with ids outside [0, {n}): "
                        f"pass n_vertices above the largest id, or None to use max id + 1")
    if checksum and combine(parts) != checksum:
        raise edges.error(None, "rows differ from the edges_checksum recorded at generation")
    np.cumsum(raw_ptr, out=raw_ptr)
    return raw_ptr


def _one_pass(edges, spans, lo, hi, raw_ptr, idt, dedupe):
    """Rows [lo, hi): (block indptr int64 (rows + 1,) from 0, block indices idt)."""
    rows = hi - lo
    base = int(raw_ptr[lo])
    buf = np.empty(int(raw_ptr[hi]) - base, idt)
    cursor = raw_ptr[lo:hi] - base
    for a, b in spans:
        u, v, blk = _read(edges, a, b)
        _scatter_range(u, v, lo, hi, cursor, buf)
        del u, v, blk
    del cursor
    ptr = np.empty(rows + 1, np.int64)
    raw = raw_ptr[lo:hi + 1]
    _sort_rows(buf, raw, base, bool(dedupe), ptr)
    kept = int(_compact(buf, raw, base, ptr))
    return ptr, buf[:kept]


class _Assemble:
    """The default sink: blocks into one in-memory CSR (indices sized by the raw count, trimmed at the end)."""

    def __init__(self, n, total, idt, first: int = 0):
        self.indptr = np.zeros(n + 1, np.int64)
        self.indices = np.empty(total, idt)
        self.pos = 0
        self.first = first                  # the global row of local row 0 (a block of rows)

    def __call__(self, lo, hi, ptr, idx):
        k = idx.size
        self.indices[self.pos:self.pos + k] = idx
        self.indptr[lo - self.first + 1:hi - self.first + 1] = self.pos + ptr[1:]
        self.pos += k


def _own_sink(raw_ptr, n: int, rows, idt) -> _Assemble:
    lo, hi = rows or (0, n)
    return _Assemble(hi - lo, int(raw_ptr[hi]) - int(raw_ptr[lo]), idt, lo)


def build_csr_passes(edges, n_vertices: int | None = None, dedupe: bool = True, memory_budget: int = 1 << 30,
                     budget_name: str = "memory_budget", sink=None, on_pass=None, quiet: bool = True,
                     rows=None):
    """Build the undirected CSR in passes over owner-row ranges (see the module docstring).

    Parameters
    ----------
    edges : numpy.ndarray, CheckedArray or VirtualEdges
        (M, 2) integer rows, read by row slices.
    n_vertices : int, optional
        Vertex count; None means max id + 1 (one more streaming pass).
    dedupe : bool
        Drop duplicate entries.
    memory_budget : int
        Bytes for the resident degree prefix plus one pass (module docstring).
    budget_name : str
        The option named in budget errors.
    sink : callable, optional
        ``sink(lo, hi, ptr, idx)`` per block, rows in order (``ptr`` int64
        from 0, ``idx`` a view valid during the call). None: assemble the
        CSR in memory and return it; with a sink only the ``meta`` dict
        below is returned.
    on_pass : callable, optional
        ``on_pass(event, index, info)`` with event ``"start"``/``"end"`` around
        the degree pass (index -1) and every range pass (the tests measure here).
    quiet : bool
        No progress lines.
    rows : (int, int), optional
        Build only rows ``[lo, hi)`` (a block partition's, the bytes of those
        rows of the whole build): the graph's ``indptr`` then has ``hi - lo + 1``
        entries from 0 and ``meta["rows"]`` is ``(lo, hi)``.

    Returns
    -------
    CSRGraph or dict
        The graph (its ``meta``, when a sink is given); ``meta["passes"]``:
        ``count``, ``ranges`` [(lo, hi)], ``planned`` bytes per pass,
        ``peak_planned``, ``budget``, ``resident``, ``chunk``, ``nnz``.
    """
    check_edge_shape(edges)
    budget = int(memory_budget)
    m = int(edges.shape[0])
    spans, step = _slices(edges)
    e_isz = np.dtype(edges.dtype).itemsize
    if n_vertices is None:
        lo_id, hi_id = 0, -1
        for a, b in spans:
            u, v, _ = _read(edges, a, b)
            x, y = _max_id(u, v)
            lo_id, hi_id = min(lo_id, int(x)), max(hi_id, int(y))
        if lo_id < 0:
            raise DbfsError(f"edge list holds negative vertex id {lo_id}: vertex ids must be >= 0")
        n = hi_id + 1
    else:
        n = int(n_vertices)
        if n < 0:
            raise DbfsError(f"n_vertices={n} is negative: pass a vertex count >= 0 or None")
    idt = index_dtype(n)
    rows = check_rows(rows, n)
    # a NumPy list is read by views (nothing allocated); a reader decodes or regenerates each chunk
    chunk = chunk_cost(min(step, max(m, 1)), e_isz) if m and not isinstance(edges, np.ndarray) else 0
    resident = 8 * (n + 1)
    if resident + chunk > budget:
        raise DbfsError(f"{budget_name} {budget} B is too small for the degree pass over {n} vertices "
                        f"and edge chunks of {step} rows: it needs {resident + chunk} B; "
                        f"raise {budget_name} to at least {resident + chunk + _ROW_COST + idt.itemsize} B")
    hook = on_pass or (lambda *a: None)
    hook("start", -1, {"planned": resident + chunk})
    raw_ptr = _degrees(edges, spans, n, getattr(edges, "checksum", None))
    hook("end", -1, {"planned": resident + chunk})
    ranges = plan_rows(raw_ptr, rows, budget, idt.itemsize, resident + chunk, budget_name) if n else []
    say(f"Kernel 1 in passes: {len(ranges)} pass(es) over {m:,} edges, budget {budget:,} B", quiet)
    own = sink is None
    if own:
        sink = _own_sink(raw_ptr, n, rows, idt)
    nnz = 0
    for k, (lo, hi, cost) in enumerate(ranges):
        hook("start", k, {"lo": lo, "hi": hi, "planned": cost - resident})
        ptr, idx = _one_pass(edges, spans, lo, hi, raw_ptr, idt, dedupe)
        sink(lo, hi, ptr, idx)
        nnz += int(idx.size)
        del ptr, idx
        hook("end", k, {"lo": lo, "hi": hi, "planned": cost - resident})
    info = {"count": len(ranges), "ranges": [(lo, hi) for lo, hi, _ in ranges],
            "planned": [c for _, _, c in ranges], "peak_planned": max([c for _, _, c in ranges], default=0),
            "budget": budget, "resident": resident, "chunk": chunk, "nnz": nnz}
    meta = {"dedupe": bool(dedupe), "relabel": "none", "n_edges": m, "passes": info}
    if rows is not None:
        meta["rows"] = rows
    if own:
        return CSRGraph(sink.indptr, sink.indices[:sink.pos], n, meta=meta)
    return meta

"""GPU Kernel 1 in passes: device memory bounded by a budget (CuPy; imported on demand, never by ``dbfs.kernel1``).

Contract
--------
``build_csr_gpu_passes(source, n_vertices, dedupe=True, memory_budget=...)``
returns a host :class:`dbfs.graph.CSRGraph` byte-for-byte equal to
:func:`dbfs.kernel1.build_csr` (and to :func:`dbfs.kernel1.gpu.build_csr_gpu`)
with the same options: both directions, self-loops dropped, duplicates
dropped unless ``dedupe=False``, rows ascending, ``indptr`` int64,
``indices`` of width :func:`dbfs.graph.id_dtype`; at most ``2**32`` vertices
(keys pack a row offset and a neighbour in 32 bits each). The device
footprint (CuPy's memory pool, freed between passes) stays within
``memory_budget``; the CSR is assembled in host memory (or handed to
``sink`` block by block).

``source`` gives device edge chunks: ``source.m`` rows, ``source.step``
rows per read, ``source.read(a, b)`` -> CuPy (b - a, 2) integer rows and
``source.done()`` called after the degree pass (where a reader checks its
rows' checksum; :func:`dbfs.store.gpu.device_chunks` makes one for a
dataset: stored chunks read and uploaded, virtual Kronecker chunks
regenerated on the device).

Method: the CPU algorithm of :mod:`.passes` with
``dbfs/kernel1/kernel1.cu``'s kernels (those of :mod:`.gpu`):
``k1_count`` per chunk into the raw degrees, prefix sum; ranges cut by
:func:`.passes.plan_ranges` on the device cost; per range, ``k1_emit`` per
chunk writes ``(src - lo) << 32 | dst`` at the row's cursor, one key sort,
``searchsorted`` on row starts finds each row among the sorted keys;
``k1_first_of_run`` flags the first of each run of equal keys, their
inclusive scan gives every kept key its slot and the block's ``indptr`` (the
scan before each row start), one scatter writes the kept keys' low 32 bits
as the block's ``indices``; both are copied to the host (or kept on the
device by :mod:`.placed_gpu`).

Device memory model (bytes): resident ``8 * (N + 1)`` (raw row starts;
the degree pass also holds the ``8 * N`` counts); per pass
``24 * E_pass + 48 * (rows + 1)`` (keys 8 and the sort's buffer 8, then
keys 8, the dedupe flags 1, their scan 8 and the kept low words 4; per row
cursor, row starts, bounds, ``indptr``) plus ``96 * step + 1 MiB`` for a chunk (its rows, their int64
copy, the generator's buffers, the degree pass's checksum terms). See :func:`device_cost`.

Reference: Graph 500 Benchmark 1 specification 3.0.1, Kernel 1,
https://graph500.org/?page_id=12.
"""
from __future__ import annotations

import cupy as cp
import numpy as np

from dbfs.errors import DbfsError
from dbfs.graph import CSRGraph, id_dtype, index_dtype
from dbfs.kernel1.gpu import _grid, _kernels, _BLOCK
from dbfs.kernel1.passes import _own_sink, check_rows, plan_rows
from dbfs.progress import say

__all__ = ["build_csr_gpu_passes", "DeviceCSR", "device_cost", "degree_pass", "pass_device", "rows_from_keys",
           "spans_of", "degree_order", "Relabelled", "check_ids"]

_ENTRY = 24
_ROW = 48
_CHUNK_ROW = 96
_CHUNK_FIXED = 1 << 20


def device_cost(n_vertices: int, step: int, entries: int, rows: int) -> int:
    """Device bytes of a pass over ``rows`` rows holding ``entries`` raw entries (module docstring),
    resident arrays and one chunk of ``step`` rows included; ``entries = rows = 0``: the fixed part."""
    fixed = 8 * (int(n_vertices) + 1) + _CHUNK_ROW * int(step) + _CHUNK_FIXED
    return fixed + (_ENTRY * int(entries) + _ROW * (int(rows) + 1) if rows else 0)


def spans_of(source):
    m, step = int(source.m), max(1, int(source.step))
    return [(a, min(a + step, m)) for a in range(0, m, step)]


def _as_i64(e):
    return e if e.dtype == cp.int64 and e.flags.c_contiguous else cp.ascontiguousarray(e, dtype=cp.int64)


def check_ids(e, n: int):
    """The first id of device rows ``e`` outside ``[0, n)`` found (the largest or the smallest), or None."""
    lo_id, hi_id = int(e.min()), int(e.max())
    return hi_id if hi_id >= n else lo_id if lo_id < 0 else None


def degree_pass(source, spans, n, k):
    """Degree pass: raw row starts (int64 N + 1) on the device; ids outside [0, N) refused."""
    counts = cp.zeros(max(n, 1), cp.uint64)
    for a, b in spans:
        e = _as_i64(source.read(a, b))
        if e.size:
            bad = check_ids(e, n)
            if bad is not None:
                raise DbfsError(f"edge list holds vertex id {bad} outside [0, {n}): pass n_vertices above the "
                                f"largest id")
            k["k1_count"](_grid(b - a), (_BLOCK,), (e, np.int64(b - a), counts))
        del e
    source.done()
    raw_ptr = cp.zeros(n + 1, cp.int64)
    if n:
        cp.cumsum(counts[:n].view(cp.int64), out=raw_ptr[1:])
    del counts
    return raw_ptr


class Relabelled:
    """A chunk source with every id mapped through ``iperm`` (the degree relabelling) on the device."""

    def __init__(self, source, iperm):
        self.source, self.iperm = source, iperm
        self.m, self.step = source.m, source.step

    def read(self, a: int, b: int):
        e = self.source.read(a, b)
        return self.iperm[e.astype(cp.int64, copy=False)]

    def done(self):
        self.source.done()


def degree_order(raw_ptr, vid, bounds=None):
    """(perm, iperm) on the device, ``perm[new] = original``: the vertices of each block ``[bounds[i],
    bounds[i + 1])`` (one block of all N when None) by descending raw degree, ties by id ascending (the rule
    of :func:`dbfs.kernel1.inmemory.degree_permutation`), each block keeping its id range, as ``vid``
    arrays; one key sort a block."""
    n = int(raw_ptr.shape[0]) - 1
    deg = cp.diff(raw_ptr)
    top = np.uint64(int(deg.max()) if n else 0)
    perm = cp.empty(n, vid)
    bounds = [0, n] if bounds is None else [int(b) for b in bounds]
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        keys = ((top - deg[lo:hi].astype(cp.uint64)) << np.uint64(32)) | cp.arange(hi - lo, dtype=cp.uint64)
        keys.sort()
        perm[lo:hi] = (keys & np.uint64(0xFFFFFFFF)).astype(vid) + lo
        del keys
    del deg
    iperm = cp.empty(n, vid)
    iperm[perm] = cp.arange(n, dtype=vid)
    return perm, iperm


def pass_device(source, spans, lo, hi, raw_ptr, idt, dedupe, k):
    """Rows [lo, hi) built on the device: (block indptr from 0, int64 rows + 1; block indices), CuPy."""
    base = int(raw_ptr[lo])
    cnt = int(raw_ptr[hi]) - base
    rows = hi - lo
    if cnt == 0:
        return cp.zeros(rows + 1, cp.int64), cp.empty(0, idt)
    cursor = (raw_ptr[lo:hi] - base).astype(cp.uint64)
    keys = cp.empty(cnt, cp.uint64)
    for a, b in spans:
        e = _as_i64(source.read(a, b))
        k["k1_emit"](_grid(b - a), (_BLOCK,), (e, np.int64(b - a), np.int64(lo), np.int64(hi), cursor, keys))
        del e
    del cursor
    return rows_from_keys(keys, rows, idt, dedupe, k)


def rows_from_keys(keys, rows: int, idt, dedupe: bool, k):
    """A block of ``rows`` rows from its raw keys ``(row << 32 | neighbour)`` in any order (CuPy uint64,
    consumed): (block indptr from 0, int64 rows + 1; block indices of width ``idt``), one key sort, the
    duplicates dropped with ``dedupe``."""
    cnt = int(keys.size)
    if cnt == 0:
        return cp.zeros(rows + 1, cp.int64), cp.empty(0, idt)
    keys.sort()
    starts = cp.arange(rows + 1, dtype=cp.uint64) << np.uint64(32)
    pos = cp.searchsorted(keys, starts).astype(cp.int64)       # row starts among the sorted raw keys
    del starts
    if not (dedupe and cnt > 1):
        return pos, (keys & np.uint64(0xFFFFFFFF)).astype(idt)
    # dedupe without a second key array: first-of-run flags, their inclusive scan, and one scatter of the
    # kept keys' low words (keys 8 + flag 1 + scan 8 + output 4 bytes per entry, the model's _ENTRY)
    keep = cp.empty(cnt, cp.uint8)
    k["k1_first_of_run"](_grid(cnt), (_BLOCK,), (keys, np.int64(cnt), keep))
    scan = cp.cumsum(keep, dtype=cp.int64)
    idx = cp.empty(int(scan[-1]), idt)
    _compact()(keys, keep, scan, idx)
    del keys, keep
    ptr = scan[cp.maximum(pos - 1, 0)] * (pos > 0)             # kept keys before each row start
    return ptr, idx


_COMPACT = None


def _compact():
    """ElementwiseKernel: ``out[scan - 1] = low 32 bits of key`` where ``keep``."""
    global _COMPACT
    if _COMPACT is None:
        _COMPACT = cp.ElementwiseKernel("uint64 key, uint8 keep, int64 at", "raw T out",
                                        "if (keep) out[at - 1] = (T)(key & 0xFFFFFFFFULL);", "dbfs_k1_compact")
    return _COMPACT


def _one_pass(source, spans, lo, hi, raw_ptr, idt, dedupe, k):
    """Rows [lo, hi) on the device -> host (block indptr from 0, block indices)."""
    ptr, idx = pass_device(source, spans, lo, hi, raw_ptr, idt, dedupe, k)
    return cp.asnumpy(ptr), cp.asnumpy(idx)


class DeviceCSR:
    """Rows ``[lo, hi)`` of a CSR in device memory: ``indptr`` (int64 CuPy, from 0, ``hi - lo + 1``),
    ``indices`` (CuPy, the id width), ``n`` vertices, ``meta`` (as the host build's)."""

    def __init__(self, indptr, indices, n: int, meta: dict):
        self.indptr, self.indices, self.n_vertices, self.meta = indptr, indices, int(n), meta


class _DeviceBlocks:
    """A sink keeping each pass's block on the device; :meth:`csr` joins them (rows in order). Given the rows and
    an upper bound on the entries (``rows``, ``entries``: the raw count before deduplication), each block is
    copied into one array of that size as it comes and freed, so the join never holds the indices twice."""

    def __init__(self, rows: int | None = None, entries: int | None = None, idt=None):
        self.ptrs, self.idxs = [], []
        self.ptr = self.idx = None
        if entries is not None:
            self.ptr, self.idx = cp.zeros(int(rows) + 1, cp.int64), cp.empty(int(entries), idt)
            self.row = self.at = 0

    def __call__(self, lo, hi, ptr, idx):
        if self.idx is None:
            self.ptrs.append(ptr)
            self.idxs.append(idx)
            return
        k, r = int(idx.size), int(ptr.size) - 1
        self.idx[self.at:self.at + k] = idx
        self.ptr[self.row:self.row + r + 1] = ptr + self.at     # (the next block's first row start, the same)
        self.at, self.row = self.at + k, self.row + r

    def csr(self, n, meta, idt) -> DeviceCSR:
        if self.idx is not None:
            if self.row != self.ptr.size - 1:
                raise RuntimeError(f"Kernel 1 passes built {self.row} of {self.ptr.size - 1} rows")
            return DeviceCSR(self.ptr, self.idx[:self.at], n, meta)
        if len(self.ptrs) == 1:
            return DeviceCSR(self.ptrs[0], self.idxs[0], n, meta)
        if not self.ptrs:
            return DeviceCSR(cp.zeros(1, cp.int64), cp.empty(0, idt), n, meta)
        offs = np.cumsum([0] + [int(i.size) for i in self.idxs])
        parts = [p[:-1] + int(o) for p, o in zip(self.ptrs, offs[:-1])] + [cp.asarray([int(offs[-1])], cp.int64)]
        ptr, idx = cp.concatenate(parts), cp.concatenate(self.idxs)
        self.ptrs = self.idxs = None
        return DeviceCSR(ptr, idx, n, meta)


def build_csr_gpu_passes(source, n_vertices: int, dedupe: bool = True, memory_budget: int = 1 << 30,
                         budget_name: str = "memory_budget", sink=None, on_pass=None, quiet: bool = True,
                         rows=None, on_device: bool = False, relabel_bounds=None):
    """Build the undirected CSR on the GPU in passes within a device budget (see the module docstring).

    Parameters
    ----------
    source : object
        ``m``, ``step``, ``read(a, b)`` (CuPy rows) and ``done()``.
    n_vertices : int
        Vertex count, at most 2**32.
    dedupe : bool
        Drop duplicate entries.
    memory_budget : int
        Device bytes for the whole build (module docstring).
    budget_name : str
        The option named in budget errors (e.g. ``--device-memory-limit``).
    sink, on_pass, quiet, rows
        As in :func:`dbfs.kernel1.passes.build_csr_passes` (``rows``: only rows ``[lo, hi)``).
    on_device : bool
        Keep the rows on the device (no sink): a :class:`DeviceCSR` instead of the host graph (each
        pass's block stays in device memory beside the next pass's work).
    relabel_bounds : sequence of int, optional
        (``on_device`` only) renumber the vertices of each block ``[b[i], b[i + 1])`` by descending raw
        degree within the block (:func:`degree_order`): rows and neighbours in the new ids, ``meta["perm"]``
        the device ``perm[new] = original`` of all N, ``meta["relabel"]`` ``"degree"``.

    Returns
    -------
    CSRGraph, DeviceCSR or dict
        The host graph (the device rows with ``on_device``; its ``meta`` when a sink is given);
        ``meta["passes"]`` as on the CPU.
    """
    n = int(n_vertices)
    if n > 2**32:
        raise DbfsError(f"GPU Kernel 1 packs vertex ids in 32 bits, {n} vertices do not fit: "
                        f"use dbfs.kernel1.build_csr_passes")
    budget = int(memory_budget)
    idt, vid = index_dtype(n), id_dtype(n)         # entries; ids (the relabelling's numbering)
    rows = check_rows(rows, n)
    if relabel_bounds is not None and not on_device:
        raise DbfsError("relabel_bounds needs on_device=True: a relabelled host build is dbfs.kernel1.build_csr's")
    fixed = device_cost(n, source.step, 0, 0) + (2 * np.dtype(vid).itemsize * n if relabel_bounds is not None else 0)
    if fixed + 8 * n > budget:
        raise DbfsError(f"{budget_name} {budget} B is too small for the degree pass over {n} vertices and edge "
                        f"chunks of {source.step} rows: it needs {fixed + 8 * n} B; "
                        f"raise {budget_name} to at least {fixed + 8 * n} B")
    k = _kernels()
    pool = cp.get_default_memory_pool()
    hook = on_pass or (lambda *a: None)
    spans = spans_of(source)
    pool.free_all_blocks()
    hook("start", -1, {"planned": fixed + 8 * n})
    raw_ptr = degree_pass(source, spans, n, k)
    hook("end", -1, {"planned": fixed + 8 * n})
    perm = None
    if relabel_bounds is not None:      # rows and neighbours in the new ids: degrees and reads mapped
        perm, iperm = degree_order(raw_ptr, vid, relabel_bounds)
        raw_ptr[1:] = cp.cumsum(cp.diff(raw_ptr)[perm])
        source = Relabelled(source, iperm)
    # the plan on the host (a copy of the row starts, host memory): the device cost per entry and per row
    host_ptr = cp.asnumpy(raw_ptr)
    ranges = plan_rows(host_ptr, rows, budget, _ENTRY, fixed, budget_name, row_cost=_ROW) if n else []
    say(f"GPU Kernel 1 in passes: {len(ranges)} pass(es) over {source.m:,} edges, device budget {budget:,} B", quiet)
    own = sink is None
    if on_device and own:
        sink, own = _DeviceBlocks(), False
    elif own:
        sink = _own_sink(host_ptr, n, rows, idt)
    del host_ptr
    nnz = 0
    for i, (lo, hi, cost) in enumerate(ranges):
        pool.free_all_blocks()
        hook("start", i, {"lo": lo, "hi": hi, "planned": cost})
        if on_device:
            ptr, idx = pass_device(source, spans, lo, hi, raw_ptr, idt, dedupe, k)
        else:
            ptr, idx = _one_pass(source, spans, lo, hi, raw_ptr, idt, dedupe, k)
        hook("end", i, {"lo": lo, "hi": hi, "planned": cost})
        sink(lo, hi, ptr, idx)
        nnz += int(idx.size)
        del ptr, idx
    del raw_ptr
    pool.free_all_blocks()
    info = {"count": len(ranges), "ranges": [(lo, hi) for lo, hi, _ in ranges],
            "planned": [c for _, _, c in ranges], "peak_planned": max([c for _, _, c in ranges], default=0),
            "budget": budget, "resident": 8 * (n + 1), "chunk": fixed - 8 * (n + 1), "nnz": nnz}
    meta = {"dedupe": bool(dedupe), "relabel": "none" if perm is None else "degree", "n_edges": int(source.m),
            "passes": info}
    if perm is not None:
        meta["perm"] = perm
    if rows is not None:
        meta["rows"] = rows
    if own:
        return CSRGraph(sink.indptr, sink.indices[:sink.pos], n, meta=meta)
    if isinstance(sink, _DeviceBlocks):
        return sink.csr(n, meta, idt)
    return meta

"""GPU Kernel 1: Graph500 edge list -> CSR on the device (CuPy + CUDA C).

Imported on demand only (``dbfs.kernel1`` never imports it): it needs CuPy.

Contract: ``build_csr_gpu(edges, n_vertices=None, dedupe=True)`` returns a
:class:`dbfs.graph.CSRGraph` whose ``indptr``/``indices`` are byte-for-byte
those of :func:`dbfs.kernel1.build_csr` with the same options (no
relabelling): both directions of every tuple, self-loops dropped,
duplicates dropped unless ``dedupe=False``, rows sorted ascending,
``indptr`` int64, ``indices`` of :func:`dbfs.graph.index_dtype` (int32
while ``N <= 2**31``, uint32 up to ``2**32``).
``edges`` is a CuPy or NumPy (M, 2) integer array; ``n_vertices=None``
means max id + 1, computed here (Graph500: Kernel 1 gets only the list).
The device copies stay in ``graph.meta["gpu_csr"]`` (the GPU BFS backend
uses them without another upload); ``to_host=False`` skips the host copy
and puts the CuPy arrays in ``indptr``/``indices`` themselves.

Algorithm (kernels in ``dbfs/kernel1/kernel1.cu``):

1. count the non-self-loop endpoints of every vertex (atomics) and prefix-sum
   them (``raw_ptr``: the undeduplicated row starts);
2. cut the vertices into ranges of consecutive rows holding at most
   ``chunk_entries`` entries (a single larger row is a range of its own);
3. per range: scatter ``(row - lo) << 32 | neighbour`` keys at per-row
   cursors (a counting sort by row), sort the keys (CuPy radix sort), drop
   repeated keys, split into ``indices`` and per-row degrees
   (``searchsorted`` of the row boundaries);
4. ``indptr`` is the prefix sum of the degrees.

Memory: the edges (16 B per tuple), 16 B per vertex for counts and row
starts, the output, and per range about 40 B per entry (keys, sort buffer,
mask, compacted keys): with the default range size (2**28 entries, or less
when free memory is short) SCALE 26 needs about 16 + 1 + 8 + 11 GB.
Vertex ids must be below 2**32 (the keys hold one in 32 bits).

Reference: Graph 500 Benchmark 1 specification 3.0.1, Kernel 1,
https://graph500.org/?page_id=12.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import cupy as cp
import numpy as np

from dbfs.errors import DbfsError
from dbfs.graph import CSRGraph, index_dtype
from dbfs.kernel1.inmemory import check_edge_shape

__all__ = ["build_csr_gpu"]

_KERNEL = Path(__file__).resolve().parent / "kernel1.cu"
_BLOCK = 256
_MAX_CHUNK = 1 << 28
_ENTRY_BYTES = 40
# whole-edge-list CuPy operations run in row chunks of this many rows: an array
# op over 2**31 or more elements makes CuPy compile a 64-bit-index kernel on
# first use, which SCALE 26 (2**31 ids) would pay
_ROWS = 1 << 26


@lru_cache(maxsize=None)
def _kernels():
    mod = cp.RawModule(code=_KERNEL.read_text())
    return {name: mod.get_function(name) for name in ("k1_count", "k1_emit", "k1_first_of_run", "k1_emit_ranges_i32",
                                                      "k1_emit_ranges_i64")}


@lru_cache(maxsize=None)
def _sm_count() -> int:
    return int(cp.cuda.Device().attributes["MultiProcessorCount"])


def _grid(items: int) -> tuple:
    return (max(1, min(-(-int(items) // _BLOCK), 32 * _sm_count())),)


def _as_device_edges(edges):
    check_edge_shape(edges)
    shape = tuple(edges.shape)
    if isinstance(edges, cp.ndarray):
        if edges.dtype == cp.int64 and edges.flags.c_contiguous:
            return edges
        out = cp.empty(shape, cp.int64)
        for a in range(0, shape[0], _ROWS):   # chunks below 2**31 elements: no 64-bit-index kernel to compile
            out[a:a + _ROWS] = edges[a:a + _ROWS]
        return out
    return cp.asarray(np.ascontiguousarray(edges, dtype=np.int64))


def _min_max(e):
    """(min, max) id of a device (m, 2) array, reduced in row chunks (see _ROWS)."""
    lo = [int(e[a:a + _ROWS].min()) for a in range(0, e.shape[0], _ROWS)]
    hi = [int(e[a:a + _ROWS].max()) for a in range(0, e.shape[0], _ROWS)]
    return min(lo), max(hi)


def _default_chunk() -> int:
    free, _ = cp.cuda.runtime.memGetInfo()
    free += cp.get_default_memory_pool().free_bytes()
    return int(max(1 << 16, min(_MAX_CHUNK, free // (2 * _ENTRY_BYTES))))


def build_csr_gpu(edges, n_vertices: int | None = None, dedupe: bool = True, chunk_entries: int | None = None,
                  to_host: bool = True) -> CSRGraph:
    """Build the undirected CSR on the GPU (see the module docstring).

    Parameters
    ----------
    edges : cupy.ndarray or numpy.ndarray, shape (M, 2)
        Integer vertex ids.
    n_vertices : int, optional
        Vertex count; None means max id + 1. At most 2**32.
    dedupe : bool
        Drop duplicate entries.
    chunk_entries : int, optional
        Entries sorted at once (None: from free memory, at most 2**28); it
        never changes the result.
    to_host : bool
        Copy ``indptr``/``indices`` to host memory (the device copies stay in
        ``meta["gpu_csr"]`` either way).

    Returns
    -------
    CSRGraph
    """
    e = _as_device_edges(edges)
    m = int(e.shape[0])
    if m:
        lo_id, hi_id = _min_max(e)
    else:
        lo_id, hi_id = 0, -1
    if lo_id < 0:
        raise DbfsError(f"edge list holds negative vertex id {lo_id}: vertex ids must be >= 0")
    if n_vertices is None:
        n = hi_id + 1
    else:
        n = int(n_vertices)
        if hi_id >= n:
            raise DbfsError(f"edge list holds vertex id {hi_id} >= n_vertices={n}: "
                            f"pass n_vertices > {hi_id} or None to use max id + 1")
    if n > 2**32:
        raise DbfsError(f"GPU Kernel 1 packs vertex ids in 32 bits, {n} vertices do not fit: "
                        f"use dbfs.kernel1.build_csr")
    idt = index_dtype(n)
    cap = int(chunk_entries) if chunk_entries is not None else _default_chunk()
    if cap < 1:
        raise DbfsError(f"chunk_entries {cap} is invalid: use an integer >= 1 or None")
    k = _kernels()

    # 1. raw degrees and row starts
    counts = cp.zeros(max(n, 1), cp.uint64)
    if m:
        k["k1_count"](_grid(m), (_BLOCK,), (e, np.int64(m), counts))
    raw_ptr = cp.zeros(n + 1, cp.int64)
    if n:
        cp.cumsum(counts[:n].view(cp.int64), out=raw_ptr[1:])
    del counts
    total = int(raw_ptr[n]) if n else 0

    deg = cp.zeros(max(n, 1), cp.int64)
    out_idx = cp.empty(max(total, 1), idt)
    pos = 0
    lo = 0
    base = 0
    while lo < n and base < total:
        # 2. the next range [lo, hi): as many rows as fit in cap entries (at least one)
        hi = int(cp.searchsorted(raw_ptr, cp.asarray(np.array([base + cap], np.int64)), side="right")[0]) - 1
        hi = min(max(hi, lo + 1), n)
        end = int(raw_ptr[hi])
        cnt = end - base
        if cnt:
            # 3. keys of the range, sorted, deduplicated, split
            cursor = (raw_ptr[lo:hi] - base).astype(cp.uint64)
            keys = cp.empty(cnt, cp.uint64)
            k["k1_emit"](_grid(m), (_BLOCK,), (e, np.int64(m), np.int64(lo), np.int64(hi), cursor, keys))
            del cursor
            keys.sort()
            if dedupe and cnt > 1:
                keep = cp.empty(cnt, cp.uint8)
                k["k1_first_of_run"](_grid(cnt), (_BLOCK,), (keys, np.int64(cnt), keep))
                keys = keys[keep.view(cp.bool_)]
                del keep
            rows = hi - lo
            starts = cp.arange(rows + 1, dtype=cp.uint64) << np.uint64(32)
            bounds = cp.searchsorted(keys, starts)
            deg[lo:hi] = cp.diff(bounds).astype(cp.int64)
            kept = int(keys.shape[0])
            out_idx[pos:pos + kept] = (keys & np.uint64(0xFFFFFFFF)).astype(idt)
            pos += kept
            del keys, starts, bounds
        lo = hi
        base = end

    # 4. indptr
    indptr = cp.zeros(n + 1, cp.int64)
    if n:
        cp.cumsum(deg[:n], out=indptr[1:])
    indices = out_idx[:pos]
    meta = {"dedupe": bool(dedupe), "relabel": "none", "n_edges": m, "gpu_csr": (indptr, indices)}
    if to_host:
        return CSRGraph(cp.asnumpy(indptr), cp.asnumpy(indices), n, meta=meta)
    return CSRGraph(indptr, indices, n, meta=meta)

"""GPU Kernel 1 in passes straight into the search's device/host split (CuPy; imported on demand).

Contract
--------
``build_csr_placed(source, n_vertices, device_entries, pass_budget, dedupe=True)``
returns a :class:`dbfs.graph.CSRGraph` whose CSR is byte-for-byte that of
:func:`dbfs.kernel1.passes_gpu.build_csr_gpu_passes` with the same options,
but never assembled in one place: rows ``[0, split.row)`` have their
adjacency entries in ONE device array of at most ``device_entries``
entries, the rest in ONE mapped pinned host array (zero-copy for the
kernels), ``indptr`` (int64, N + 1) in host memory and on the device. It is
what the GPU backend searches when the CSR fits neither the device alone
nor the disk (SCALE 30 on one H200: ~125 GiB of adjacency against 141 GiB of
device memory that the searches and validations also need).

Encoding: ``graph.indices`` is an EMPTY array of the id width (the
adjacency is not in one host array); ``graph.meta["gpu_pieces"]`` holds
``indptr`` (CuPy), ``adj`` (the kernels' ``ADJ_PARAMS``: device piece, host
piece, entry where they meet, :mod:`dbfs.split` order ``prefix``),
``split`` (:class:`dbfs.split.Split`) and ``keep`` (the pinned
allocation's owner), read by :func:`dbfs.bfs.gpu.device_graph`;
``meta["passes"]`` is the pass report of :mod:`.passes_gpu` plus
``placement`` (bytes and entries each side).

Method: :mod:`.passes_gpu`'s degree pass and per-range passes (each range
regenerates or rereads the edge chunks: ``pass_budget`` bounds a pass's
device bytes, the raw row starts included, as there). Ranges go in row
order; a range's rows are copied into the device piece while they fit
whole, and from the first row that does not fit on, every row goes to the
host piece (one split point, so one comparison per read in ``ADJ``). The
device piece is allocated once at the start (``min(device_entries, raw
entries)``); the host piece when the split is crossed, sized by the raw
(undeduplicated) entries still to come, an upper bound.

Reference: Graph 500 Benchmark 1 specification 3.0.1, Kernel 1; the
split of one adjacency between GPU and host memory follows Kolganov &
Chernyshev's zero-copy Graph500 BFS (2016) and Totem (Gharaibeh et al.,
PACT 2012).
"""
from __future__ import annotations

import time

import cupy as cp
import numpy as np

from dbfs.errors import DbfsError
from dbfs.graph import CSRGraph, id_dtype
from dbfs.kernel1.gpu import _kernels
from dbfs.kernel1.passes import plan_ranges
from dbfs.kernel1.passes_gpu import _ENTRY, _ROW, degree_pass, device_cost, pass_device, spans_of
from dbfs.pinned import mapped_host_empty
from dbfs.progress import say
from dbfs.split import Split

__all__ = ["build_csr_placed"]


class _Placer:
    """Puts pass blocks into the device piece while whole rows fit, then into the host piece."""

    def __init__(self, n, cap, raw_ptr_host, idt):
        self.n, self.idt, self.raw = n, idt, raw_ptr_host
        self.dev = cp.empty(max(cap, 1), idt)
        self.cap = int(cap)
        self.indptr = np.empty(n + 1, np.int64)
        self.indptr[0] = 0
        self.pos = 0                        # entries placed so far
        self.row = None                     # the split row once crossed
        self.entry = None
        self.host = self.host_dev = None
        self.keep: list = []

    def _cross(self, row: int, entry: int):
        self.row, self.entry = row, entry
        left = int(self.raw[self.n] - self.raw[row])      # raw entries still to come: an upper bound
        self.host, self.host_dev = mapped_host_empty((max(left, 1),), self.idt, self.keep)

    def __call__(self, lo: int, hi: int, ptr_d, idx_d):
        ptr = cp.asnumpy(ptr_d)
        c, rows = int(ptr[-1]), hi - lo
        self.indptr[lo + 1:hi + 1] = self.pos + ptr[1:]
        put = 0                             # the block's entries that go to the device piece
        if self.row is None:
            fit = min(int(np.searchsorted(ptr, self.cap - self.pos, side="right")) - 1, rows)  # whole rows
            put = int(ptr[fit])
            if put:
                self.dev[self.pos:self.pos + put] = idx_d[:put]
            if fit < rows:
                self._cross(lo + fit, self.pos + put)
        if put < c:
            at = self.pos + put - self.entry
            idx_d[put:].get(out=self.host[at:at + c - put])
        self.pos += c

    def finish(self) -> tuple:
        nnz = self.pos
        if self.row is None:                # everything fitted: one device piece
            return self.indptr, Split("prefix", self.n, nnz, nnz, self.idt.itemsize), (self.dev, None)
        sp = Split("prefix", self.row, self.entry, nnz, self.idt.itemsize)
        return self.indptr, sp, (self.dev if self.entry else None, self.host_dev)


def build_csr_placed(source, n_vertices: int, device_entries: int, pass_budget: int, dedupe: bool = True,
                     budget_name: str = "--device-memory-limit", quiet: bool = True) -> CSRGraph:
    """Build the CSR on the GPU in passes into a device/host split (see the module docstring).

    Parameters
    ----------
    source : object
        ``m``, ``step``, ``read(a, b)`` (CuPy rows) and ``done()``
        (:func:`dbfs.store.gpu.device_chunks`).
    n_vertices : int
        At most 2**32.
    device_entries : int
        Adjacency entries the device piece may hold.
    pass_budget : int
        Device bytes of one pass (raw row starts and a chunk included), besides the device piece.
    dedupe : bool
        Drop duplicate entries.
    budget_name : str
        The option named in budget errors.
    quiet : bool
        No status lines.

    Returns
    -------
    CSRGraph
        Placed as the module docstring says.
    """
    n = int(n_vertices)
    if n > 2**32:
        raise DbfsError(f"GPU Kernel 1 packs vertex ids in 32 bits, {n} vertices do not fit")
    idt = np.dtype(id_dtype(n))
    fixed = device_cost(n, source.step, 0, 0)
    if fixed + 8 * n > pass_budget:
        raise DbfsError(f"{budget_name} leaves {pass_budget:,} B of device memory for Kernel 1's passes over "
                        f"{n:,} vertices, they need at least {fixed + 8 * n:,} B: raise {budget_name}")
    t0 = time.perf_counter()
    k = _kernels()
    pool = cp.get_default_memory_pool()
    spans = spans_of(source)
    raw_ptr = degree_pass(source, spans, n, k)
    host_ptr = cp.asnumpy(raw_ptr)
    ranges = plan_ranges(host_ptr, pass_budget, _ENTRY, fixed, budget_name, row_cost=_ROW) if n else []
    cap = min(int(device_entries), int(host_ptr[n]) if n else 0)
    placer = _Placer(n, max(cap, 0), host_ptr, idt)
    say(f"GPU Kernel 1 placed: {len(ranges)} pass(es) over {source.m:,} edges, device piece up to "
        f"{cap * idt.itemsize:,} B, passes within {pass_budget:,} B", quiet)
    for i, (lo, hi, _cost) in enumerate(ranges):
        pool.free_all_blocks()
        ptr_d, idx_d = pass_device(source, spans, lo, hi, raw_ptr, idt, dedupe, k)
        placer(lo, hi, ptr_d, idx_d)
        del ptr_d, idx_d
        if not quiet and (i + 1) % 8 == 0:
            say(f"GPU Kernel 1 placed: pass {i + 1}/{len(ranges)} done", quiet)
    del raw_ptr, host_ptr
    pool.free_all_blocks()
    indptr, sp, (dev, host) = placer.finish()
    if n == 0:
        indptr = np.zeros(1, np.int64)
    ip_dev = cp.asarray(indptr)
    if sp.mode == "device":
        adj = (dev[:sp.nnz], dev[:sp.nnz], np.int64(1 << 62))
    elif sp.mode == "host":
        adj = (host, host, np.int64(1 << 62))
    else:
        adj = (dev[:sp.entry], host, np.int64(sp.entry))
    info = {"count": len(ranges), "ranges": [(lo, hi) for lo, hi, _ in ranges],
            "planned": [c for _, _, c in ranges], "peak_planned": max([c for _, _, c in ranges], default=0),
            "budget": int(pass_budget), "nnz": sp.nnz, "placement": sp.report(),
            "seconds": time.perf_counter() - t0}
    meta = {"dedupe": bool(dedupe), "relabel": "none", "n_edges": int(source.m), "passes": info,
            "gpu_pieces": {"indptr": ip_dev, "adj": adj, "split": sp, "keep": placer.keep}}
    return CSRGraph(indptr, np.empty(0, idt), n, meta=meta)

"""GPU Kernel 1 in passes straight into the search's device/host split (CuPy; imported on demand).

Contract
--------
``build_csr_placed(source, n_vertices, device_entries, pass_budget, dedupe=True,
order="prefix", relabel="none")`` returns a :class:`dbfs.graph.CSRGraph`
whose CSR is byte-for-byte that of :func:`dbfs.kernel1.build_csr` with the
same ``dedupe`` and ``relabel`` (``"degree"``: ids by descending raw degree,
ties by id, computed on the device from the degree pass), but never
assembled in one place: the rows of one end of the row order (``order``,
:mod:`dbfs.split`) have their adjacency entries in ONE device array of at
most ``device_entries`` entries, the rest in ONE mapped pinned host array
(zero-copy for the kernels), ``indptr`` (int64, N + 1) in host memory and
on the device. It is
what the GPU backend searches when the CSR fits neither the device alone
(beside the memory the searches and validations also need there) nor the
disk.

Encoding: ``graph.indices`` is an EMPTY array of the id width (the
adjacency is not in one host array); ``graph.meta["gpu_pieces"]`` holds
``indptr`` (CuPy), ``adj`` (the kernels' ``ADJ_PARAMS``: device piece, host
piece, entry where they meet, :mod:`dbfs.split` order ``prefix``),
``split`` (:class:`dbfs.split.Split`), ``keep`` (the pinned
allocation's owner) and ``perm`` (relabelled: ``perm[new] = original`` on
the device, else None), read by :func:`dbfs.bfs.gpu.device_graph`;
``meta["passes"]`` is the pass report of :mod:`.passes_gpu` plus
``placement`` (bytes and entries each side).

Method: :mod:`.passes_gpu`'s degree pass and per-range passes (each range
regenerates or rereads the edge chunks: ``pass_budget`` bounds a pass's
device bytes, the raw row starts included, as there). Relabelling sorts one
key per vertex (``(max - degree) << 32 | id``) and maps every chunk's ids
through ``iperm`` before a pass. Ranges go in row order (``suffix``:
backwards) to :class:`dbfs.kernel1.placer.Placer` (CuPy arrays, mapped pinned
host memory; CI runs the same placer with NumPy and the CPU passes): a
range's rows are copied into the device piece while they fit
whole, and from the first row that does not fit on, every row goes to the
host piece (one split point, so one comparison per read in ``ADJ``). The
device piece is allocated once at the start (``min(device_entries, raw
entries)``); the host piece when the split is crossed, sized by the raw
(undeduplicated) entries still to come, an upper bound. On a degree-ordered
CSR the ``suffix`` (the low-degree rows on the device) is the placement to
use: measured in docs/BENCHMARKS.md.

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
from dbfs.graph import CSRGraph, id_dtype, index_dtype
from dbfs.kernel1.gpu import _kernels
from dbfs.kernel1.passes import plan_ranges
from dbfs.kernel1.passes_gpu import (_ENTRY, _ROW, Relabelled, degree_order, degree_pass, device_cost, pass_device,
                                     spans_of)
from dbfs.kernel1.placer import Placer
from dbfs.pinned import mapped_host_empty
from dbfs.progress import say

__all__ = ["build_csr_placed"]


def build_csr_placed(source, n_vertices: int, device_entries: int, pass_budget: int, dedupe: bool = True,
                     order: str = "prefix", relabel: str = "none", budget_name: str = "--device-memory-limit",
                     quiet: bool = True) -> CSRGraph:
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
    order : {"prefix", "suffix"}
        Which end of the row order keeps its adjacency on the device (:mod:`dbfs.split`).
    relabel : {"none", "degree"}
        Renumber by descending raw degree first (the bytes of ``dbfs.kernel1.build_csr(...,
        relabel="degree")``; ``perm``/``iperm`` on the graph, the device ``perm`` in the pieces).
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
    if relabel not in ("none", "degree"):
        raise DbfsError(f"unknown relabel {relabel!r}: use 'none' or 'degree'")
    idt, vid = np.dtype(index_dtype(n)), np.dtype(id_dtype(n))      # entries; ids (the relabelling's numbering)
    vb = np.dtype(vid).itemsize
    fixed = device_cost(n, source.step, 0, 0) + (vb * n if relabel == "degree" else 0)    # + iperm
    if fixed + 8 * n > pass_budget:
        raise DbfsError(f"{budget_name} leaves {pass_budget:,} B of device memory for Kernel 1's passes over "
                        f"{n:,} vertices, they need at least {fixed + 8 * n:,} B: raise {budget_name}")
    t0 = time.perf_counter()
    m = int(source.m)
    k = _kernels()
    pool = cp.get_default_memory_pool()
    spans = spans_of(source)
    raw_ptr = degree_pass(source, spans, n, k)
    hp = iperm = None
    if relabel == "degree":
        perm, iperm = degree_order(raw_ptr, vid)
        deg = cp.diff(raw_ptr)[perm]
        raw_ptr[1:] = cp.cumsum(deg)
        hp = cp.asnumpy(perm)           # host while the passes run: they need only iperm on the device
        del deg, perm
        source = Relabelled(source, iperm)
    host_ptr = cp.asnumpy(raw_ptr)
    ranges = plan_ranges(host_ptr, pass_budget, _ENTRY, fixed, budget_name, row_cost=_ROW) if n else []
    cap = min(int(device_entries), int(host_ptr[n]) if n else 0)
    del host_ptr                # host memory goes to the pinned piece (8 B per vertex back)
    placer = Placer(n, max(cap, 0), raw_ptr, idt, order, cp, mapped_host_empty)
    say(f"GPU Kernel 1 placed: {len(ranges)} pass(es) over {m:,} edges, device piece up to "
        f"{cap * idt.itemsize:,} B ({order}), passes within {pass_budget:,} B", quiet)
    todo = ranges if order == "prefix" else ranges[::-1]
    for i, (lo, hi, _cost) in enumerate(todo):
        pool.free_all_blocks()
        ptr_d, idx_d = pass_device(source, spans, lo, hi, raw_ptr, idt, dedupe, k)
        placer(lo, hi, ptr_d, idx_d)
        del ptr_d, idx_d
        if (i + 1) % 8 == 0:
            say(f"GPU Kernel 1 placed: pass {i + 1}/{len(ranges)} done", quiet)
    placer.raw = None
    del raw_ptr
    hi_p = None
    if iperm is not None:       # host copies in the id width (4 B per vertex each for int32 ids, not 8)
        hi_p = cp.asnumpy(iperm)
        del iperm, source
    pool.free_all_blocks()
    indptr, sp, adj = placer.finish()
    info = {"count": len(ranges), "ranges": [(lo, hi) for lo, hi, _ in ranges],
            "planned": [c for _, _, c in ranges], "peak_planned": max([c for _, _, c in ranges], default=0),
            "budget": int(pass_budget), "nnz": sp.nnz, "placement": sp.report(),
            "seconds": time.perf_counter() - t0}
    meta = {"dedupe": bool(dedupe), "relabel": relabel, "n_edges": m, "passes": info,
            "gpu_pieces": {"indptr": cp.asarray(indptr), "adj": adj, "split": sp, "keep": placer.keep,
                           "perm": None if hp is None else cp.asarray(hp)}}
    return CSRGraph(indptr, np.empty(0, idt), n, perm=hp, iperm=hi_p, meta=meta)

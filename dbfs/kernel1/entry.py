"""Kernel 1's entry points, one per device: which builder runs, decided in one place.

Contract
--------
``kernel1_cpu(ds, opts, client, warm)`` and ``kernel1_gpu(ds, opts, client,
warm)`` return ``(variant name, attributes)`` of the CSR variant ``opts``
names (:class:`Kernel1Options`) for dataset ``ds``: the stored one when it
is complete and not recorded as damaged (``opts.force`` rebuilds it), else
built. Every builder below them keeps Kernel 1's contract
(:mod:`dbfs.kernel1`: the same bytes for any chunking, device or budget),
so the choice changes where the CSR lives and how long it takes, never
its bytes. Callers (the backends, ``dbfs build``, a run spec's ``build``
stage) go through these two; the dask backend's builds on its workers
(:mod:`dbfs.kernel1.on_workers`, the GPU workers' shuffle) are the third
device, chosen by that backend because their result is the workers'
state, not a store.

Method
------
CPU (:func:`kernel1_cpu`): the out-of-core partitioned build on Dask
(:func:`dbfs.kernel1.partitioned.build_partitioned`), or, with ``keep``
given, one partition in memory in passes (:func:`keep_in_passes`: the
host's budget, nothing stored) when the disk has no room for the CSR.
The Numba kernels of the build it picks are loaded first through
``warm(build, client)`` (a backend's compile step, outside the clock).

GPU (:func:`kernel1_gpu`): one block partition is built on the device:
in one pass from the device copy of the edges where it fits
(:func:`dbfs.kernel1.build_gpu.build_gpu`), in passes within 85% of the
free device memory where it does not (both stored), or straight into the
searches' device/host split, kept in memory for the run
(:func:`dbfs.kernel1.build_placed.build_placed`) when ``--relabel degree``
asks for the degree order or the CSR has no room on disk or in host
memory (:func:`csr_stores`). ``opts.store`` (``dbfs build --backend gpu``)
takes the stored build only, within ``opts.device_budget`` when given.
A stored relabelled variant is reused through the CPU entry; other
partitionings are the CPU entry's, with the placed build as its in-memory
fallback.

The checks a caller makes before it starts a cluster are here too:
:func:`check_scratch` (``--scratch``) and :func:`disk_need` (the
partitioned build's disk bytes), from :mod:`dbfs.kernel1.partitioned`.

Encoding: the attributes are those the builder stores (or, kept in memory,
returns): ``construction_time``, ``nnz``, ``variant``, and ``in_memory``
/ ``note`` / ``passes`` where they apply. Reference: Graph 500 Benchmark
1 specification 3.0.1, Kernel 1, https://graph500.org/?page_id=12.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from dbfs.kernel1.build_gpu import build_gpu, kernel1_fits
from dbfs.kernel1.build_placed import build_placed
from dbfs.kernel1.partitioned import build_partitioned, check_scratch, disk_need
from dbfs.kernel1.passes import build_csr_passes
from dbfs.preflight import csr_bytes, host_available
from dbfs.progress import say
from dbfs.split import PLACEMENT_ORDER, split_order
from dbfs.store.space import MARGIN, free_bytes
from dbfs.store.variants import reusable_variant, variant_name
from dbfs.units import human

__all__ = ["Kernel1Options", "kernel1_cpu", "kernel1_gpu", "keep_in_passes", "keep_placed", "csr_stores",
           "check_scratch", "disk_need"]


@dataclass(frozen=True)
class Kernel1Options:
    """What Kernel 1 builds and within what (the run's or ``dbfs build``'s options)."""
    partitions: int = 1
    partitioning: str = "block"
    dedupe: bool = True
    relabel: str = "none"
    quiet: bool = False
    force: bool = False                  # rebuild a stored variant
    memory_budget: int | None = None     # the CPU out-of-core build's host bytes (None: its default)
    scratch: str | None = None           # the CPU out-of-core build's scratch folder
    store: bool = False                  # GPU: the stored build only (``dbfs build --backend gpu``)
    device_budget: int | None = None     # GPU stored build in passes within this many device bytes
    device_limit: int | None = None      # GPU placed build: device bytes for the CSR (None: what is free)
    order: str = "prefix"                # GPU placed build: which end of the row order stays on the device

    @classmethod
    def of(cls, cfg, **given) -> "Kernel1Options":
        """The options of a run's configuration (:class:`dbfs.backends.RunConfig`), ``given`` over them."""
        base = {k: getattr(cfg, k) for k in ("partitions", "partitioning", "dedupe", "relabel", "quiet")}
        return cls(**{**base, "device_limit": cfg.device_memory_limit,
                      "order": split_order(cfg.placement, cfg.relabel) if cfg.placement in PLACEMENT_ORDER
                      else "prefix", **given})

    @property
    def variant(self) -> str:
        return variant_name(self.partitions, self.partitioning, self.dedupe, self.relabel)

    def stored(self, ds) -> dict | None:
        """The reusable stored variant's attributes (None where it must be built, or ``force``)."""
        if self.force:
            return None
        return reusable_variant(ds.path, self.partitions, self.partitioning, self.dedupe, self.relabel)


def csr_stores(ds) -> bool:
    """Whether the one-partition CSR of ``ds`` can be assembled in host memory and stored (disk and host
    memory have room for it)."""
    need = sum(csr_bytes(ds.n_vertices, ds.n_edges))
    return need + MARGIN <= free_bytes(ds.path) and need + (need >> 2) <= host_available()


def keep_in_passes(ds, opts: Kernel1Options, why: str) -> dict:
    """CPU Kernel 1 of one partition in passes (:func:`dbfs.kernel1.passes.build_csr_passes`, half the
    available host memory as its budget) into ``ds.memo["graph"]``, not stored; ``why`` said on stderr
    and kept as the attributes' ``note``."""
    say(why, opts.quiet)
    t0 = time.perf_counter()
    g = build_csr_passes(ds.edges(), n_vertices=ds.n_vertices, dedupe=opts.dedupe,
                         memory_budget=max(host_available() // 2, 1 << 26))
    ds.memo["graph"] = g
    return {"construction_time": time.perf_counter() - t0, "in_memory": True, "note": why, "nnz": int(g.nnz)}


def kernel1_cpu(ds, opts: Kernel1Options, client=None, warm=None, keep=None) -> tuple:
    """(variant, attributes): the stored variant, or Kernel 1 out of core on ``client``'s workers (the
    threaded scheduler without one); with ``keep(ds, opts, why)``, one partition of the plain CSR is built
    in memory by it where the disk has no room for the CSR. ``warm(build, client)`` loads the chosen
    build's kernels first (``build``: ``"passes"`` or ``(P, partitioning, dedupe, relabel)``) and returns
    the seconds, added to ``ds.memo["compile_time"]``."""
    if opts.stored(ds) is None:
        in_memory, why = False, ""
        if keep is not None and opts.partitions == 1 and opts.relabel == "none":
            need = sum(csr_bytes(ds.n_vertices, ds.n_edges)) + MARGIN
            free = free_bytes(ds.path)
            in_memory = need > free
            why = (f"no room on disk for the CSR of {ds.name} (up to {human(need)}, {human(free)} free): Kernel 1 "
                   f"keeps it in memory for this run, not stored")
        if warm is not None:
            build = "passes" if in_memory else (opts.partitions, opts.partitioning, opts.dedupe, opts.relabel)
            seconds = warm(build, None if in_memory else client)
            ds.memo["compile_time"] = ds.memo.get("compile_time", 0.0) + seconds
        if in_memory:
            return opts.variant, keep(ds, opts, why)
    attrs = build_partitioned(ds.path, P=opts.partitions, partitioning=opts.partitioning, dedupe=opts.dedupe,
                              relabel=opts.relabel, memory_budget=opts.memory_budget, client=client,
                              progress=not opts.quiet, force=opts.force, scratch=opts.scratch)
    return opts.variant, attrs


def keep_placed(ds, opts: Kernel1Options, why: str = "") -> dict:
    """GPU Kernel 1 in passes straight into the searches' device/host split, kept for this run
    (:func:`dbfs.kernel1.build_placed.build_placed`, which says why on stderr and in its ``note``)."""
    return build_placed(ds, dedupe=opts.dedupe, device_limit=opts.device_limit, quiet=opts.quiet,
                        relabel=opts.relabel, order=opts.order)


def kernel1_gpu(ds, opts: Kernel1Options, client=None, warm=None) -> tuple:
    """(variant, attributes): Kernel 1 of one block partition on this process's GPU (module docstring);
    other partitionings through :func:`kernel1_cpu`, with the placed build where the disk has no room."""
    if opts.partitions != 1 or opts.partitioning != "block":
        return kernel1_cpu(ds, opts, client, warm, keep=keep_placed)
    if opts.store:
        return opts.variant, build_gpu(ds, dedupe=opts.dedupe, relabel=opts.relabel, quiet=opts.quiet,
                                       force=opts.force, device_budget=opts.device_budget)
    if opts.stored(ds) is not None:
        if opts.relabel != "none":
            return kernel1_cpu(ds, opts, client, warm)
        return opts.variant, build_gpu(ds, dedupe=opts.dedupe, quiet=opts.quiet)
    if opts.relabel != "none" or not csr_stores(ds):
        return opts.variant, keep_placed(ds, opts)
    fits = kernel1_fits(ds)
    if not fits:
        say(f"GPU Kernel 1 of {ds.name} does not fit the free device memory in one pass: building in passes",
            opts.quiet)
    return opts.variant, build_gpu(ds, dedupe=opts.dedupe, quiet=opts.quiet, force=opts.force,
                                   device_budget=None if fits else "auto")


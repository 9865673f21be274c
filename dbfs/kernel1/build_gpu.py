"""GPU Kernel 1 of a stored dataset into its CSR variant (``dbfs build --backend gpu``, ``--backend gpu``).

Contract
--------
:func:`build_gpu` is Kernel 1 on the GPU (:func:`dbfs.kernel1.gpu.build_csr_gpu`)
into variant ``p1-block[-dup]`` (:func:`dbfs.kernel1.store_csr`): the edges
come from ``ds.memo`` or the zarr store, the CSR is copied to the host and
written (:func:`dbfs.kernel1.csr_store.store_csr`: locked, crc32c per
chunk); the device copy stays in ``graph.meta["gpu_csr"]`` of the
:class:`~dbfs.graph.CSRGraph` left in ``ds.memo["graph"]`` so the GPU
backend's searches need no reload. ``construction_time`` runs from reading
the edges to the complete marker, as for the CPU builder. With
``device_budget`` (``dbfs build --backend gpu --device-memory-limit SIZE``)
it builds in passes within that many device bytes
(:func:`dbfs.kernel1.passes_gpu.build_csr_gpu_passes`, chunks from
:func:`dbfs.store.gpu.device_chunks`: regenerated on the device for virtual
Kronecker datasets); the CSR is assembled on the host, same bytes.
:func:`kernel1_fits` says whether the one-pass build fits the device
(:func:`kernel1_device_bytes`, an upper bound).

Importing it needs no CuPy: CuPy is imported inside the functions that use
the device. Reference: Graph 500 Benchmark 1 specification 3.0.1,
Kernel 1, https://graph500.org/?page_id=12.
"""
from __future__ import annotations

import time

from dbfs.errors import DbfsError
from dbfs.kernel1.csr_store import reusable, store_csr
from dbfs.progress import say
from dbfs.store.gpu import _free_device_bytes, device_chunks, device_edges

__all__ = ["build_gpu", "kernel1_fits", "kernel1_device_bytes"]


def kernel1_device_bytes(n_edges: int, n_vertices: int) -> int:
    """Device bytes GPU Kernel 1 needs, an upper bound.

    The edge list as uint32 and as int64 (24 B per tuple), ``indices`` for
    both directions (8 B per tuple), 32 B per vertex (counts, row starts,
    degrees, indptr) and 1 GiB for the sorted ranges (their size adapts to
    what is free).

    Parameters
    ----------
    n_edges, n_vertices : int

    Returns
    -------
    int
    """
    return 32 * int(n_edges) + 32 * int(n_vertices) + (1 << 30)


def kernel1_fits(ds, free: int | None = None) -> bool:
    """Whether GPU Kernel 1 of a dataset fits 90% of the free device memory.

    Parameters
    ----------
    ds : Dataset
    free : int, optional
        Free device bytes (None: asked from the device).

    Returns
    -------
    bool
    """
    free = _free_device_bytes() if free is None else int(free)
    return kernel1_device_bytes(ds.n_edges, ds.n_vertices) <= 0.9 * free


def _build_passes(ds, dedupe: bool, device_budget: int, quiet: bool) -> dict:
    """GPU Kernel 1 in passes within ``device_budget`` (:mod:`dbfs.kernel1.passes_gpu`), stored as ``p1-block``."""
    from dbfs.kernel1.passes_gpu import build_csr_gpu_passes  # deferred: cupy

    t0 = time.perf_counter()
    g = build_csr_gpu_passes(device_chunks(ds), ds.n_vertices, dedupe=dedupe, memory_budget=device_budget,
                             budget_name="--device-memory-limit", quiet=quiet)
    info = g.meta["passes"]
    say(f"GPU Kernel 1 built {g.nnz:,} entries in {info['count']} pass(es) within {device_budget:,} B of device "
        f"memory in {time.perf_counter() - t0:.2f} s; storing", quiet)
    attrs = store_csr(ds.path, g.indptr, g.indices, ds.n_edges, dedupe, t0, builder="gpu-passes")
    g.meta.update({"variant": attrs["variant"], "construction_time": attrs["construction_time"], "load_time": 0.0})
    ds.memo["graph"] = g
    return {**attrs, "passes": info["count"]}


def build_gpu(ds, dedupe: bool = True, relabel: str = "none", quiet: bool = False, force: bool = False,
              device_budget: int | None = None) -> dict:
    """GPU Kernel 1 of a dataset into its store (see the module docstring).

    Parameters
    ----------
    ds : Dataset
    dedupe : bool
        Drop duplicate entries.
    relabel : {"none"}
        GPU Kernel 1 does not relabel; anything else raises :class:`DbfsError`.
    quiet : bool
        No status lines.
    force : bool
        Rebuild the variant even when a complete one is stored.
    device_budget : int, optional
        Device bytes Kernel 1 may hold: build in passes within it
        (:mod:`dbfs.kernel1.passes_gpu`, same bytes); None: one pass, if the
        whole build fits the free device memory.

    Returns
    -------
    dict
        The variant's attributes (``reused=True`` when already stored and
        not recorded as damaged; ``passes`` when built in passes).
    """
    from dbfs.kernel1.gpu import build_csr_gpu  # deferred: cupy

    if relabel != "none":
        raise DbfsError("GPU Kernel 1 builds the CSR without relabelling: drop --relabel or use --backend cpu")
    old = None if force else reusable(ds.path, 1, "block", dedupe, relabel, quiet)
    if old is not None:
        return old
    if device_budget == "auto":
        device_budget = int(0.85 * _free_device_bytes())
    if device_budget is not None:
        return _build_passes(ds, dedupe, int(device_budget), quiet)
    if not kernel1_fits(ds):
        raise DbfsError(f"GPU Kernel 1 of {ds.name} needs about "
                        f"{kernel1_device_bytes(ds.n_edges, ds.n_vertices) / 2**30:.0f} GiB of device memory, "
                        f"{_free_device_bytes() / 2**30:.0f} GiB are free: build on the CPU (`dbfs build {ds.name}`); "
                        f"the GPU backend then searches it from host memory")
    t0 = time.perf_counter()
    edges = device_edges(ds)
    g = build_csr_gpu(edges, n_vertices=ds.n_vertices, dedupe=dedupe)
    say(f"GPU Kernel 1 built {g.nnz:,} entries in {time.perf_counter() - t0:.2f} s; storing", quiet)
    attrs = store_csr(ds.path, g.indptr, g.indices, ds.n_edges, dedupe, t0, builder="gpu")
    g.meta.update({"variant": attrs["variant"], "dedupe": dedupe, "relabel": "none", "n_edges": ds.n_edges,
                   "construction_time": attrs["construction_time"], "load_time": 0.0})
    ds.memo["graph"] = g
    return attrs



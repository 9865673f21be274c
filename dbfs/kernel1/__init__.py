"""Kernel 1: Graph500 edge list -> undirected CSR, in memory, out of core on Dask, and on the GPU.

Contract (every builder): both directions of every tuple, self-loops
dropped, duplicates dropped unless ``dedupe=False``, every row ascending,
``indptr`` int64, ``indices`` of width :func:`dbfs.graph.id_dtype`; the
bytes depend only on the edge multiset and the options, never on edge
order, chunking, threads, workers, devices or the memory budget. Reference:
Graph 500 Benchmark 1 specification 3.0.1, Kernel 1,
https://graph500.org/?page_id=12.

Entry points: :mod:`.entry` (``kernel1_cpu``, ``kernel1_gpu``: which builder
runs in this process, decided in one place) and :mod:`.on_workers` (the builds
inside Dask worker tasks); code outside this package calls a builder only
through them (the import contract ``kernel1-entries``).

Modules, each layer importing only those above it:

- :mod:`.kernels`     Numba counting-sort kernels and their thread control
- :mod:`.inmemory`    ``build_csr``, ``raw_degree``, ``degree_permutation``
- :mod:`.variants`    variant names, listing and reuse
- :mod:`.csr_store`   the stored layout: ``store_csr``, ``load_partition``,
  ``load_csr``, ``load_perm``
- :mod:`.plan`        the partitioned build's memory model and work cuts
- :mod:`.partitioned` ``build_partitioned``: zarr edges -> zarr CSR on Dask
- :mod:`.passes`      ``build_csr_passes``: streamed edge chunks, one pass per
  owner-row range, working memory within a budget (same bytes)
- :mod:`.shuffle`     Kernel 1 as one shuffle over G readers (CPU workers): each
  edge chunk read once, both directions bucketed by owner rank; ``SpanReads``
  and ``rank_passes``, which the GPU shuffle shares
- :mod:`.placer`      the searches' device/host split of a CSR built in passes
  (array-module generic)

On the GPU (CuPy; imported on demand, never here), the same plan (raw degrees,
then owner-row ranges within a budget, keys sorted per range, first of each
run kept) with ``kernel1.cu``'s kernels:

- :mod:`.gpu`          ``build_csr_gpu``: the whole CSR at once
- :mod:`.passes_gpu`   ``build_csr_gpu_passes``: in passes within a device budget
- :mod:`.placed_gpu`   the passes straight into the device/host split
- :mod:`.shuffle_gpu`  the passes on G GPUs at once, the entries swapped over NCCL
- :mod:`.build_gpu`    the drivers for a dataset: ``build_gpu`` (into a stored
  variant) and :mod:`.build_placed` (kept in memory, placed)

Rows per read, by meaning: a stored edge chunk (:data:`dbfs.generate.DEFAULT_CHUNK_EDGES`),
a slice of an in-memory list (:data:`.passes._NUMPY_STEP`), a device regeneration step
of the placed build (:data:`.build_placed.PLACED_STEP`).
"""
from __future__ import annotations

from dbfs.kernel1.csr_store import load_csr, load_partition, load_perm, store_csr
from dbfs.kernel1.inmemory import build_csr, degree_permutation, raw_degree
from dbfs.kernel1.partitioned import build_partitioned
from dbfs.kernel1.passes import build_csr_passes
from dbfs.kernel1.plan import DEFAULT_MEMORY_BUDGET
from dbfs.store.variants import list_variants, parse_variant, reusable_variant, variant_name

__all__ = [
    "build_csr",
    "build_partitioned",
    "build_csr_passes",
    "load_partition",
    "load_csr",
    "load_perm",
    "store_csr",
    "variant_name",
    "parse_variant",
    "list_variants",
    "reusable_variant",
    "raw_degree",
    "degree_permutation",
    "DEFAULT_MEMORY_BUDGET",
]

"""The dataset store: zarr v3 groups under a datasets root.

Layout of one dataset ``<root>/<name>/`` (a zarr v3 group, ``name`` from its
:class:`~dbfs.spec.GraphSpec`)::

    zarr.json              group attributes (below)
    edges/                 (M, 2) edge tuples in generation order; uint32 while
                           N <= 2**32 (SCALE <= 32), else int64; zstd + crc32c;
                           chunks of chunk_edges rows (the dask chunks of generation);
                           absent in a virtual dataset (:mod:`.virtual`), whose
                           edges are regenerated from ``spec`` on every read
    original_ids/          (N,) int64, id-compacted imports only: the input
                           file's id of each vertex
    csr/<variant>/...      Kernel 1 output (dbfs.kernel1), each with its own marker

Group attributes: ``spec`` (GraphSpec.to_dict), ``name``, ``n_vertices``,
``n_edges``, ``edge_dtype``, ``chunk_edges``, ``generation_time`` (s),
``generated_on`` (cpu|gpu), ``generated_at`` (UTC ISO), ``dbfs_version``,
``edges_checksum`` (dbfs.checksum, chunk-independent), ``original_ids``
(true when stored), ``edges_storage`` (``stored`` or ``virtual``; absent
before virtual datasets existed: stored), ``virtual_digest`` (virtual only),
``complete: true`` written LAST, and ``corrupt``
(written when damage is seen, :mod:`.integrity`).

Safety: a dataset is generated into ``<root>/.<name>.tmp-<id>`` and renamed
into place only after its marker is written, so ``<root>/<name>`` is either
absent or was complete when it appeared. ``force`` moves the old copy aside
only after the new one is complete. A dataset without the marker, with wrong
counts, missing or damaged chunks is never used: it is reported and rebuilt.
Writers hold ``<root>/.<name>.lock`` (:mod:`.locks`).

Modules: :mod:`.integrity` (codecs, checked reads, corruption markers),
:mod:`.locks` (writer locks), :mod:`.space` (disk space checks and the full
disk error), :mod:`.datasets` (open, check, list, remove), :mod:`.write`
(generation into the store), :mod:`.to_npy` (export to ``.npy``), :mod:`.verify`
(every chunk of a dataset), :mod:`.virtual` (virtual edge lists: the spec
instead of the edges), :mod:`.gpu` (GPU generation and GPU Kernel 1
into the store; CuPy, imported on demand, never here).
"""
from __future__ import annotations

from dbfs.store.datasets import (ENV_ROOT, Dataset, check_name, datasets_root, edges_fix, info, list_datasets,
                                 open_dataset, open_edges, remove, stages, status, stored)
from dbfs.store.to_npy import export
from dbfs.store.space import check_room, choose_edges
from dbfs.store.verify import verify
from dbfs.store.virtual import VirtualEdges, storage_of
from dbfs.store.write import (_check_room, check_room_for, estimate_bytes, generate, need_bytes,  # noqa: F401
                              resolve_edges)

__all__ = ["ENV_ROOT", "Dataset", "datasets_root", "check_name", "status", "stored", "open_dataset", "open_edges",
           "edges_fix", "stages", "info", "list_datasets", "remove", "export", "generate", "estimate_bytes",
           "check_room", "verify", "choose_edges", "VirtualEdges", "storage_of", "need_bytes", "resolve_edges", "check_room_for"]

"""A CSR that Kernel 1 builds in a GPU worker's memory, searched as a distributed graph without zarr.

Contract
--------
:func:`generate_on_worker` makes a Kronecker dataset with the GPU generator
on a GPU worker (the same bytes as every generator; a virtual list's
checksum in seconds instead of a CPU pass over 2^34 edges) and keeps its
device copy of the edges there, in the worker plugin's ``scratch``
(:mod:`dbfs.bfs.dask.mesh.plugin`; no module state), for Kernel 1
(:func:`forget` drops it when Kernel 1 runs elsewhere).
:func:`build_on_worker` runs :func:`dbfs.kernel1.on_workers.resident_csr` (the
GPU backend's Kernel 1 in passes straight into a device/pinned-host split,
edge chunks read or regenerated on that device) as ONE task pinned to a GPU
worker, and :func:`adopt` makes the result the one partition (P = 1) of a
:class:`~dbfs.bfs.dask.layout.placement.DistributedGraph` that the ordinary
distributed search (:func:`dbfs.bfs.dask.search`) runs on. It is the Dask
backend's path for a graph whose CSR fits neither the disk nor the host
memory and for ``--relabel degree`` at P = 1 (relabelled on the device,
as ``--backend gpu`` does), searched through
:class:`dbfs.bfs.dask.search.graphs.ResidentGraph`. Nothing is stored,
so what the zarr variant would give later is asked of that worker:
:func:`eligible` (root eligibility from the CSR's degrees: a vertex has a
non-self-loop input edge iff its CSR row is not empty), :func:`validate`
(:func:`dbfs.validate.gpu.validate_many_gpu` against the INPUT edges,
regenerated on the device for a virtual list, several searches per
regeneration), :func:`nedge`, :func:`host_parents` and :func:`peaks`
(peak device memory and host RSS of the worker). A lost worker cannot be
reloaded: ``dg.built`` says why and :func:`dbfs.bfs.dask.layout.recovery._recover`
fails in one line.

Encoding: :class:`_BuiltPart` is a :class:`~dbfs.bfs.dask.layout.gpu_part._GpuPart`
of the whole graph (rank 0 of 1, ``base = pad = 0``) whose ``adj`` is the
placed split (bfs.cu's ``ADJ_PARAMS``: device piece, mapped pinned host
piece, the entry where they meet, :mod:`dbfs.split`) and whose search
parents stay on the device in the id width, mapped to ORIGINAL ids there
when the search ends (:func:`dbfs.bfs.gpu.original_parent`); the client sees
original ids only (a root is mapped through ``iperm`` on the worker:
:meth:`_BuiltPart.new_id`).

Reference: Graph 500 Benchmark 1 specification 3.0.1 (Kernel 1: any data
structure, its construction timed; validation against the input edge
list); the device/host split after Kolganov & Chernyshev's zero-copy
Graph500 BFS (2016) and Totem (Gharaibeh et al., PACT 2012).
"""
from __future__ import annotations

import gc
import resource
import time
import uuid
from functools import partial
from pathlib import Path

import numpy as np
from distributed import get_worker

from dbfs.bfs.dask.layout.gpu_part import _GpuPart
from dbfs.bfs.dask.layout.placement import DistributedGraph, worker_kinds
from dbfs.bfs.dask.layout.recovery import _recover
from dbfs.bfs.dask.mesh import DEFAULT_TIMEOUT, _open_mesh, ensure_plugin
from dbfs.bfs.dask.mesh.plugin import NAME
from dbfs.bfs.dask.mesh.waits import WorkerLost, gather_watched
from dbfs.errors import DbfsError
from dbfs.kernel1.on_workers import resident_csr
from dbfs.partition import Partitioning
from dbfs.store import generate, open_dataset
from dbfs.store.gpu import search_edges
from dbfs.units import human
from dbfs.validate.gpu import batch_size, validate_many_gpu

__all__ = ["generate_on_worker", "forget", "build_on_worker", "adopt", "new_roots", "eligible", "validate", "nedge",
           "host_parents", "peaks", "BUILD_TIMEOUT"]

#: seconds the Kernel 1 task may take: a generous bound over the longest build measured (docs/DISTRIBUTED.md)
BUILD_TIMEOUT = 3600.0
_PIN = {"allow_other_workers": False, "pure": False}


class _BuiltPart(_GpuPart):
    """The whole placed CSR as a GPU partition (module docstring); ``k1`` is Kernel 1's report."""

    keep_parents = True

    def __init__(self, ds, graph, k1: dict):
        from dbfs.bfs.gpu import device_graph  # deferred: cupy

        t0 = time.perf_counter()
        dev = device_graph(graph)             # the placed pieces, the hub table on the device
        n = int(graph.n_vertices)
        part = Partitioning(n, 1, "block")
        self.rank, self.P, self.kind, self.n = 0, 1, "block", n
        self.code, self.q, self.r = part.code, part.q, part.r
        self.count, self.first, self.base, self.pad, self.nloc = n, 0, 0, 0, n
        self.nnz = int(graph.nnz)
        self.meta = {"variant": graph.meta["variant"], "rank": 0, "P": 1, "partitioning": "block",
                     "n_vertices": n, "nnz": self.nnz}
        self.indptr_host, self.indptr, self.adj, self.hub = graph.indptr, dev.indptr, dev.adj, dev.hub
        pl = k1["placement"]
        self.device_bytes = int(pl["device_bytes"]) + dev.indptr.nbytes + dev.hub.nbytes
        self.host_bytes = int(pl["host_bytes"]) + graph.indptr.nbytes
        self.ds, self.graph, self.k1 = ds, graph, k1
        self.edges = None                     # the INPUT edges for validation, opened on first use
        self.peak_device = 0
        self.held_bytes = 0                   # most device bytes in use as a validation starts (CuPy's pool)
        self.before = []                      # (driver, pool) bytes in use as each validation starts
        self._finish()
        self.validate_batch = self._batch()
        self.load_time = 0.0
        self.prepare_time = time.perf_counter() - t0

    def _batch(self) -> int:
        """:func:`dbfs.validate.gpu.batch_size` for the device memory left after the load."""
        import cupy as cp  # deferred: cupy

        cp.get_default_memory_pool().free_all_blocks()
        return batch_size(int(cp.cuda.runtime.memGetInfo()[0]), self.n)

    def new_id(self, root: int) -> int:
        iperm = self.graph.iperm
        return int(root) if iperm is None else int(iperm[int(root)])

    def original(self, parent):
        """The search's parents in original ids, in their own cudaMalloc: held until validated, they never pin
        a chunk of CuPy's pool (whose free remainder could then not go back to the driver)."""
        from dbfs.bfs.gpu import original_parent, own_memory  # deferred: cupy

        return original_parent(self.graph, parent, out=own_memory(parent.shape, parent.dtype))

    def sample(self) -> None:
        from dbfs.bfs.gpu import device_in_use  # deferred: cupy

        self.peak_device = max(self.peak_device, device_in_use())

    def info(self):
        self.sample()
        return {**super().info(), "host_bytes": self.host_bytes, "k1": self.k1,
                "validate_batch": self.validate_batch,
                "relabel": self.graph.meta.get("relabel", "none"),
                "virtual": self.ds.storage == "virtual"}


def _build(dataset_path, dedupe, relabel, order, device_limit, quiet):
    """(task pinned to a GPU worker) Kernel 1 of the dataset at ``dataset_path`` into a :class:`_BuiltPart`."""
    import cupy as cp  # deferred: cupy

    path = Path(dataset_path)
    ds = _kept().pop(str(path), None) or open_dataset(path.name, path.parent)
    try:
        k1 = resident_csr(ds, dedupe, device_limit, quiet, relabel, order)
        return _BuiltPart(ds, ds.memo.pop("graph"), k1)
    except cp.cuda.memory.OutOfMemoryError:
        free, total = cp.cuda.runtime.memGetInfo()
        raise DbfsError(f"the GPU worker ran out of device memory building the CSR of {ds.name} ({human(free)} of "
                        f"{human(total)} free): lower --device-memory-limit so more of it goes to pinned host "
                        f"memory, or free the device") from None


def _generate(spec, root, quiet):
    """(task pinned to a GPU worker) the dataset of ``spec`` generated with the GPU generator; its path."""
    ds, _ = generate(spec, root, quiet=quiet, backend="gpu", edges="auto")
    if ds.memo.get("device_edges") is not None:     # the device copy of the edges, for Kernel 1 here
        _kept()[str(ds.path)] = ds
    return str(ds.path)


def _kept(dask_worker=None) -> dict:
    """This worker's kept datasets: dataset path -> the Dataset :func:`_generate` made here, its device copy of
    the edges in ``memo`` (what Kernel 1 and validation read instead of the zarr chunks), until :func:`_build`
    or :func:`forget`. Kept in the worker plugin's ``scratch`` (gone when that is cleared); a worker without the
    plugin keeps none (Kernel 1 then reads the stored or regenerated edges: the same bytes)."""
    if dask_worker is None:
        dask_worker = get_worker()
    plugin = dask_worker.plugins.get(NAME)
    return {} if plugin is None else plugin.scratch.setdefault(_SCRATCH_KEY, {})


#: the key of :func:`_kept`'s datasets in the worker plugin's ``scratch``
_SCRATCH_KEY = "built-datasets"


def _forget(path, dask_worker=None):
    """(client.run on a GPU worker) drop a kept dataset's device copy of its edges."""
    import cupy as cp  # deferred: cupy

    if _kept(dask_worker).pop(str(path), None) is not None:
        cp.get_default_memory_pool().free_all_blocks()


def forget(client, ds) -> None:
    """Drop what :func:`generate_on_worker` kept on its worker for ``ds`` (when no Kernel 1 runs there)."""
    w = ds.memo.pop("generated_on", None)
    if w is not None:
        client.run(_forget, str(ds.path), workers=[w])


def generate_on_worker(client, spec, root, worker: str, quiet: bool = False, timeout: float = BUILD_TIMEOUT):
    """The dataset of Kronecker ``spec`` under ``root``, generated on GPU worker ``worker`` (its device copy of
    the edges kept there, in the worker plugin, for Kernel 1)."""
    ensure_plugin(client)
    fut = client.submit(_generate, spec, str(root), quiet, workers=[worker], **_PIN)
    path = Path(gather_watched(client, [fut], {worker}, f"generating {spec.name} on GPU worker {worker}",
                               timeout)[0])
    ds = open_dataset(path.name, path.parent)
    ds.memo["generated_on"] = worker
    return ds


def _info(bp):
    return bp.info()


def build_on_worker(client, ds, worker: str, dedupe: bool = True, relabel: str = "none", order: str = "prefix",
                    device_limit: int | None = None, quiet: bool = False, timeout: float = BUILD_TIMEOUT):
    """Kernel 1 of ``ds`` on GPU worker ``worker`` (module docstring): (future of the partition, its info)."""
    fut = client.submit(_build, str(ds.path), dedupe, relabel, order, device_limit, quiet, workers=[worker],
                        key=f"dbfs-built-{uuid.uuid4().hex[:12]}", **_PIN)
    info = gather_watched(client, [client.submit(_info, fut, workers=[worker], **_PIN)], {worker},
                          f"Kernel 1 of {ds.name} on GPU worker {worker}", timeout)[0]
    return fut, info


def adopt(client, dataset_path, fut, worker: str, info: dict, transport: str = "tcp", timeout: float | None = None):
    """The :class:`~dbfs.bfs.dask.layout.placement.DistributedGraph` of a partition :func:`build_on_worker` made,
    its (one-worker) mesh open."""
    t0 = time.perf_counter()
    n, nnz = int(info["n_vertices"]), int(info["nnz"])
    attrs = {"n_vertices": n, "P": 1, "partitioning": "block", "nnz": [nnz], "nnz_total": nnz,
             "options": {"relabel": info["relabel"]}}
    dg = DistributedGraph(client=client, dataset_path=Path(dataset_path), variant=info["variant"],
                          partitioning=Partitioning(n, 1, "block"), nnz_total=nnz, rank_worker={0: worker},
                          part_futures={0: fut}, transport=transport, timeout=float(timeout or DEFAULT_TIMEOUT),
                          attrs=attrs, rank_kind={0: "gpu"}, worker_kinds=worker_kinds(client, [worker]),
                          part_bytes=[int(info["device_bytes"])],
                          built=f"Kernel 1 built it in GPU worker {worker}'s memory, not stored")
    dg.part_info[0], dg.part_load_times[0] = info, 0.0
    if info["relabel"] != "none":           # the worker holding the relabelled CSR maps each root
        dg.roots_of = partial(new_roots, dg)
    _open_mesh(dg)
    dg.load_time = time.perf_counter() - t0
    return dg


def _ask(dg, fn, *args, what: str):
    """``fn(partition, *args)`` on the worker holding it; a lost worker is one DbfsError (nothing to reload)."""
    w = dg.rank_worker[0]
    try:
        return gather_watched(dg.client, [dg.client.submit(fn, dg.part_futures[0], *args, workers=[w], **_PIN)],
                              {w}, what, dg.timeout)[0]
    except WorkerLost as exc:
        _recover(dg, f"{type(exc).__name__}: {exc}", 1, what.removeprefix("the "))     # raises: dg.built
        raise


def _new_roots(bp, roots):
    return [int(bp.new_id(int(r))) for r in roots]


def new_roots(dg, roots) -> list:
    """The ids the searches from ORIGINAL vertices ``roots`` start at (a relabelled CSR's, from its worker,
    in one round trip)."""
    return _ask(dg, _new_roots, [int(r) for r in roots], what=f"the new ids of roots {list(roots)}")


def _eligible(bp, cands):
    v = np.asarray(cands, np.int64)
    if bp.graph.iperm is not None:
        v = bp.graph.iperm[v].astype(np.int64)
    ip = bp.indptr_host
    return ip[v + 1] > ip[v]


def eligible(dg, cands) -> np.ndarray:
    """Which original vertices ``cands`` have a non-self-loop input edge (their CSR rows are not empty)."""
    return _ask(dg, _eligible, np.asarray(cands, np.int64), what="the eligibility of candidate roots")


def _edges(bp):
    if bp.edges is None:
        bp.edges = search_edges(bp.ds)
    return bp.edges


def _validate(bp, roots, *parents):
    import cupy as cp  # deferred: cupy

    from dbfs.bfs.gpu import device_in_use  # deferred: cupy

    gc.collect()            # what the searches left in reference cycles, then their cached blocks
    pool = cp.get_default_memory_pool()
    pool.free_all_blocks()
    bp.held_bytes = max(bp.held_bytes, int(pool.used_bytes()))
    bp.before.append((device_in_use(), int(pool.used_bytes())))
    try:
        res = validate_many_gpu(_edges(bp), [(int(r), p) for r, p in zip(roots, parents)], n_vertices=bp.n,
                                levels=False)
    except cp.cuda.memory.OutOfMemoryError:
        free, total = cp.cuda.runtime.memGetInfo()
        raise DbfsError(f"the GPU worker ran out of device memory validating {len(roots)} searches together "
                        f"({human(free)} of {human(total)} free): lower --device-memory-limit so more of the CSR "
                        f"goes to pinned host memory") from None
    bp.sample()
    return res


def validate(dg, results) -> list:
    """ValidationResults of the searches ``results`` (DistributedResults on this graph), in order, over one
    read (or regeneration) of the input edges on the worker."""
    roots = [r.root for r in results]
    return _ask(dg, _validate, roots, *[r.parents[0] for r in results],
                what=f"the validation of the searches from roots {roots}")


def _nedge(bp, parent):
    from dbfs.bfs.gpu import count_nedge  # deferred: cupy

    return int(count_nedge(_edges(bp), parent))


def nedge(dg, result) -> int:
    return _ask(dg, _nedge, result.parents[0], what=f"the nedge count of root {result.root}")


def _host_parents(bp, parent):
    return parent.get().astype(np.int64)


def host_parents(dg, result) -> np.ndarray:
    """The search's int64 parents in original ids, copied to the client."""
    return _ask(dg, _host_parents, result.parents[0], what=f"the parents of the search from root {result.root}")


def _peaks(bp):
    bp.sample()
    return {"peak_device_bytes": bp.peak_device, "device_in_use_before_validation": bp.held_bytes,
            "device_before_each_validation": [{"driver": d, "pool": p} for d, p in bp.before],
            "validate_batch": bp.validate_batch,
            "peak_host_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def peaks(dg) -> dict:
    """Peak device memory in use and peak host RSS of the worker holding the graph."""
    return _ask(dg, _peaks, what="the worker's peak memory")

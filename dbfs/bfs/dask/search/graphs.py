"""One contract for a graph partitioned over Dask workers, and the Kernel 1 results that make one.

Contract
--------
Kernel 1 of ``--backend dask`` ends in one of three typed results, which
the pipeline hands to the load stage as it hands any backend's Kernel 1
output (``str()`` of each is the name of the CSR variant it stands for):

- :class:`Stored` ``(variant)``: a CSR variant stored in zarr, read onto
  the workers when opened (:func:`dbfs.bfs.dask.load_distributed`);
- :class:`OnWorkers` ``(dg)``: the ``P > 1`` block partitions built from
  the edges on the workers that search them
  (:func:`dbfs.bfs.dask.build_distributed`), already in their memory;
- :class:`Resident` ``(future, worker, info)``: the ``P = 1`` CSR Kernel 1
  built in a GPU worker's memory (:func:`dbfs.bfs.dask.layout.built.build_on_worker`).

:func:`open_graph` (``result.open(...)``; a plain variant name is
:class:`Stored`) gives the :class:`PartitionedGraph` the searches run on,
the same calls whichever Kernel 1 made it::

    g = open_graph(client, dataset_path, result, placement=..., device_memory_limit=..., validate_most=K)
    res, seconds, levels = g.search(root, algorithm="do", stats=True, **opts)   # res: DistributedResult
    g.search_many(roots, ...)       # -> that triple per root, the batch in one task a worker
    g.validate_many([res, ...])     # -> ValidationResults against the INPUT edges, in order
    g.eligible(cands)               # -> bool mask: which candidate roots have a non-self-loop edge
    g.nedge(res)                    # -> Graph500 nedge of one search
    g.parents(res)                  # -> int64 parents in original ids, on the client
    g.describe(); g.workers_table() # where the partitions live (the run's JSON)
    g.close()                       # the mesh closed, the partitions released
    g.load_time, g.events           # seconds to open; worker losses survived (dg.events)
    g.validate_batch, g.batched     # searches validated per pass; whether their parents wait for it
    g.gpus                          # GPU workers that validate the searches ([] when none does)

Method
------
:class:`DistributedPartitions` (a stored variant, or partitions built on
the workers): the distributed search; eligibility from the CSR rows on the
partitions' workers (:func:`dbfs.bfs.dask.eligible_distributed`, no pass
over the edges); validation on the cluster's GPU workers, each checking its
share of the input edges for a batch of searches per pass (the batch sized
by the least free device memory after the load, at most ``validate_most``:
:func:`dbfs.validate.gpu.batch_size`), else as CPU Dask tasks over
the stored edge chunks for a batch of searches per read (one table of their levels
and parents, :func:`dbfs.validate.dask.validate_partitioned_many`); a lost worker's partitions are
placed again and the step redone (:mod:`dbfs.bfs.dask.layout.recovery`).
:class:`ResidentGraph` (the CSR in one GPU worker's memory): the same
search; eligibility, validation (a batch per read or regeneration of the
input edges), nedge, parents and peak memory asked of that worker
(:mod:`dbfs.bfs.dask.layout.built`); nothing to reload it from, so a lost worker
is one DbfsError.

Encoding: a search's result is a :class:`dbfs.bfs.dask.DistributedResult`
(parents stay on the workers, one future per partition, until released).

Reference: Graph 500 Benchmark 1 specification 3.0.1 (Kernel 1: any data
structure; section 6: search keys with a non-self-loop edge; validation
against the input edge list).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dbfs.bfs.dask.layout import built as on_worker
from dbfs.bfs.dask.search.client import eligible_distributed, load_distributed, search, search_many
from dbfs.bfs.dask.search.parents import gather_parent, validate_many_distributed
from dbfs.bfs.dask.layout.placement import gpu_workers
from dbfs.bfs.dask.mesh.plugin import memory_peaks
from dbfs.errors import DbfsError
from dbfs.preflight import host_available
from dbfs.validate.batch_cpu import batch_size_cpu
from dbfs.validate.gpu import batch_size, keep_budget, mesh_plan
from dbfs.validate.gpus import device_free, edge_rows_bytes
from dbfs.workers_info import workers_info

__all__ = ["Stored", "OnWorkers", "Resident", "PartitionedGraph", "DistributedPartitions", "ResidentGraph",
           "open_graph"]


# ----------------------------------------------------------------- Kernel 1's typed results
@dataclass(eq=False)
class Stored:
    """A CSR variant stored in zarr: its partitions read onto the workers when opened."""

    variant: str

    def __str__(self) -> str:
        return self.variant

    def open(self, client, dataset_path, placement: str = "block", device_memory_limit: int | None = None,
             validate_most: int = 1) -> "DistributedPartitions":
        dg = load_distributed(client, dataset_path, self.variant, placement=placement,
                              device_memory_limit=device_memory_limit)
        return DistributedPartitions(client, dataset_path, dg, validate_most)


@dataclass(eq=False)
class OnWorkers:
    """The block partitions Kernel 1 built from the edges on the workers that search them (not stored)."""

    dg: object          # dbfs.bfs.dask.DistributedGraph, its mesh open

    @property
    def variant(self) -> str:
        return self.dg.variant

    def __str__(self) -> str:
        return self.variant

    def open(self, client, dataset_path, placement: str = "block", device_memory_limit: int | None = None,
             validate_most: int = 1) -> "DistributedPartitions":
        return DistributedPartitions(client, dataset_path, self.dg, validate_most)


@dataclass(eq=False)
class Resident:
    """The one CSR Kernel 1 built in GPU worker ``worker``'s memory: the future of its partition there and the
    partition's info (:func:`dbfs.bfs.dask.layout.built.build_on_worker`)."""

    future: object
    worker: str
    info: dict

    @property
    def variant(self) -> str:
        return self.info["variant"]

    def __str__(self) -> str:
        return self.variant

    def open(self, client, dataset_path, placement: str = "block", device_memory_limit: int | None = None,
             validate_most: int = 1) -> "ResidentGraph":
        return ResidentGraph(client, dataset_path, self)


def open_graph(client, dataset_path, result, placement: str = "block", device_memory_limit: int | None = None,
               validate_most: int = 1) -> "PartitionedGraph":
    """The :class:`PartitionedGraph` of Kernel 1's ``result`` (a variant name is a :class:`Stored` one);
    ``placement`` and ``device_memory_limit`` place a stored variant's partitions, ``validate_most`` bounds a
    batch validated on the GPU workers."""
    if isinstance(result, str):
        result = Stored(result)
    if not isinstance(result, (Stored, OnWorkers, Resident)):
        raise DbfsError(f"cannot search {type(result).__name__} {result!r} on the Dask workers: pass a CSR variant "
                        f"name or what the dask backend's Kernel 1 returned")
    return result.open(client, Path(dataset_path), placement=placement, device_memory_limit=device_memory_limit,
                       validate_most=validate_most)


# ----------------------------------------------------------------- the contract
class PartitionedGraph(ABC):
    """A graph partitioned over Dask workers, as the searches see it (module docstring)."""

    dg = None               # the DistributedGraph: partitions, their workers, the mesh, the events
    #: searches validated per pass (their parents wait on the workers until then); 1: each alone
    validate_batch = 1
    #: whether the searches' parents wait for :meth:`validate_many` (a batch per pass)
    batched = False
    #: GPU workers that validate the searches, each its share of the input edges ([] when none does)
    gpus: list = []

    @property
    def validates_on_devices(self) -> bool:
        """Whether :meth:`validate_many` runs on GPU devices (CuPy kernels, none of the CPU validator's Numba ones)."""
        return bool(self.gpus)

    @property
    def load_time(self) -> float:
        return self.dg.load_time

    @property
    def events(self) -> list:
        """Worker losses survived (load, search, validation), as :mod:`dbfs.bfs.dask.layout.recovery` records them."""
        return self.dg.events

    def search(self, root: int, algorithm: str = "do", stats: bool = True, **opts):
        """One search from ORIGINAL vertex ``root``: (DistributedResult, Kernel 2 seconds, level records)."""
        return search(self.dg, root, algorithm=algorithm, stats=stats, **opts)

    def search_many(self, roots, algorithm: str = "do", stats: bool = True, **opts) -> list:
        """Searches from ORIGINAL vertices ``roots`` in one task a worker: the triple of :meth:`search` per root."""
        return search_many(self.dg, roots, algorithm=algorithm, stats=stats, **opts)

    @abstractmethod
    def validate_many(self, results) -> list:
        """ValidationResults of the searches ``results`` against the input edges, in order."""

    @abstractmethod
    def eligible(self, cands) -> np.ndarray:
        """Which ORIGINAL vertices ``cands`` have a non-self-loop input edge (Graph500 section 6)."""

    @abstractmethod
    def nedge(self, result) -> int:
        """Graph500 nedge of one search (the input edges with both ends in its tree)."""

    @abstractmethod
    def parents(self, result) -> np.ndarray:
        """The search's int64 parents in original ids on the client, -1 for unreached."""

    def workers_table(self) -> list:
        """Per worker: kind, partitions, device and host bytes, read and prepare seconds."""
        return self.dg.workers_table()

    def describe(self) -> dict:
        """Per worker: kind (cpu/gpu), partitions, device and host bytes, peak host RSS and peak device memory
        (the most in use after a search or a validation; None on a CPU worker); the placement policy; how
        frontiers cross workers."""
        dg = self.dg
        peaks = memory_peaks(dg.client, dg.mesh_workers)
        return {"placement": dg.placement, "frontier_sharing": dg.frontier_sharing,
                "level_exchange": dg.level_exchange or f"mesh ({dg.transport})", "nccl_off": dg.nccl_off,
                "validate_by": dg.validate_by if self.gpus else "device" if self.validates_on_devices else "tasks",
                "workers": [{**row, **peaks.get(row["worker"], {})} for row in dg.workers_table()],
                "load_steps": dict(dg.load_steps)}

    def close(self) -> None:
        """Close the mesh and release the partitions."""
        self.dg.close()


def _least_memory(client) -> int:
    """The smallest memory limit among the cluster's workers in bytes (a worker without one: what this host has
    available)."""
    info = workers_info(client)
    return min([int(v.get("memory_limit") or 0) for v in info.values() if v.get("memory_limit")] +
               [host_available()])


class DistributedPartitions(PartitionedGraph):
    """The partitions of a DistributedGraph ``dg`` (stored, or built on the workers): validated on the cluster's
    GPU workers in batches of at most ``validate_most``, or as Dask tasks on any workers in batches
    (:func:`dbfs.validate.dask.validate_partitioned_many`, as many as a quarter of the smallest worker's memory
    holds, :func:`dbfs.validate.batch_cpu.batch_size_cpu`)."""

    def __init__(self, client, dataset_path, dg, validate_most: int = 1):
        self.client, self.dataset_path, self.dg = client, Path(dataset_path), dg
        try:
            self.gpus = gpu_workers(client)
            self.batched = True
            if self.gpus:           # every search validated on the GPU workers, a batch per pass
                free = device_free(client, self.gpus)
                # parents kept on the devices: each search of a batch holds its worker's slices there too
                held = dg.held_parent_bytes()
                self.validate_batch = K = batch_size(free, dg.n_vertices, validate_most, held)
                # what the batch leaves for the input rows kept between batches; over NCCL, whole searches a
                # worker where every worker keeps them all, else each its share of them
                if dg.parents_held == "mesh":
                    dg.validate_by, dg.keep_bytes = mesh_plan(free, dg.n_vertices, K, held, dg.P,
                                                              edge_rows_bytes(dataset_path))
                else:
                    dg.keep_bytes = keep_budget(free, dg.n_vertices, K, held)
            else:                   # as Dask tasks: a quarter of the smallest worker's memory holds the batch
                self.validate_batch = batch_size_cpu(_least_memory(client) // 4, dg.n_vertices)
        except BaseException:
            dg.close()
            raise

    def validate_many(self, results) -> list:
        return validate_many_distributed(self.client, self.dataset_path, self.dg, list(results), self.gpus)

    def eligible(self, cands) -> np.ndarray:
        return eligible_distributed(self.dg, cands)     # rows on the workers, no pass over the edges

    def nedge(self, result) -> int:
        return int(self.validate_many([result])[0].nedge)

    def parents(self, result) -> np.ndarray:
        return gather_parent(result, self.client, self.dg)


class ResidentGraph(PartitionedGraph):
    """The CSR Kernel 1 built in one GPU worker's memory (:class:`Resident`), adopted as the one partition of a
    DistributedGraph; what zarr would give is asked of that worker (:mod:`dbfs.bfs.dask.layout.built`)."""

    batched = True

    def __init__(self, client, dataset_path, k1: Resident):
        self.client, self.dataset_path = client, Path(dataset_path)
        self.validate_batch = max(1, int(k1.info["validate_batch"]))
        self.gpus = []
        self.dg = on_worker.adopt(client, self.dataset_path, k1.future, k1.worker, k1.info)

    validates_on_devices = True         # on the GPU worker holding the CSR (dbfs.validate.gpu)

    def validate_many(self, results) -> list:
        return on_worker.validate(self.dg, list(results))

    def eligible(self, cands) -> np.ndarray:
        return on_worker.eligible(self.dg, cands)

    def nedge(self, result) -> int:
        return on_worker.nedge(self.dg, result)

    def parents(self, result) -> np.ndarray:
        return on_worker.host_parents(self.dg, result)

    def describe(self) -> dict:
        """As :meth:`PartitionedGraph.describe`, and the device/host split of the adjacency, Kernel 1's note and
        the worker's peak memory, as ``--backend gpu`` reports them."""
        return {**super().describe(), "placement": self.dg.part_info[0]["k1"]["placement"],
                "kernel1": self.dg.built, "memory": on_worker.peaks(self.dg)}

"""Backend ``cpu``: the whole graph in this process, Numba kernels (:mod:`dbfs.bfs.cpu`).

Contract: :class:`dbfs.backends.Backend`. The CSR variant (one partition)
is loaded from zarr; :meth:`CpuBackend.warm` loads the Numba kernels of the
searches, validation and root selection (untimed, ``compile_time``);
:meth:`CpuBackend.prepare` builds the per-graph search structures (timed
as Kernel 1 work); each search is timed around the kernel
call with the garbage collector paused (Graph500 3.0.1 section 7: the clock
stops once the parent array is written); validation runs afterwards,
untimed, on the stored INPUT edge list (in memory when it fits a quarter of
the free RAM, else streamed from zarr by chunks), several searches over one
read of it (:mod:`dbfs.validate.batch_cpu`; as many as a quarter of the
available host memory holds, at most 8).

``--device-memory-limit BYTES`` (with ``--placement block|degree|degree-low``,
the GPU backend's orders, :func:`dbfs.split.split_order`) simulates the
GPU backend's device/host split in host memory: :func:`dbfs.split.plan_split`
picks the rows whose adjacency the budget (less the row offsets, which a
GPU keeps on the device) would hold, and the searches read the adjacency as
those two pieces (:func:`dbfs.bfs.cpu.split_graph`, the one comparison per
entry of ``bfs.cu``'s ``ADJ``), so CI runs the code that reads across the
split. Only ``td``, ``bu`` and ``do`` read a split
(:data:`dbfs.bfs.cpu.SPLIT_ALGORITHMS`); the run's JSON gets the placement
as the GPU backend reports it (:meth:`CpuBackend.describe`).
"""
from __future__ import annotations

import os
import time

import numpy as np

from dbfs import kernel1
from dbfs.arrays import iter_rows
from dbfs.backends import Backend, check_split_placement, warm
from dbfs.backends.ahead import cpu_search_job
from dbfs.bfs import algorithm_names, bfs, collector_paused
from dbfs.bfs.cpu import SPLIT_ALGORITHMS, split_graph, warm_kernels
from dbfs.bfs.cpu.buffers import reserve_parents
from dbfs.bfs.cpu.topdown import reserve_td
from dbfs.errors import DbfsError
from dbfs.preflight import host_available
from dbfs.progress import say
from dbfs.roots import eligible
from dbfs.spec import GraphSpec
from dbfs.split import plan_split, split_order
from dbfs.units import human
from dbfs.validate import validate
from dbfs.validate.batch_cpu import batch_size_cpu, validate_many_cpu

__all__ = ["CpuBackend", "edges_for_validation", "nedge_only", "warm_search_side", "warm_validation"]


def edges_for_validation(ds, budget_bytes: int | None = None):
    """The stored edge list in memory when it fits the budget (default: a
    quarter of the available RAM), else the zarr array (streamed by chunks)."""
    arr = ds.edges()
    nbytes = ds.n_edges * 2 * np.dtype(arr.dtype).itemsize
    if budget_bytes is None:
        try:
            budget_bytes = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 4
        except (ValueError, OSError):
            budget_bytes = 1 << 30
    return arr[:] if nbytes <= budget_bytes else arr


def warm_validation(edge_dtype) -> None:
    """Load the Numba kernels of the validation (one search, and a batch) and of the root selection: all
    run on a three-vertex triangle with ``edge_dtype`` ids."""
    triangle = np.array([[0, 1], [0, 2], [1, 2]], dtype=edge_dtype)
    validate(triangle, 0, np.zeros(3, np.int64))
    validate_many_cpu(triangle, [(0, np.zeros(3, np.int64)), (1, np.ones(3, np.int64))])
    eligible(triangle, np.arange(3, dtype=np.int64))


def warm_search_side(indptr, indices, edge_dtype) -> None:
    """Load the Numba kernels of the searches (:func:`dbfs.bfs.cpu.warm_kernels` for these CSR arrays) and
    :func:`warm_validation`'s."""
    warm_kernels(indptr, indices)
    warm_validation(edge_dtype)


def nedge_only(edges, parent, n) -> int:
    """Graph500 3.0.1 nedge (non-self-loop tuples with both ends reached), for
    --no-validate runs, streamed over the edge list."""
    reached = np.asarray(parent) >= 0
    total = 0
    for _, block in iter_rows(edges):
        u, v = block[:, 0], block[:, 1]
        total += int(np.count_nonzero((u != v) & reached[u] & reached[v]))
    return total


class CpuBackend(Backend):
    name = "cpu"
    kernels = "cpu"
    cluster = "stages"
    options = frozenset({"relabel", "partitioning", "device_memory_limit", "placement"})
    in_memory_csr = True
    refusals = {
        "partitions": "it searches one partition in this process: use --backend dask for P > 1",
        "energy": "it measures GPU power: add --backend gpu or drop --energy",
    }

    @classmethod
    def algorithms(cls) -> list:
        return algorithm_names("cpu")

    @classmethod
    def ahead_job(cls, cfg, target):
        """The searches' and validation's kernels for a graph of spec ``target`` (a stored dataset's name
        tells no types before it is opened; a simulated split reads other kernels): compiled ahead."""
        if not isinstance(target, GraphSpec) or cfg.device_memory_limit is not None:
            return None
        return cpu_search_job(target)

    @classmethod
    def default_relabel(cls, cfg, client=None, ds=None):
        """The plain CSR: its searches measured faster than the degree-ordered one's in this process (whose
        parents are mapped back to the user's ids inside the timed search) and its Kernel 1 several times
        quicker (docs/BENCHMARKS.md)."""
        return "none", "the degree-ordered CSR searches slower in this process and takes longer to build"

    @classmethod
    def check(cls, cfg, given=()):
        """The base checks, then the simulated split's: ``--placement`` as the GPU backend takes it, only
        with ``--device-memory-limit``, and an algorithm that reads a split adjacency."""
        super().check(cfg, given)
        check_split_placement(cfg, "cpu", "the simulated device/host split")
        if cfg.device_memory_limit is None:
            if cfg.placement != "block":
                raise DbfsError(f"--placement {cfg.placement} needs --device-memory-limit with --backend cpu: it "
                                f"picks the rows of a simulated device/host split, which only a budget makes")
            return

        if cfg.algorithm not in SPLIT_ALGORITHMS:
            raise DbfsError(f"--algorithm {cfg.algorithm} cannot search a split adjacency (--device-memory-limit "
                            f"with --backend cpu): use {', '.join(SPLIT_ALGORITHMS)} or drop --device-memory-limit")

    def load(self, ds, variant):
        self.ds, self.n = ds, ds.n_vertices
        t0 = time.perf_counter()
        mem = ds.memo.get("graph")          # Kernel 1 kept it in memory (no room on disk)
        self.graph = mem if mem is not None else kernel1.load_csr(ds.path, variant)
        self.split = None
        if self.cfg.device_memory_limit is not None:
            self.graph = self._split(self.graph)
        self.load_time = time.perf_counter() - t0
        self.edges = edges_for_validation(ds)
        self.parent = None
        # searches validated together, over one read of the edges (their parents held till then)
        self.validate_batch, self.held = batch_size_cpu(host_available() // 4, self.n), []
        return self.load_time

    def warm(self):
        """The searches', validation's and root selection's kernels loaded here (:func:`warm_search_side`),
        so neither ``prepare`` (Kernel 1 time) nor a timed search or validation compiles one."""
        self.compile_time = warm("the searches and validation", None, self.cfg.quiet, warm_search_side,
                                 self.graph.indptr, self.graph.indices, self.edges.dtype)
        # the top-down steps' record buffer and seen bitmap (this thread's, which runs the searches) at their
        # largest, so no timed search grows them
        reserve_td(None, int(self.graph.nnz), (int(self.graph.n_vertices) + 63) >> 6)
        if self.graph.perm is None:   # the held parents are the pool's own (relabelled: copies in original ids)
            reserve_parents(self.graph, self.validate_batch + 1)
        return self.compile_time

    def _split(self, graph):
        """``graph`` with its adjacency in the two pieces the GPU backend would hold under
        ``--device-memory-limit`` (the budget less the row offsets; ``--placement``'s order), said on stderr."""
        limit, item = int(self.cfg.device_memory_limit), graph.indices.dtype.itemsize
        order = split_order(self.cfg.placement, self.cfg.relabel)
        sp = plan_split(graph.indptr, (limit - int(graph.indptr.nbytes)) // item, order, item)
        self.split = sp
        rows = f"rows [0, {sp.row:,})" if order == "prefix" else f"rows [{sp.row:,}, {graph.n_vertices:,})"
        say(f"--device-memory-limit {human(limit)} with --backend cpu: the device/host split is simulated in host "
            f"memory ({sp.mode}: {rows} on the 'device', {sp.device_entries:,} of {sp.nnz:,} adjacency entries, "
            f"--placement {self.cfg.placement})")
        return split_graph(graph, sp)

    def describe(self) -> dict:
        """The simulated device/host split as the GPU backend reports its placement (``{}`` without one)."""
        sp = getattr(self, "split", None)
        return {} if sp is None else {"placement": {**sp.report(), "simulated": "host memory"}}

    def eligible(self):
        return lambda cands: eligible(self.edges, cands)   # the edges already in memory for validation

    def search(self, root):
        self.parent = self.level_stats = None   # the previous parents go back to the pool before the clock
        cfg = self.cfg
        with collector_paused():
            t0 = time.perf_counter()
            res = bfs(self.graph, root, algorithm=cfg.algorithm, backend="cpu", stats=True, original=False,
                      **cfg.opts)
            t = time.perf_counter() - t0
        # a relabelled CSR's parents mapped to original ids after the clock, as the GPU and dask backends do
        self.parent, self.level_stats = self.graph.to_original(res.parent), res.level_stats
        self._hold(root, self.parent)
        return t

    def validate(self, root):
        return validate(self.edges, root, self.parent, n_vertices=self.n)

    def validate_many(self, roots):
        """The last ``len(roots)`` searches validated over one read of the edges
        (:func:`dbfs.validate.batch_cpu.validate_many_cpu`)."""
        return validate_many_cpu(self.edges, self._take_held(roots), n_vertices=self.n)

    def nedge(self, root):
        return nedge_only(self.edges, self.parent, self.n)

    def parents(self):
        return self.parent

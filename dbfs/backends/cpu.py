"""Backend ``cpu``: the whole graph in this process, Numba kernels (:mod:`dbfs.bfs.cpu`).

Contract: :class:`dbfs.backends.Backend`. The CSR variant (one partition)
is loaded from zarr; :meth:`CpuBackend.prepare` builds the per-graph search
structures (timed as Kernel 1 work); each search is timed around the kernel
call with the garbage collector paused (Graph500 3.0.1 section 7: the clock
stops once the parent array is written); validation runs afterwards,
untimed, on the stored INPUT edge list (in memory when it fits a quarter of
the free RAM, else streamed from zarr by chunks).
"""
from __future__ import annotations

import os
import time

import numpy as np

from dbfs.backends import Backend

__all__ = ["CpuBackend", "edges_for_validation", "nedge_only"]


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


def nedge_only(edges, parent, n) -> int:
    """Graph500 3.0.1 nedge (non-self-loop tuples with both ends reached), for
    --no-validate runs, streamed over the edge list."""
    from dbfs.arrays import iter_rows

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
    options = frozenset({"relabel", "partitioning"})
    in_memory_csr = True
    refusals = {
        "partitions": "it searches one partition in this process: use --backend dask for P > 1",
        "device_memory_limit": "it applies to the GPU backend only: add --backend gpu or drop it",
        "energy": "it measures GPU power: add --backend gpu or drop --energy",
    }

    @classmethod
    def algorithms(cls) -> list:
        from dbfs.bfs import algorithm_names

        return algorithm_names("cpu")

    def load(self, ds, variant):
        from dbfs import kernel1

        self.ds, self.n = ds, ds.n_vertices
        t0 = time.perf_counter()
        mem = ds.memo.get("graph")          # Kernel 1 kept it in memory (no room on disk)
        self.graph = mem if mem is not None else kernel1.load_csr(ds.path, variant)
        self.load_time = time.perf_counter() - t0
        self.edges = edges_for_validation(ds)
        self.parent = None
        return self.load_time

    def eligible(self):
        from dbfs.roots import eligible

        return lambda cands: eligible(self.edges, cands)   # the edges already in memory for validation

    def search(self, root):
        from dbfs.bfs import bfs, collector_paused

        self.parent = self.level_stats = None   # the previous parents go back to the pool before the clock
        cfg = self.cfg
        with collector_paused():
            t0 = time.perf_counter()
            res = bfs(self.graph, root, algorithm=cfg.algorithm, backend="cpu", stats=True, **cfg.opts)
            t = time.perf_counter() - t0
        self.parent, self.level_stats = res.parent, res.level_stats
        return t

    def validate(self, root):
        from dbfs.validate import validate

        return validate(self.edges, root, self.parent, n_vertices=self.n)

    def nedge(self, root):
        return nedge_only(self.edges, self.parent, self.n)

    def parents(self):
        return self.parent

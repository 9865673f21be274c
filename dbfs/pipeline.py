"""The Graph500 pipeline: generate -> Kernel 1 -> load -> roots -> Kernel 2 + validate -> stats.

``run_graph500(cfg)`` wires the stages (each reused when stored) and returns a
:class:`RunResult`; the CLI prints it. Timing rules (GRAPH500.md section 7):
generation and loading are not timed as Kernel 1; ``construction_time`` is
the stored Kernel 1 variant's end-to-end build time (edges in zarr to CSR in
zarr) plus the backend's per-graph preparation after loading
(``dbfs.bfs.prepare``, e.g. the CPU backend's heaviest-neighbour table); one untimed warm-up search runs first; each search is timed alone
around the backend call (per-search setup inside the timer, the parent array
written when the clock stops) and validated afterwards, untimed, against
the stored INPUT edge list.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

import numpy as np

from dbfs.errors import DbfsError


def say(msg: str, quiet: bool = False) -> None:
    if not quiet:
        print(f"dbfs: {msg}", file=sys.stderr, flush=True)


@dataclass
class RunConfig:
    algorithm: str = "do"
    backend: str = "cpu"
    n_roots: int = 64
    validate: bool = True
    partitions: int = 1
    partitioning: str = "block"
    relabel: str = "none"
    dedupe: bool = True
    opts: dict = field(default_factory=dict)
    quiet: bool = False
    energy: bool = False


@dataclass
class RunResult:
    spec: dict
    dataset: str
    scale: int
    edgefactor: int
    n_vertices: int
    n_edges: int
    config: dict
    generation_time: float
    construction_time: float
    load_time: float
    roots: list
    times: list
    nedges: list
    validate_times: list
    valid: list
    failures: list
    levels: list  # per root: list of per-level dicts
    validated: bool
    num_processes: int = 1
    energy: dict | None = None  # --energy: the energy phase (_GpuRunner.energy_phase)

    @property
    def ok(self) -> bool:
        return all(self.valid) if self.validated else True


def ensure_dataset(spec_or_name, root, client=None, quiet=False, backend="cpu"):
    """A complete dataset for a GraphSpec (generated if needed, on the GPU for
    ``backend="gpu"`` and a Kronecker spec) or a stored name."""
    from dbfs import store
    from dbfs.spec import GraphSpec

    if isinstance(spec_or_name, GraphSpec):
        gen = "gpu" if backend == "gpu" and spec_or_name.kind == "kronecker" else "cpu"
        ds, _ = store.generate(spec_or_name, root, client=client, quiet=quiet, backend=gen)
        return ds
    return store.open_dataset(spec_or_name, root)


def stored_for_run(spec_or_name, root, cfg: RunConfig) -> bool:
    """Whether the dataset is stored complete (of this spec) and has the CSR
    variant ``cfg`` searches, so a run has no generation or Kernel 1 left
    for a Dask cluster to do. Never raises: a missing, half-written or
    different dataset is False, and the run itself then reports it."""
    from dbfs import kernel1, store
    from dbfs.spec import GraphSpec

    try:
        ds = store.stored(spec_or_name, root) if isinstance(spec_or_name, GraphSpec) else \
            store.open_dataset(spec_or_name, root)
        if ds is None:
            return False
        return kernel1.reusable_variant(ds.path, cfg.partitions, cfg.partitioning, cfg.dedupe, cfg.relabel) is not None
    except DbfsError:
        return False


def _gpu_kernel1(cfg: RunConfig) -> bool:
    """GPU Kernel 1 builds the one-partition variant without relabelling."""
    return cfg.backend == "gpu" and cfg.partitions == 1 and cfg.partitioning == "block" and cfg.relabel == "none"


def ensure_csr(ds, cfg: RunConfig, client=None) -> tuple[str, dict]:
    """(variant name, its attributes), building the CSR variant if not stored
    (on the GPU for the GPU backend's default variant)."""
    from dbfs import kernel1

    variant = kernel1.variant_name(cfg.partitions, cfg.partitioning, cfg.dedupe, cfg.relabel)
    if _gpu_kernel1(cfg):
        from dbfs.gpu_store import build_gpu, kernel1_fits

        if kernel1.reusable_variant(ds.path, 1, "block", cfg.dedupe) or kernel1_fits(ds):
            return variant, build_gpu(ds, dedupe=cfg.dedupe, quiet=cfg.quiet)
        say(f"GPU Kernel 1 of {ds.name} does not fit the free device memory: building on the CPU", cfg.quiet)
    attrs = kernel1.build_partitioned(ds.path, P=cfg.partitions, partitioning=cfg.partitioning,
                                      dedupe=cfg.dedupe, relabel=cfg.relabel, client=client,
                                      progress=not cfg.quiet)
    return variant, attrs


def load_graph(ds, variant: str):
    """Load a stored single-process CSR; returns (CSRGraph, load_time seconds)."""
    from dbfs import kernel1

    t0 = time.perf_counter()
    g = kernel1.load_csr(ds.path, variant)
    return g, time.perf_counter() - t0


def edges_for_validation(ds, budget_bytes: int | None = None):
    """The stored edge list in memory when it fits the budget, else the zarr array
    (validation then streams it in chunks)."""
    arr = ds.edges()
    nbytes = ds.n_edges * 2 * np.dtype(arr.dtype).itemsize
    if budget_bytes is None:
        try:
            import os

            budget_bytes = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 4
        except (ValueError, OSError):
            budget_bytes = 1 << 30
    return arr[:] if nbytes <= budget_bytes else arr


def pick_roots(ds, edges, n: int, backend: str = "cpu") -> np.ndarray:
    """The Graph500 search keys. The GPU backend tests eligibility on the
    device copy of the edges when there is one (``edges`` is then unused)."""
    from dbfs.roots import eligible, select_roots

    spec = ds.attrs["spec"]
    test = None
    if backend == "gpu":
        from dbfs.gpu_store import eligible_gpu, search_edges

        edges = search_edges(ds)
        if type(edges).__module__.startswith("cupy"):
            test = lambda cands: eligible_gpu(edges, cands)  # noqa: E731
    if test is None:
        test = lambda cands: eligible(edges, cands)  # noqa: E731
    return select_roots(ds.n_vertices, spec.get("seed1", 2), spec.get("seed2", 3), n, test)


def check_root(ds, root: int) -> None:
    """Raise DbfsError for a root that is out of range or has no non-self-loop
    edge in the dataset's INPUT edge list (one streamed pass)."""
    from dbfs.roots import eligible

    n = ds.n_vertices
    if not 0 <= root < n:
        raise DbfsError(f"root {root} is out of range for a graph of {n:,} vertices: pass 0 <= --root < {n}")
    if not eligible(ds.edges(), np.array([root], dtype=np.int64))[0]:
        raise DbfsError(f"root {root} is isolated (no non-self-loop edge): pick a vertex with neighbours, "
                        f"e.g. one of the Graph500 roots (`dbfs run`)")


def load_parent_file(path, n_vertices: int) -> np.ndarray:
    """A parent array saved with ``numpy.save`` (any BFS: dbfs, GAP, cuGraph,
    ...), as int64: one integer per vertex, -1 for unreached. A missing or
    unreadable file, a non-integer or multi-dimensional array, or one whose
    length is not the dataset's vertex count is a DbfsError."""
    try:
        a = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise DbfsError(f"parent file {path} not found: save the search's parent array with numpy.save") from None
    except (OSError, ValueError) as e:
        raise DbfsError(f"parent file {path} is not a readable .npy array ({e}): save it with numpy.save") from None
    if not isinstance(a, np.ndarray) or a.ndim != 1 or a.dtype.kind not in "iu":
        raise DbfsError(f"parent file {path} holds a {getattr(a, 'dtype', type(a))} array of shape "
                        f"{getattr(a, 'shape', '?')}: save a 1-D integer array (one parent per vertex, -1 unreached)")
    if a.shape[0] != n_vertices:
        raise DbfsError(f"parent file {path} has {a.shape[0]:,} entries but the dataset has {n_vertices:,} vertices: "
                        f"pass the parents of a search on this dataset")
    return a.astype(np.int64, copy=False)


def make_runner(client, ds, variant, edges, cfg: RunConfig):
    """The search/validate driver for cfg.backend (see _LocalRunner, _DaskRunner)."""
    if cfg.backend == "dask":
        return _DaskRunner(client, ds, variant, cfg)
    if cfg.backend == "gpu":
        return _GpuRunner(ds, variant, edges, cfg)
    return _LocalRunner(ds, variant, edges, cfg)


def search(graph, root: int, cfg: RunConfig):
    """One timed search; returns (BFSResult, seconds).

    CPU: the clock runs around the backend call (parents written in host
    memory), with the garbage collector paused as ``timeit`` does. GPU:
    ``dbfs.bfs.gpu.search_timed`` synchronises the device before each clock
    read and copies the parents to the host after the clock stops.
    """
    from dbfs.bfs import BFSResult, bfs, collector_paused

    if cfg.backend == "gpu":
        from dbfs.bfs import gpu

        parent, seconds, rec = gpu.search_timed(graph, root, cfg.algorithm, stats=True, **cfg.opts)
        return BFSResult(parent=parent, level_stats=rec, root=root, algorithm=cfg.algorithm, backend="gpu",
                         opts=dict(cfg.opts)), seconds
    with collector_paused():
        t0 = time.perf_counter()
        res = bfs(graph, root, algorithm=cfg.algorithm, backend=cfg.backend, stats=True, **cfg.opts)
        t = time.perf_counter() - t0
    return res, t


def run_graph500(spec_or_name, root_dir=None, cfg: RunConfig | None = None, client=None) -> RunResult:
    from dbfs.bfs import get_algorithm
    from dbfs.cluster import release_local_cluster
    from dbfs.validate import validate

    cfg = cfg or RunConfig()
    if cfg.n_roots < 1:
        raise DbfsError(f"--roots {cfg.n_roots} is invalid: use at least 1 search key (Graph500 uses 64)")
    if cfg.energy and cfg.backend != "gpu":
        raise DbfsError("--energy measures GPU power: add --backend gpu or drop --energy")
    if cfg.backend == "dask":
        if client is None:
            raise DbfsError("--backend dask needs a Dask cluster: drop --scheduler threads")
        if cfg.algorithm not in ("do", "td", "bu"):
            raise DbfsError(f"algorithm {cfg.algorithm!r} has no dask backend: use do, td or bu")
    else:
        get_algorithm(cfg.algorithm, cfg.backend)  # unknown algorithm/backend fails before any work
    ds = ensure_dataset(spec_or_name, root_dir, client, cfg.quiet, cfg.backend)
    variant, k1 = ensure_csr(ds, cfg, client)
    edges = None if cfg.backend == "gpu" else edges_for_validation(ds)
    roots = pick_roots(ds, edges, cfg.n_roots, cfg.backend)
    if len(roots) == 0:
        raise DbfsError(f"dataset {ds.name} has no vertex with a non-self-loop edge: nothing to search")

    runner = make_runner(client, ds, variant, edges, cfg)
    say(f"loaded CSR {variant} of {ds.name} in {runner.load_time:.3f} s", cfg.quiet)
    closed = release_local_cluster(client) if cfg.backend != "dask" else None
    if closed:
        say(f"closed the {closed}: the searches and validations run in this process", cfg.quiet)
    times, nedges, vtimes, valid, failures, levels = [], [], [], [], [], []
    try:
        runner.search(int(roots[0]))  # untimed warm-up (JIT, caches), as the reference does
        for i, r in enumerate(roots.tolist()):
            t = runner.search(r)
            times.append(t)
            levels.append(runner.level_stats or [])
            if cfg.validate:
                t0 = time.perf_counter()
                v = runner.validate(r)
                vtimes.append(time.perf_counter() - t0)
                valid.append(bool(v.ok))
                nedges.append(int(v.nedge))
                if not v.ok:
                    failures.append({"root": r, "summary": v.summary(), "rules": v.rules_failed})
            else:
                nedges.append(runner.nedge(r))
            say(f"search {i + 1}/{len(roots)} root {r}: {t * 1e3:.2f} ms, {nedges[-1] / t / 1e9:.3f} GTEPS"
                + ("" if not cfg.validate else (" valid" if valid[-1] else " INVALID")), cfg.quiet)
        energy = runner.energy_phase(roots.tolist(), times, nedges) if cfg.energy else None
    finally:
        runner.close()
    spec = ds.attrs["spec"]
    return RunResult(spec=spec, dataset=ds.name, scale=ds.scale, edgefactor=int(spec.get("edgefactor") or 0),
                     n_vertices=ds.n_vertices, n_edges=ds.n_edges,
                     config={"algorithm": cfg.algorithm, "backend": cfg.backend, "variant": variant,
                             "opts": cfg.opts, "partitions": cfg.partitions, "events": runner.events},
                     generation_time=float(ds.attrs.get("generation_time", 0.0)),
                     construction_time=float(k1["construction_time"]) + getattr(runner, "prepare_time", 0.0),
                     load_time=runner.load_time,
                     roots=roots.tolist(), times=times, nedges=nedges, validate_times=vtimes, valid=valid,
                     failures=failures, levels=levels, validated=cfg.validate, num_processes=cfg.partitions,
                     energy=energy)


class _LocalRunner:
    """Single-process backends (cpu, gpu): the graph in this process."""

    events: list = []

    def __init__(self, ds, variant, edges, cfg):
        from dbfs.bfs import prepare

        self.graph, self.load_time = self._graph(ds, variant)
        t0 = time.perf_counter()
        prepare(self.graph, cfg.backend)  # per-graph search structures: Kernel 1 work, timed as such
        self.prepare_time = time.perf_counter() - t0
        self.edges, self.cfg, self.n = edges, cfg, ds.n_vertices
        self.parent = None
        self.level_stats = None

    def _graph(self, ds, variant):
        return load_graph(ds, variant)

    def search(self, root):
        self.parent = self.level_stats = None   # the previous parents go back to the pool before the clock
        res, t = search(self.graph, root, self.cfg)
        self.parent, self.level_stats = res.parent, res.level_stats
        return t

    def validate(self, root):
        from dbfs.validate import validate

        return validate(self.edges, root, self.parent, n_vertices=self.n)

    def nedge(self, root):
        return _nedge_only(self.edges, self.parent, self.n)

    def parents(self) -> np.ndarray:
        """The last search's parent array (original ids) in this process."""
        return self.parent

    def close(self):
        pass


ENERGY_MIN_SECONDS = 2.0


class _GpuRunner(_LocalRunner):
    """``--backend gpu``: the CSR Kernel 1 just built stays on the device
    (``ds.memo["graph"]``, load time 0) or is loaded from zarr; searches time
    the device (:func:`dbfs.bfs.gpu.search_device`), the parent is copied to
    the host after the clock stops and validated on the device against the
    device copy of the INPUT edges (:func:`dbfs.validate_gpu.validate_gpu`;
    relabelled CSRs are validated on the host). With ``cfg.energy``,
    :meth:`energy_phase` measures power after the timed searches."""

    def __init__(self, ds, variant, edges, cfg):
        self.ds = ds
        self.meter = None
        if cfg.energy:
            from dbfs.energy import PowerMeter

            self.meter = PowerMeter()
        super().__init__(ds, variant, edges, cfg)
        self.parent_dev = None
        self._pinned = None

    def _graph(self, ds, variant):
        g = ds.memo.get("graph")
        if g is not None and g.meta.get("variant") == variant:
            return g, 0.0
        return load_graph(ds, variant)

    def search(self, root):
        from dbfs.bfs import gpu

        parent, t, rec = gpu.search_device(self.graph, root, self.cfg.algorithm, stats=True, **self.cfg.opts)
        self.parent_dev = parent
        if self.graph.perm is None:   # into one pinned buffer: a 512 MB copy per search at SCALE 26
            if self._pinned is None:
                import cupyx

                self._pinned = cupyx.empty_pinned(parent.shape, np.int64)
            self.parent = gpu.host_parent(parent, out=self._pinned)
        else:
            self.parent = self.graph.to_original(gpu.host_parent(parent))
        self.level_stats = rec
        return t

    def validate(self, root):
        if self.graph.perm is not None:
            from dbfs.validate import validate

            return validate(self.ds.edges(), root, self.parent, n_vertices=self.n)
        from dbfs.gpu_store import search_edges
        from dbfs.validate_gpu import validate_gpu

        return validate_gpu(search_edges(self.ds), root, self.parent_dev, n_vertices=self.n, levels=False)

    def nedge(self, root):
        from dbfs.bfs.gpu import count_nedge
        from dbfs.gpu_store import edges_fit, search_edges

        if self.graph.perm is not None or not edges_fit(self.ds):
            return _nedge_only(self.ds.edges(), self.parent, self.n)
        return count_nedge(search_edges(self.ds), self.parent_dev)

    def energy_phase(self, roots, times, nedges, min_seconds: float = ENERGY_MIN_SECONDS):
        """GPU power while searching (GreenGraph500): the searches from
        ``roots`` run back to back, the list repeated until ``min_seconds``
        have passed, inside ONE :class:`~dbfs.energy.PowerMeter` window. One
        window per timed search would not do: a search at SCALE 26 takes 3 ms
        and NVML's energy counter and power readings update far more slowly
        (windows that short read 40 J in 9 ms). Returns joules, seconds,
        searches, mean watts and MTEPS/W = harmonic-mean TEPS of the timed
        searches / 1e6 / mean watts."""
        from dbfs.bfs import gpu
        from dbfs.energy import mteps_per_watt
        from dbfs.stats import teps_stats

        say(f"energy: searching back to back for {min_seconds:g} s with NVML sampling", self.cfg.quiet)
        self.meter.start()
        t0, count = time.perf_counter(), 0
        while count == 0 or time.perf_counter() - t0 < min_seconds:
            for r in roots:
                gpu.search_device(self.graph, r, self.cfg.algorithm, **self.cfg.opts)
                count += 1
        w = self.meter.stop()
        hm = teps_stats(times, nedges)["harmonic_mean"]
        return {"device": w["device"], "method": w["method"], "joules": w["joules"], "seconds": w["seconds"],
                "searches": count, "samples": w["samples"], "mean_watts": w["mean_watts"],
                "joules_per_search": w["joules"] / count, "mteps_per_watt": mteps_per_watt(hm, w["mean_watts"]),
                "rule": "one NVML window over back-to-back searches; MTEPS/W = hmean TEPS of the timed "
                        "searches / 1e6 / mean W"}

    def close(self):
        if self.meter is not None:
            self.meter.close()


class _DaskRunner:
    """``--backend dask``: partitions pinned to workers, parents stay there,
    validation as Dask tasks over the stored edge chunks."""

    def __init__(self, client, ds, variant, cfg):
        from dbfs.bfs import distributed

        self.mod, self.client, self.ds, self.cfg = distributed, client, ds, cfg
        self.dg = distributed.load_distributed(client, ds.path, variant)
        self.load_time = self.dg.load_time
        self.result = None
        self.level_stats = None

    @property
    def events(self):
        return list(self.dg.events)

    def search(self, root):
        if self.result is not None:
            self.result.release()
        self.result, seconds, self.level_stats = self.mod.search(self.dg, root, algorithm=self.cfg.algorithm,
                                                                 stats=True, **self.cfg.opts)
        for ev in self.result.events:
            say(f"worker lost during the search from {root}: {ev}; partitions reloaded, search rerun", self.cfg.quiet)
        return seconds

    def validate(self, root):
        return self.mod.validate_distributed(self.client, self.ds.path, self.dg, self.result, root)

    def nedge(self, root):
        return int(self.validate(root).nedge)

    def parents(self) -> np.ndarray:
        """The last search's parent array, gathered from the workers."""
        return self.mod.gather_parent(self.result, self.client)

    def close(self):
        if self.result is not None:
            self.result.release()
        self.dg.close()


def _nedge_only(edges, parent, n):
    """Graph500 3.0.1 nedge (non-self-loop tuples with both ends reached), for
    --no-validate runs, streamed over the edge list."""
    from dbfs.arrays import iter_rows

    reached = np.asarray(parent) >= 0
    total = 0
    for _, block in iter_rows(edges):
        u, v = block[:, 0], block[:, 1]
        total += int(np.count_nonzero((u != v) & reached[u] & reached[v]))
    return total


def run_fields(res: RunResult) -> list:
    """The Graph500 output fields of a run (stats.graph500_fields) plus dbfs extras.

    Without validation the ``*_validate`` keys are left out and
    ``validation: unvalidated`` is appended, so the output cannot pass for a
    validated run.
    """
    from dbfs.stats import graph500_fields, teps_stats

    te = teps_stats(res.times, res.nedges)
    extra = [("bfs  mean_TEPS", te["mean"]), ("load_time", res.load_time),
             ("algorithm", res.config["algorithm"]), ("backend", res.config["backend"])]
    fields = graph500_fields(res.scale, res.edgefactor, len(res.roots), res.generation_time, res.num_processes,
                             res.construction_time, res.times, res.nedges,
                             res.validate_times if res.validated else [0.0], extra=None)
    if res.energy:
        extra += [("energy_mean_power_W", res.energy["mean_watts"]), ("energy_joules", res.energy["joules"]),
                  ("MTEPS_per_W", res.energy["mteps_per_watt"])]
    if not res.validated:
        fields = [f for f in fields if not f[0].endswith("_validate")]
        extra.append(("validation", "unvalidated"))
    return fields + [(k, v, "s" if isinstance(v, str) else "g") for k, v in extra]


def per_level_comparison(res: RunResult, root_dir, cfg: RunConfig) -> dict:
    """Per-level records of td, bu and the run's algorithm on the run's first root (untimed)."""
    from dbfs.bfs import bfs
    from dbfs.store import open_dataset

    ds = open_dataset(res.dataset, root_dir)
    graph, _ = load_graph(ds, res.config["variant"])
    out = {}
    for alg in dict.fromkeys(["td", "bu", cfg.algorithm]):
        backend = "cpu" if cfg.backend == "dask" else cfg.backend
        out[f"{alg} ({backend})"] = bfs(graph, res.roots[0], algorithm=alg, backend=backend, stats=True).level_stats
    return out

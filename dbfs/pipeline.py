"""The Graph500 pipeline: generate -> Kernel 1 -> load -> roots -> Kernel 2 + validate -> stats.

``run_graph500(target, root, cfg, client)`` runs the stages in order over ONE
backend contract (:mod:`dbfs.backends`; no backend is named here), each stage
reused when its output is stored, and returns a :class:`RunResult`; the CLI
prints it. ``cfg.relabel="auto"`` is resolved first to the backend's default
CSR variant (:func:`dbfs.backends.resolve_relabel`); the result's ``config``
records ``relabel``, ``relabel_default`` (whether auto chose it) and
``relabel_why``. Timing rules (Graph500 3.0.1 section 7, docs/GRAPH500.md):
generation and loading are not Kernel 1; ``construction_time`` is the stored
Kernel 1 variant's end-to-end build time (edges in zarr to CSR in zarr) plus
the backend's per-graph preparation after loading; no timed stage compiles
code: the Numba kernels of each stage are loaded before its timer starts
(:func:`dbfs.backends.warm`; ``compile_time``, reported apart); one untimed
warm-up search runs first; each search is timed alone by the backend and validated
afterwards, untimed, against the stored INPUT edge list.

Monitoring (:mod:`dbfs.monitor`): with a cluster, the run installs the dbfs
plugins and publishes its stages, each search's result and (single-process
backends, after each search) its levels; the stage wall times and the
cluster's description go into the result (``stages``, ``cluster``); with
``perf_report`` Dask's ``performance_report`` of the cluster's part of the
run (every stage before the searches; the whole run for a backend whose
searches run on the cluster) is written there as inline HTML.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

import numpy as np
from distributed import performance_report

from dbfs import kernel1, preflight, store
from dbfs.backends import RunConfig, get_backend, resolve_relabel
from dbfs.backends.ahead import start as start_ahead
from dbfs.bfs import algorithm_names, bfs
from dbfs.cluster import release_local_cluster
from dbfs.errors import DbfsError
from dbfs.monitor import Publisher, describe_cluster, install
from dbfs.progress import say
from dbfs.report import graph500_fields, search_records, teps_stats, write_partial
from dbfs.roots import eligible
from dbfs.spec import GraphSpec
from dbfs.store import open_dataset

__all__ = ["RunConfig", "RunResult", "run_graph500", "stored_for_run", "open_backend", "check_fits", "check_root",
           "load_parent_file", "run_fields", "per_level_comparison"]


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
    compile_time: float = 0.0  # seconds loading Numba kernels before the timed stages (in none of them)
    stages: dict = field(default_factory=dict)  # stage -> wall seconds in this run (generate, kernel1, load, ...)
    cluster: dict | None = None  # describe_cluster() of the cluster the run used, None without one

    @property
    def ok(self) -> bool:
        return all(self.valid) if self.validated else True


def stored_for_run(target, root, cfg: RunConfig) -> bool:
    """Whether the dataset is stored complete (of this spec) and has the CSR
    variant ``cfg`` searches, so a run has no generation or Kernel 1 left
    for a Dask cluster to do. Never raises: a missing, half-written or
    different dataset is False, and the run itself then reports it."""
    try:
        ds = store.stored(target, root) if isinstance(target, GraphSpec) else store.open_dataset(target, root)
        if ds is None:
            return False
        cfg = resolve_relabel(cfg, None, ds, quiet=True)
        return kernel1.reusable_variant(ds.path, cfg.partitions, cfg.partitioning, cfg.dedupe, cfg.relabel) is not None
    except DbfsError:
        return False


def check_fits(target, root, cfg: RunConfig, client=None) -> dict:
    """Refuse in one line, before any work, a run whose searches cannot fit this machine
    (:func:`dbfs.preflight.check_run`) or, given the run's ``client``, its cluster (the backend's
    ``fits_cluster``); the estimate otherwise."""
    if isinstance(target, GraphSpec):
        n, m, scale = target.n_vertices, target.n_edges, target.scale
    else:
        ds = store.open_dataset(target, root)
        n, m, scale = ds.n_vertices, ds.n_edges, ds.scale
    est = preflight.check_run(cfg.backend, n, m, scale)
    if client is not None:
        est["cluster"] = get_backend(cfg.backend).fits_cluster(client, n, m, scale)
    return est


def open_backend(target, root_dir, cfg: RunConfig, client=None, given=(), pub: Publisher | None = None,
                 stages: dict | None = None):
    """Stages 1-3 for one backend: check ``cfg``, get the dataset (generated
    if needed), its CSR variant (built if needed), load and prepare it, each
    stage published through ``pub`` (:func:`dbfs.monitor.install` of
    ``client`` when None) and its wall seconds put in ``stages``, apart from
    the seconds spent loading Numba kernels before the timed stages
    (``stages["compile"]``). Returns (backend instance, dataset, variant,
    Kernel 1 attributes)."""
    B = get_backend(cfg.backend)
    B.check(cfg, given)
    check_fits(target, root_dir, cfg, client)
    pub = pub if pub is not None else install(client, cfg.quiet)
    stages = {} if stages is None else stages
    ahead = start_ahead(B.ahead_job(cfg, target), cfg.quiet)   # a first run: the searches' kernels meanwhile
    try:
        clock = time.perf_counter()
        pub.stage("generate")
        ds = B.dataset(target, root_dir, client, cfg.quiet)
        cfg = resolve_relabel(cfg, client, ds)  # --relabel auto: the backend's default, said on stderr
        pub.run(ds, cfg, cfg.n_roots)
        pub.stage("kernel1")
        compiled = ds.memo.get("compile_time", 0.0)     # the stages' kernels loaded before their timers
        stages["generate"], clock = time.perf_counter() - clock - compiled, time.perf_counter()
        built, k1 = B.csr(ds, cfg, client)     # the variant's name, or a typed result whose str() is that name
        variant = str(built)
        stages["kernel1"] = time.perf_counter() - clock - (ds.memo.get("compile_time", 0.0) - compiled)
        clock = time.perf_counter()
        pub.stage("load")
        b = B(cfg, client)
        try:
            b.load(ds, built)
            waited = ahead.join() if ahead is not None else 0.0     # compile time, like the warm-up's
            b.warm()
            b.prepare()
        except BaseException:
            b.close()
            raise
    finally:
        if ahead is not None:
            ahead.close()
    stages["load"] = time.perf_counter() - clock - b.compile_time - waited
    stages["compile"] = ds.memo.get("compile_time", 0.0) + b.compile_time + waited
    say(f"loaded CSR {variant} of {ds.name} in {b.load_time:.3f} s", cfg.quiet)
    return b, ds, variant, k1


def check_root(ds, root: int) -> None:
    """Raise DbfsError for a root that is out of range or has no non-self-loop
    edge in the dataset's INPUT edge list (one streamed pass)."""
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
    fix = "save the search's parent array with numpy.save(FILE.npy, parent)"
    try:
        with open(path, "rb") as f:
            head = f.read(6)
        if head != b"\x93NUMPY":
            what = "empty (0 bytes)" if not head else "not a .npy file (it does not start with the .npy header)"
            raise DbfsError(f"parent file {path} is {what}: {fix}")
        a = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise DbfsError(f"parent file {path} not found: {fix}") from None
    except (OSError, ValueError, EOFError) as e:  # EOFError, ValueError: a truncated or damaged .npy
        raise DbfsError(f"parent file {path} is not a readable .npy array ({e}): {fix}") from None
    if not isinstance(a, np.ndarray) or a.ndim != 1 or a.dtype.kind not in "iu":
        raise DbfsError(f"parent file {path} holds a {getattr(a, 'dtype', type(a))} array of shape "
                        f"{getattr(a, 'shape', '?')}: save a 1-D integer array (one parent per vertex, -1 unreached)")
    if a.shape[0] != n_vertices:
        raise DbfsError(f"parent file {path} has {a.shape[0]:,} entries but the dataset has {n_vertices:,} vertices: "
                        f"pass the parents of a search on this dataset")
    return a.astype(np.int64, copy=False)


def _partial(cfg: RunConfig, ds, variant, k1: dict, b, stages: dict, roots, out: dict | None = None) -> None:
    """``cfg.record_path`` brought up to date (:func:`dbfs.report.write_partial`): the run so far, the searches
    validated (or counted) so far with their levels (a run cut off still shows where its levels' time went);
    nothing without a path."""
    if not cfg.record_path:
        return
    searches = search_records(roots, out["times"], out["nedges"], out["validate_times"], out["valid"],
                              out["levels"]) if out else []
    write_partial(cfg.record_path, {
        "dataset": ds.name, "scale": ds.scale, "n_vertices": ds.n_vertices, "n_edges": ds.n_edges,
        "config": {"algorithm": cfg.algorithm, "backend": cfg.backend, "variant": str(variant),
                   "relabel": cfg.relabel, "partitions": cfg.partitions, "edges": ds.storage},
        "construction_time": float(k1.get("construction_time") or 0.0) + b.prepare_time, "load_time": b.load_time,
        "stages": dict(stages), "roots": [int(r) for r in roots], "searches": searches})


def _search_all(b, roots, cfg: RunConfig, pub: Publisher, stages: dict, progress=lambda out: None) -> dict:
    """Stage 5: the timed searches, each validated (or its nedge counted) after its clock stopped.

    A backend with ``validate_batch`` K > 1 searches K roots at once (``search_many``: one round trip on a
    cluster), keeps their parents and validates them together (``validate_many``: one read of a regenerated
    edge list per batch); each search of the batch is given the batch's validation time over K."""
    out = {k: [] for k in ("times", "nedges", "validate_times", "valid", "failures", "levels")}
    n = len(roots)
    batch = max(1, int(getattr(b, "validate_batch", 1))) if cfg.validate else 1
    client_levels = b.cluster != "always"   # a backend searching on the cluster publishes from its workers
    clock = time.perf_counter()
    pub.stage("warm-up", 0, n, int(roots[0]))
    b.search(int(roots[0]))  # untimed warm-up (JIT, caches), as the reference does
    stages["warm-up"] = time.perf_counter() - clock
    stages["searches"] = stages["validation"] = 0.0
    order = roots.tolist()
    for i0 in range(0, n, batch):       # a batch searched at once (one round trip on a cluster), then validated
        pending = list(enumerate(order[i0:i0 + batch], i0))
        pub.stage("search", i0 + 1, n, pending[0][1])
        clock = time.perf_counter()
        got = b.search_many([r for _, r in pending])
        stages["searches"] += time.perf_counter() - clock
        for t, lv in got:
            out["times"].append(t)
            out["levels"].append(lv or [])
            if client_levels:
                pub.levels(out["levels"][-1])
        i, r = pending[-1]
        clock = time.perf_counter()
        if cfg.validate:
            pub.stage("validate", i + 1, n, r)
            vs = b.validate_many([x for _, x in pending]) if batch > 1 else [b.validate(r)]
            dt = (time.perf_counter() - clock) / len(vs)
            for (_, x), v in zip(pending, vs):
                out["validate_times"].append(dt)
                out["valid"].append(bool(v.ok))
                out["nedges"].append(int(v.nedge))
                if not v.ok:
                    out["failures"].append({"root": x, "summary": v.summary(), "rules": v.rules_failed})
        else:
            out["nedges"].append(b.nedge(r))
        stages["validation"] += time.perf_counter() - clock
        for j, x in pending:
            t = out["times"][j]
            pub.search(j + 1, x, t, out["nedges"][j], out["valid"][j] if cfg.validate else None)
            say(f"search {j + 1}/{len(roots)} root {x}: {t * 1e3:.2f} ms, {out['nedges'][j] / t / 1e9:.3f} GTEPS"
                + ("" if not cfg.validate else (" valid" if out["valid"][j] else " INVALID")), cfg.quiet)
        progress(out)
    return out


def _performance_report(client, path):
    """Dask's performance report of what ``client``'s cluster does inside (inline BokehJS: opens offline)."""
    if client is None or not path:
        return contextlib.nullcontext()

    return performance_report(filename=str(path), mode="inline")


def run_graph500(target, root_dir=None, cfg: RunConfig | None = None, client=None, given=(),
                 perf_report=None) -> RunResult:
    """The whole benchmark for ``target`` (a GraphSpec or a stored dataset name); see the module docstring.

    ``perf_report``: a path for Dask's performance report of the cluster's part of the run (None: none).
    """
    cfg = cfg or RunConfig()
    pub = install(client, cfg.quiet)
    stages = {}
    with contextlib.ExitStack() as on_cluster:
        on_cluster.enter_context(_performance_report(client, perf_report))
        try:
            b, ds, variant, k1 = open_backend(target, root_dir, cfg, client, given, pub, stages)
            cfg = b.cfg                 # --relabel auto resolved
        except BaseException:
            pub.stage("failed")
            raise
        try:
            cluster = describe_cluster(client)
            roots = b.roots(cfg.n_roots)
            if len(roots) == 0:
                raise DbfsError(f"dataset {ds.name} has no vertex with a non-self-loop edge: nothing to search")
            notes = [k1["note"]] if k1.get("in_memory") else []
            if len(roots) < cfg.n_roots:
                notes.append(f"--roots {cfg.n_roots} asked for more search keys than {ds.name} has eligible "
                             f"vertices: searching all {len(roots)} of them (NBFS {len(roots)})")
                say(notes[-1])
            if b.cluster != "always":
                on_cluster.close()     # the performance report ends with the cluster's part of the run
                closed = release_local_cluster(client)
                if closed:
                    pub.detach()
                    say(f"closed the {closed}: the searches and validations run in this process", cfg.quiet)
            _partial(cfg, ds, variant, k1, b, stages, roots.tolist())
            res = _search_all(b, roots, cfg, pub, stages,
                              lambda out: _partial(cfg, ds, variant, k1, b, stages, roots.tolist(), out))
            where = b.describe()       # dask: per worker kind, partitions, device/host bytes; placement
            energy = b.energy_phase(roots.tolist(), res["times"], res["nedges"]) if cfg.energy else None
            pub.stage("done", len(roots), len(roots))
        except BaseException:
            pub.stage("failed")
            raise
        finally:
            b.close()
    spec = ds.attrs["spec"]
    return RunResult(spec=spec, dataset=ds.name, scale=ds.scale, edgefactor=int(spec.get("edgefactor") or 0),
                     n_vertices=ds.n_vertices, n_edges=ds.n_edges,
                     config={"algorithm": cfg.algorithm, "backend": cfg.backend, "variant": variant,
                             "relabel": cfg.relabel, "relabel_default": bool(cfg.relabel_why),
                             "relabel_why": cfg.relabel_why or f"--relabel {cfg.relabel} given", "opts": cfg.opts,
                             "partitions": cfg.partitions, "events": list(b.events),
                             "edges": ds.storage, "notes": notes, **where},
                     generation_time=float(ds.attrs.get("generation_time", 0.0)),
                     construction_time=float(k1["construction_time"]) + b.prepare_time,
                     load_time=b.load_time, roots=roots.tolist(), validated=cfg.validate,
                     num_processes=cfg.partitions, energy=energy, stages=stages, cluster=cluster,
                     compile_time=stages.get("compile", 0.0), **res)


def run_fields(res: RunResult) -> list:
    """The Graph500 output fields of a run (stats.graph500_fields) plus dbfs extras.

    Without validation the ``*_validate`` keys are left out and
    ``validation: unvalidated`` is appended, so the output cannot pass for a
    validated run.
    """
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
    """Per-level records of td, bu and the run's algorithm on the run's first
    root (untimed), with the in-memory kernels of the run's backend."""
    kernels = get_backend(cfg.backend).kernels
    ds = open_dataset(res.dataset, root_dir)
    graph = kernel1.load_csr(ds.path, res.config["variant"])
    names = algorithm_names(kernels)
    out = {}
    for alg in dict.fromkeys(["td", "bu", cfg.algorithm]):
        if alg in names:
            out[f"{alg} ({kernels})"] = bfs(graph, res.roots[0], algorithm=alg, backend=kernels,
                                            stats=True).level_stats
    return out

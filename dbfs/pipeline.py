"""The Graph500 pipeline: generate -> Kernel 1 -> load -> roots -> Kernel 2 + validate -> stats.

``run_graph500(target, root, cfg, client)`` runs the stages in order over ONE
backend contract (:mod:`dbfs.backends`; no backend is named here), each stage
reused when its output is stored, and returns a :class:`RunResult`; the CLI
prints it. Timing rules (Graph500 3.0.1 section 7, docs/GRAPH500.md):
generation and loading are not Kernel 1; ``construction_time`` is the stored
Kernel 1 variant's end-to-end build time (edges in zarr to CSR in zarr) plus
the backend's per-graph preparation after loading; one untimed warm-up
search runs first; each search is timed alone by the backend and validated
afterwards, untimed, against the stored INPUT edge list.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from dbfs.backends import RunConfig, get_backend
from dbfs.errors import DbfsError
from dbfs.progress import say

__all__ = ["RunConfig", "RunResult", "run_graph500", "stored_for_run", "open_backend", "check_root",
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

    @property
    def ok(self) -> bool:
        return all(self.valid) if self.validated else True


def stored_for_run(target, root, cfg: RunConfig) -> bool:
    """Whether the dataset is stored complete (of this spec) and has the CSR
    variant ``cfg`` searches, so a run has no generation or Kernel 1 left
    for a Dask cluster to do. Never raises: a missing, half-written or
    different dataset is False, and the run itself then reports it."""
    from dbfs import kernel1, store
    from dbfs.spec import GraphSpec

    try:
        ds = store.stored(target, root) if isinstance(target, GraphSpec) else store.open_dataset(target, root)
        if ds is None:
            return False
        return kernel1.reusable_variant(ds.path, cfg.partitions, cfg.partitioning, cfg.dedupe, cfg.relabel) is not None
    except DbfsError:
        return False


def open_backend(target, root_dir, cfg: RunConfig, client=None, given=()):
    """Stages 1-3 for one backend: check ``cfg``, get the dataset (generated
    if needed), its CSR variant (built if needed), load and prepare it.
    Returns (backend instance, dataset, variant, Kernel 1 attributes)."""
    B = get_backend(cfg.backend)
    B.check(cfg, given)
    ds = B.dataset(target, root_dir, client, cfg.quiet)
    variant, k1 = B.csr(ds, cfg, client)
    b = B(cfg, client)
    try:
        b.load(ds, variant)
        b.prepare()
    except BaseException:
        b.close()
        raise
    say(f"loaded CSR {variant} of {ds.name} in {b.load_time:.3f} s", cfg.quiet)
    return b, ds, variant, k1


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


def _search_all(b, roots, cfg: RunConfig) -> dict:
    """Stage 5: the timed searches, each validated (or its nedge counted) after its clock stopped."""
    out = {k: [] for k in ("times", "nedges", "validate_times", "valid", "failures", "levels")}
    b.search(int(roots[0]))  # untimed warm-up (JIT, caches), as the reference does
    for i, r in enumerate(roots.tolist()):
        t = b.search(r)
        out["times"].append(t)
        out["levels"].append(b.level_stats or [])
        if cfg.validate:
            t0 = time.perf_counter()
            v = b.validate(r)
            out["validate_times"].append(time.perf_counter() - t0)
            out["valid"].append(bool(v.ok))
            out["nedges"].append(int(v.nedge))
            if not v.ok:
                out["failures"].append({"root": r, "summary": v.summary(), "rules": v.rules_failed})
        else:
            out["nedges"].append(b.nedge(r))
        say(f"search {i + 1}/{len(roots)} root {r}: {t * 1e3:.2f} ms, {out['nedges'][-1] / t / 1e9:.3f} GTEPS"
            + ("" if not cfg.validate else (" valid" if out["valid"][-1] else " INVALID")), cfg.quiet)
    return out


def run_graph500(target, root_dir=None, cfg: RunConfig | None = None, client=None, given=()) -> RunResult:
    """The whole benchmark for ``target`` (a GraphSpec or a stored dataset name); see the module docstring."""
    from dbfs.cluster import release_local_cluster

    cfg = cfg or RunConfig()
    b, ds, variant, k1 = open_backend(target, root_dir, cfg, client, given)
    try:
        roots = b.roots(cfg.n_roots)
        if len(roots) == 0:
            raise DbfsError(f"dataset {ds.name} has no vertex with a non-self-loop edge: nothing to search")
        notes = []
        if len(roots) < cfg.n_roots:
            notes.append(f"--roots {cfg.n_roots} asked for more search keys than {ds.name} has eligible vertices: "
                         f"searching all {len(roots)} of them (NBFS {len(roots)})")
            say(notes[-1])
        if b.cluster != "always":
            closed = release_local_cluster(client)
            if closed:
                say(f"closed the {closed}: the searches and validations run in this process", cfg.quiet)
        res = _search_all(b, roots, cfg)
        energy = b.energy_phase(roots.tolist(), res["times"], res["nedges"]) if cfg.energy else None
    finally:
        b.close()
    spec = ds.attrs["spec"]
    return RunResult(spec=spec, dataset=ds.name, scale=ds.scale, edgefactor=int(spec.get("edgefactor") or 0),
                     n_vertices=ds.n_vertices, n_edges=ds.n_edges,
                     config={"algorithm": cfg.algorithm, "backend": cfg.backend, "variant": variant,
                             "opts": cfg.opts, "partitions": cfg.partitions, "events": list(b.events),
                             "notes": notes},
                     generation_time=float(ds.attrs.get("generation_time", 0.0)),
                     construction_time=float(k1["construction_time"]) + b.prepare_time,
                     load_time=b.load_time, roots=roots.tolist(), validated=cfg.validate,
                     num_processes=cfg.partitions, energy=energy, **res)


def run_fields(res: RunResult) -> list:
    """The Graph500 output fields of a run (stats.graph500_fields) plus dbfs extras.

    Without validation the ``*_validate`` keys are left out and
    ``validation: unvalidated`` is appended, so the output cannot pass for a
    validated run.
    """
    from dbfs.report import graph500_fields, teps_stats

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
    from dbfs import kernel1
    from dbfs.bfs import algorithm_names, bfs
    from dbfs.store import open_dataset

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

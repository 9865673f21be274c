"""The ``dbfs`` command: wiring only (click); the work lives in the stage modules.

Every user error is a :class:`~dbfs.errors.DbfsError`, printed as one line
``dbfs: error: <problem>: <fix>`` with exit code 2. Results go to stdout,
progress and the dashboard link to stderr.
"""
from __future__ import annotations

import json
import sys

import click

from dbfs import __version__
from dbfs.errors import DbfsError
from dbfs.units import human, parse_size


class _Group(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except DbfsError as e:
            click.echo(f"dbfs: error: {e}", err=True)
            ctx.exit(e.exit_code)


datasets_opt = click.option("--datasets", "datasets", default=None, metavar="DIR",
                            help="Dataset root [default: $DBFS_DATASETS or ./datasets].")
scheduler_opt = click.option("--scheduler", default=None, metavar="ADDRESS",
                             help="Join this Dask scheduler (tcp://host:port); 'threads' runs without a cluster. "
                                  "[default: start a LocalCluster of worker processes]")
_workers = click.option("--workers", type=int, default=None, show_default="one per core",
                        help="Worker processes of the LocalCluster.")
_cluster = click.option("--cluster", "cluster_profile", default=None, metavar="NAME|FILE",
                        help="Cluster profile (YAML; a packaged name, one in $DBFS_PROFILES, or a file), e.g. local-4x4.")


def workers_opt(f):
    return _workers(_cluster(f))


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.version_option(__version__, prog_name="dbfs")
@click.option("--quiet", "-q", is_flag=True, help="No status lines on stderr (errors and results only).")
def cli(quiet):
    """dbfs: Graph500 breadth-first search as a Dask pipeline."""
    from dbfs.progress import set_quiet

    set_quiet(quiet)


def _given(ctx=None) -> set:
    """The parameters the user set on the command line or through the environment."""
    from click.core import ParameterSource

    ctx = ctx or click.get_current_context()
    return {k for k in ctx.params
            if ctx.get_parameter_source(k) in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)}


def _refuse(given: set, flags: dict, why: str) -> None:
    """A one-line error for the first of ``flags`` (param -> --flag) that was given."""
    for k, flag in flags.items():
        if k in given:
            raise DbfsError(f"{flag} does not apply {why}")


_CLUSTER_FLAGS = {"scheduler": "--scheduler", "workers": "--workers", "cluster_profile": "--cluster"}


def _check_cluster_flags(given: set, scheduler, cluster_profile) -> None:
    """--workers sizes a LocalCluster this command starts: refuse it when joining one."""
    if "workers" in given and (scheduler or cluster_profile):
        from dbfs.cluster import load_profile

        if scheduler or load_profile(cluster_profile)["type"] != "local":
            raise DbfsError("--workers does not apply when joining a cluster (--scheduler, or a profile that is "
                            "not type: local): it sizes the LocalCluster dbfs starts; drop it")


# ---------------------------------------------------------------------------
@cli.command()
@click.option("--scale", type=int, default=16, help="log2 of the number of vertices (1..42).")
@click.option("--edgefactor", type=int, default=16, help="Edge tuples per vertex.")
@click.option("--seed1", type=int, default=2, help="First 64-bit user seed.")
@click.option("--seed2", type=int, default=3, help="Second 64-bit user seed.")
@click.option("--kind", type=click.Choice(["kronecker", "rmat", "uniform", "grid2d", "grid3d", "import"]),
              default="kronecker", help="Graph kind.")
@click.option("--a", "a", type=float, default=None, help="R-MAT initiator a [default: 0.57].")
@click.option("--b", "b", type=float, default=None, help="R-MAT initiator b [default: 0.19].")
@click.option("--c", "c", type=float, default=None, help="R-MAT initiator c [default: 0.19].")
@click.option("--input", "input_", default=None, metavar="FILE",
              help="Import an edge list ('u v' per line, # comments) or Matrix Market file.")
@click.option("--compact-ids", is_flag=True, help="Import: relabel sparse ids to 0..n-1 in ascending order; searches "
              "and --root then use the new ids, `dbfs export` writes the original ones.")
@datasets_opt
@click.option("--chunk-edges", type=int, default=1 << 20, help="Edges per chunk (dask block and zarr chunk).")
@click.option("--force", is_flag=True, help="Rebuild even if a complete dataset exists (old copy kept until done).")
@click.option("--backend", type=click.Choice(["cpu", "gpu"]), default="cpu",
              help="Generate on Dask workers (cpu) or on the GPU (gpu, Kronecker only; same bytes).")
@scheduler_opt
@workers_opt
def generate(scale, edgefactor, seed1, seed2, kind, a, b, c, input_, compact_ids, datasets, chunk_edges, force, backend,
             scheduler, workers, cluster_profile):
    """Generate a graph's edge list into the dataset store (zarr)."""
    from dbfs import store
    from dbfs.cluster import client_for
    from dbfs.spec import GraphSpec

    given = _given()
    if backend == "gpu":
        _refuse(given, _CLUSTER_FLAGS, "to --backend gpu: the GPU generates in this process")
    _check_cluster_flags(given, scheduler, cluster_profile)
    spec = GraphSpec.make(kind=kind, scale=scale, edgefactor=edgefactor, seed1=seed1, seed2=seed2,
                          a=a, b=b, c=c, input=input_, given=given, compact_ids=compact_ids)
    if chunk_edges < 1:
        raise DbfsError(f"--chunk-edges {chunk_edges} is invalid: use a positive number of edges per chunk")
    root = store.datasets_root(datasets)
    if store.status(root / spec.name)[0] == "complete" and not force:
        store.generate(spec, root, chunk_edges=chunk_edges)  # reuse (a damaged copy is rebuilt): no cluster needed
    else:
        store._check_room(root, store.estimate_bytes(spec))  # fail before starting a cluster
        if backend == "gpu":
            if spec.kind != "kronecker":
                raise DbfsError(f"GPU generation makes Graph500 Kronecker graphs only, not {spec.kind}: "
                                f"drop --backend gpu for this kind")
            _need_gpu()
            store.generate(spec, root, chunk_edges=chunk_edges, force=force, backend="gpu")
        else:
            with client_for(scheduler, n_workers=workers, profile=cluster_profile) as client:
                store.generate(spec, root, chunk_edges=chunk_edges, force=force, client=client)
    click.echo(spec.name)


# ---------------------------------------------------------------------------
@cli.group(cls=_Group)
def datasets():
    """List, inspect, verify and remove stored datasets."""


@datasets.command("list")
@datasets_opt
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def datasets_list(datasets, as_json):
    """Table of datasets: name, kind, SCALE, edges, size, stages, complete."""
    from dbfs import store

    rows = store.list_datasets(datasets)
    if as_json:
        click.echo(json.dumps([{k: v for k, v in r.items() if k != "attrs"} for r in rows], indent=1))
        return
    if not rows:
        click.echo(f"no datasets under {store.datasets_root(datasets)}")
        return
    head = ("NAME", "KIND", "SCALE", "EDGES", "SIZE", "STAGES", "COMPLETE")
    table = [head] + [(r["name"], r["kind"], str(r["scale"]), f"{r['n_edges']:,}" if r["n_edges"] is not None else "?",
                       human(r["size_bytes"]), ",".join(r["stages"]) or "-", "yes" if r["complete"] else f"no ({r['status']})")
                      for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for row in table:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())


@datasets.command("info")
@click.argument("name")
@datasets_opt
def datasets_info(name, datasets):
    """Everything stored about dataset NAME (JSON)."""
    from dbfs import store

    click.echo(json.dumps(store.info(name, datasets), indent=1, default=str))


@datasets.command("rm")
@click.argument("name")
@datasets_opt
def datasets_rm(name, datasets):
    """Remove dataset NAME (edges and every derived stage)."""
    from dbfs import store

    path = store.remove(name, datasets)
    click.echo(f"removed {path}")


@datasets.command("verify")
@click.argument("name")
@datasets_opt
def datasets_verify(name, datasets):
    """Check every chunk of dataset NAME and of its CSR variants: exit 0 intact, 1 damaged (a line per bad
    chunk), 2 bad input."""
    from dbfs import store

    res = store.verify(name, datasets)
    out, err = res.lines()
    click.echo("\n".join(err), err=True, nl=bool(err))
    click.echo("\n".join(out))
    sys.exit(0 if res.ok else 1)


# ---------------------------------------------------------------------------
@cli.command()
@click.argument("name")
@click.option("--out", required=True, metavar="FILE.npy", help="Output .npy file (int64, shape (M, 2)).")
@datasets_opt
def export(name, out, datasets):
    """Write dataset NAME's edge list to FILE.npy as int64 (M, 2) in the input's ids, every chunk verified."""
    from dbfs import store

    path = store.export(name, out, datasets)
    click.echo(str(path))


# ---------------------------------------------------------------------------
def _need_gpu():
    """Fail early, in one line, when the GPU backend cannot run here (no CuPy or no GPU)."""
    from dbfs.backends import get_backend

    reason = get_backend("gpu").unavailable()
    if reason:
        raise DbfsError(f"--backend gpu cannot run here: {reason}")


@cli.command()
@click.argument("name")
@click.option("--partitions", "-P", type=int, default=1, help="Number of CSR partitions.")
@click.option("--partitioning", type=click.Choice(["block", "cyclic"]), default="block", help="Vertex ownership rule.")
@click.option("--keep-duplicates", is_flag=True, help="Keep duplicate edges in the CSR.")
@click.option("--relabel", type=click.Choice(["none", "degree"]), default="none",
              help="Renumber vertices by descending degree, heavy neighbours first.")
@click.option("--memory-budget", default=None, metavar="SIZE", show_default="from worker memory",
              help="Peak memory per task, e.g. 512MiB.")
@click.option("--backend", type=click.Choice(["cpu", "gpu"]), default="cpu",
              help="Build out of core on Dask workers (cpu) or on the GPU (gpu: one partition, no relabel; same bytes).")
@datasets_opt
@scheduler_opt
@workers_opt
def build(name, partitions, partitioning, keep_duplicates, relabel, memory_budget, backend, datasets, scheduler, workers,
          cluster_profile):
    """Kernel 1: build (or reuse) the partitioned CSR of dataset NAME, out of core."""
    from dbfs import kernel1, store
    from dbfs.cluster import client_for

    given = _given()
    budget = parse_size(memory_budget)
    if partitions < 1:
        raise DbfsError(f"--partitions {partitions} is invalid: use 1 or more")
    if backend == "gpu":
        _refuse(given, {"partitions": "--partitions", "partitioning": "--partitioning"},
                "to --backend gpu: GPU Kernel 1 builds one block partition; use --backend cpu")
        _refuse(given, {"memory_budget": "--memory-budget", **_CLUSTER_FLAGS},
                "to --backend gpu: GPU Kernel 1 runs in this process, bounded by the free device memory")
    _check_cluster_flags(given, scheduler, cluster_profile)
    ds = store.open_dataset(name, datasets)
    if backend == "gpu":
        _need_gpu()
        from dbfs.store.gpu import build_gpu

        attrs = build_gpu(ds, dedupe=not keep_duplicates, relabel=relabel)
    else:
        with client_for(scheduler, n_workers=workers, profile=cluster_profile) as client:
            attrs = kernel1.build_partitioned(ds.path, P=partitions, partitioning=partitioning,
                                              dedupe=not keep_duplicates, relabel=relabel,
                                              memory_budget=budget, client=client, progress=True)
    variant = kernel1.variant_name(partitions, partitioning, not keep_duplicates, relabel)
    click.echo(f"{name}/csr/{variant}: construction_time {attrs['construction_time']:.3f} s, "
               f"nnz {sum(attrs['nnz']):,}")


#: run/bfs parameters -> RunConfig option names (for the backend's applicability check)
_RUN_OPTIONS = {"partitions": "partitions", "partitioning": "partitioning", "relabel": "relabel",
                "keep_duplicates": "dedupe", "device_memory_limit": "device_memory_limit", "energy": "energy",
                "algorithm": "algorithm", "backend": "backend", "n_roots": "n_roots"}
_SPEC_FLAGS = {"scale": "--scale", "edgefactor": "--edgefactor", "seed1": "--seed1", "seed2": "--seed2"}


def _run_config(name, given: set, scheduler, cluster_profile, **kw):
    """The RunConfig of run/bfs, with every flag that does not apply refused (one line, exit 2)."""
    from dbfs.backends import RunConfig, get_backend

    if name:
        _refuse(given, _SPEC_FLAGS, f"with a dataset NAME ({name}): its spec is stored; drop the flag or NAME")
    cfg = RunConfig(algorithm=kw["algorithm"], backend=kw["backend"], n_roots=kw.get("n_roots", 64),
                    validate=not kw.get("no_validate", False), partitions=kw["partitions"],
                    partitioning=kw["partitioning"], relabel=kw["relabel"], dedupe=not kw["keep_duplicates"],
                    energy=kw.get("energy", False), device_memory_limit=parse_size(kw["device_memory_limit"]),
                    quiet=kw.get("quiet", False))
    B = get_backend(cfg.backend)
    if B.cluster == "never":
        _refuse(given, _CLUSTER_FLAGS, f"to --backend {cfg.backend}: it runs every stage in this process")
    _check_cluster_flags(given, scheduler, cluster_profile)
    B.check(cfg, {_RUN_OPTIONS[k] for k in given if k in _RUN_OPTIONS})
    return cfg


def _spec_or_name(name, scale, edgefactor, seed1, seed2):
    from dbfs.spec import GraphSpec

    if name:
        return name
    return GraphSpec.make(scale=scale, edgefactor=edgefactor, seed1=seed1, seed2=seed2)


_run_common = [
    click.option("--scale", type=int, default=16, help="Kronecker SCALE when no NAME is given."),
    click.option("--edgefactor", type=int, default=16, help="Kronecker edgefactor when no NAME is given."),
    click.option("--seed1", type=int, default=2, help="First seed (generation and search keys)."),
    click.option("--seed2", type=int, default=3, help="Second seed."),
    click.option("--algorithm", "-a", default="do", help="BFS algorithm (see `dbfs algorithms`)."),
    click.option("--backend", type=click.Choice(["cpu", "gpu", "dask"]), default="cpu",
                 help="Where Kernel 2 runs: this process (cpu), one GPU (gpu), or Dask workers (dask)."),
    click.option("--partitions", "-P", type=int, default=1, help="CSR partitions (dask backend: one per worker slot)."),
    click.option("--partitioning", type=click.Choice(["block", "cyclic"]), default="block",
                 help="Vertex ownership of the CSR variant to search (dask backend for P > 1)."),
    click.option("--keep-duplicates", is_flag=True, help="Search the CSR variant built with duplicate edges kept."),
    click.option("--relabel", type=click.Choice(["none", "degree"]), default="none", help="CSR variant to search."),
    click.option("--device-memory-limit", default=None, metavar="SIZE",
                 help="GPU backend: keep the CSR in pinned host memory when it exceeds SIZE (auto when it does not fit)."),
    datasets_opt, scheduler_opt, workers_opt,
]


def _apply(opts):
    def deco(f):
        for o in reversed(opts):
            f = o(f)
        return f

    return deco


def _scheduler_if_work_left(scheduler, cluster_profile, target, datasets, cfg):
    """``scheduler``, or "threads" (no cluster): for a backend that never uses
    one, and for one that uses it only for generation and Kernel 1 when the
    dataset and CSR variant are already stored and no scheduler or cluster
    profile was asked for (a LocalCluster would have nothing to do)."""
    from dbfs.backends import get_backend
    from dbfs.pipeline import stored_for_run

    mode = get_backend(cfg.backend).cluster
    if mode == "never":
        return "threads"
    if mode == "stages" and not scheduler and not cluster_profile and stored_for_run(target, datasets, cfg):
        click.echo("dbfs: dataset and CSR already stored: no cluster to start, the searches run in this process",
                   err=True)
        return "threads"
    return scheduler


@cli.command()
@click.argument("name", required=False)
@_apply(_run_common)
@click.option("--roots", "n_roots", type=int, default=64, help="Number of search keys.")
@click.option("--json", "json_path", default=None, metavar="FILE", help="Write the full result as JSON.")
@click.option("--plot", "plot_path", default=None, metavar="FILE.png", help="Write per-level and TEPS plots.")
@click.option("--no-validate", is_flag=True, help="Skip validation (results marked unvalidated).")
@click.option("--energy", is_flag=True,
              help="GPU backend: sample GPU power (NVML) during the timed searches; report MTEPS/W.")
def run(name, scale, edgefactor, seed1, seed2, algorithm, backend, partitions, partitioning, keep_duplicates, relabel,
        device_memory_limit, datasets, scheduler, workers, cluster_profile, n_roots, json_path, plot_path, no_validate,
        energy):
    """Graph500 end to end: generate and build if needed, search from the keys, validate, report.

    NAME is a stored dataset; without it a Kronecker graph of --scale is used.
    Graph500 output goes to stdout, progress to stderr.
    """
    from dbfs.cluster import client_for
    from dbfs.pipeline import run_graph500

    given = _given()
    cfg = _run_config(name, given, scheduler, cluster_profile, algorithm=algorithm, backend=backend,
                      partitions=partitions, partitioning=partitioning, keep_duplicates=keep_duplicates,
                      relabel=relabel, device_memory_limit=device_memory_limit, n_roots=n_roots,
                      no_validate=no_validate, energy=energy)
    _check_writable(json_path, "--json")
    _check_writable(plot_path, "--plot")
    target = _spec_or_name(name, scale, edgefactor, seed1, seed2)
    scheduler = _scheduler_if_work_left(scheduler, cluster_profile, target, datasets, cfg)
    with client_for(scheduler, n_workers=workers, profile=cluster_profile) as client:
        res = run_graph500(target, datasets, cfg, client)
    _print_run(res, cfg, datasets, json_path, plot_path)


def _check_writable(path, flag) -> None:
    """A one-line error before any work when ``path``'s folder cannot take the file."""
    import os
    from pathlib import Path

    if not path:
        return
    d = Path(path).expanduser().resolve().parent
    if not d.is_dir() or not os.access(d, os.W_OK):
        raise DbfsError(f"{flag} {path}: folder {d} does not exist or is not writable: pass a writable path")


def _print_run(res, cfg, datasets, json_path=None, plot_path=None) -> None:
    """The Graph500 block on stdout (or the invalid-run line and exit 1), then the JSON and plot files."""
    from dbfs.pipeline import run_fields
    from dbfs.report import render_graph500

    if res.validated and not res.ok:
        for f in res.failures:
            click.echo(f"dbfs: root {f['root']}: validation failed: {f['summary']}", err=True)
        click.echo("No results printed for invalid run.")
        sys.exit(1)
    fields = run_fields(res)
    click.echo(render_graph500(fields), nl=False)
    if json_path:
        from dbfs.report import write_json

        click.echo(f"dbfs: wrote {write_json(json_path, res, {k: v for k, v, _ in fields})}", err=True)
    if plot_path:
        from dbfs.pipeline import per_level_comparison
        from dbfs.report import plot_run

        click.echo(f"dbfs: wrote {plot_run(plot_path, res, per_level_comparison(res, datasets, cfg))}", err=True)


@cli.command("bfs")
@click.argument("name", required=False)
@click.option("--root", "root", type=int, required=True, help="Search key (original vertex id).")
@click.option("--out", default=None, metavar="FILE.npy",
              help="Also write the parent array (int64, original ids, -1 unreached); see `dbfs validate`.")
@_apply(_run_common)
def bfs_cmd(name, root, out, scale, edgefactor, seed1, seed2, algorithm, backend, partitions, partitioning,
            keep_duplicates, relabel, device_memory_limit, datasets, scheduler, workers, cluster_profile):
    """One search from --root on dataset NAME: levels and per-level statistics.

    NAME must already have the CSR variant (`dbfs build NAME`); without NAME a
    Kronecker graph of --scale is generated and built if needed.
    """
    import contextlib

    from dbfs import kernel1, store
    from dbfs.cluster import client_for
    from dbfs.pipeline import check_root, open_backend

    given = _given()
    cfg = _run_config(name, given, scheduler, cluster_profile, algorithm=algorithm, backend=backend,
                      partitions=partitions, partitioning=partitioning, keep_duplicates=keep_duplicates,
                      relabel=relabel, device_memory_limit=device_memory_limit, quiet=True)
    _check_writable(out, "--out")
    ds = store.open_dataset(name, datasets) if name else None
    if ds is not None:
        check_root(ds, root)
        if kernel1.reusable_variant(ds.path, cfg.partitions, cfg.partitioning, cfg.dedupe, cfg.relabel) is None:
            variant = kernel1.variant_name(cfg.partitions, cfg.partitioning, cfg.dedupe, cfg.relabel)
            raise DbfsError(f"dataset {ds.name} has no CSR variant {variant}: build it with "
                            f"`{_build_command(ds.name, cfg)}`")
        target = ds.name
        needs = get_backend_cluster(cfg) == "always"
    else:
        target = _spec_or_name(name, scale, edgefactor, seed1, seed2)
        scheduler = _scheduler_if_work_left(scheduler, cluster_profile, target, datasets, cfg)
        needs = scheduler != "threads"
    ctx = client_for(scheduler, n_workers=workers, profile=cluster_profile) if needs else contextlib.nullcontext()
    with ctx as client:
        b, ds, variant, _ = open_backend(target, datasets, cfg, client)
        try:
            if name is None:
                check_root(ds, root)
            b.search(root)  # warm-up
            t = b.search(root)
            levels = b.level_stats
            if out:
                _save_parents(out, b.parents())
        finally:
            b.close()
    click.echo(f"dataset {ds.name}  root {root}  algorithm {algorithm}  backend {backend}")
    click.echo(f"{'level':>5}  {'dir':>3}  {'frontier':>12}  {'edges examined':>15}  {'time ms':>9}")
    for d in levels:
        click.echo(f"{d['level']:>5}  {d['direction']:>3}  {d['frontier']:>12,}  {d['edges']:>15,}  {d['time'] * 1e3:>9.3f}")
    reached = sum(d.get("discovered", 0) for d in levels) + 1
    click.echo(f"levels {len(levels)}  reached {reached:,} of {ds.n_vertices:,}  time {t * 1e3:.3f} ms")
    if out:
        click.echo(f"dbfs: wrote the parent array to {out}", err=True)


def _build_command(name, cfg) -> str:
    """The `dbfs build` line that makes the CSR variant ``cfg`` searches."""
    cmd = f"dbfs build {name}"
    if cfg.partitions > 1:
        cmd += f" --partitions {cfg.partitions}"
    if cfg.partitioning != "block":
        cmd += f" --partitioning {cfg.partitioning}"
    if not cfg.dedupe:
        cmd += " --keep-duplicates"
    if cfg.relabel != "none":
        cmd += f" --relabel {cfg.relabel}"
    return cmd


def get_backend_cluster(cfg) -> str:
    from dbfs.backends import get_backend

    return get_backend(cfg.backend).cluster


def _save_parents(out, parent) -> None:
    import numpy as np

    try:
        np.save(out, np.asarray(parent, dtype=np.int64))
    except OSError as e:
        raise DbfsError(f"cannot write the parent array to {out} ({e.strerror}): pass a writable --out path") from None


@cli.command("validate")
@click.argument("name")
@click.option("--root", "root", type=int, required=True, help="Search key the parents come from (original id).")
@click.option("--parent", "parent_path", required=True, metavar="FILE.npy",
              help="The search's parent array (numpy.save): one integer per vertex, -1 unreached.")
@click.option("--seconds", type=float, default=None, help="The search's time, to print its TEPS (nedge / seconds).")
@datasets_opt
def validate_cmd(name, root, parent_path, seconds, datasets):
    """Check a parent array from any BFS (dbfs, GAP, cuGraph, ...) against
    dataset NAME's input edges by the Graph500 rules.

    Prints the result and nedge; exit 0 when valid, 1 when not (each failed
    rule with example vertices), 2 for bad input.
    """
    from dbfs import store
    from dbfs.graph import check_root_id
    from dbfs.backends.cpu import edges_for_validation
    from dbfs.pipeline import load_parent_file
    from dbfs.validate import validate

    if seconds is not None and not seconds > 0:
        raise DbfsError(f"--seconds {seconds} is invalid: pass the search's time in seconds (> 0)")
    ds = store.open_dataset(name, datasets)
    r = check_root_id(root, ds.n_vertices)
    parent = load_parent_file(parent_path, ds.n_vertices)
    v = validate(edges_for_validation(ds), r, parent, n_vertices=ds.n_vertices)
    reached = int((parent >= 0).sum())
    if not v.ok:
        click.echo(f"INVALID: dataset {ds.name}  root {r}  reached {reached:,} of {ds.n_vertices:,}")
        for f in v.failures:
            click.echo(f"  {f.rule}: {f.message} (e.g. vertices {', '.join(map(str, f.vertices[:5]))})")
        sys.exit(1)
    tail = f"  TEPS {v.nedge / seconds:.6g}" if seconds else ""
    click.echo(f"valid: dataset {ds.name}  root {r}  reached {reached:,} of {ds.n_vertices:,}  nedge {v.nedge:,}{tail}")


def _interrupt(*_):
    raise KeyboardInterrupt


@cli.command("cluster")
@click.argument("profile")
@click.option("--script", is_flag=True, help="type: slurm only: print the job script each worker job runs, submit nothing.")
@click.option("--check", is_flag=True, help="type: slurm only: ask sinfo whether the profile's jobs fit a node of "
                                            "its partition and say what does not; submit nothing.")
@click.option("--workers", type=int, default=None, help="type: local: worker processes [default: the profile's].")
def cluster_cmd(profile, script, check, workers):
    """Start PROFILE's cluster (a profile name or a YAML file) and keep it up.

    Prints the scheduler address and dashboard link; other commands join it
    with --scheduler ADDRESS (several runs then share the workers, e.g. SLURM
    jobs that queued once). Ctrl-C (or SIGTERM, SIGHUP) closes it: a SLURM
    profile's jobs are cancelled. --check and --script submit nothing.
    """
    import signal
    import time

    from dbfs.cluster import client_for, load_profile, slurm_cluster

    prof = load_profile(profile)
    if workers is not None and prof["type"] != "local":
        raise DbfsError(f"--workers does not apply to profile {profile} (type {prof['type']}): it sizes a type: local "
                        f"cluster; set jobs/processes in the profile instead")
    if (script or check) and prof["type"] != "slurm":
        raise DbfsError(f"--{'script prints a SLURM job script' if script else 'check asks SLURM about a request'}: "
                        f"profile {profile} is type {prof['type']}")
    if check:
        from dbfs.slurm import check_request

        check_request(prof, profile)
        if not script:
            return
    if script:
        c = slurm_cluster(prof)
        try:
            click.echo(c.job_script())
        finally:
            c.close()
        return
    if prof["type"] == "scheduler":
        raise DbfsError(f"profile {profile} joins a scheduler that runs elsewhere ({prof['address']}): nothing to start")
    signal.signal(signal.SIGTERM, _interrupt)
    with client_for(None, n_workers=workers, profile=profile) as client:
        click.echo(f"dbfs: scheduler {client.scheduler.address} (join with --scheduler {client.scheduler.address}); "
                   "Ctrl-C closes the cluster", err=True)
        try:
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            click.echo("dbfs: closing the cluster", err=True)


@cli.command()
def algorithms():
    """List every backend with its algorithms and whether it runs here."""
    from dbfs.backends import backend_table

    for name, names, reason in backend_table():
        click.echo(f"{name}: {' '.join(names)}  ({'available' if reason is None else 'unavailable: ' + reason})")


@cli.group(cls=_Group)
def pipeline():
    """Run pipeline specs (YAML files of stages, e.g. pipelines/graph500.yaml)."""


@pipeline.command("run")
@click.argument("spec_file", metavar="FILE.yaml")
@datasets_opt
@scheduler_opt
@workers_opt
def pipeline_run(spec_file, datasets, scheduler, workers, cluster_profile):
    """Run FILE.yaml's stages in order (generate, build, run), reusing stored outputs."""
    from dbfs.cluster import client_for
    from dbfs.pipeline_spec import load_spec, run_spec

    _check_cluster_flags(_given(), scheduler, cluster_profile)
    spec = load_spec(spec_file)
    scheduler = scheduler or spec.get("scheduler")
    with client_for(scheduler, n_workers=workers, profile=cluster_profile or spec.get("cluster")) as client:
        for kind, result in run_spec(spec, datasets, client):
            if kind == "generate":
                click.echo(f"dbfs: dataset {result}", err=True)
            elif kind == "build":
                click.echo(f"dbfs: CSR {result}", err=True)
            else:
                _print_run(result, spec["run_config"], datasets)


def main(argv=None):  # console-script entry point
    return cli.main(args=argv, prog_name="dbfs")


if __name__ == "__main__":
    sys.exit(main())

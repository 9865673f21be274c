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


class _Group(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except DbfsError as e:
            click.echo(f"dbfs: error: {e}", err=True)
            ctx.exit(e.exit_code)


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


datasets_opt = click.option("--datasets", "datasets", default=None, metavar="DIR",
                            help="Dataset root [default: $DBFS_DATASETS or ./datasets].")
scheduler_opt = click.option("--scheduler", default=None, metavar="ADDRESS",
                             help="Join this Dask scheduler (tcp://host:port); 'threads' runs without a cluster. "
                                  "[default: start a LocalCluster of worker processes]")
_workers = click.option("--workers", type=int, default=None, show_default="one per core",
                        help="Worker processes of the LocalCluster.")
_cluster = click.option("--cluster", "cluster_profile", default=None, metavar="NAME|FILE",
                        help="Cluster profile (YAML; names are files in cluster/), e.g. local-4x4.")


def workers_opt(f):
    return _workers(_cluster(f))


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.version_option(__version__, prog_name="dbfs")
def cli():
    """dbfs: Graph500 breadth-first search as a Dask pipeline."""


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
@datasets_opt
@click.option("--chunk-edges", type=int, default=1 << 20, help="Edges per chunk (dask block and zarr chunk).")
@click.option("--force", is_flag=True, help="Rebuild even if a complete dataset exists (old copy kept until done).")
@click.option("--backend", type=click.Choice(["cpu", "gpu"]), default="cpu",
              help="Generate on Dask workers (cpu) or on the GPU (gpu, Kronecker only; same bytes).")
@scheduler_opt
@workers_opt
def generate(scale, edgefactor, seed1, seed2, kind, a, b, c, input_, datasets, chunk_edges, force, backend, scheduler,
             workers, cluster_profile):
    """Generate a graph's edge list into the dataset store (zarr)."""
    from dbfs import store
    from dbfs.cluster import client_for
    from dbfs.spec import GraphSpec

    spec = GraphSpec.make(kind=kind, scale=scale, edgefactor=edgefactor, seed1=seed1, seed2=seed2,
                          a=a, b=b, c=c, input=input_)
    if chunk_edges < 1:
        raise DbfsError(f"--chunk-edges {chunk_edges} is invalid: use a positive number of edges per chunk")
    root = store.datasets_root(datasets)
    if store.status(root / spec.name)[0] == "complete" and not force:
        store.generate(spec, root)  # reuse: no cluster needed
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
    """List, inspect and remove stored datasets."""


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
                       _human(r["size_bytes"]), ",".join(r["stages"]) or "-", "yes" if r["complete"] else f"no ({r['status']})")
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


# ---------------------------------------------------------------------------
@cli.command()
@click.argument("name")
@click.option("--out", required=True, metavar="FILE.npy", help="Output .npy file (int64, shape (M, 2)).")
@datasets_opt
def export(name, out, datasets):
    """Write dataset NAME's edge list to FILE.npy as int64 (M, 2), checksum-verified."""
    from dbfs import store

    path = store.export(name, out, datasets)
    click.echo(str(path))


# ---------------------------------------------------------------------------
def _need_gpu():
    """Fail early, in one line, when the GPU backend cannot load (no CuPy or no GPU)."""
    from dbfs.bfs import _load_backend

    _load_backend("gpu")


def _parse_size(text):
    if text is None:
        return None
    units = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MB": 1 << 20, "MIB": 1 << 20,
             "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30, "T": 1 << 40, "TB": 1 << 40, "TIB": 1 << 40}
    import re

    m = re.fullmatch(r"\s*([0-9.]+)\s*([A-Za-z]*)\s*", str(text))
    if not m or m.group(2).upper() not in units:
        raise DbfsError(f"size {text!r} is not understood: use e.g. 512MiB, 2GB or 1073741824")
    return int(float(m.group(1)) * units[m.group(2).upper()])


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

    budget = _parse_size(memory_budget)
    if partitions < 1:
        raise DbfsError(f"--partitions {partitions} is invalid: use 1 or more")
    if backend == "gpu" and (partitions != 1 or partitioning != "block"):
        raise DbfsError("GPU Kernel 1 builds one block partition: drop --partitions/--partitioning or use --backend cpu")
    ds = store.open_dataset(name, datasets)
    if backend == "gpu":
        _need_gpu()
        from dbfs.gpu_store import build_gpu

        attrs = build_gpu(ds, dedupe=not keep_duplicates, relabel=relabel)
    else:
        with client_for(scheduler, n_workers=workers, profile=cluster_profile) as client:
            attrs = kernel1.build_partitioned(ds.path, P=partitions, partitioning=partitioning,
                                              dedupe=not keep_duplicates, relabel=relabel,
                                              memory_budget=budget, client=client, progress=True)
    variant = kernel1.variant_name(partitions, partitioning, not keep_duplicates, relabel)
    click.echo(f"{name}/csr/{variant}: construction_time {attrs['construction_time']:.3f} s, "
               f"nnz {sum(attrs['nnz']):,}")


def _partitions(backend, partitions):
    if partitions < 1:
        raise DbfsError(f"--partitions {partitions} is invalid: use 1 or more")
    if partitions > 1 and backend != "dask":
        raise DbfsError(f"--partitions {partitions} needs --backend dask (the {backend} backend searches one partition)")
    return partitions


def _backend_opts(backend, device_memory_limit):
    if device_memory_limit is None:
        return {}
    if backend != "gpu":
        raise DbfsError("--device-memory-limit applies to the GPU backend only: add --backend gpu or drop it")
    return {"device_memory_limit": _parse_size(device_memory_limit)}


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
    """``scheduler``, or "threads" (no cluster) for a CPU search whose
    dataset and CSR variant are already stored when no scheduler or cluster
    profile was asked for: a LocalCluster would have nothing to do."""
    from dbfs.pipeline import stored_for_run

    if cfg.backend == "cpu" and not scheduler and not cluster_profile and stored_for_run(target, datasets, cfg):
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
def run(name, scale, edgefactor, seed1, seed2, algorithm, backend, partitions, relabel, device_memory_limit, datasets,
        scheduler, workers, cluster_profile, n_roots, json_path, plot_path, no_validate, energy):
    """Graph500 end to end: generate and build if needed, search from the keys, validate, report.

    NAME is a stored dataset; without it a Kronecker graph of --scale is used.
    Graph500 output goes to stdout, progress to stderr.
    """
    from dbfs.cluster import client_for
    from dbfs.pipeline import RunConfig, run_fields, run_graph500
    from dbfs.stats import render_graph500

    if n_roots < 1:
        raise DbfsError(f"--roots {n_roots} is invalid: use at least 1 search key (Graph500 uses 64)")
    if energy and backend != "gpu":
        raise DbfsError("--energy measures GPU power: add --backend gpu or drop --energy")
    if energy:   # NVML missing: fail now, not after generation and Kernel 1
        from dbfs.energy import PowerMeter

        PowerMeter().close()
    cfg = RunConfig(algorithm=algorithm, backend=backend, n_roots=n_roots, validate=not no_validate,
                    relabel=relabel, opts=_backend_opts(backend, device_memory_limit),
                    partitions=_partitions(backend, partitions), energy=energy)
    if backend != "dask":
        from dbfs.bfs import get_algorithm

        get_algorithm(algorithm, backend)
    target = _spec_or_name(name, scale, edgefactor, seed1, seed2)
    if backend == "gpu" and not scheduler and not cluster_profile:
        scheduler = "threads"  # the GPU does generation and Kernel 1: no CPU cluster to start
    else:
        scheduler = _scheduler_if_work_left(scheduler, cluster_profile, target, datasets, cfg)
    with client_for(scheduler, n_workers=workers, profile=cluster_profile) as client:
        res = run_graph500(target, datasets, cfg, client)
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
def bfs_cmd(name, root, out, scale, edgefactor, seed1, seed2, algorithm, backend, partitions, relabel,
            device_memory_limit, datasets, scheduler, workers, cluster_profile):
    """One search from --root on dataset NAME: levels and per-level statistics.

    NAME must already have the CSR variant (`dbfs build NAME`); without NAME a
    Kronecker graph of --scale is generated and built if needed.
    """
    import contextlib

    from dbfs import kernel1, store
    from dbfs.cluster import client_for
    from dbfs.pipeline import RunConfig, check_root, ensure_csr, ensure_dataset, make_runner

    if backend != "dask":
        from dbfs.bfs import get_algorithm

        get_algorithm(algorithm, backend)
    cfg = RunConfig(algorithm=algorithm, backend=backend, relabel=relabel, quiet=True,
                    partitions=_partitions(backend, partitions), opts=_backend_opts(backend, device_memory_limit))
    ds = store.open_dataset(name, datasets) if name else None
    variant = kernel1.variant_name(cfg.partitions, "block", True, relabel)
    built = ds is not None and variant in [v["name"] for v in kernel1.list_variants(ds.path) if v.get("complete")]
    if ds is not None and not built:
        hint = f"dbfs build {ds.name}" + (f" --partitions {cfg.partitions}" if cfg.partitions > 1 else "") + (
            " --relabel degree" if relabel == "degree" else "")
        raise DbfsError(f"dataset {ds.name} has no CSR variant {variant}: build it with `{hint}`")
    target = None
    if ds is None:
        target = _spec_or_name(name, scale, edgefactor, seed1, seed2)
        scheduler = _scheduler_if_work_left(scheduler, cluster_profile, target, datasets, cfg)
    need_client = backend == "dask" or ds is None
    with (client_for(scheduler, n_workers=workers, profile=cluster_profile) if need_client else contextlib.nullcontext()) as client:
        if ds is None:
            ds = ensure_dataset(target, datasets, client)
            variant, _ = ensure_csr(ds, cfg, client)
        check_root(ds, root)
        runner = make_runner(client, ds, variant, None, cfg)
        try:
            runner.search(root)  # warm-up
            t = runner.search(root)
            levels = runner.level_stats
            if out:
                import numpy as np

                try:
                    np.save(out, np.asarray(runner.parents(), dtype=np.int64))
                except OSError as e:
                    raise DbfsError(f"cannot write the parent array to {out} ({e.strerror}): pass a writable "
                                    f"--out path") from None
        finally:
            runner.close()
    click.echo(f"dataset {ds.name}  root {root}  algorithm {algorithm}  backend {backend}")
    click.echo(f"{'level':>5}  {'dir':>3}  {'frontier':>12}  {'edges examined':>15}  {'time ms':>9}")
    for d in levels:
        click.echo(f"{d['level']:>5}  {d['direction']:>3}  {d['frontier']:>12,}  {d['edges']:>15,}  {d['time'] * 1e3:>9.3f}")
    reached = sum(d.get("discovered", 0) for d in levels) + 1
    click.echo(f"levels {len(levels)}  reached {reached:,} of {ds.n_vertices:,}  time {t * 1e3:.3f} ms")
    if out:
        click.echo(f"dbfs: wrote the parent array to {out}", err=True)


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
    from dbfs.bfs import check_root_id
    from dbfs.pipeline import edges_for_validation, load_parent_file
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
@click.option("--workers", type=int, default=None, help="type: local: worker processes [default: the profile's].")
def cluster_cmd(profile, script, workers):
    """Start PROFILE's cluster (cluster/NAME.yaml or a file) and keep it up.

    Prints the scheduler address and dashboard link; other commands join it
    with --scheduler ADDRESS (several runs then share the workers, e.g. SLURM
    jobs that queued once). Ctrl-C (or SIGTERM) closes it: a SLURM profile's
    jobs are cancelled.
    """
    import signal
    import time

    from dbfs.cluster import client_for, load_profile, slurm_cluster

    prof = load_profile(profile)
    if script:
        if prof["type"] != "slurm":
            raise DbfsError(f"--script prints a SLURM job script: profile {profile} is type {prof['type']}")
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
    """List the registered BFS algorithms per backend."""
    from dbfs.bfs import ALGORITHMS

    for backend, names in ALGORITHMS.items():
        click.echo(f"{backend}: {' '.join(names)}")


def main(argv=None):  # console-script entry point
    return cli.main(args=argv, prog_name="dbfs")


if __name__ == "__main__":
    sys.exit(main())

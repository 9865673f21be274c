"""``dbfs run`` and ``dbfs bfs``: the Graph500 run and one search, over the
backend contract (:mod:`dbfs.backends`); every flag is translated into a
RunConfig and refused in one line where it does not apply."""
from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import tempfile
from pathlib import Path

import click
import numpy as np

from dbfs.backends import RunConfig, get_backend, resolve_relabel, say_relabel
from dbfs.errors import DbfsError
from dbfs.progress import say
from dbfs.report import plot_run, render_graph500, write_json
from dbfs.units import parse_size

from dbfs.cli.common import (_check_cluster_flags, _CLUSTER_FLAGS, _given, _refuse, cli, datasets_opt,
                             scheduler_opt, workers_opt)

#: run/bfs parameters -> RunConfig option names (for the backend's applicability check)
_RUN_OPTIONS = {"partitions": "partitions", "partitioning": "partitioning", "relabel": "relabel",
                "keep_duplicates": "dedupe", "device_memory_limit": "device_memory_limit", "energy": "energy",
                "algorithm": "algorithm", "backend": "backend", "n_roots": "n_roots", "placement": "placement"}
_SPEC_FLAGS = {"scale": "--scale", "edgefactor": "--edgefactor", "seed1": "--seed1", "seed2": "--seed2"}


def _run_config(name, given: set, scheduler, cluster_profile, **kw):
    """The RunConfig of run/bfs, with every flag that does not apply refused (one line, exit 2)."""
    if name:
        _refuse(given, _SPEC_FLAGS, f"with a dataset NAME ({name}): its spec is stored; drop the flag or NAME")
    cfg = RunConfig(algorithm=kw["algorithm"], backend=kw["backend"], n_roots=kw.get("n_roots", 64),
                    validate=not kw.get("no_validate", False), partitions=kw["partitions"],
                    partitioning=kw["partitioning"], relabel=kw["relabel"], dedupe=not kw["keep_duplicates"],
                    energy=kw.get("energy", False), device_memory_limit=parse_size(kw["device_memory_limit"]),
                    placement=kw.get("placement", "block"), quiet=kw.get("quiet", False))
    B = get_backend(cfg.backend)
    if B.cluster == "never":
        _refuse(given, _CLUSTER_FLAGS, f"to --backend {cfg.backend}: it runs every stage in this process")
    _check_cluster_flags(given, scheduler, cluster_profile)
    B.check(cfg, {_RUN_OPTIONS[k] for k in given if k in _RUN_OPTIONS})
    return cfg


def _spec_or_name(name, scale, edgefactor, seed1, seed2):
    from dbfs.spec import GraphSpec  # deferred: dask (CLI start)

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
    click.option("--relabel", type=click.Choice(["none", "degree", "auto"]), default="auto", show_default=True,
                 help="CSR variant to search: plain (none), degree-relabelled (degree; built and timed in Kernel "
                      "1; parents and roots stay in your ids), or the backend's default (auto: degree where its "
                      "searches ran clearly faster: gpu, dask GPU workers, dask CPU workers at P = 1, and with "
                      "--placement degree*; none for cpu and elsewhere; said on stderr and in the JSON)."),
    click.option("--device-memory-limit", default=None, metavar="SIZE",
                 help="GPU backend: device bytes for the CSR; the adjacency rows past it stay in pinned host "
                      "memory, read zero-copy (auto when it does not fit). Dask backend: device bytes each GPU "
                      "worker gives to partitions; the rest go to CPU workers. CPU backend: the GPU backend's "
                      "split simulated in host memory (td, bu, do)."),
    click.option("--placement", type=click.Choice(["block", "random", "degree", "degree-low"]), default="block",
                 help="Dask backend: which partitions the GPU workers hold (block: in rank order; random: seeded; "
                      "degree / degree-low: the hubs' / the lowest-degree partitions of a --relabel degree variant). "
                      "GPU backend: which rows keep their adjacency on the device when it is split (degree: the hubs "
                      "of a --relabel degree CSR; degree-low: its lowest-degree rows; block: the first rows, or "
                      "with --relabel degree its lowest-degree rows, the fastest measured); the CPU backend's "
                      "simulated split likewise."),
    datasets_opt, scheduler_opt, workers_opt,
]


def _apply(opts):
    def deco(f):
        for o in reversed(opts):
            f = o(f)
        return f

    return deco


def _check_partitions(target, datasets, cfg) -> None:
    """Refuse --partitions beyond what the graph's vertex count allows (:func:`dbfs.partition.check_partition_count`)."""
    if cfg.partitions <= 1:
        return
    from dbfs import store  # deferred: distributed (CLI start)
    from dbfs.partition import check_partition_count  # deferred: numba (CLI start)
    from dbfs.spec import GraphSpec  # deferred: dask (CLI start)

    n = target.n_vertices if isinstance(target, GraphSpec) else store.open_dataset(target, datasets).n_vertices
    check_partition_count(cfg.partitions, n)


def gpu_hint(given, visible: bool) -> str | None:
    """The one line ``dbfs run`` says when ``--backend`` was not given (README's command: the CPU backend) and
    a GPU with CuPy is ``visible`` here: the GPU backend is there (None otherwise; how much faster it ran
    README's command: docs/BENCHMARKS.md)."""
    if "backend" in given or not visible:
        return None
    return ("a CUDA GPU and CuPy are here: --backend gpu runs this on the GPU, many times faster than the CPU "
            "backend this command runs")


def _gpu_visible() -> bool:
    """CuPy installed and a CUDA device node present (checked without importing CuPy or starting CUDA)."""
    return importlib.util.find_spec("cupy") is not None and any(Path("/dev").glob("nvidia[0-9]*"))


def _relabel_before_cluster(cfg, ds=None, quiet=False):
    """``cfg`` with ``--relabel auto`` resolved now (said on stderr unless ``quiet``, even for ``bfs``) for
    a backend whose default needs no cluster, or, with a stored dataset ``ds`` (``bfs NAME``), by the
    variants it has; a dask run's is resolved with its client and dataset when the backend is opened
    (:func:`dbfs.backends.resolve_relabel`)."""
    if ds is None and get_backend(cfg.backend).cluster == "always":
        return cfg
    return resolve_relabel(cfg, None, ds, stored=ds is not None, quiet=quiet)


def _scheduler_if_work_left(scheduler, cluster_profile, target, datasets, cfg):
    """``scheduler``, or "threads" (no cluster): for a backend that never uses
    one, and for one that uses it only for generation and Kernel 1 when the
    dataset and CSR variant are already stored and no scheduler or cluster
    profile was asked for (a LocalCluster would have nothing to do)."""
    from dbfs.pipeline import stored_for_run  # deferred: distributed (CLI start)

    from dbfs.pipeline import check_fits  # deferred: distributed (CLI start)

    # a NAME cannot be generated: missing, half-written or corrupt fails here, and a graph the
    # searches cannot hold (or too small for --partitions) is refused, before any cluster starts or
    # anything is generated
    check_fits(target, datasets, cfg)
    _check_partitions(target, datasets, cfg)
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
@click.option("--json", "json_path", default=None, metavar="FILE",
              help="Write the full result as JSON (kept up to date as the run goes, \"complete\": false until it ends).")
@click.option("--plot", "plot_path", default=None, metavar="FILE.png", help="Write per-level and TEPS plots.")
@click.option("--report", "report_path", default=None, metavar="FILE.html",
              help="Write one self-contained HTML report: Graph500 block, per-level plots, machine, cluster, "
                   "stage times, Dask performance report.")
@click.option("--no-validate", is_flag=True, help="Skip validation (results marked unvalidated).")
@click.option("--energy", is_flag=True,
              help="GPU backend: sample GPU power (NVML) during the timed searches; report MTEPS/W.")
def run(name, scale, edgefactor, seed1, seed2, algorithm, backend, partitions, partitioning, keep_duplicates, relabel,
        device_memory_limit, placement, datasets, scheduler, workers, cluster_profile, n_roots, json_path, plot_path,
        report_path, no_validate, energy):
    """Graph500 end to end: generate and build if needed, search from the keys, validate, report.

    NAME is a stored dataset; without it a Kronecker graph of --scale is used.
    Graph500 output goes to stdout, progress to stderr.
    """
    from dbfs.cluster import client_for  # deferred: distributed (CLI start)
    from dbfs.pipeline import run_graph500  # deferred: distributed (CLI start)

    given = _given()
    cfg = _run_config(name, given, scheduler, cluster_profile, algorithm=algorithm, backend=backend,
                      partitions=partitions, partitioning=partitioning, keep_duplicates=keep_duplicates,
                      relabel=relabel, device_memory_limit=device_memory_limit, placement=placement,
                      n_roots=n_roots, no_validate=no_validate, energy=energy)
    _check_writable(json_path, "--json")
    cfg.record_path = json_path           # kept up to date as the run goes ("complete": false until it ends)
    _check_writable(plot_path, "--plot", (".png",))
    _check_writable(report_path, "--report", (".html", ".htm"))
    target = _spec_or_name(name, scale, edgefactor, seed1, seed2)
    scheduler = _scheduler_if_work_left(scheduler, cluster_profile, target, datasets, cfg)
    cfg = _relabel_before_cluster(cfg, quiet=True)     # said once the cluster is up (its errors come first)
    hint = gpu_hint(given, _gpu_visible())
    if hint:
        say(hint, cfg.quiet)
    with tempfile.TemporaryDirectory(prefix="dbfs-report-") as tmp:
        perf = os.path.join(tmp, "dask-performance.html") if report_path else None
        with client_for(scheduler, n_workers=workers, profile=cluster_profile) as client:
            if cfg.relabel_why and not cfg.quiet:
                say_relabel(cfg)
            res = run_graph500(target, datasets, cfg, client, perf_report=perf)
        _print_run(res, cfg, datasets, json_path, plot_path, report_path, perf)


def _write_report(path, res, block, perf) -> None:
    """``--report``: the HTML report (:mod:`dbfs.monitor.report_html`), Dask's performance report inside."""
    from dbfs.monitor.report_html import write_report  # deferred: distributed (CLI start)

    perf_html = None
    if perf and os.path.exists(perf):
        with open(perf, encoding="utf-8") as f:
            perf_html = f.read()
    try:
        click.echo(f"dbfs: wrote {write_report(path, res, block, perf_html)}", err=True)
    except OSError as e:
        raise DbfsError(f"cannot write the report to {path} ({e.strerror}): pass a writable --report path") from None


def _check_writable(path, flag, suffixes: tuple = ()) -> None:
    """A one-line error before any work when ``path`` is a folder, lacks one of ``suffixes`` (the
    formats written; any when empty), or its folder cannot take the file."""
    if not path:
        return
    if Path(path).expanduser().is_dir():
        raise DbfsError(f"{flag} {path} is a folder: pass a file path")
    if suffixes and Path(path).suffix.lower() not in suffixes:
        raise DbfsError(f"{flag} {path}: the file is written as {suffixes[0][1:].upper()}, so its name must end in "
                        f"{' or '.join(suffixes)}: pass e.g. {flag} {Path(path).with_suffix(suffixes[0])}")
    d = Path(path).expanduser().resolve().parent
    if not d.is_dir() or not os.access(d, os.W_OK):
        raise DbfsError(f"{flag} {path}: folder {d} does not exist or is not writable: pass a writable path")
    if Path(path).expanduser().exists() and not os.access(Path(path).expanduser(), os.W_OK):
        raise DbfsError(f"{flag} {path}: the file exists and is not writable: pass a writable path")


def _print_run(res, cfg, datasets, json_path=None, plot_path=None, report_path=None, perf=None) -> None:
    """The Graph500 block on stdout (or the invalid-run line and exit 1), then the JSON, plot and report files."""
    from dbfs.pipeline import run_fields  # deferred: distributed (CLI start)

    if res.validated and not res.ok:
        for f in res.failures:
            click.echo(f"dbfs: root {f['root']}: validation failed: {f['summary']}", err=True)
        click.echo("No results printed for invalid run.")
        if report_path:
            _write_report(report_path, res, None, perf)
        sys.exit(1)
    fields = run_fields(res)
    block = render_graph500(fields)
    click.echo(block, nl=False)
    if report_path:
        _write_report(report_path, res, block, perf)
    if json_path:
        click.echo(f"dbfs: wrote {write_json(json_path, res, {k: v for k, v, _ in fields})}", err=True)
    if plot_path:
        from dbfs.pipeline import per_level_comparison  # deferred: distributed (CLI start)

        click.echo(f"dbfs: wrote {plot_run(plot_path, res, per_level_comparison(res, datasets, cfg))}", err=True)


@cli.command("bfs")
@click.argument("name", required=False)
@click.option("--root", "root", type=int, required=True, help="Search key (original vertex id).")
@click.option("--out", default=None, metavar="FILE.npy",
              help="Also write the parent array (int64, original ids, -1 unreached); see `dbfs validate`.")
@_apply(_run_common)
def bfs_cmd(name, root, out, scale, edgefactor, seed1, seed2, algorithm, backend, partitions, partitioning,
            keep_duplicates, relabel, device_memory_limit, placement, datasets, scheduler, workers, cluster_profile):
    """One search from --root on dataset NAME: levels and per-level statistics.

    NAME must already have the CSR variant (`dbfs build NAME`); without NAME a
    Kronecker graph of --scale is generated and built if needed.
    """
    from dbfs import kernel1, store  # deferred: distributed (CLI start)
    from dbfs.cluster import client_for  # deferred: distributed (CLI start)
    from dbfs.pipeline import check_root, open_backend  # deferred: distributed (CLI start)

    given = _given()
    cfg = _run_config(name, given, scheduler, cluster_profile, algorithm=algorithm, backend=backend,
                      partitions=partitions, partitioning=partitioning, keep_duplicates=keep_duplicates,
                      relabel=relabel, device_memory_limit=device_memory_limit, placement=placement, quiet=True)
    _check_writable(out, "--out", (".npy",))
    ds = store.open_dataset(name, datasets) if name else None
    if ds is not None:
        _check_partitions(ds.name, datasets, cfg)
        check_root(ds, root)
        cfg = _relabel_before_cluster(cfg, ds, quiet=True)
        if kernel1.reusable_variant(ds.path, cfg.partitions, cfg.partitioning, cfg.dedupe, cfg.relabel) is None:
            variant = kernel1.variant_name(cfg.partitions, cfg.partitioning, cfg.dedupe, cfg.relabel)
            raise DbfsError(f"dataset {ds.name} has no CSR variant {variant}: build it with "
                            f"`{_build_command(ds.name, cfg)}`")
        if cfg.relabel_why:
            say_relabel(cfg)
        target = ds.name
        needs = get_backend_cluster(cfg) == "always"
    else:
        target = _spec_or_name(name, scale, edgefactor, seed1, seed2)
        scheduler = _scheduler_if_work_left(scheduler, cluster_profile, target, datasets, cfg)
        cfg = _relabel_before_cluster(cfg)
        needs = scheduler != "threads"
    ctx = client_for(scheduler, n_workers=workers, profile=cluster_profile) if needs else contextlib.nullcontext()
    with ctx as client:
        b, ds, variant, _ = open_backend(target, datasets, cfg, client)
        if cfg.relabel == "auto":        # resolved there (dask: with the cluster), quietly as bfs is
            say_relabel(b.cfg)
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
    return get_backend(cfg.backend).cluster


def _save_parents(out, parent) -> None:
    try:
        np.save(out, np.asarray(parent, dtype=np.int64))
    except OSError as e:
        raise DbfsError(f"cannot write the parent array to {out} ({e.strerror}): pass a writable --out path") from None

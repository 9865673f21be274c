"""Shared bits for benchmark scripts: JSON records and repeat timing."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from dbfs.report import machine

RESULTS = Path(__file__).resolve().parent / "results"


def stage(tag: str, msg: str) -> None:
    """One progress line on stderr, flushed (``[tag HH:MM:SS] msg``): a benchmark's stages, one line each, so a
    run cut short by a time limit still says where it was."""
    print(f"[{tag} {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def level_medians(searches) -> dict:
    """Per direction (``td``, ``bu``) over every level of ``searches`` (a ``dbfs run --json`` record's): the
    median a worker of its kernel, exchange and host-issuing seconds (``issue`` None where the levels do not
    record it, off an NCCL mesh), the median level time and the number of worker-levels ``n``."""
    levels = [lv for s in searches for lv in (s.get("levels") or [])]
    out = {}
    for d in ("td", "bu"):
        ws = [w for lv in levels if lv.get("direction") == d for w in lv.get("workers") or []]
        if ws:
            issue = [w.get("issue") for w in ws]
            out[d] = {"kernel": float(np.median([w["kernel"] for w in ws])),
                      "exchange": float(np.median([w["exchange"] for w in ws])),
                      "issue": float(np.median(issue)) if None not in issue else None,
                      "level": float(np.median([lv["time"] for lv in levels if lv.get("direction") == d])),
                      "n": len(ws)}
    return out


def hmean_teps(times, nedges) -> float:
    """Graph500's harmonic-mean TEPS of searches of ``times`` seconds over ``nedges`` edges each."""
    s = np.asarray(times, dtype=float) / np.asarray(nedges, dtype=float)
    return float(1.0 / s.mean())


def do_validated(fn, g, edges, roots, n_vertices) -> tuple:
    """The single process's search ``fn`` (``get_algorithm("do", "cpu")``) from each of ``roots`` on ``g``,
    validated against ``edges`` in batches (:func:`dbfs.validate.batch_cpu.validate_many_cpu`: one pass over
    the edges for as many searches as a quarter of the host's free memory holds); returns (each search's
    nedge, each search's level steps). A failed validation is an AssertionError."""
    from dbfs.preflight import host_available
    from dbfs.validate.batch_cpu import batch_size_cpu, validate_many_cpu

    nedges, steps = [], []
    batch = batch_size_cpu(host_available() // 4, n_vertices)
    for a in range(0, len(roots), batch):
        done = []
        for r in roots[a:a + batch]:
            parent, lv = fn(g, r, stats=True)
            done.append((r, parent))
            steps.append(len(lv))
        for v in validate_many_cpu(edges, done, n_vertices=n_vertices):
            assert v.ok, v.summary()
            nedges.append(v.nedge)
    return nedges, steps


def write_record(kind: str, record: dict, out_dir=None, path=None) -> Path:
    """Write ``record`` (plus machine, time and the dbfs commit that ran) to
    results/<kind>-<UTC stamp>.json, or over ``path`` (a record rewritten as a long run goes on)."""
    out = Path(out_dir or os.environ.get("DBFS_RESULTS") or RESULTS)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = Path(path) if path is not None else out / f"{kind}-{stamp}.json"
    record = {"benchmark": kind, "when": stamp, "machine": machine(), "dbfs_commit": dbfs_commit(), **record}
    path.write_text(json.dumps(record, indent=1, default=float))
    print(f"record: {path}", file=sys.stderr)
    return path


def dbfs_commit() -> str | None:
    """The git commit of the dbfs package that ran, ``-dirty`` appended when
    its working tree has uncommitted changes (None outside a checkout);
    ``$DBFS_COMMIT`` when set (a copy of the tree whose .git is not its own,
    as on the device machines)."""
    import dbfs

    if os.environ.get("DBFS_COMMIT"):
        return os.environ["DBFS_COMMIT"]

    try:
        out = subprocess.run(["git", "-C", str(Path(dbfs.__file__).parent), "describe", "--always", "--dirty",
                              "--abbrev=7", "--match", "no-tags-match-this"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def median_time(fn, repeat=3):
    """(median seconds, all seconds) of ``repeat`` calls of fn()."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2], times


def generate_virtual(scale: int, datasets) -> None:
    """``dbfs generate --scale S --edges virtual --backend gpu --datasets D``: a Kronecker dataset whose list is
    regenerated where it is read, never stored (what runs to be compared should share: a stored list is
    read differently, and need not fit the disk)."""
    subprocess.run([sys.executable, "-m", "dbfs.cli", "generate", "--scale", str(scale), "--edges", "virtual",
                    "--backend", "gpu", "--datasets", str(datasets)], check=True)


def dbfs_run(scale: int, roots: int, datasets, json_path, flags: str = "", env: dict | None = None) -> tuple:
    """``dbfs run --scale S --roots R --datasets D --json FILE FLAGS`` in a subprocess (``env``: variables
    added to its environment), its status lines (but the per-search ones) passed to stderr as they come, so
    a call cut at its limit shows where it was. Returns (the run's JSON record, wall seconds); a failed run
    ends the benchmark (SystemExit)."""
    import shlex

    json_path = Path(json_path)
    json_path.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "dbfs.cli", "run", "--scale", str(scale), "--roots", str(roots),
           "--datasets", str(datasets), "--json", str(json_path), *shlex.split(flags)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})
    for ln in proc.stderr:
        if not ln.startswith("dbfs: search "):
            sys.stderr.write(f"[{time.perf_counter() - t0:6.1f} s] {ln}")     # where the wall time goes
            sys.stderr.flush()
    proc.wait()
    wall = time.perf_counter() - t0
    sys.stderr.write(f"[{wall:6.1f} s] exited {proc.returncode}\n")
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}")
    return json.loads(json_path.read_text()), wall


#: the steps inside a CPU worker's top-down claims (``td_rows``), for :func:`install_step_timers`: the claims,
#: then the level's new vertices from the records or the bits
TD_INSIDE = {
    "dbfs.bfs.cpu.rowtable": ["_rows_claim_serial", "_rows_claim_chunks", "_rows_degree_offsets",
                              "_rows_degree_offsets_par", "_td_parallel"],
    "dbfs.bfs.cpu.topdown": ["_td_fix_lost_bits", "_diff_bits", "_td_dedupe", "_td_gather", "bitmap_to_queue",
                             "_seen_bitmap", "_record_buffer"],
}


def install_step_timers(steps: dict, dask_worker=None):
    """(``client.run``) a host timer around every step named in ``steps`` (``"module[:Class]" -> [names]``,
    a name this version does not have skipped) on this worker; the totals (calls, seconds) go to the worker's
    ``_dbfs_prof`` (:func:`take_step_timers`). Outside a worker (``dask_worker`` None, in this process) the
    totals' dict is returned instead."""
    import functools
    import importlib

    stats = {}

    def wrap(owner, name, label):
        f = getattr(owner, name, None)
        if f is None or getattr(f, "_dbfs_timed", False):       # a step this version does not have
            return

        @functools.wraps(f)
        def timed(*a, **k):
            t = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                s = stats.setdefault(label, [0, 0.0])
                s[0] += 1
                s[1] += time.perf_counter() - t
        timed._dbfs_timed = True
        setattr(owner, name, timed)

    for where, names in steps.items():
        mod, _, cls = where.partition(":")
        owner = importlib.import_module(mod)
        owner = getattr(owner, cls) if cls else owner
        for n in names:
            wrap(owner, n, f"{cls or mod.rsplit('.', 1)[1]}.{n}")
    if dask_worker is None:
        return stats
    dask_worker._dbfs_prof = stats
    return True


def take_step_timers(dask_worker=None) -> dict:
    """(``client.run``) this worker's step totals since the last take: label -> [calls, seconds]."""
    s = getattr(dask_worker, "_dbfs_prof", {})
    out = {k: list(v) for k, v in s.items()}
    s.clear()
    return out


def cpu_mesh_args(ap) -> None:
    """The options of a script that profiles a distributed CPU search (:func:`cpu_mesh`)."""
    ap.add_argument("--scale", type=int, default=20)
    ap.add_argument("--roots", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)


@contextmanager
def cpu_mesh(a, prefix: str):
    """A Kronecker graph of ``a.scale`` generated in a temporary folder (``prefix``), its block variant of
    ``a.workers`` partitions built and loaded on a local cluster of ``a.workers`` CPU workers x ``a.threads``
    threads; yields ``(client, dg, edges, n_vertices, roots)``: the input edges in host memory and
    ``a.roots + 1`` Graph500 roots (the first for a warm-up). dbfs is imported here, not at the script's
    top (docs/DISTRIBUTED.md: Numba-using modules before the workers spawn)."""
    import tempfile

    import dbfs.bfs.dask as D
    from dbfs import kernel1, store
    from dbfs.cluster import client_for
    from dbfs.roots import graph500_roots
    from dbfs.spec import GraphSpec

    with tempfile.TemporaryDirectory(prefix=prefix) as tmp, \
            client_for(n_workers=a.workers, threads_per_worker=a.threads, quiet=True) as client:
        ds, _ = store.generate(GraphSpec.make("kronecker", a.scale), root=Path(tmp), quiet=True)
        kernel1.build_partitioned(ds.path, P=a.workers, client=client, progress=False)
        edges = np.asarray(ds.edges()[:])
        roots = [int(r) for r in graph500_roots(edges, a.scale, n=a.roots + 1, n_vertices=ds.n_vertices)]
        with D.load_distributed(client, ds.path, kernel1.variant_name(a.workers, "block")) as dg:
            yield client, dg, edges, ds.n_vertices, roots

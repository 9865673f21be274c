"""Dask clusters for the long stages: LocalCluster by default, SLURM jobs, or an existing one.

``client_for(scheduler=None, ...)`` is a context manager yielding a
``distributed.Client``. With no address it starts a ``LocalCluster`` of worker
PROCESSES (one per core, one thread each unless told otherwise) and sets
``NUMBA_NUM_THREADS``/``OMP_NUM_THREADS`` in every worker to its thread count so
Numba kernels in concurrent tasks do not oversubscribe the cores. With
``scheduler="tcp://host:port"`` it joins that cluster (a SLURM or GPU cluster
started elsewhere) and leaves it running on exit. ``scheduler="threads"`` uses
no cluster at all (the threaded scheduler; yields None).

A profile of ``type: slurm`` (:func:`slurm_cluster`) submits its workers as
SLURM jobs through dask-jobqueue (``pip install -e '.[slurm]'``), waits for
all of them and cancels the jobs on exit.

Either way the dashboard link is printed to stderr. The worker environment is
passed with the Nanny's ``env=`` (applied after the worker re-imports
``__main__``), not ``pre-spawn-environ``: the latter is set in the PARENT's
environment while workers spawn, and a Numba compile in the parent during
that window pins its thread count (seen on the 16-core GPU host). So scripts
that start clusters must not import Numba-compiling modules at top level of
``__main__`` (dbfs's CLI does not).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import sys

from dbfs.errors import DbfsError


def load_profile(name_or_path: str) -> dict:
    """A cluster profile (YAML): a path, or a name of a file in the repo's cluster/ folder."""
    from pathlib import Path

    import yaml

    p = Path(name_or_path)
    if not p.suffix:
        p = Path(__file__).resolve().parent.parent / "cluster" / f"{name_or_path}.yaml"
    try:
        prof = yaml.safe_load(p.read_text()) or {}
    except OSError:
        raise DbfsError(f"cluster profile {name_or_path} not found ({p}): pass a YAML file or a name in cluster/") from None
    except yaml.YAMLError as e:
        raise DbfsError(f"cluster profile {p} is not valid YAML ({e.__class__.__name__}): fix the file") from None
    if prof.get("type") not in ("local", "scheduler", "slurm") or (prof["type"] == "scheduler" and not prof.get("address")):
        raise DbfsError(f"cluster profile {p} needs type: local, type: slurm, or type: scheduler with an address")
    if prof["type"] == "slurm":
        unknown = sorted(set(prof) - _SLURM_KEYS)
        if unknown:
            raise DbfsError(f"cluster profile {p} has unknown keys {', '.join(unknown)}: the slurm keys are "
                            f"{', '.join(sorted(_SLURM_KEYS))}")
        missing = [k for k in ("cores", "memory") if not prof.get(k)]
        if missing:
            raise DbfsError(f"cluster profile {p} needs {' and '.join(missing)} (per SLURM job) for type: slurm")
        prof.update(processes=prof.get("processes") or 1, jobs=prof.get("jobs") or 1, wait=prof.get("wait") or 600)
        cores, processes = prof["cores"], prof["processes"]
        if not (isinstance(cores, int) and isinstance(processes, int) and cores >= processes >= 1
                and cores % processes == 0):
            raise DbfsError(f"cluster profile {p}: cores ({cores}) must be a positive multiple of processes "
                            f"({processes}), each worker process getting cores / processes threads")
    return prof


# keys of a ``type: slurm`` profile (cluster/slurm.yaml documents them)
_SLURM_KEYS = {"type", "jobs", "cores", "memory", "processes", "queue", "account", "walltime", "interface",
               "local_directory", "log_directory", "job_extra_directives", "job_script_prologue", "python", "wait"}


def worker_env(threads: int) -> dict:
    """Environment of every worker process: thread pools sized to the
    worker's threads, so Numba kernels in concurrent tasks do not
    oversubscribe the cores."""
    t = str(threads)
    return {"NUMBA_NUM_THREADS": t, "OMP_NUM_THREADS": t, "MKL_NUM_THREADS": t, "OPENBLAS_NUM_THREADS": t,
            "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}


def slurm_cluster(prof: dict):
    """A dask-jobqueue ``SLURMCluster`` for a ``type: slurm`` profile as
    :func:`load_profile` checked it and filled its defaults (processes and
    jobs 1, wait 600 s), no job
    submitted yet (``cluster.job_script()`` shows what each job runs). Each
    job books ``cores`` and ``memory`` on one node and runs ``processes``
    worker processes of ``cores // processes`` threads, with
    :func:`worker_env` exported before ``job_script_prologue``."""
    import signal
    import threading

    main = threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGINT) if main else None
    try:
        from dask_jobqueue import SLURMCluster
    except ImportError:
        raise DbfsError("cluster profile type slurm needs dask-jobqueue: pip install -e '.[slurm]'") from None
    finally:
        if main:      # its import makes Ctrl-C a silent sys.exit() (exit 0): keep the interrupt
            signal.signal(signal.SIGINT, before)
    prologue = [f"export {k}={v}" for k, v in worker_env(prof["cores"] // prof["processes"]).items()]
    kw = {"cores": prof["cores"], "processes": prof["processes"], "memory": str(prof["memory"]),
          "job_script_prologue": prologue + list(prof.get("job_script_prologue") or []),
          "job_extra_directives": list(prof.get("job_extra_directives") or [])}
    for k in ("queue", "account", "walltime", "interface", "local_directory", "log_directory", "python"):
        if prof.get(k) is not None:
            kw[k] = prof[k]
    return SLURMCluster(**kw)


def _start_slurm(prof: dict, quiet: bool):
    """(client, cluster): ``prof["jobs"]`` SLURM jobs submitted and all their
    workers connected within ``prof["wait"]`` seconds (else the jobs are
    cancelled and a DbfsError says how many came up)."""
    from distributed import Client

    if shutil.which("sbatch") is None:
        raise DbfsError("cluster profile type slurm submits its workers with sbatch, which is not on PATH: run dbfs "
                        "on a SLURM login node or inside an allocation, or use --cluster local")
    cluster = slurm_cluster(prof)
    jobs, processes, wait = prof["jobs"], prof["processes"], float(prof["wait"])
    want = jobs * processes
    try:
        cluster.scale(jobs=jobs)
        client = Client(cluster)
        if not quiet:
            say(f"dbfs: submitted SLURMCluster ({jobs} jobs x {processes} worker processes x "
                f"{prof['cores'] // processes} threads); dashboard: {client.dashboard_link}")
            say(f"dbfs: waiting up to {wait:.0f} s for its {want} workers (`squeue --me` shows the jobs)")
        try:
            client.wait_for_workers(want, timeout=wait)
        except TimeoutError:
            up = len(client.scheduler_info()["workers"])
            client.close()
            raise DbfsError(f"only {up} of {want} SLURM workers connected within {wait:.0f} s (jobs cancelled): "
                            f"check `squeue --me` and the job logs, or raise wait in the profile") from None
    except BaseException:
        cluster.close()
        raise
    return client, cluster


def default_workers() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@contextlib.contextmanager
def client_for(scheduler: str | None = None, n_workers: int | None = None,
               threads_per_worker: int | None = None, memory_limit="auto", quiet: bool = False,
               profile: str | None = None):
    prof = load_profile(profile) if profile else {}
    if prof.get("type") == "scheduler" and not scheduler:
        scheduler = prof["address"]
    n_workers = n_workers or prof.get("workers")
    threads_per_worker = threads_per_worker or prof.get("threads_per_worker") or 1
    if scheduler == "threads":
        yield None
        return
    from distributed import Client, LocalCluster

    if scheduler:
        try:
            client = Client(scheduler, timeout="10s")
        except (OSError, TimeoutError) as e:
            raise DbfsError(f"cannot reach the Dask scheduler at {scheduler} ({e}): start it or drop --scheduler to use a local cluster") from None
        if not quiet:
            say(f"dbfs: joined Dask cluster {scheduler}; dashboard: {client.dashboard_link}")
        try:
            yield client
        finally:
            client.close()
        return
    if prof.get("type") == "slurm":
        client, cluster = _start_slurm(prof, quiet)
    else:
        n = n_workers or default_workers()
        cluster = LocalCluster(n_workers=n, threads_per_worker=threads_per_worker, processes=True,
                               memory_limit=memory_limit, dashboard_address=":0", env=worker_env(threads_per_worker),
                               silence_logs=40)
        client = Client(cluster)
        if not quiet:
            say(f"dbfs: started LocalCluster ({n} worker processes x {threads_per_worker} thread); "
                f"dashboard: {client.dashboard_link}")
    _STARTED[id(client)] = cluster
    try:
        yield client
    finally:
        release_local_cluster(client)   # unless a run already did


# id(client) -> the LocalCluster client_for started for it (joined clusters are not here)
_STARTED: dict = {}


def release_local_cluster(client) -> str | None:
    """Close the cluster (LocalCluster, or SLURMCluster: its jobs are
    cancelled) that :func:`client_for` started for ``client`` (a joined
    cluster is left alone) and return its class name; None when there is
    none. For the part of a run that needs no cluster: the timed searches of
    a single-process backend. Idle, the cluster still runs its worker
    processes' periodic work and, in this process, the scheduler and the
    dashboard; on a 2-core machine they preempt the search threads (SCALE
    20: 3.10 GTEPS harmonic mean with the cluster up, 3.72 without, several
    searches stalled 8-11 ms in one level). ``client`` is closed too."""
    cluster = _STARTED.pop(id(client), None) if client is not None else None
    if cluster is None:
        return None
    client.close()
    cluster.close()
    return type(cluster).__name__


def compute_with_progress(tasks, client, label: str, quiet: bool = False):
    """Compute a list of dask collections/delayed, showing progress on stderr."""
    import dask

    if client is None:
        if quiet:
            return dask.compute(*tasks, scheduler="threads")
        from dask.diagnostics import ProgressBar

        say(f"dbfs: {label}")
        with ProgressBar(out=sys.stderr, minimum=0.5):
            return dask.compute(*tasks, scheduler="threads")
    futures = client.compute(list(tasks))
    if not quiet:
        from distributed import progress

        say(f"dbfs: {label}")
        with contextlib.redirect_stdout(sys.stderr):  # stdout is reserved for results
            progress(futures, notebook=False)
        say("")
    return client.gather(futures)

"""Dask clusters for the long stages: LocalCluster by default, or an existing one.

``client_for(scheduler=None, ...)`` is a context manager yielding a
``distributed.Client``. With no address it starts a ``LocalCluster`` of worker
PROCESSES (one per core, one thread each unless told otherwise) and sets
``NUMBA_NUM_THREADS``/``OMP_NUM_THREADS`` in every worker to its thread count so
Numba kernels in concurrent tasks do not oversubscribe the cores. With
``scheduler="tcp://host:port"`` it joins that cluster (a SLURM or GPU cluster
started elsewhere) and leaves it running on exit. ``scheduler="threads"`` uses
no cluster at all (the threaded scheduler; yields None).

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
    if prof.get("type") not in ("local", "scheduler") or (prof["type"] == "scheduler" and not prof.get("address")):
        raise DbfsError(f"cluster profile {p} needs type: local, or type: scheduler with an address")
    return prof


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
    n = n_workers or default_workers()
    env = {"NUMBA_NUM_THREADS": str(threads_per_worker), "OMP_NUM_THREADS": str(threads_per_worker),
           "MKL_NUM_THREADS": str(threads_per_worker), "OPENBLAS_NUM_THREADS": str(threads_per_worker),
           "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
    cluster = LocalCluster(n_workers=n, threads_per_worker=threads_per_worker, processes=True,
                           memory_limit=memory_limit, dashboard_address=":0", env=env, silence_logs=40)
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


def release_local_cluster(client) -> bool:
    """Close the LocalCluster that :func:`client_for` started for ``client``
    (a joined cluster is left alone) and return True; False when there is
    none. For the part of a run that needs no cluster: the timed searches of
    a single-process backend. Idle, the cluster still runs its worker
    processes' periodic work and, in this process, the scheduler and the
    dashboard; on a 2-core machine they preempt the search threads (SCALE
    20: 3.10 GTEPS harmonic mean with the cluster up, 3.72 without, several
    searches stalled 8-11 ms in one level). ``client`` is closed too."""
    cluster = _STARTED.pop(id(client), None) if client is not None else None
    if cluster is None:
        return False
    client.close()
    cluster.close()
    return True


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

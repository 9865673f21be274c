"""The dask backend never hangs: a lost worker is survived or reported, Ctrl-C stops a run, no stalls.

Rules checked, each on a real LocalCluster of worker processes (nannies
restart a killed worker under a new address):

- a worker killed with SIGKILL (its pid from ``client.run(os.getpid)``)
  while the load, a search, an nedge count (validation off) or a
  validation waits on it: the step recovers (partitions reloaded on live
  workers, the step redone) and its result is right (golden nedge, valid
  tree), within a time bound far below a hang; parents lost with no graph
  to recompute them are one-line errors;
- SIGINT to ``dbfs run --backend dask`` stops it within seconds, with a
  non-zero exit, no traceback, and no worker process left (a cluster the
  run started), or the joined cluster's workers still serving with their
  meshes closed;
- after the load, searches on a worker compile or load no Numba kernel
  (the warm-up covers every kernel of the level loop), so no search pays
  for a compile inside its timer.
"""
from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import dbfs.bfs.dask as D
from dbfs import kernel1, store
from dbfs.backends import RunConfig
from dbfs.backends.dask import DaskBackend
from dbfs.errors import DbfsError
from dbfs.spec import GraphSpec
from dbfs.validate import validate
from dbfs.workers_info import workers_info

pytestmark = pytest.mark.distributed

BOUND_S = 60.0          # a recovery takes seconds on this 2-core machine; a hang took minutes
SIGINT_BOUND_S = 8.0    # seconds from SIGINT to the process's exit


# ---------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def droot(tmp_path_factory):
    return tmp_path_factory.mktemp("reliability-datasets")


@pytest.fixture(scope="module")
def kron16(droot, golden16):
    """SCALE 16 Kronecker graph with its p2-block and p2-cyclic variants built."""
    ds, _ = store.generate(GraphSpec.make("kronecker", 16, 16, 2, 3), root=droot, client=None, quiet=True)
    for kind in ("block", "cyclic"):
        kernel1.build_partitioned(ds.path, P=2, partitioning=kind, client=None, progress=False)
    ds.edges_np = np.asarray(ds.edges()[:], np.int64)
    return ds


@pytest.fixture
def cluster():
    """A fresh LocalCluster of 2 worker processes x 1 thread (a killed worker leaves the others alone)."""
    from dbfs.cluster import client_for

    with client_for(n_workers=2, threads_per_worker=1, quiet=True) as c:
        yield c


# ----------------------------------------------------------------- helpers
def _pid(client, worker) -> int:
    return client.run(os.getpid, workers=[worker])[worker]


def _kill_later(client, worker, delay):
    """SIGKILL ``worker``'s process ``delay`` seconds from now (from a timer thread)."""
    pid = _pid(client, worker)
    t = threading.Timer(delay, os.kill, (pid, signal.SIGKILL))
    t.start()
    return t


def _occupy(client, worker, seconds):
    """A task that holds ``worker``'s only thread for ``seconds`` (tasks pinned there queue behind it)."""
    return client.submit(time.sleep, seconds, workers=[worker], allow_other_workers=False, pure=False)


async def _nap(seconds):
    """(client.run) a call that takes ``seconds`` without blocking the worker's event loop."""
    import asyncio

    await asyncio.sleep(seconds)


def _add_slow_levels(delay, dask_worker=None):
    """(client.run) every level of a search on this worker takes ``delay`` seconds more."""
    from dbfs.bfs.dask.mesh.plugin import get_plugin

    get_plugin(dask_worker).level_listeners.append(lambda level, ranks, record: time.sleep(delay))
    return True


def _worker_lost(events, stage, worker):
    return [ev for ev in events if ev.get("event") == "worker-lost" and ev.get("stage") == stage
            and worker in ev["workers_lost"]]


def _check_tree(ds, root, parent, golden16, i):
    v = validate(ds.edges_np, root, parent)
    assert v.ok, v.summary()
    assert v.nedge == golden16["nedge_v3"][i]


def _backend(client, ds, validate_runs=True):
    b = DaskBackend(RunConfig(backend="dask", partitions=2, validate=validate_runs, quiet=True), client)
    b.load(ds, "p2-block")
    return b


# ----------------------------------------------------------- a lost worker
def test_worker_killed_during_load(cluster, kron16, golden16):
    """Rank 1's load queues behind a task on its worker, which is killed meanwhile: the load
    moves rank 1 to a live worker and the graph searches correctly."""
    ws = sorted(workers_info(cluster))
    victim = ws[1]
    blocker = _occupy(cluster, victim, 5.0)
    _kill_later(cluster, victim, 1.0)
    t0 = time.perf_counter()
    with D.load_distributed(cluster, kron16.path, "p2-block", timeout=60) as dg:
        took = time.perf_counter() - t0
        assert _worker_lost(dg.events, "load", victim), dg.events
        assert victim not in dg.rank_worker.values()
        root = golden16["roots"][0]
        res, _, _ = D.search(dg, root)
        _check_tree(kron16, root, D.gather_parent(res, dgraph=dg), golden16, 0)
    del blocker
    assert took < BOUND_S


def test_worker_killed_during_search(cluster, kron16, golden16):
    """Levels slowed to 0.3 s; the worker of rank 1 is killed 1 s into the search: the search is
    rerun on the live workers and its tree is valid."""
    with D.load_distributed(cluster, kron16.path, "p2-block", timeout=60) as dg:
        cluster.run(_add_slow_levels, 0.3)
        victim = dg.rank_worker[1]
        root = golden16["roots"][1]
        _kill_later(cluster, victim, 1.0)
        t0 = time.perf_counter()
        res, seconds, _ = D.search(dg, root)
        took = time.perf_counter() - t0
        assert res.attempts == 2 and _worker_lost(res.events, "search", victim), res.events
        # why, as the local cluster's nanny said it (dbfs.worker_deaths): the SIGKILL of _kill_later
        assert any("killed by signal 9" in m for m in _worker_lost(res.events, "search", victim)[0]["nanny"]), \
            res.events
        _check_tree(kron16, root, D.gather_parent(res, dgraph=dg), golden16, 1)
    assert took < BOUND_S


def test_worker_killed_before_nedge_without_validation(cluster, kron16, golden16):
    """--no-validate still counts nedge on the workers: the worker holding rank 1's parents is
    killed right after the search; nedge recomputes the parents (search rerun) and is right."""
    b = _backend(cluster, kron16, validate_runs=False)
    try:
        root = golden16["roots"][2]
        b.search(root)
        victim = b.dg.rank_worker[1]
        os.kill(_pid(cluster, victim), signal.SIGKILL)
        t0 = time.perf_counter()
        nedge = b.nedge(root)
        took = time.perf_counter() - t0
        assert nedge == golden16["nedge_v3"][2]
        assert _worker_lost(b.result.events, "validation", victim), b.result.events
    finally:
        b.close()
    assert took < BOUND_S


def test_worker_killed_during_validation(cluster, kron16, golden16):
    """Both workers' threads are busy when the validation starts; the worker holding rank 1's
    parents is killed while the validation waits: it recovers and the result is valid."""
    b = _backend(cluster, kron16)
    try:
        root = golden16["roots"][3]
        b.search(root)
        victim = b.dg.rank_worker[1]
        blockers = [_occupy(cluster, w, 2.0) for w in sorted(set(b.dg.rank_worker.values()))]
        _kill_later(cluster, victim, 0.5)
        t0 = time.perf_counter()
        v = b.validate(root)
        took = time.perf_counter() - t0
        assert v.ok, v.summary()
        assert v.nedge == golden16["nedge_v3"][3]
        assert _worker_lost(b.result.events, "validation", victim), b.result.events
        _check_tree(kron16, root, b.parents(), golden16, 3)
        del blockers
    finally:
        b.close()
    assert took < BOUND_S


def test_lost_parents_without_a_graph_are_one_line(cluster, kron16, golden16):
    """Parents lost with their worker and no graph to recompute them: a one-line DbfsError, at once."""
    with D.load_distributed(cluster, kron16.path, "p2-block", timeout=60) as dg:
        root = golden16["roots"][0]
        res, _, _ = D.search(dg, root)
        os.kill(_pid(cluster, dg.rank_worker[1]), signal.SIGKILL)
        t0 = time.perf_counter()
        with pytest.raises(DbfsError, match="lost with their worker") as ei:
            D.gather_parent(res)
        assert "\n" not in str(ei.value) and "search again" in str(ei.value)
        assert "the nanny said: Worker process" in str(ei.value) and "killed by signal 9" in str(ei.value)
        with pytest.raises(DbfsError, match="after losing a worker") as ei:
            D.validate_distributed(cluster, kron16.path, dg, res, root, retries=0)
        assert "\n" not in str(ei.value)
        assert time.perf_counter() - t0 < BOUND_S


def test_a_wait_without_progress_ends_at_its_deadline(cluster):
    """A wait on a task that does not finish (no worker lost) ends at its deadline with one line."""
    from dbfs.bfs.dask.mesh.waits import gather_watched, run_within

    ws = sorted(workers_info(cluster))
    slow = _occupy(cluster, ws[0], 30.0)
    t0 = time.perf_counter()
    with pytest.raises(DbfsError, match="no Dask task finished within 1 s") as ei:
        gather_watched(cluster, [slow], ws, "a stuck step", timeout=1.0)
    assert "\n" not in str(ei.value) and time.perf_counter() - t0 < 10
    with pytest.raises(DbfsError, match="a stuck call"):
        run_within(cluster, _nap, 30.0, workers=ws[1:], timeout=1.0, what="a stuck call")
    assert time.perf_counter() - t0 < 20


# ------------------------------------------------------------------ Ctrl-C
def _children(pid) -> list:
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _start_run(droot, *extra, session=False):
    env = dict(os.environ, DBFS_DATASETS=str(droot))
    cmd = [sys.executable, "-m", "dbfs.cli", "run", "--scale", "16", "--backend", "dask", "--partitions", "2",
           "--relabel", "none", *extra]       # the stored p2-block: no Kernel 1 before the searches
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=Path(__file__).resolve().parents[1], start_new_session=session)


def _interrupt_when(p, marker, delay=0.0, limit=120.0, group=False):
    """Read stderr until a line holds ``marker``, wait ``delay``, send SIGINT; returns (seconds to exit, stderr)."""
    lines = []
    deadline = time.monotonic() + limit
    for line in p.stderr:
        lines.append(line)
        if marker in line or time.monotonic() > deadline:
            break
    assert any(marker in ln for ln in lines), "".join(lines)
    time.sleep(delay)
    kids = _children(p.pid)
    assert p.poll() is None, "".join(lines)
    t0 = time.monotonic()
    if group:
        os.killpg(p.pid, signal.SIGINT)       # a terminal's Ctrl-C: the whole process group
    else:
        p.send_signal(signal.SIGINT)
    try:
        out, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        pytest.fail(f"dbfs run still running 60 s after SIGINT: {''.join(lines)}{err}")
    return time.monotonic() - t0, "".join(lines) + err, kids


def test_sigint_stops_a_run_and_its_cluster(kron16):
    """SIGINT during the searches and validations of a run that started its own LocalCluster:
    exit within seconds, non-zero, no traceback, no worker process left."""
    p = _start_run(kron16.path.parent, "--roots", "64")
    took, err, kids = _interrupt_when(p, "search 2/", delay=0.2)
    assert took < SIGINT_BOUND_S, err
    assert p.returncode != 0, err
    assert "Traceback" not in err, err
    assert kids, "the run had no worker processes to check"
    deadline = time.monotonic() + 5.0
    while any(k.is_running() and k.status() != "zombie" for k in kids) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [k.pid for k in kids if k.is_running() and k.status() != "zombie"]
    assert not left, f"worker processes left after SIGINT: {left}"


def test_terminal_ctrl_c_reaches_no_worker(kron16):
    """Ctrl-C as a terminal sends it (SIGINT to the process group, workers included): the run
    stops within seconds, non-zero, and no worker process prints a traceback of its own."""
    p = _start_run(kron16.path.parent, "--roots", "64", session=True)
    took, err, _ = _interrupt_when(p, "search 2/", delay=0.2, group=True)
    assert took < SIGINT_BOUND_S, err
    assert p.returncode != 0, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err


def test_sigint_mid_search_on_a_joined_cluster(kron16):
    """SIGINT while a search waits on the workers (levels slowed to 0.5 s) of a joined cluster:
    exit within seconds, non-zero, no traceback; the workers keep serving, no mesh left open."""
    from dbfs.bfs.dask.mesh.plugin import _status
    from dbfs.cluster import client_for

    from dbfs.bfs.dask.mesh import ensure_plugin

    with client_for(n_workers=2, threads_per_worker=1, quiet=True) as c:
        ensure_plugin(c)
        c.run(_add_slow_levels, 0.5)
        p = _start_run(kron16.path.parent, "--roots", "4", "--scheduler", c.scheduler.address)
        took, err, _ = _interrupt_when(p, "loaded CSR", delay=1.0)
        assert took < SIGINT_BOUND_S, err
        assert p.returncode != 0 and "Traceback" not in err, err
        deadline = time.monotonic() + 10.0
        while any(s["meshes"] for s in c.run(_status).values()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(s["meshes"] for s in c.run(_status).values())
        assert c.submit(sum, [1, 2]).result(timeout=30) == 3


# ------------------------------------------------------------------ stalls
def _dispatcher_signatures():
    """(client.run) signatures of every Numba kernel of the search modules loaded in this process."""
    from numba.core.registry import CPUDispatcher

    out = {}
    for name, m in list(sys.modules.items()):
        if m is not None and name.startswith(("dbfs.bfs.cpu", "dbfs.bfs.dask", "dbfs.partition")):
            for k, v in vars(m).items():
                if isinstance(v, CPUDispatcher):
                    out[f"{name}.{k}"] = sorted(str(s) for s in v.signatures)
    return out


@pytest.mark.parametrize("variant,transport,shm", [("p2-block", "tcp", None), ("p2-block", "tcp-threads", False),
                                                   ("p2-cyclic", "dask", None)])
def test_searches_load_no_kernel_after_the_load(cluster, kron16, golden16, variant, transport, shm):
    """After load_distributed (no search yet), 36 searches (do, td, bu from 12 roots: serial and
    parallel top-down claims, bottom-up, shared frontier or slices) load no Numba kernel on any
    worker: a first use inside a timed search was the cause of a 2 s search among 4 ms ones."""
    with D.load_distributed(cluster, kron16.path, variant, transport=transport, shared_memory=shm) as dg:
        before = cluster.run(_dispatcher_signatures)
        for algorithm in ("do", "td", "bu"):
            for root in golden16["roots"][:12]:
                D.search(dg, root, algorithm=algorithm)
        after = cluster.run(_dispatcher_signatures)
    new = {w: {k: v for k, v in sigs.items() if v != before[w].get(k)} for w, sigs in after.items()}
    assert not any(new.values()), new


def _after(x, seconds):
    time.sleep(seconds)
    return len(x)


def test_a_wait_in_slices_keeps_no_future_alive(cluster):
    """A wait that outlasts several slices leaves nothing that holds the futures of its caller: with the
    collector off, the argument's key goes from the scheduler as soon as the client drops it (a held
    cycle kept every SCALE 30 search's parents in device memory)."""
    from dbfs.bfs.dask.mesh.waits import SLICE, gather_watched

    ws = sorted(workers_info(cluster))
    gc.collect()
    gc.disable()
    try:
        x = cluster.submit(list, range(5), workers=ws[:1], pure=False)
        key = x.key
        assert gather_watched(cluster, [cluster.submit(_after, x, 4 * SLICE, pure=False)], ws, "a slow step",
                              timeout=30.0) == [5]
        del x
        deadline = time.monotonic() + 10
        while cluster.run_on_scheduler(lambda dask_scheduler: key in dask_scheduler.tasks) and \
                time.monotonic() < deadline:
            time.sleep(0.1)
        assert not cluster.run_on_scheduler(lambda dask_scheduler: key in dask_scheduler.tasks)
    finally:
        gc.enable()

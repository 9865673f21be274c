"""A local cluster's CPU workers share the host's cores per level: each task thread starts at its worker's
own Numba count, out of a pool of every worker's threads, and a top-down level takes the share of the pool
its frontier edges ask (dbfs.cluster.task_threads, dbfs.bfs.dask.search.level_threads). Real worker
processes: the pool and the task threads' count are read inside tasks."""
import threading

import numba
import pytest

from dbfs.bfs.dask.search.level_threads import host_pool, level_threads, share
from dbfs.cluster import client_for, default_workers, preloads, task_threads, worker_env


def test_share_is_proportional_and_at_least_one():
    assert share(16, 0, 100) == 1
    assert share(16, 100, 100) == 16
    assert share(16, 59, 100) == 9
    assert share(16, 25, 100) == 4
    assert share(16, 5, 0) == 1


def test_worker_env_gives_the_pool_only_where_the_threads_fit():
    env = worker_env(1, fits=True, host_threads=4)
    assert env["NUMBA_NUM_THREADS"] == "4" and env[task_threads.ENV] == "1"
    assert preloads(env) == [task_threads.PRELOAD]
    for env in (worker_env(1, fits=False, host_threads=4), worker_env(4, fits=True, host_threads=4),
                worker_env(2, fits=True)):
        assert task_threads.ENV not in env and preloads(env) == []


def test_a_thread_started_after_the_hook_takes_the_workers_count(monkeypatch):
    """The preload's hook in this process: a task-named thread started after it runs at the given count,
    a thread of another name keeps the pool's, and the hook is gone from both once they ran."""
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("one Numba thread: no count below the pool")
    monkeypatch.setenv(task_threads.ENV, "1")
    got = {}

    def probe(key):
        got[key] = (numba.get_num_threads(), threading.getprofile() is not None)

    try:
        task_threads.dask_setup()
        for name in ("Dask-Default-Threads-1-0", "other"):
            t = threading.Thread(target=probe, args=(name,), name=name)
            t.start()
            t.join()
    finally:
        threading.setprofile(None)
    assert got["Dask-Default-Threads-1-0"][0] == 1
    assert got["other"][0] == numba.config.NUMBA_NUM_THREADS


def _counts():
    from dbfs.bfs.dask.search.level_threads import host_pool

    out = {"pool": numba.config.NUMBA_NUM_THREADS, "task": numba.get_num_threads(), "host_pool": host_pool()}
    with level_threads(host_pool(), 3, 4):
        out["level"] = numba.get_num_threads()
    out["after"] = numba.get_num_threads()
    return out


def test_local_cluster_workers_start_tasks_at_their_own_count():
    if default_workers() < 2:
        pytest.skip("one core: the two workers' threads would not fit")
    with client_for(n_workers=2, threads_per_worker=1, quiet=True) as client:
        ws = sorted(client.scheduler_info()["workers"])
        got = [client.submit(_counts, workers=[w], pure=False).result() for w in ws]
    for g in got:
        assert g["pool"] == 2 and g["task"] == 1 and g["host_pool"] == 2
        assert g["level"] == share(2, 3, 4) == 2 and g["after"] == 1


def test_level_threads_off_keeps_the_count():
    before = numba.get_num_threads()
    with level_threads(0, 5, 10):
        assert numba.get_num_threads() == before
    assert host_pool() in (0, numba.config.NUMBA_NUM_THREADS)

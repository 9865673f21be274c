"""The Numba threads a CPU worker's top-down level takes: the host's cores shared by the level's work.

Contract
--------
:func:`host_pool` is the number of Numba threads a CPU worker's search may spread a level over: the
worker's thread pool where it is larger than the worker's own count (a local cluster's CPU workers
start with a pool of every worker's threads on the host, each task thread set to its worker's own
count: :mod:`dbfs.cluster.task_threads`), else 0 (nothing changes). :func:`level_threads` ``(pool,
mine, total)`` is a context in which this thread's parallel kernels use the worker's share of ``pool``
in proportion to its share of the level's frontier edges (``mine`` of ``total``), at least one thread;
the count it had is restored on exit.

Method: a partitioned top-down level's work is its frontier's edges, and a Kronecker graph's hubs put
most of a small frontier's edges in one partition (a search's second level: a few vertices, one of
them a hub with millions of edges). With each worker on its own fixed share of the cores, that worker
expands the hub's row alone while its peers wait in the level's barrier; here it takes the cores the
idle peers leave. The workers agree on nothing new: each reads its own and the global frontier edges
from the counts every worker already has, so the shares sum to about the pool. Bottom-up levels keep
the fixed count (their work, the unvisited rows, is about even over block partitions). After the
frontier-proportional work split of direction-optimizing BFS on shared memory (Beamer, Asanovic and
Patterson, "Direction-Optimizing Breadth-First Search", SC 2012) applied to processes sharing a host.

Encoding: thread counts are Python ints; ``pool`` 0 means "off".
"""
from __future__ import annotations

import contextlib

import numba

__all__ = ["host_pool", "share", "level_threads"]


def host_pool() -> int:
    """This worker's Numba pool where the calling thread's own count is smaller (the pool is the host's),
    else 0."""
    pool = int(numba.config.NUMBA_NUM_THREADS)
    return pool if pool > numba.get_num_threads() else 0


def share(pool: int, mine: int, total: int) -> int:
    """Threads of ``pool`` for a worker with ``mine`` of a level's ``total`` frontier edges (at least 1)."""
    if total <= 0:
        return 1
    return max(1, min(pool, round(pool * mine / total)))


@contextlib.contextmanager
def level_threads(pool: int, mine: int, total: int):
    """This thread's Numba kernels on :func:`share` of ``pool`` inside the block (``pool`` 0: unchanged)."""
    if not pool:
        yield
        return
    old = numba.get_num_threads()
    numba.set_num_threads(share(pool, mine, total))
    try:
        yield
    finally:
        numba.set_num_threads(old)

"""A CPU worker whose Numba pool is the host's: each Dask task thread starts with the worker's own count.

Contract
--------
A Dask worker preload (the worker's ``preload``, :func:`dbfs.cluster.preloads`; :func:`dask_setup` runs
in the worker process before any task). Where the environment gives :data:`ENV` (the worker's own threads, ``t``) and Numba's pool
(``NUMBA_NUM_THREADS``) is larger, every task thread of the worker (named ``...Dask-Default-Threads...``)
calls ``numba.set_num_threads(t)`` once, as it starts: a task's parallel kernels use ``t`` threads, as
they would with a pool of ``t``, and a search may take more for a level its worker holds most of
(:mod:`dbfs.bfs.dask.search.level_threads`). Other threads are left alone.

Method: ``threading.setprofile`` installs, for every thread started after it, a profile hook that
Python calls on the thread's first function call; the hook removes itself for that thread at once
(``sys.setprofile(None)``), so no later call pays for it. Numba's thread count is thread-local and a
new thread starts at the pool's size: there is no per-process default to set instead.

Encoding: :data:`ENV` is a positive integer as text. Reference: Dask's worker preload scripts
(``dask_setup``); Numba's ``set_num_threads`` (thread masking, "Setting the Number of Threads").
"""
from __future__ import annotations

import os
import sys
import threading

__all__ = ["ENV", "PRELOAD", "dask_setup"]

#: the worker's own Numba threads a task thread starts with
ENV = "DBFS_TASK_THREADS"

#: this module, as a worker's ``preload`` entry
PRELOAD = __name__

_TASK_THREADS = "Dask-Default-Threads"


def _hook(n: int):
    def first_call(frame, event, arg):
        sys.setprofile(None)            # this thread only, and only once
        if _TASK_THREADS in threading.current_thread().name:
            import numba  # deferred: only task threads need it

            numba.set_num_threads(max(1, min(n, numba.config.NUMBA_NUM_THREADS)))
    return first_call


def dask_setup(worker=None) -> None:
    """(Dask preload) the task threads' starting count, where :data:`ENV` asks for one."""
    n = int(os.environ.get(ENV, "0") or 0)
    if n > 0:
        threading.setprofile(_hook(n))

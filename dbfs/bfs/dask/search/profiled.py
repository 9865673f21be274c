"""The ``DBFS_PROFILE_SEARCH`` diagnostic: a worker's searches and NCCL validation shares under cProfile.

Contract
--------
:func:`profiler` returns a started :class:`cProfile.Profile` where the environment variable
:data:`PROFILE_ENV` names a folder (created if missing), else None; :func:`dump` stops it and writes
``<stem>-<pid>-<ns>.prof`` there (None: nothing). The level loop (:func:`dbfs.bfs.dask.search.bsp._bsp_search`,
stem ``search-w<worker>``) and the NCCL validation share
(:mod:`dbfs.bfs.dask.search.validate_nccl`, ``validate-w<worker>``) call them around their work, so where a
level's or a validation's host time goes can be read with :mod:`pstats`; unset, nothing is profiled and
nothing is written.

Method: the standard library's deterministic profiler (host time; a device's work shows at the call that
waits for it). Encoding: :mod:`pstats`' file format.
"""
from __future__ import annotations

import cProfile
import os
import time

__all__ = ["PROFILE_ENV", "profiler", "dump"]

#: a folder where each worker writes the profile of each batch of its searches and of each validation share
PROFILE_ENV = "DBFS_PROFILE_SEARCH"


def profiler():
    """A started cProfile profiler where :data:`PROFILE_ENV` names a folder, else None."""
    if not os.environ.get(PROFILE_ENV):
        return None
    os.makedirs(os.environ[PROFILE_ENV], exist_ok=True)
    prof = cProfile.Profile()
    prof.enable()
    return prof


def dump(prof, stem: str) -> None:
    """Stop ``prof`` (None: nothing) and write it as ``<stem>-<pid>-<ns>.prof`` in :data:`PROFILE_ENV`'s folder."""
    if prof is not None:
        prof.disable()
        prof.dump_stats(os.path.join(os.environ[PROFILE_ENV], f"{stem}-{os.getpid()}-{time.time_ns()}.prof"))

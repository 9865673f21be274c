"""Kernel warm-up of a distributed-search worker: every kernel of the level loop loaded at load time.

Contract: after :func:`warm_level_kernels` ``(p, claim_dtype)`` (run by
:func:`dbfs.bfs.dask.layout.worker._prepare_part` on the partition's worker, with
:func:`dbfs.bfs.cpu.warm_kernels`), no search of
:mod:`dbfs.bfs.dask.search.bsp` on that worker compiles or loads a Numba kernel
for a partition of ``p``'s array types: not the top-down step's claims
into the worker's claim scratch (dtype ``claim_dtype``, the vertex-id
width of N, which the single-process warm-up never uses), serial or
parallel, nor the frontier slice ORs (block and cyclic), the
shared-frontier copies, the shared claims' passes and the board's posts,
nor the row-table kernels that claim, bucket and absorb over all of a
worker's partitions (:func:`dbfs.bfs.cpu.warm_row_kernels`)
(``tests/test_dask_reliability.py`` checks it on live workers). Numba compiles one specialisation per
argument type and loads it on first call, from its on-disk cache when it
holds it, otherwise by compiling it; either inside a timed search would
be timed. Idempotent per worker process and type (``_WARMED``).

Method: each kernel runs once on arrays of a few elements whose dtypes
and writeability are the partition's (its CSR, its parents, its bitmaps)
and whose scalar arguments are the partition's own (ownership code, P,
rank), so every call has the argument types the level loop passes; the
top-down step runs on a star with one leaf more than the serial limit so
its parallel claim path runs too. Every index the kernels compute stays
inside these small arrays (vertex 0 and local row 0 only).

Encoding: the star's CSR has vertex 0 joined to 1..k, k =
``_TD_SERIAL_EDGES + 1`` (and the 100-leaf star for the serial path).
"""
from __future__ import annotations

import threading

import numpy as np

from dbfs.bfs.cpu import bitmap_to_queue, queue_to_bitmap, td_step, warm_row_kernels
from dbfs.bfs.cpu.topdown import _TD_SERIAL_EDGES
from dbfs.bfs.dask.layout.exchange import _or_into, _or_slice
from dbfs.bfs.dask.mesh.shm import _fix_boundaries, _publish_words, _take_front
from dbfs.bfs.dask.mesh.board import warm_board
from dbfs.bfs.dask.mesh.shm_claims import warm_claims
from dbfs.partition import owner_local

__all__ = ["warm_level_kernels"]

_LOCK = threading.Lock()
_WARMED: set = set()


def _like(a: np.ndarray, values) -> np.ndarray:
    """``values`` with ``a``'s dtype and writeability (one Numba specialisation per array type)."""
    out = np.ascontiguousarray(values, dtype=a.dtype)
    out.setflags(write=a.flags.writeable)
    return out


def _star(p, k: int):
    """CSR arrays of a star (vertex 0 joined to 1..k) with the partition's types."""
    ip = _like(p.indptr, np.concatenate([[0], np.full(k + 1, k)]))
    ix = _like(p.indices, np.arange(1, k + 1))
    return ip, ix


def _warm_topdown(p, claim_dtype) -> None:
    """``td_step`` into a claim array of ``claim_dtype``: the serial and the parallel path."""
    for k in (100, _TD_SERIAL_EDGES + 1):
        ip, ix = _star(p, k)
        claims = np.zeros(k + 1, claim_dtype)
        visited = np.zeros((k + 64) >> 6, np.int64)
        visited[0] = 1
        td_step(ip, ix, 0, np.zeros(1, np.int64), claims, visited)


def _warm_exchange(p, claim_dtype) -> None:
    """OR frontier slices and convert them, as the level loop does on this partition."""
    owner_local(np.int64(0), p.code, p.P, p.q, p.r)      # the root's owner, at the start barrier
    gvis = np.zeros((p.rank >> 6) + 1, np.int64)
    front = np.zeros(gvis.shape[0], np.int64)
    sl = np.zeros(1, np.int64)
    _or_slice(front, sl, p.code, p.P, p.rank, 0)
    _or_into(gvis, front)
    q = bitmap_to_queue(sl, 0)
    queue_to_bitmap(q, 0, sl)


def _warm_shm() -> None:
    """The shared-frontier copies (publish, boundary words, take)."""
    dst = np.zeros(2, np.int64)
    src = np.zeros(1, np.int64)
    _publish_words(dst, src, 0, 0)
    _fix_boundaries(dst, np.zeros(1, np.int64), np.full(1, -1, np.int64))
    _take_front(np.zeros(2, np.int64), dst, np.zeros(2, np.int64))


def warm_level_kernels(p, claim_dtype) -> None:
    """Load every kernel the level loop calls for partition ``p`` (see the module docstring).

    Parameters
    ----------
    p : dbfs.bfs.dask.layout.worker._Part
        A partition held on this worker (its array types and ownership scalars are used).
    claim_dtype : numpy.dtype
        The dtype of the worker's claim scratch (:func:`dbfs.graph.id_dtype` of N).
    """
    key = (p.indptr.dtype.str, p.indices.dtype.str, p.indptr.flags.writeable, p.indices.flags.writeable,
           np.dtype(claim_dtype).str, type(p.code), type(p.P), type(p.rank))
    if key in _WARMED:
        return
    with _LOCK:
        if key in _WARMED:
            return
        _warm_topdown(p, claim_dtype)
        _warm_exchange(p, claim_dtype)
        warm_row_kernels(p.indptr, p.indices)
        _warm_shm()
        warm_claims(claim_dtype)
        warm_board()
        _WARMED.add(key)

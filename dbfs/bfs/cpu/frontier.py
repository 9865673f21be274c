"""Frontier representations of the CPU BFS and their degree sums (GAP's
``QueueToBitmap``/``BitmapToQueue``).

Contract:

- :func:`mark_queue`, :func:`queue_to_bitmap`: the bits of ``queue -
  offset`` set in a bitmap (the latter clears it first).
- :func:`bitmap_to_queue`: the global ids ``offset + i`` of a bitmap's set
  bits, ascending.
- :func:`frontier_edges` (a queue) and :func:`bitmap_degrees` (a bitmap):
  the frontier's degree sum, Beamer's ``m_f``; with ``cap`` it is exact when
  it is <= cap and otherwise only some value > cap (the sum stops early), as
  :meth:`dbfs.bfs.policy.BeamerPolicy.m_f_cap` allows.

Method: each public function is a thin Python function choosing a serial or
a parallel Numba kernel by size (``_B2Q_SERIAL_WORDS``,
``_DEG_SERIAL_VERTICES``): parallel kernels are only ever called from
Python, since a cached non-parallel kernel calling a parallel one is
recompiled in every process, and small frontiers must not wake threads.
``bitmap_to_queue`` counts, scans and writes per word range (two passes).
Setting bits from a queue stays serial: a bit set is a read-modify-write of
a shared word, so threads could lose bits.

Encoding: queue: int64 array of global vertex ids; bitmap: int64 words, bit
``v & 63`` of word ``v >> 6`` over LOCAL ids ``v = global - offset``;
``indptr`` has one row per local vertex.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from .primitives import _MAX_CHUNKS, _cap, _cttz, _popcount, num_threads


# below this many words bitmap_to_queue runs on one thread
_B2Q_SERIAL_WORDS = 1 << 16
# below this many vertices a frontier's degree sum / offsets run on one thread
# (each vertex is a random read of indptr)
_DEG_SERIAL_VERTICES = 4096


@njit(nogil=True, cache=True)
def mark_queue(queue, offset, bitmap):
    """Set the bits of ``queue - offset`` in ``bitmap``.

    Serial: a bit set is a read-modify-write of a shared word, so threads
    could lose bits.

    Parameters
    ----------
    queue : ndarray of int64
        Global vertex ids.
    offset : int
        Global id of local vertex 0.
    bitmap : ndarray of int64
        Local bitmap, updated in place (bits only set).
    """
    for i in range(queue.shape[0]):
        v = queue[i] - offset
        bitmap[v >> 6] |= np.int64(1) << (v & 63)


@njit(nogil=True, cache=True)
def queue_to_bitmap(queue, offset, bitmap):
    """Clear ``bitmap`` and set the bits of ``queue - offset``.

    Parameters
    ----------
    queue : ndarray of int64
        Global vertex ids.
    offset : int
        Global id of local vertex 0.
    bitmap : ndarray of int64
        Local bitmap, overwritten (every word written).
    """
    for w in range(bitmap.shape[0]):
        bitmap[w] = 0
    mark_queue(queue, offset, bitmap)


def bitmap_to_queue(bitmap, offset):
    """The global ids of a bitmap's set bits (count, scan, write).

    Parameters
    ----------
    bitmap : ndarray of int64
        Local bitmap.
    offset : int
        Global id of local vertex 0.

    Returns
    -------
    ndarray of int64
        ``offset + i`` for every set bit ``i``, ascending.
    """
    if bitmap.shape[0] < _B2Q_SERIAL_WORDS:
        return _bitmap_to_queue_serial(bitmap, offset)
    return _bitmap_to_queue_parallel(bitmap, offset)


@njit(nogil=True, cache=True)
def _bitmap_to_queue_serial(bitmap, offset):
    """:func:`bitmap_to_queue` on one thread: count, then write."""
    s = 0
    for w in range(bitmap.shape[0]):
        x = np.uint64(bitmap[w])
        while x != 0:
            x &= x - np.uint64(1)
            s += 1
    out = np.empty(s, np.int64)
    p = 0
    for w in range(bitmap.shape[0]):
        x = bitmap[w]
        while x != 0:
            out[p] = offset + (w << 6) + _cttz(x)
            p += 1
            x &= x - 1
    return out


@njit(parallel=True, nogil=True, cache=True)
def _bitmap_to_queue_parallel(bitmap, offset):
    """:func:`bitmap_to_queue` over word ranges: count per range, prefix
    sum, write per range."""
    nwords = bitmap.shape[0]
    C = nwords // 64
    if C < 1:
        C = 1
    if C > _MAX_CHUNKS:
        C = _MAX_CHUNKS
    cnt = np.zeros(C + 1, np.int64)
    for c in prange(C):
        w0 = c * nwords // C
        w1 = (c + 1) * nwords // C
        s = 0
        for w in range(w0, w1):
            x = np.uint64(bitmap[w])
            while x != 0:
                x &= x - np.uint64(1)
                s += 1
        cnt[c + 1] = s
    for c in range(C):
        cnt[c + 1] += cnt[c]
    out = np.empty(cnt[C], np.int64)
    for c in prange(C):
        w0 = c * nwords // C
        w1 = (c + 1) * nwords // C
        p = cnt[c]
        for w in range(w0, w1):
            x = bitmap[w]
            while x != 0:
                out[p] = offset + (w << 6) + _cttz(x)
                p += 1
                x &= x - 1
    return out


def frontier_edges(indptr, offset, queue, cap=None):
    """The degree sum of a frontier queue (Beamer's ``m_f``).

    Parameters
    ----------
    indptr : ndarray of int64
        Local rows.
    offset : int
        Global id of local row 0.
    queue : ndarray of int64
        Global ids of local vertices.
    cap : int or None
        None: exact. Else the sum stops early: exact when it is <= cap,
        some value > cap otherwise (see
        :meth:`dbfs.bfs.policy.BeamerPolicy.m_f_cap`).

    Returns
    -------
    int
    """
    if queue.shape[0] > _DEG_SERIAL_VERTICES:
        return int(_frontier_edges_parallel(indptr, offset, queue, _cap(cap), num_threads()))
    return int(_frontier_edges_serial(indptr, offset, queue, 0, queue.shape[0], _cap(cap)))


@njit(nogil=True, cache=True)
def _frontier_edges_serial(indptr, offset, queue, i0, i1, cap):
    """Degree sum of ``queue[i0:i1]``, stopping once it exceeds ``cap``."""
    s = 0
    for i in range(i0, i1):
        r = queue[i] - offset
        s += indptr[r + 1] - indptr[r]
        if s > cap:
            break
    return s


@njit(parallel=True, nogil=True, cache=True)
def _frontier_edges_parallel(indptr, offset, queue, cap, parts):
    """:func:`_frontier_edges_serial` over ``parts`` ranges in parallel; a
    range stops once its own sum exceeds ``cap``, so a total <= cap is exact."""
    f = queue.shape[0]
    s = 0
    for t in prange(parts):
        s += _frontier_edges_serial(indptr, offset, queue, t * f // parts, (t + 1) * f // parts, cap)
    return s


def bitmap_degrees(bitmap, indptr, cap=None):
    """The size and degree sum of a frontier bitmap.

    Parameters
    ----------
    bitmap : ndarray of int64
        Local bitmap (rows of ``indptr``).
    indptr : ndarray of int64
        Local rows.
    cap : int or None
        None: exact sum. Else exact when it is <= cap, some value > cap
        otherwise.

    Returns
    -------
    tuple of int
        (set bits, sum of their rows' degrees).
    """
    return _bitmap_degrees(bitmap, indptr, _cap(cap), num_threads())


@njit(parallel=True, nogil=True, cache=True)
def _bitmap_degrees(bitmap, indptr, cap, parts):
    """Set bits over all words; the degree sum over ``parts`` word ranges in
    parallel, each stopping once its own sum exceeds ``cap`` (so a total
    <= cap is exact)."""
    nw = bitmap.shape[0]
    n = 0
    for w in prange(nw):
        n += _popcount(bitmap[w])
    m = 0
    for t in prange(parts):
        d = 0
        for w in range(t * nw // parts, (t + 1) * nw // parts):
            x = bitmap[w]
            base = w << 6
            while x != 0:
                v = base + _cttz(x)
                x &= x - 1
                d += indptr[v + 1] - indptr[v]
            if d > cap:
                break
        m += d
    return n, m

"""Kernel 1's Numba kernels and the one place that sets their thread count.

Contract
--------
Pure array kernels shared by the in-memory builder (:mod:`.inmemory`), the
partitioned builder (:mod:`.partitioned`) and the CSR loader/writer
(:mod:`.csr_store`). None allocates more than its outputs and per-thread
counters; none holds the GIL (``nogil=True``). Results never depend on the
thread count: every parallel loop works on fixed slices of its input, and
counts, cursors and sums are combined in slice order.

Encoding
--------
- An edge-list entry is keyed by ``key = owner * nfb + fine block`` of its
  source row (:func:`_key`); ownership comes only from
  :func:`dbfs.partition.owner_local`. Fine blocks are ``local >> fshift`` or,
  with ``fshift < 0``, explicit per-partition bounds ``fbounds[j, f]``.
- A *packed key* is one uint64 ``(row - bucket's first row) << dbits |
  neighbour`` (``dbits`` = bits of ``N - 1``): sorting packed keys orders a
  bucket by (row, neighbour), so duplicates are adjacent.
- Checksums (:func:`_wrapsum`) are the sum of an array's values mod 2**64.

Method
------
Two-pass counting sort: :func:`_count_keys` counts entries per (input slice,
key), the caller turns the counts into exclusive cursors, and
:func:`_scatter_keys` / :func:`_scatter_packed` write every entry at its
slice's cursor (one cursor per (slice, bucket): race-free, no atomics).
:func:`_degree_order` is a counting sort by descending degree.

Threads: ``numba.set_num_threads`` is thread-local and the ``workqueue``
threading layer aborts on concurrent launches from two Python threads, so
every launch that must control its thread count goes through
:class:`_numba_threads`.
"""
from __future__ import annotations

import threading

import numba
import numpy as np
from numba import njit, prange

from dbfs.partition import owner_local


# =====================================================================
# Numba kernels (shared by the in-memory and the partitioned builder)
# =====================================================================
@njit(inline="always", nogil=True, cache=True)
def _key(v, kind, P, q, r, nfb, fshift, fbounds):
    """(bucket key, local index) of source vertex ``v``: key = owner * nfb + fine block."""
    j, l = owner_local(v, kind, P, q, r)
    if fshift >= 0:
        f = l >> fshift
    else:  # explicit fine-block bounds: last f with fbounds[j, f] <= l
        lo = 0
        hi = nfb
        while hi - lo > 1:
            mid = (lo + hi) >> 1
            if fbounds[j, mid] <= l:
                lo = mid
            else:
                hi = mid
        f = lo
    return j * nfb + f, l


@njit(parallel=True, nogil=True, cache=True)
def _minmax(a, b, T):
    m = a.size
    lo = np.empty(T, np.int64)
    hi = np.empty(T, np.int64)
    for t in prange(T):
        i0 = m * t // T
        i1 = m * (t + 1) // T
        mn = np.int64(0)
        mx = np.int64(-1)
        if i1 > i0:
            mn = np.int64(a[i0])
            mx = mn
        for i in range(i0, i1):
            x = np.int64(a[i])
            y = np.int64(b[i])
            if x < mn:
                mn = x
            if y < mn:
                mn = y
            if x > mx:
                mx = x
            if y > mx:
                mx = y
        lo[t] = mn
        hi[t] = mx
    return lo.min(), hi.max()


@njit(parallel=True, nogil=True, cache=True)
def _count_keys(a, b, symmetric, iperm, kind, P, q, r, nfb, fshift, fbounds, nchunks, n_check):
    """Entries per key, one row of counts per fixed slice of the input.

    Column ``P * nfb`` (the last) counts tuples with an id outside
    ``[0, n_check)`` (checked only when ``n_check >= 0``); callers refuse the
    input when it is non-zero, so no later pass can index out of bounds.
    """
    m = a.size
    K = P * nfb
    counts = np.zeros((nchunks, K + 1), np.int64)
    relabel = iperm.size > 0
    for c in prange(nchunks):
        i0 = m * c // nchunks
        i1 = m * (c + 1) // nchunks
        for i in range(i0, i1):
            x = np.int64(a[i])
            y = np.int64(b[i])
            if n_check >= 0 and (x < 0 or y < 0 or x >= n_check or y >= n_check):
                counts[c, K] += 1
                continue
            if relabel:
                x = iperm[x]
                y = iperm[y]
            if symmetric:
                if x == y:
                    continue
                k, _ = _key(y, kind, P, q, r, nfb, fshift, fbounds)
                counts[c, k] += 1
            k, _ = _key(x, kind, P, q, r, nfb, fshift, fbounds)
            counts[c, k] += 1
    return counts


@njit(parallel=True, nogil=True, cache=True)
def _scatter_keys(a, b, symmetric, iperm, kind, P, q, r, nfb, fshift, fbounds,
                  k2b, cursors, src_out, dst_out):
    """Write (local src, dst) of every entry at its bucket's cursor (same slices as counting)."""
    m = a.size
    nchunks = cursors.shape[0]
    relabel = iperm.size > 0
    for c in prange(nchunks):
        i0 = m * c // nchunks
        i1 = m * (c + 1) // nchunks
        for i in range(i0, i1):
            x = np.int64(a[i])
            y = np.int64(b[i])
            if relabel:
                x = iperm[x]
                y = iperm[y]
            if symmetric:
                if x == y:
                    continue
                k, l = _key(y, kind, P, q, r, nfb, fshift, fbounds)
                bk = k2b[k]
                p = cursors[c, bk]
                src_out[p] = l
                dst_out[p] = x
                cursors[c, bk] = p + 1
            k, l = _key(x, kind, P, q, r, nfb, fshift, fbounds)
            bk = k2b[k]
            p = cursors[c, bk]
            src_out[p] = l
            dst_out[p] = y
            cursors[c, bk] = p + 1


@njit(nogil=True, cache=True)
def _group_blocks(tot, target, shift, n_rows, max_span):
    """Greedy grouping of consecutive fine blocks into buckets -> (first block of each bucket)."""
    nfb = tot.size
    starts = np.empty(nfb + 1, np.int64)
    nb = 0
    starts[0] = 0
    nb = 1
    acc = 0
    span_blocks = max(1, max_span >> shift)
    first = 0
    for f in range(nfb):
        if f > first and (acc + tot[f] > target or f - first >= span_blocks):
            starts[nb] = f
            nb += 1
            first = f
            acc = 0
        acc += tot[f]
    return starts[:nb].copy()


@njit(parallel=True, nogil=True, cache=True)
def _scatter_packed(a, b, symmetric, iperm, P, q, nfb, fshift, k2b, bvlo, dbits, cursors, keys):
    """Write every entry as one uint64 ``(row - bucket's first row) << dbits | dst`` at its bucket's cursor.

    Single partition (``owner_local`` with P=1 is the identity), fine blocks by shift.
    """
    m = a.size
    nchunks = cursors.shape[0]
    relabel = iperm.size > 0
    fb_dummy = np.zeros((1, 2), np.int64)
    ub = np.uint64(dbits)
    for c in prange(nchunks):
        i0 = m * c // nchunks
        i1 = m * (c + 1) // nchunks
        for i in range(i0, i1):
            x = np.int64(a[i])
            y = np.int64(b[i])
            if relabel:
                x = iperm[x]
                y = iperm[y]
            if symmetric:
                if x == y:
                    continue
                k, l = _key(y, 0, P, q, 0, nfb, fshift, fb_dummy)
                bk = k2b[k]
                p = cursors[c, bk]
                keys[p] = (np.uint64(l - bvlo[bk]) << ub) | np.uint64(x)
                cursors[c, bk] = p + 1
            k, l = _key(x, 0, P, q, 0, nfb, fshift, fb_dummy)
            bk = k2b[k]
            p = cursors[c, bk]
            keys[p] = (np.uint64(l - bvlo[bk]) << ub) | np.uint64(y)
            cursors[c, bk] = p + 1


@njit(nogil=True, cache=True)
def _bucket_emit(keys, s0, s1, lo, hi, dbits, dedupe, deg, out):
    """One sorted bucket: degrees of rows ``lo..hi-1`` and kept neighbours at ``out[s0:]``; returns count."""
    ub = np.uint64(dbits)
    mask = (np.uint64(1) << ub) - np.uint64(1)
    for v in range(lo, hi):
        deg[v] = 0
    w = s0
    for i in range(s0, s1):
        kk = keys[i]
        if dedupe and i > s0 and kk == keys[i - 1]:
            continue
        deg[lo + np.int64(kk >> ub)] += 1
        out[w] = kk & mask
        w += 1
    return w - s0


@njit(parallel=True, nogil=True, cache=True)
def _indptr_compact(deg, eoff, bnnz, vlo, vhi, indptr, out):
    """indptr from degrees (parallel per bucket); then close the gaps dedupe left in ``out``."""
    nb = eoff.size - 1
    ioff = np.zeros(nb + 1, np.int64)
    for bk in range(nb):
        ioff[bk + 1] = ioff[bk] + bnnz[bk]
    indptr[0] = 0
    for bk in prange(nb):
        acc = ioff[bk]
        for v in range(vlo[bk], vhi[bk]):
            acc += deg[v]
            indptr[v + 1] = acc
    for bk in range(nb):                  # left moves in bucket order: sequential, overlap-safe
        d = ioff[bk]
        s = eoff[bk]
        if d != s:
            for t in range(bnnz[bk]):
                out[d + t] = out[s + t]
    return ioff[nb]


@njit(nogil=True, cache=True)
def _degree_order(deg):
    """perm: vertices by descending degree, ties by id ascending (counting sort, O(N + max))."""
    n = deg.size
    perm = np.empty(n, np.int64)
    if n == 0:
        return perm
    mx = deg.max()
    cnt = np.zeros(mx + 2, np.int64)
    for v in range(n):
        cnt[mx - deg[v] + 1] += 1
    for k in range(mx + 1):
        cnt[k + 1] += cnt[k]
    for v in range(n):
        k = mx - deg[v]
        perm[cnt[k]] = v
        cnt[k] += 1
    return perm


@njit(parallel=True, nogil=True, cache=True)
def _invert(perm):
    iperm = np.empty(perm.size, np.int64)
    for i in prange(perm.size):
        iperm[perm[i]] = i
    return iperm


@njit(parallel=True, nogil=True, cache=True)
def _gather_rows(indptr_g, indices_g, part_indptr, part_indices, rows):
    """Copy each partition row into its global position (cyclic -> one CSR)."""
    for t in prange(rows.size):
        v = rows[t]
        a = part_indptr[t]
        o = indptr_g[v]
        for k in range(part_indptr[t + 1] - a):
            indices_g[o + k] = part_indices[a + k]


@njit(parallel=True, nogil=True, cache=True)
def _wrapsum(x, T):
    """Sum mod 2**64 of a non-negative integer array (chunk-independent checksum)."""
    part = np.zeros(T, np.uint64)
    n = x.size
    for t in prange(T):
        s = np.uint64(0)
        for i in range(n * t // T, n * (t + 1) // T):
            s += np.uint64(x[i])
        part[t] = s
    tot = np.uint64(0)
    for t in range(T):
        tot += part[t]
    return tot


# =====================================================================
# Thread control: one place decides how many Numba threads a call uses
# =====================================================================
_WQ_LOCK = threading.RLock()
_LAYER: list = []


class _numba_threads:
    """Run a block with ``n`` Numba threads (``numba.set_num_threads`` is thread-local); None keeps the count.

    The ``workqueue`` threading layer aborts on concurrent launches from two
    Python threads (dask's threaded scheduler); it is serialised by a lock.
    """

    def __init__(self, n: int | None = None):
        self.n = n

    def __enter__(self):
        if not _LAYER:
            _wrapsum(np.zeros(1, np.int64), 1)
            _LAYER.append(numba.threading_layer())
        self.lock = _WQ_LOCK if _LAYER[0] == "workqueue" else None
        if self.lock is not None:
            self.lock.acquire()
        self.old = numba.get_num_threads()
        if self.n is not None:
            numba.set_num_threads(max(1, min(int(self.n), numba.config.NUMBA_NUM_THREADS)))
        return self

    def __exit__(self, *exc):
        numba.set_num_threads(self.old)
        if self.lock is not None:
            self.lock.release()
        return False

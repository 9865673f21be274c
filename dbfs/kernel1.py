"""Kernel 1: Graph500 edge list -> CSR, in memory and out of core on Dask.

Contract
--------
Input is a Graph500 edge list: ``M`` tuples ``(u, v)`` of vertex ids, shape
(M, 2), uint32 or int64, self-loops and duplicate tuples included. Output is
the CSR of the undirected graph:

- both directions of every tuple are present; self-loops are dropped;
- duplicates are dropped (``dedupe=True``); with ``dedupe=False`` the
  multiplicity of ``v`` in the row of ``u`` is the number of tuples ``(u, v)``
  plus the number of tuples ``(v, u)``;
- every row is sorted ascending;
- ``indptr`` is int64; ``indices`` is int32 while ``N <= 2**31``, else int64;
- the bytes depend only on the edge multiset and the options: never on edge
  order, chunking, thread count, worker count or memory budget (every row is
  sorted at the end, which erases the order in which entries arrived).

``relabel="degree"`` renumbers vertices by descending *raw* degree, ties by
original id ascending. The raw degree of ``v`` is the number of non-self-loop
tuple endpoints equal to ``v`` (duplicates counted): that is a plain sum over
the edge list, so the in-memory and the partitioned builder compute the same
permutation without building the graph first. Rows are then sorted by new id,
i.e. heavy neighbours first. ``perm[new] = original`` and ``iperm[original] =
new`` (int64).

``n_vertices=None`` means ``max id + 1``, computed here as Graph500 requires
(Kernel 1 may only be given the edge list).

In-memory algorithm (``build_csr``): counting sort into buckets, no global sort
------------------------------------------------------------------------------
1. count entries per *fine block* of source rows (``row >> shift``, at most
   2**14 blocks), one histogram per thread over a fixed slice of the input
   (Numba, parallel); ids outside ``[0, N)`` are counted apart and refused;
2. group consecutive fine blocks into *buckets* of about ``2**12..2**18``
   entries (a hub's block may be a bucket of its own; a bucket spans at most
   2**20 rows);
3. scatter every directed entry, packed as one uint64 ``(row - bucket's first
   row) << dbits | neighbour`` (``dbits`` = bits of ``N - 1``), to its
   bucket (one write cursor per (thread, bucket): race-free, no atomics);
4. per bucket, on a thread pool, largest first: sort the bucket's keys in
   place with numpy's sort (SIMD, releases the GIL), then, while the bucket is
   in cache, count each row's (distinct) neighbours and write them out (Numba,
   nogil). Sorting a packed key orders by (row, neighbour): every row comes
   out sorted, and duplicates are adjacent;
5. prefix-sum the degrees into ``indptr`` (parallel per bucket) and close the
   gaps that dropped duplicates left between buckets (one sequential pass).
Sorting a bucket is O(B log B) for a bucket of B entries; no step sorts the
whole edge list. Memory: the input plus 8 bytes per directed entry (packed
keys) plus the width of ``indices`` per directed entry.

Why packed keys and numpy's sort rather than a per-row sort in Numba: on the
2-core dev machine Numba's per-row quicksort and insertion sort cost 25-95 ns
per entry (branch mispredictions on random neighbour ids), an in-cache LSD
radix 10-20 ns, numpy's SIMD sort of a bucket's uint64 keys 9-11 ns; one
packed key per entry also halves the scatter's write streams. SCALE 20 builds
in about 0.65 s there (GAP: 0.49 s), see ``benchmarks/kernel1.py``.

Out-of-core partitioned algorithm (``build_partitioned``) on Dask
-----------------------------------------------------------------
The dataset is a zarr v3 group with array ``edges`` (M, 2) chunked along rows
and attributes ``n_vertices``, ``n_edges``, ``complete``. The variant is
written to ``csr/.<variant>.tmp-<uuid>/`` and renamed to ``csr/<variant>/``
after its ``complete`` attribute is written (last). Phases, each a set of
dask tasks with a barrier on the driver:

R. (``relabel="degree"`` only) per edge slice, raw degree counts (int64, N);
   pairwise tree sum; the driver derives ``perm``/``iperm``.
1. *bucket*: per edge slice (whole zarr chunks, or slices of one chunk), emit
   both directions, drop self-loops, map through ``iperm``, key every entry by
   ``(owner(src), fine block of local(src))`` and counting-sort by key; write
   ``scratch/eNNNNNN.src`` (local source index) and ``.dst`` (global
   neighbour id) as raw little-endian files; return the key counts.
2. the driver sums the key counts and cuts each partition's fine blocks into
   *sub-ranges* of consecutive local rows whose phase-2 cost fits the budget.
   *rows*: per (partition, sub-range), read that key range from every bucket
   file, build the rows (the in-memory algorithm above, directed, on local
   rows), write ``scratch/rPPPP-SSSSS.ptr`` (int64 running row ends) and
   ``.idx``.
3. *write*: per (partition, range of whole zarr chunks), assemble ``indptr``
   or ``indices`` chunks from the sub-range files and write them; exactly one
   task writes each zarr chunk. Checksums are summed from what was written.

Memory model (bytes a task holds; ``s``/``d`` = source/neighbour id width,
4 for int32 ids, 8 for int64; ``e`` = input id width, 4 for uint32):

=========  ==========================================================
phase R    ``3 * 8 * N`` (two partial degree arrays and their sum)
phase 1    ``4 * e + 2 * (s + d)`` per edge row (decoded chunk, slice,
           bucketed pairs) + ``8 * N`` for ``iperm`` when relabelling
phase 2    ``s + d + 8`` per directed entry (pairs read, packed keys;
           then keys + ``indices``) + 16 per local row (``indptr``, degrees)
phase 3    ``3 * d`` per entry written (slice, encoded chunk, codec copy)
           or 24 per ``indptr`` entry
=========  ==========================================================

With int32 ids that is 32 B per edge row, 16 B per directed entry (+16 B per
row) and 12 B per entry written. ``memory_budget`` (bytes per task; default
1 GiB, or half a worker thread's share of its memory limit) bounds all of
them: slices, sub-ranges and write ranges are cut to fit, and a build whose
smallest unit does not fit fails up front with a :class:`DbfsError`. The
Python/Numba/zarr process baseline (about 200-300 MB) is not in the budget.
"""
from __future__ import annotations

import os
import re
import shutil
import threading
import time
import uuid
from pathlib import Path

import numba
import numpy as np
from numba import njit, prange

from dbfs.errors import DbfsError
from dbfs.graph import CSRGraph
from dbfs.partition import Partitioning, owner_local

__all__ = [
    "build_csr",
    "build_partitioned",
    "load_partition",
    "load_csr",
    "load_perm",
    "variant_name",
    "parse_variant",
    "list_variants",
    "raw_degree",
    "degree_permutation",
    "DEFAULT_MEMORY_BUDGET",
]

DEFAULT_MEMORY_BUDGET = 1 << 30
INT32_LIMIT = 2**31            # ids below this fit int32 (Graph500: N <= 2**31)
_FINE_BITS = 14                # in-memory: at most 2**14 fine blocks
_KEYS_PER_SLICE = 4096         # partitioned: at most this many (part, fine block) keys
_BUCKET_MIN, _BUCKET_MAX = 1 << 12, 1 << 18
_BUCKET_MAX_SPAN = 1 << 20     # vertices per bucket (its counting array is 8 B each)
_MAX_OUT_CHUNK = 1 << 21       # zarr chunk length of indices / indptr
_MIN_OUT_CHUNK = 1 << 10
_ZSTD_LEVEL = 1
_SERIAL_BELOW = 1 << 16        # inputs smaller than this run on one thread (a parallel launch costs more)


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


def _id_dtype(n_vertices: int):
    return np.dtype(np.int32) if n_vertices <= INT32_LIMIT else np.dtype(np.int64)


# =====================================================================
# In-memory Kernel 1
# =====================================================================
def _sort_emit(keys, eoff, vlo, vhi, dbits, dedupe, deg, out, nthreads):
    """Per bucket: sort its packed keys in place (numpy's SIMD sort, GIL released),
    then, while the bucket is in cache, count row degrees and write its kept
    neighbours at the bucket's start in ``out``. Returns kept entries per bucket.

    A bucket holds at most a few hundred thousand keys (a hub's block may hold
    more), so this is O(E log bucket), never a global sort.
    """
    nb = eoff.size - 1
    bnnz = np.zeros(nb, np.int64)

    def one(bk):
        s0, s1 = int(eoff[bk]), int(eoff[bk + 1])
        if s1 - s0 > 1:
            keys[s0:s1].sort()
        bnnz[bk] = _bucket_emit(keys, s0, s1, int(vlo[bk]), int(vhi[bk]), dbits, dedupe, deg, out)

    order = sorted(range(nb), key=lambda i: int(eoff[i]) - int(eoff[i + 1]))   # largest first
    if nthreads <= 1 or nb <= 1:
        for bk in order:
            one(bk)
    else:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(nthreads) as ex:
            for f in [ex.submit(one, bk) for bk in order]:
                f.result()
    return bnnz


def _build_rows(pairs: list, n_rows: int, symmetric: bool, iperm, idt, dedupe: bool, dst_bound: int,
                n_check: int = -1):
    """CSR rows ``0..n_rows-1`` from entries ``pairs = [a, b]`` (consumed: the list is emptied).

    symmetric: ``(a[i], b[i])`` is an undirected tuple (both directions, loops
    dropped, ``iperm`` applied); else a directed entry from local row ``a[i]``.
    ``dst_bound``: all neighbour ids are below it (sizes the packed keys).
    ``n_check >= 0``: refuse tuples with ids outside ``[0, n_check)``.
    Returns ``(indptr int64 (n_rows+1,), indices idt)``.
    """
    a, b = pairs
    pairs.clear()
    T = numba.get_num_threads()
    n_rows = int(n_rows)
    if iperm is None:
        iperm = np.empty(0, np.int64)
    dbits = max(1, (int(dst_bound) - 1).bit_length())
    if dbits > 44:
        raise DbfsError(f"vertex ids need {dbits} bits, more than the 44 Kernel 1 packs: use fewer vertices")
    max_span = min(_BUCKET_MAX_SPAN, 1 << (64 - dbits))
    shift = max(0, (max(n_rows, 1) - 1).bit_length() - _FINE_BITS)
    nfb = max(1, -(-n_rows // (1 << shift)))
    fb_dummy = np.zeros((1, 2), np.int64)
    q = max(n_rows, 1)
    nchunks = T if a.size >= (1 << 16) else 1
    counts = _count_keys(a, b, symmetric, iperm, 0, 1, q, 0, nfb, shift, fb_dummy, nchunks, n_check)
    if counts[:, -1].any():
        raise DbfsError(f"edge list holds {int(counts[:, -1].sum())} tuples with ids outside [0, {n_check}): "
                        f"pass n_vertices above the largest id, or None to use max id + 1")
    counts = counts[:, :-1]
    tot = counts.sum(axis=0)
    E = int(tot.sum())
    if E == 0:
        return np.zeros(n_rows + 1, np.int64), np.empty(0, idt)
    target = min(_BUCKET_MAX, max(_BUCKET_MIN, E // (8 * T)))
    starts = _group_blocks(tot, target, shift, n_rows, max_span)
    nb = starts.size
    k2b = np.repeat(np.arange(nb, dtype=np.int64), np.diff(np.append(starts, nfb)))
    vlo = np.minimum(starts << shift, n_rows)
    vhi = np.append(vlo[1:], n_rows)
    bcounts = np.add.reduceat(counts, starts, axis=1)            # (nchunks, nb)
    del counts
    eoff = np.zeros(nb + 1, np.int64)
    np.cumsum(bcounts.sum(axis=0), out=eoff[1:])
    cursors = eoff[:-1] + np.cumsum(bcounts, axis=0) - bcounts   # exclusive over slices
    keys = np.empty(E, np.uint64)
    _scatter_packed(a, b, symmetric, iperm, 1, q, nfb, shift, k2b, vlo, dbits, cursors, keys)
    del a, b
    deg = np.empty(n_rows, np.int64)
    out = np.empty(E, idt)
    bnnz = _sort_emit(keys, eoff, vlo, vhi, dbits, dedupe, deg, out, T)
    del keys
    indptr = np.empty(n_rows + 1, np.int64)
    nnz = int(_indptr_compact(deg, eoff, bnnz, vlo, vhi, indptr, out))
    if nnz < E:   # dedupe dropped entries: a view of the compacted prefix (no copy)
        out = out[:nnz]
    return indptr, out


def _check_edges(edges):
    edges = np.asarray(edges)
    if edges.ndim != 2 or edges.shape[1] != 2:
        raise DbfsError(f"edge list has shape {edges.shape}, expected (M, 2): pass one (u, v) tuple per row")
    if not np.issubdtype(edges.dtype, np.integer):
        raise DbfsError(f"edge list has dtype {edges.dtype}: pass integer vertex ids (uint32 or int64)")
    return edges


def raw_degree(edges, n_vertices: int) -> np.ndarray:
    """Non-self-loop endpoint count per vertex (duplicates counted), int64 (N,).

    Refuses ids outside ``[0, n_vertices)`` with a :class:`DbfsError`.
    """
    edges = _check_edges(edges)
    n = int(n_vertices)
    T = numba.get_num_threads()
    nchunks = max(1, min(T, (1 << 27) // max(n, 1)))   # per-slice histograms cost 8 B * N each
    fb_dummy = np.zeros((1, 2), np.int64)
    counts = _count_keys(edges[:, 0], edges[:, 1], True, np.empty(0, np.int64), 0, 1, max(n, 1), 0,
                         max(n, 1), 0, fb_dummy, nchunks, n)
    if counts[:, -1].any():
        raise DbfsError(f"edge list holds {int(counts[:, -1].sum())} tuples with ids outside [0, {n}): "
                        "fix n_vertices or the edge list")
    return counts[:, :n].sum(axis=0) if nchunks > 1 else counts[0, :n].copy()


def degree_permutation(deg: np.ndarray):
    """(perm, iperm) ordering vertices by descending ``deg``, ties by id ascending."""
    perm = _degree_order(np.ascontiguousarray(deg, dtype=np.int64))
    return perm, _invert(perm)


def build_csr(edges, n_vertices: int | None = None, dedupe: bool = True, relabel: str = "none") -> CSRGraph:
    """Build the undirected CSR of a Graph500 edge list in memory (see module docstring).

    edges: (M, 2) integer array. n_vertices: None -> max id + 1.
    relabel: "none" or "degree". Returns :class:`CSRGraph` with ``meta``
    holding ``dedupe``, ``relabel``, ``n_edges`` (input tuples).
    """
    edges = _check_edges(edges)
    if relabel not in ("none", "degree"):
        raise DbfsError(f"unknown relabel {relabel!r}: use 'none' or 'degree'")
    a, b = edges[:, 0], edges[:, 1]
    with _numba_threads(1 if edges.shape[0] < _SERIAL_BELOW else None):
        if n_vertices is None:      # Graph500: N comes from the edge list itself
            lo, hi = _minmax(a, b, numba.get_num_threads()) if edges.shape[0] else (0, -1)
            if lo < 0:
                raise DbfsError(f"edge list holds negative vertex id {lo}: vertex ids must be >= 0")
            n = int(hi) + 1
        else:                       # ids are checked against n while counting
            n = int(n_vertices)
            if n < 0:
                raise DbfsError(f"n_vertices={n} is negative: pass a vertex count >= 0 or None")
        idt = _id_dtype(n)
        perm = iperm = None
        if relabel == "degree":
            perm, iperm = degree_permutation(raw_degree(edges, n))
        indptr, indices = _build_rows([a, b], n, True, iperm, idt, dedupe, n, n_check=n)
    meta = {"dedupe": bool(dedupe), "relabel": relabel, "n_edges": int(edges.shape[0])}
    return CSRGraph(indptr, indices, n, perm=perm, iperm=iperm, meta=meta)


# =====================================================================
# Variants: naming and listing
# =====================================================================
_VARIANT_RE = re.compile(r"^p(\d+)-(block|cyclic)(-dup)?(-deg)?$")


def variant_name(P: int = 1, partitioning: str = "block", dedupe: bool = True, relabel: str = "none") -> str:
    """``p{P}-{partitioning}`` + ``-dup`` (dedupe=False) + ``-deg`` (relabel='degree')."""
    if partitioning not in ("block", "cyclic"):
        raise DbfsError(f"unknown partitioning {partitioning!r}: use 'block' or 'cyclic'")
    if relabel not in ("none", "degree"):
        raise DbfsError(f"unknown relabel {relabel!r}: use 'none' or 'degree'")
    return f"p{int(P)}-{partitioning}" + ("" if dedupe else "-dup") + ("-deg" if relabel == "degree" else "")


def parse_variant(name: str) -> dict:
    """Inverse of :func:`variant_name`: dict with P, partitioning, dedupe, relabel."""
    m = _VARIANT_RE.match(name)
    if not m:
        raise DbfsError(f"{name!r} is not a CSR variant name: use p<P>-<block|cyclic>[-dup][-deg], e.g. p4-block")
    return {"P": int(m.group(1)), "partitioning": m.group(2), "dedupe": m.group(3) is None,
            "relabel": "degree" if m.group(4) else "none"}


def _rebuild_hint(dataset_path, variant: str) -> str:
    name = Path(dataset_path).name
    try:
        o = parse_variant(variant)
    except DbfsError:
        return f"`dbfs build {name}`"
    cmd = f"dbfs build {name} --partitions {o['P']}"
    if o["partitioning"] != "block":
        cmd += f" --partitioning {o['partitioning']}"
    if not o["dedupe"]:
        cmd += " --keep-duplicates"
    if o["relabel"] != "none":
        cmd += f" --relabel {o['relabel']}"
    return f"`{cmd}`"


def _read_attrs(path: Path) -> dict | None:
    import json

    f = path / "zarr.json"
    if not f.is_file():
        return None
    try:
        with open(f) as fh:
            return dict(json.load(fh).get("attributes", {}))
    except (OSError, ValueError):
        return None


def list_variants(dataset_path) -> list[dict]:
    """CSR variants under ``dataset_path/csr``: dicts with name, complete and (if complete) key attributes."""
    root = Path(dataset_path) / "csr"
    out = []
    if not root.is_dir():
        return out
    for d in sorted(root.iterdir()):
        if not d.is_dir() or d.name.startswith(".") or not _VARIANT_RE.match(d.name):
            continue
        attrs = _read_attrs(d) or {}
        rec = {"name": d.name, "complete": bool(attrs.get("complete", False))}
        for k in ("P", "partitioning", "options", "nnz_total", "construction_time", "n_vertices"):
            if k in attrs:
                rec[k] = attrs[k]
        out.append(rec)
    return out


# =====================================================================
# Out-of-core partitioned Kernel 1
# =====================================================================
def _open_dataset(dataset_path):
    import zarr

    path = Path(dataset_path)
    name = path.name
    if not (path / "zarr.json").is_file():
        raise DbfsError(f"dataset {name} not found at {path}: generate it first with `dbfs generate`")
    g = zarr.open_group(str(path), mode="r")
    attrs = dict(g.attrs)
    if not attrs.get("complete", False):
        raise DbfsError(f"dataset {name} is incomplete (no complete marker): regenerate it with `dbfs generate`")
    if "edges" not in g:
        raise DbfsError(f"dataset {name} has no edges array: regenerate it with `dbfs generate`")
    edges = g["edges"]
    if len(edges.shape) != 2 or edges.shape[1] != 2:
        raise DbfsError(f"dataset {name}: edges has shape {edges.shape}, expected (M, 2): regenerate it")
    for k in ("n_vertices", "n_edges"):
        if k not in attrs:
            raise DbfsError(f"dataset {name} lacks attribute {k}: regenerate it with `dbfs generate`")
    if int(attrs["n_edges"]) != edges.shape[0]:
        raise DbfsError(f"dataset {name}: n_edges={attrs['n_edges']} but edges has {edges.shape[0]} rows: "
                        "regenerate it")
    return g, edges, attrs


def _total_threads(client) -> int:
    if client is None:
        return os.cpu_count() or 1
    return max(1, sum(client.nthreads().values()))


def _default_budget(client) -> int:
    if client is None:
        return DEFAULT_MEMORY_BUDGET
    try:
        info = client.scheduler_info(n_workers=-1)["workers"]
    except TypeError:
        info = client.scheduler_info()["workers"]
    shares = [w.get("memory_limit", 0) / max(1, w.get("nthreads", 1)) for w in info.values()]
    shares = [s for s in shares if s > 0]
    if not shares:
        return DEFAULT_MEMORY_BUDGET
    return int(min(4 << 30, max(64 << 20, min(shares) // 2)))


def _run(tasks, client, progress: bool, label: str = "Kernel 1"):
    """Compute a list of dask.delayed on the client (distributed) or the threaded scheduler."""
    from dbfs.cluster import compute_with_progress

    if not tasks:
        return []
    return list(compute_with_progress(tasks, client, label, quiet=not progress))


def _share(obj, client, name):
    """One graph key (or one scattered future) for a large array shared by many tasks."""
    import dask

    if client is not None:
        return client.scatter(obj, broadcast=True, hash=False)
    return dask.delayed(obj, name=f"{name}-{uuid.uuid4().hex}")


def _read_into(path, dtype, out, offset_entries):
    """Read ``out.size`` entries of ``dtype`` from raw file ``path`` at entry ``offset_entries``."""
    if out.size == 0:
        return
    with open(path, "rb") as f:
        f.seek(int(offset_entries) * dtype.itemsize)
        n = f.readinto(memoryview(out).cast("B"))
    if n != out.nbytes:
        raise DbfsError(f"scratch file {path} is truncated: rebuild the CSR variant")


# ---- phase R: raw degrees --------------------------------------------
def _task_degree(edges_path, r0, r1, n, nt):
    import zarr

    z = zarr.open_array(edges_path, mode="r")
    e = z[r0:r1]
    with _numba_threads(nt):
        return raw_degree(e, n)


def _task_add(x, y):
    return x + y


# ---- phase 1: bucket --------------------------------------------------
def _task_bucket(edges_path, r0, r1, spec, iperm, out_prefix, nt):
    import zarr

    z = zarr.open_array(edges_path, mode="r")
    e = z[r0:r1]
    a, b = e[:, 0], e[:, 1]
    ip = np.empty(0, np.int64) if iperm is None else iperm
    K = spec["P"] * spec["nfb"]
    args = (spec["code"], spec["P"], spec["q"], spec["r"], spec["nfb"], spec["fshift"], spec["fbounds"])
    with _numba_threads(1 if a.size < _SERIAL_BELOW else nt):
        T = numba.get_num_threads()
        nchunks = T if a.size >= (1 << 16) else 1
        counts = _count_keys(a, b, True, ip, *args, nchunks, spec["N"])
        if counts[:, -1].any():
            raise DbfsError(f"edges rows {r0}..{r1} hold ids outside [0, {spec['N']}) (n_vertices): "
                            "the dataset is corrupt, regenerate it")
        counts = counts[:, :-1]
        tot = counts.sum(axis=0)
        E = int(tot.sum())
        koff = np.zeros(K, np.int64)
        np.cumsum(tot[:-1], out=koff[1:])
        cursors = koff + np.cumsum(counts, axis=0) - counts
        src = np.empty(E, spec["sdt"])
        dst = np.empty(E, spec["idt"])
        _scatter_keys(a, b, True, ip, *args, np.arange(K, dtype=np.int64), cursors, src, dst)
    del e, a, b
    src.tofile(out_prefix + ".src")
    dst.tofile(out_prefix + ".dst")
    return tot


# ---- phase 2: rows ------------------------------------------------------
def _task_rows(pieces, n_entries, l0, n_rows, spec, dedupe, out_prefix, nt):
    """pieces: list of (prefix, entry offset, count) into bucket files; builds local rows l0..l0+n_rows."""
    src = np.empty(n_entries, spec["sdt"])
    dst = np.empty(n_entries, spec["idt"])
    o = 0
    for prefix, off, cnt in pieces:
        _read_into(prefix + ".src", src.dtype, src[o:o + cnt], off)
        _read_into(prefix + ".dst", dst.dtype, dst[o:o + cnt], off)
        o += cnt
    if l0:
        src -= src.dtype.type(l0)
    pairs = [src, dst]
    del src, dst
    with _numba_threads(1 if n_entries < 2 * _SERIAL_BELOW else nt):
        indptr, indices = _build_rows(pairs, n_rows, False, None, spec["idt"], dedupe, spec["N"])
    indptr[1:].tofile(out_prefix + ".ptr")
    indices.tofile(out_prefix + ".idx")
    deg = np.diff(indptr)
    return {
        "nnz": int(indptr[-1]),
        "deg_min": int(deg.min()) if n_rows else None,
        "deg_max": int(deg.max()) if n_rows else None,
        "isolated": int(np.count_nonzero(deg == 0)),
    }


# ---- phase 3: write -----------------------------------------------------
def _task_write(arr_path, a, b, pieces, dtype, lead_zero, nt):
    """Write positions [a, b) of a zarr array from pieces (path, entry offset, count, add)."""
    import zarr

    out = np.empty(b - a, dtype)
    o = 0
    if lead_zero:
        out[0] = 0
        o = 1
    for path, off, cnt, add in pieces:
        _read_into(path, out.dtype, out[o:o + cnt], off)
        if add:
            out[o:o + cnt] += add
        o += cnt
    assert o == out.size, (o, out.size)
    z = _writable(zarr.open_array(arr_path, mode="r+"))
    z[a:b] = out
    with _numba_threads(nt):
        return int(_wrapsum(out, numba.get_num_threads()))


def _writable(z):
    """The array with every chunk written, zeros included: a missing chunk then means damage.

    (``open_array(config=...)`` ignores the setting in zarr 3.1; ``with_config`` applies it.)
    """
    return z.with_config({"write_empty_chunks": True}) if hasattr(z, "with_config") else z


def _plan_slices(n_rows_total, chunk_rows, rows_cap, threads):
    """Row slices [r0, r1) for phases R/1: whole chunks grouped, or a chunk cut in pieces."""
    if n_rows_total == 0:
        return []
    nchunks = -(-n_rows_total // chunk_rows)
    if chunk_rows <= rows_cap:
        g = max(1, min(rows_cap // chunk_rows, -(-nchunks // max(1, threads))))
        step = g * chunk_rows
        return [(r, min(r + step, n_rows_total)) for r in range(0, n_rows_total, step)]
    k = -(-chunk_rows // rows_cap)
    out = []
    for c in range(nchunks):
        c0, c1 = c * chunk_rows, min((c + 1) * chunk_rows, n_rows_total)
        step = -(-(c1 - c0) // k)
        out += [(r, min(r + step, c1)) for r in range(c0, c1, step)]
    return out


def _fine_blocks(part: Partitioning, deg_new):
    """Fine-block layout per partition: (nfb, fshift, fbounds (P, nfb+1) of local rows)."""
    P = part.P
    counts = part.counts()
    max_local = int(counts.max()) if P else 0
    target = max(1, _KEYS_PER_SLICE // P)
    if deg_new is None:
        tbits = max(0, target.bit_length() - 1)
        fshift = max(0, (max(max_local, 1) - 1).bit_length() - tbits)
        nfb = max(1, -(-max_local // (1 << fshift)))
        ks = np.arange(nfb + 1, dtype=np.int64) << fshift
        fb = np.minimum(ks[None, :], counts[:, None])
        return nfb, fshift, np.ascontiguousarray(fb)
    # relabelled: cut each partition's rows so every fine block holds ~equal entries
    nfb = max(1, min(target, max_local))
    fb = np.zeros((P, nfb + 1), np.int64)
    for j in range(P):
        d = deg_new[part.owned_vertices(j)]
        cum = np.cumsum(d)
        tot = int(cum[-1]) if cum.size else 0
        if tot:
            marks = (np.arange(1, nfb, dtype=np.float64) * tot / nfb)
            fb[j, 1:nfb] = np.searchsorted(cum, marks, side="right")
        fb[j, nfb] = counts[j]
        np.maximum.accumulate(fb[j], out=fb[j])
        fb[j] = np.minimum(fb[j], counts[j])
    return nfb, -1, fb


def _subranges(H, fbounds, cost_entry, cost_row, budget, part_label):
    """Cut fine blocks [0, nfb) of one partition into consecutive groups of cost <= budget."""
    nfb = H.size
    subs = []
    f0 = 0
    acc_e = 0
    for f in range(nfb):
        e = int(H[f])
        rows = int(fbounds[f + 1] - fbounds[f])
        c1 = e * cost_entry + rows * cost_row
        if c1 > budget:
            raise DbfsError(f"memory budget {budget} B is too small for {part_label} rows "
                            f"{int(fbounds[f])}..{int(fbounds[f + 1])} ({e} entries need {c1} B): "
                            f"raise memory_budget to at least {c1} B")
        cur_rows = int(fbounds[f + 1] - fbounds[f0])
        if f > f0 and (acc_e + e) * cost_entry + cur_rows * cost_row > budget:
            subs.append((f0, f))
            f0 = f
            acc_e = 0
        acc_e += e
    subs.append((f0, nfb))
    return subs


def build_partitioned(dataset_path, P: int = 1, partitioning: str = "block", dedupe: bool = True,
                      relabel: str = "none", memory_budget: int | None = None, client=None,
                      progress: bool = True) -> dict:
    """Build (or reuse) CSR variant ``csr/<variant_name(...)>`` of a zarr dataset; return its attributes.

    Out-of-core on Dask (see the module docstring for phases and memory model).
    ``client``: a ``distributed.Client`` or None for the threaded scheduler.
    An existing complete variant with the same value-affecting options
    (P, partitioning, dedupe, relabel) is reused; the returned dict then has
    ``reused=True``. ``memory_budget`` (bytes per task) changes only how the
    work is cut, never the result.
    """
    import dask
    import zarr
    from zarr.codecs import ZstdCodec

    dataset_path = Path(dataset_path)
    name = variant_name(P, partitioning, dedupe, relabel)
    csr_root = dataset_path / "csr"
    final = csr_root / name

    old = reusable_variant(dataset_path, P, partitioning, dedupe, relabel)
    if old is not None:
        return old

    t_start = time.perf_counter()
    _, edges, dattrs = _open_dataset(dataset_path)
    N = int(dattrs["n_vertices"])
    M = int(edges.shape[0])
    part = Partitioning(N, P, partitioning)
    budget = int(memory_budget) if memory_budget is not None else _default_budget(client)
    threads = _total_threads(client)
    edges_path = str(dataset_path / "edges")
    e_isz = edges.dtype.itemsize
    idt = _id_dtype(N)
    sdt = _id_dtype(int(part.counts().max()) if P else 0)
    s_isz, d_isz = sdt.itemsize, idt.itemsize

    # ---- where: temp dir next to the final one; stale temps of this variant are removed
    zarr.open_group(str(csr_root), mode="a")
    for stale in [*csr_root.glob(f".{name}.tmp-*"), *csr_root.glob(f".{name}.old-*")]:
        shutil.rmtree(stale, ignore_errors=True)   # left by a killed build (one builder per variant at a time)
    tmp = csr_root / f".{name}.tmp-{uuid.uuid4().hex[:12]}"
    scratch = tmp / "scratch"
    vg = zarr.open_group(str(tmp), mode="w")
    scratch.mkdir(parents=True)
    phase_times = {}

    try:
        # ---- budget arithmetic (module docstring, memory model)
        iperm_bytes = 8 * N if relabel == "degree" else 0
        row_cost = 4 * e_isz + 2 * (s_isz + d_isz)
        rows_cap = (budget - iperm_bytes) // row_cost
        chunk_rows = int(edges.chunks[0])
        if rows_cap < 1 or chunk_rows * 4 * e_isz > budget - iperm_bytes:
            need = iperm_bytes + chunk_rows * 4 * e_isz + row_cost
            raise DbfsError(f"memory budget {budget} B is too small to read edge chunks of {chunk_rows} rows "
                            f"(needs {need} B): raise memory_budget or re-chunk the edges")
        slices = _plan_slices(M, chunk_rows, max(1, rows_cap), threads)

        # ---- phase R: degree relabelling
        iperm = perm = deg_new = None
        if relabel == "degree":
            t0 = time.perf_counter()
            if 24 * N > budget:
                raise DbfsError(f"degree relabelling of {N} vertices needs {24 * N} B per task, over the memory "
                                f"budget {budget} B: raise memory_budget or build without relabel")
            nt = max(1, threads // max(1, len(slices)))
            parts = [dask.delayed(_task_degree, pure=False)(edges_path, r0, r1, N, nt) for r0, r1 in slices]
            while len(parts) > 1:
                nxt = [dask.delayed(_task_add, pure=False)(parts[i], parts[i + 1])
                       for i in range(0, len(parts) - 1, 2)]
                if len(parts) % 2:
                    nxt.append(parts[-1])
                parts = nxt
            deg = _run(parts, client, progress, "Kernel 1: degrees")[0] if parts else np.zeros(N, np.int64)
            perm, iperm = degree_permutation(deg)
            deg_new = deg[perm]
            del deg
            phase_times["degree"] = time.perf_counter() - t0

        # ---- phase 1: bucket by (owner, fine block)
        t0 = time.perf_counter()
        nfb, fshift, fbounds = _fine_blocks(part, deg_new)
        spec = {"N": N, "code": part.code, "P": part.P, "q": part.q, "r": part.r, "nfb": nfb, "fshift": fshift,
                "fbounds": fbounds, "sdt": sdt, "idt": idt}
        ip = _share(iperm, client, "iperm") if iperm is not None else None
        nt = max(1, threads // max(1, len(slices)))
        prefixes = [str(scratch / f"e{i:06d}") for i in range(len(slices))]
        tasks = [dask.delayed(_task_bucket, pure=False)(edges_path, r0, r1, spec, ip, prefixes[i], nt)
                 for i, (r0, r1) in enumerate(slices)]
        Hs = _run(tasks, client, progress, "Kernel 1: bucketing edges by owner")
        del ip, tasks
        phase_times["bucket"] = time.perf_counter() - t0

        # ---- phase 2: rows per (partition, sub-range)
        t0 = time.perf_counter()
        K = P * nfb
        if Hs:
            Hmat = np.stack(Hs)                                  # (n_slices, K)
            offs = np.zeros_like(Hmat)
            np.cumsum(Hmat[:, :-1], axis=1, out=offs[:, 1:])     # key offsets inside each bucket file
            H = Hmat.sum(axis=0)
        else:
            Hmat = offs = np.zeros((0, K), np.int64)
            H = np.zeros(K, np.int64)
        del Hs
        cost_entry, cost_row = s_isz + d_isz + 8, 16
        plan = []                                                # (j, s, l0, l1, n_entries, pieces)
        n_subs = []
        for j in range(P):
            subs = _subranges(H[j * nfb:(j + 1) * nfb], fbounds[j], cost_entry, cost_row, budget,
                              f"partition {j}")
            n_subs.append(len(subs))
            for s, (f0, f1) in enumerate(subs):
                k0, k1 = j * nfb + f0, j * nfb + f1
                cnt = Hmat[:, k0:k1].sum(axis=1)
                pieces = [(prefixes[i], int(offs[i, k0]), int(cnt[i])) for i in range(len(prefixes)) if cnt[i]]
                plan.append((j, s, int(fbounds[j, f0]), int(fbounds[j, f1]), int(cnt.sum()), pieces))
        del Hmat, offs
        nt = max(1, threads // max(1, len(plan)))
        tasks = [dask.delayed(_task_rows, pure=False)(pieces, ne, l0, l1 - l0, spec, bool(dedupe),
                                                       str(scratch / f"r{j:04d}-{s:05d}"), nt)
                 for j, s, l0, l1, ne, pieces in plan]
        row_res = _run(tasks, client, progress, "Kernel 1: sorting rows")
        del tasks
        phase_times["rows"] = time.perf_counter() - t0

        # ---- phase 3: write zarr chunks (one writer per chunk)
        t0 = time.perf_counter()
        w_cost = max(3 * d_isz, 24)
        out_chunk = 1 << max(_MIN_OUT_CHUNK.bit_length() - 1, min(_MAX_OUT_CHUNK.bit_length() - 1,
                                                                  (max(1, budget // w_cost)).bit_length() - 1))
        per_task = max(1, (budget // w_cost) // out_chunk) * out_chunk
        compressors = [ZstdCodec(level=_ZSTD_LEVEL)]
        wtasks, wkeys = [], []
        nnz_parts = []
        for j in range(P):
            mine = [(p, rr) for p, rr in zip(plan, row_res) if p[0] == j]
            nnz_j = sum(rr["nnz"] for _, rr in mine)
            nnz_parts.append(nnz_j)
            n_j = part.local_count(j)
            pg = zarr.open_group(str(tmp / f"part-{j:04d}"), mode="w")
            ip_path, ix_path = str(tmp / f"part-{j:04d}" / "indptr"), str(tmp / f"part-{j:04d}" / "indices")
            pg.create_array("indptr", shape=(n_j + 1,), chunks=(out_chunk,), dtype=np.int64,
                            compressors=compressors, fill_value=0, dimension_names=["row"])
            pg.create_array("indices", shape=(nnz_j,), chunks=(out_chunk,), dtype=idt,
                            compressors=compressors, fill_value=0, dimension_names=["entry"])
            # sub-range extents: rows [l0, l1) and entries [e0, e1)
            ext, e0 = [], 0
            for (jj, s, l0, l1, ne, _), rr in mine:
                prefix = str(scratch / f"r{j:04d}-{s:05d}")
                ext.append((l0, l1, e0, e0 + rr["nnz"], prefix))
                e0 += rr["nnz"]
            for a in range(0, nnz_j, per_task):
                b = min(a + per_task, nnz_j)
                pieces = [(pre + ".idx", max(a, x0) - x0, min(b, x1) - max(a, x0), 0)
                          for _, _, x0, x1, pre in ext if x0 < b and x1 > a]
                wtasks.append(dask.delayed(_task_write, pure=False)(ix_path, a, b, pieces, idt, False, 1))
                wkeys.append((j, "indices"))
            for a in range(0, n_j + 1, per_task):
                b = min(a + per_task, n_j + 1)
                ra, rb = max(a, 1) - 1, b - 1                  # rows whose end lands in [a, b)
                pieces = [(pre + ".ptr", max(ra, l0) - l0, min(rb, l1) - max(ra, l0), x0)
                          for l0, l1, x0, _, pre in ext if l0 < rb and l1 > ra]
                wtasks.append(dask.delayed(_task_write, pure=False)(ip_path, a, b, pieces, np.int64, a == 0, 1))
                wkeys.append((j, "indptr"))
        sums = _run(wtasks, client, progress, "Kernel 1: writing CSR")
        checks = [{"nnz": nnz_parts[j], "indices_sum": 0, "indptr_sum": 0} for j in range(P)]
        for (j, kind), s in zip(wkeys, sums):
            checks[j][f"{kind}_sum"] = (checks[j][f"{kind}_sum"] + s) % (1 << 64)
        if perm is not None:
            zp = vg.create_array("perm", shape=perm.shape, dtype=np.int64, chunks=(out_chunk,),
                                 compressors=compressors, fill_value=0, dimension_names=["new_id"])
            _writable(zp)[:] = perm
        phase_times["write"] = time.perf_counter() - t0
        shutil.rmtree(scratch, ignore_errors=True)

        # ---- attributes, complete marker last, then rename into place
        mins = [rr["deg_min"] for rr in row_res if rr["deg_min"] is not None]
        maxs = [rr["deg_max"] for rr in row_res if rr["deg_max"] is not None]
        nnz_total = int(sum(nnz_parts))
        attrs = {
            "variant": name,
            "dataset": dataset_path.name,
            "P": int(P),
            "partitioning": partitioning,
            "n_vertices": N,
            "n_edges": M,
            "vertex_ranges": part.to_attrs()["vertex_ranges"],
            "nnz": [int(x) for x in nnz_parts],
            "nnz_total": nnz_total,
            "index_dtype": idt.name,
            "degree": {
                "min": int(min(mins)) if mins else 0,
                "max": int(max(maxs)) if maxs else 0,
                "mean": nnz_total / N if N else 0.0,
                "isolated": int(sum(rr["isolated"] for rr in row_res)),
            },
            "options": {"dedupe": bool(dedupe), "relabel": relabel, "memory_budget": budget},
            "subranges": n_subs,
            "tasks": {"bucket": len(slices), "rows": len(plan), "write": len(wtasks)},
            "chunks": {"indptr": out_chunk, "indices": out_chunk},
            "checksums": checks,
            "phase_times": phase_times,
        }
        _publish(vg, attrs, t_start, tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return attrs


def _publish(vg, attrs: dict, t_start: float, tmp: Path, final: Path) -> None:
    """Finish a variant built in ``tmp``: ``construction_time`` (from
    ``t_start``), the attributes, the complete marker LAST, then the rename
    into ``final`` (an incomplete or stale one there is moved aside first)."""
    from dbfs import __version__

    attrs["checksum_rule"] = "indices_sum / indptr_sum: sum of the array's values mod 2**64"
    attrs["dbfs_version"] = __version__
    attrs["construction_time"] = time.perf_counter() - t_start
    vg.attrs.update(attrs)
    vg.attrs["complete"] = True
    attrs["complete"] = True
    if final.exists():
        aside = final.parent / f".{final.name}.old-{uuid.uuid4().hex[:12]}"
        os.rename(final, aside)
        os.rename(tmp, final)
        shutil.rmtree(aside, ignore_errors=True)
    else:
        os.rename(tmp, final)
    attrs["reused"] = False


# =====================================================================
# Loading
# =====================================================================
def _variant_attrs(dataset_path, variant):
    dataset_path = Path(dataset_path)
    vpath = dataset_path / "csr" / variant
    hint = _rebuild_hint(dataset_path, variant)
    attrs = _read_attrs(vpath)
    if attrs is None:
        raise DbfsError(f"CSR variant {variant} of {dataset_path.name} does not exist: build it with {hint}")
    if not attrs.get("complete", False):
        raise DbfsError(f"CSR variant {variant} of {dataset_path.name} is incomplete: rebuild it with {hint}")
    return vpath, attrs, hint


def load_partition(dataset_path, variant: str, rank: int):
    """Load partition ``rank`` of a complete variant -> ``(indptr, indices, meta)``.

    ``indices`` hold global vertex ids (new ids in relabelled variants).
    Checks the complete marker, shapes, nnz and checksums; raises
    :class:`DbfsError` naming the fix. ``meta``: variant, rank, P,
    partitioning, n_vertices, vertex_range (a ``range``), nnz, options,
    load_time (s).
    """
    import zarr

    t0 = time.perf_counter()
    vpath, attrs, hint = _variant_attrs(dataset_path, variant)
    dname = Path(dataset_path).name
    P = int(attrs["P"])
    if not 0 <= int(rank) < P:
        raise DbfsError(f"rank {rank} is out of range for CSR variant {variant} (P={P}): use 0..{P - 1}")
    part = Partitioning(int(attrs["n_vertices"]), P, attrs["partitioning"])
    ppath = vpath / f"part-{int(rank):04d}"

    def bad(what):
        return DbfsError(f"CSR variant {variant} of {dname} is corrupt (part {rank}: {what}): rebuild it with {hint}")

    try:
        indptr = zarr.open_array(str(ppath / "indptr"), mode="r")[:]
        indices = zarr.open_array(str(ppath / "indices"), mode="r")[:]
    except (FileNotFoundError, KeyError, ValueError) as exc:
        raise bad(f"missing array: {type(exc).__name__}") from None
    nnz = int(attrs["nnz"][rank])
    ck = attrs["checksums"][rank]
    if indptr.shape != (part.local_count(rank) + 1,):
        raise bad(f"indptr has {indptr.shape[0]} entries, expected {part.local_count(rank) + 1}")
    if indices.shape != (nnz,) or int(indptr[-1]) != nnz or int(indptr[0]) != 0:
        raise bad(f"nnz mismatch: indptr[-1]={int(indptr[-1])}, indices={indices.shape[0]}, expected {nnz}")
    with _numba_threads():
        T = numba.get_num_threads()
        s_ix, s_ip = int(_wrapsum(indices, T)), int(_wrapsum(indptr, T))
    if s_ix != int(ck["indices_sum"]) or s_ip != int(ck["indptr_sum"]):
        raise bad("checksum mismatch")
    meta = {
        "variant": variant,
        "rank": int(rank),
        "P": P,
        "partitioning": attrs["partitioning"],
        "n_vertices": int(attrs["n_vertices"]),
        "vertex_range": part.vertex_range(rank),
        "nnz": nnz,
        "options": attrs.get("options", {}),
        "load_time": time.perf_counter() - t0,
    }
    return indptr, indices, meta


def load_perm(dataset_path, variant: str):
    """``perm`` (int64, perm[new] = original) of a relabelled variant, or None."""
    import zarr

    vpath, attrs, hint = _variant_attrs(dataset_path, variant)
    if attrs.get("options", {}).get("relabel", "none") == "none":
        return None
    try:
        perm = zarr.open_array(str(vpath / "perm"), mode="r")[:]
    except (FileNotFoundError, KeyError, ValueError):
        perm = None
    if perm is None or perm.shape != (int(attrs["n_vertices"]),):
        raise DbfsError(f"CSR variant {variant} of {Path(dataset_path).name} has a bad perm array: "
                        f"rebuild it with {hint}")
    return perm


def load_csr(dataset_path, variant: str) -> CSRGraph:
    """Load a whole variant as one :class:`CSRGraph` (partitions joined; cyclic rows re-interleaved)."""
    t0 = time.perf_counter()
    vpath, attrs, hint = _variant_attrs(dataset_path, variant)
    P = int(attrs["P"])
    N = int(attrs["n_vertices"])
    parts = [load_partition(dataset_path, variant, j) for j in range(P)]
    idt = np.dtype(attrs.get("index_dtype", _id_dtype(N).name))
    if P == 1:
        indptr, indices = parts[0][0], parts[0][1]
    else:
        part = Partitioning(N, P, attrs["partitioning"])
        nnz = sum(int(p[0][-1]) for p in parts)
        deg = np.zeros(N, np.int64)
        for j, (ip, _, _) in enumerate(parts):
            deg[part.owned_vertices(j)] = np.diff(ip)
        indptr = np.zeros(N + 1, np.int64)
        np.cumsum(deg, out=indptr[1:])
        indices = np.empty(nnz, idt)
        with _numba_threads():
            for j, (ip, ix, _) in enumerate(parts):
                _gather_rows(indptr, indices, ip, ix, part.owned_vertices(j))
    perm = load_perm(dataset_path, variant)
    iperm = _invert(perm) if perm is not None else None
    opts = attrs.get("options", {})
    meta = {"variant": variant, "dedupe": opts.get("dedupe", True), "relabel": opts.get("relabel", "none"),
            "n_edges": attrs.get("n_edges"), "construction_time": attrs.get("construction_time"),
            "load_time": time.perf_counter() - t0}
    return CSRGraph(indptr, indices, N, perm=perm, iperm=iperm, meta=meta)


# =====================================================================
# Storing an in-memory CSR (GPU Kernel 1)
# =====================================================================
def reusable_variant(dataset_path, P: int = 1, partitioning: str = "block", dedupe: bool = True,
                     relabel: str = "none") -> dict | None:
    """The attributes of a complete stored variant built with these options
    (``reused=True`` added), or None when it must be built."""
    old = _read_attrs(Path(dataset_path) / "csr" / variant_name(P, partitioning, dedupe, relabel))
    if old and old.get("complete") and old.get("P") == P and old.get("partitioning") == partitioning \
            and old.get("options", {}).get("dedupe") == bool(dedupe) \
            and old.get("options", {}).get("relabel") == relabel:
        old["reused"] = True
        return old
    return None


def store_csr(dataset_path, indptr: np.ndarray, indices: np.ndarray, n_edges: int, dedupe: bool,
              t_start: float, builder: str, threads: int | None = None) -> dict:
    """Store a whole in-memory CSR (host arrays) as variant ``p1-block[-dup]``
    of the dataset: the layout, attributes and checksums
    :func:`build_partitioned` writes, temp dir + rename, complete marker last.
    ``construction_time`` runs from ``t_start`` (perf_counter) to the marker.
    Chunks are compressed and written by ``threads`` threads (zstd releases
    the GIL). Returns the attributes."""
    from concurrent.futures import ThreadPoolExecutor

    import zarr
    from zarr.codecs import ZstdCodec

    dataset_path = Path(dataset_path)
    N = int(indptr.shape[0] - 1)
    nnz = int(indptr[-1])
    name = variant_name(1, "block", dedupe, "none")
    csr_root = dataset_path / "csr"
    final = csr_root / name
    zarr.open_group(str(csr_root), mode="a")
    for stale in [*csr_root.glob(f".{name}.tmp-*"), *csr_root.glob(f".{name}.old-*")]:
        shutil.rmtree(stale, ignore_errors=True)
    tmp = csr_root / f".{name}.tmp-{uuid.uuid4().hex[:12]}"
    try:
        vg = zarr.open_group(str(tmp), mode="w")
        pg = zarr.open_group(str(tmp / "part-0000"), mode="w")
        comp = [ZstdCodec(level=_ZSTD_LEVEL)]
        arrays = {"indptr": (indptr, "row"), "indices": (indices, "entry")}
        jobs = []
        for key, (arr, dim) in arrays.items():
            z = _writable(pg.create_array(key, shape=arr.shape, chunks=(_MAX_OUT_CHUNK,), dtype=arr.dtype,
                                          compressors=comp, fill_value=0, dimension_names=[dim]))
            jobs += [(z, arr, a, min(a + 4 * _MAX_OUT_CHUNK, arr.shape[0]))
                     for a in range(0, arr.shape[0], 4 * _MAX_OUT_CHUNK)]

        def put(job):
            z, arr, a, b = job
            z[a:b] = arr[a:b]

        with ThreadPoolExecutor(max_workers=threads or os.cpu_count() or 1) as pool:
            list(pool.map(put, jobs))
        with _numba_threads():
            T = numba.get_num_threads()
            checks = [{"nnz": nnz, "indices_sum": int(_wrapsum(indices, T)), "indptr_sum": int(_wrapsum(indptr, T))}]
        deg = np.diff(indptr)
        part = Partitioning(N, 1, "block")
        attrs = {
            "variant": name, "dataset": dataset_path.name, "P": 1, "partitioning": "block",
            "n_vertices": N, "n_edges": int(n_edges), "vertex_ranges": part.to_attrs()["vertex_ranges"],
            "nnz": [nnz], "nnz_total": nnz, "index_dtype": np.dtype(indices.dtype).name,
            "degree": {"min": int(deg.min()) if N else 0, "max": int(deg.max()) if N else 0,
                       "mean": nnz / N if N else 0.0, "isolated": int(np.count_nonzero(deg == 0))},
            "options": {"dedupe": bool(dedupe), "relabel": "none", "builder": builder},
            "chunks": {"indptr": _MAX_OUT_CHUNK, "indices": _MAX_OUT_CHUNK},
            "checksums": checks,
        }
        _publish(vg, attrs, t_start, tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return attrs

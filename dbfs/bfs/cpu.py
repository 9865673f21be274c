"""CPU BFS kernels (Numba): one contract, several algorithms.

Contract (what :func:`dbfs.bfs.bfs` calls): ``search(graph, root, stats=False,
**opts) -> (parent, level_stats)`` where ``graph`` is a :class:`CSRGraph`,
``root`` an INTERNAL vertex id, ``parent`` an int64 array over internal ids
(``parent[root] == root``, -1 for unreached) and ``level_stats`` a list of
per-level dicts (empty unless ``stats``). Only per-level work happens in
Python; every per-vertex and per-edge loop is compiled.

Algorithms (registered under these names):

- ``seq-list``: Graph500 2.x ``seq-list``: a sequential queue BFS walking
  singly linked adjacency lists (``head[v]``, ``next[k]``) threaded through the
  edge list; half-edge ``k`` is tuple ``k >> 1`` seen from its endpoint
  ``k & 1``. The lists are built over ``graph.meta["edges"]`` (the Kernel 1
  input, original ids) when it is there, else over the CSR's undirected edges
  (each ``u < v`` entry once); they are Kernel-1 data, built on first use and
  kept in ``graph.meta["_seq_list"]``.
- ``seq-csr``: sequential queue BFS on the CSR (Graph500 2.x ``seq-csr``).
- ``td``: parallel top-down, one :func:`td_step` per level.
- ``bu``: parallel bottom-up, one :func:`bu_step` per level.
- ``do``: direction-optimizing (Beamer et al., SC'12), ``td_step`` and
  ``bu_step`` chosen per level by :mod:`dbfs.bfs.policy`
  (``policy="beamer"`` with ``alpha=15, beta=18`` by default, or
  ``policy="change_state"``, Yasui et al.'s growing/shrinking rule).
- ``spmv``: linear algebra BFS: ``y = A x`` over the (min, select-index)
  semiring, masked by the unvisited set, push (sparse x, SpMSpV) or pull
  (dense x, SpMV) per level as GraphBLAS does (Yang, Buluc and Owens, ICPP'18)
  with the same policy. ``parent[v]`` is the smallest internal id among v's
  neighbours in the previous level, so its parent array is deterministic.

Per-graph helpers (Kernel-1 data, built by :func:`prepare` or on the first
search and cached in ``graph.meta``): ``_hub`` (each vertex's highest-degree
neighbour, tested first by bottom-up: on Kronecker graphs it finds most
parents without reading the adjacency row, about halving the big bottom-up
level), ``_no_edge_bitmap`` (vertices without edges, pre-marked visited) and
``_rows_sorted`` (lets ``spmv`` stop at the first frontier neighbour).

Named steps (GAP style, Beamer's gapbs ``TDStep``/``BUStep``/
``QueueToBitmap``/``BitmapToQueue``). Each works on a LOCAL vertex range so a
distributed backend can call it per partition: ``indptr`` has one row per
local vertex, local row ``i`` is global vertex ``offset + i``, ``indices``
hold global ids; single-process callers pass ``offset = 0``.

Encodings:

- queue: int64 array of global vertex ids.
- bitmap: int64 words, bit ``v & 63`` of word ``v >> 6``. Local bitmaps
  (``visited``, ``next``) index local ids, so ``offset`` must be a multiple
  of 64 for them; the frontier bitmap read by ``bu_step`` is global.
- ``visited``: the vertices not to search: those reached so far, those
  with no edges (never reachable) and the padding bits past the last vertex.
  It is exact at level boundaries (bottom-up sets its own words, top-down
  sets the bits of the vertices it returns), so neither step reads
  ``parent`` and bottom-up never reads an isolated vertex's row.

Races (no compare-and-swap in Numba): ``td_step`` claims ``parent[v] = u``
with a plain store from several threads, for every v whose visited bit was
clear when the level started; aligned 8-byte stores are atomic on the
supported CPUs, so ``parent[v]`` ends as one of the writers, all in the
current frontier, hence a valid BFS parent. Visited bits are set with plain
read-modify-writes that a race may undo; lost bits are then re-set
(``atomic_or``, LLVM ``atomicrmw or``) and the recorded vertices
deduplicated, either through the bits ``visited`` gained (large frontiers)
or by an atomic OR per record on a second bitmap, so the next frontier
holds each vertex once and ``visited`` is exact again.
(Claiming with the atomic OR directly, one per new vertex in the claim loop,
measured 35% slower on 2 cores than this.)
Bottom-up writes only the vertices its thread owns (whole 64-bit words), so
it needs no atomics at all.
"""
from __future__ import annotations

import sys
import threading
import time

import numba
import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from dbfs.bfs import register
from dbfs.bfs.policy import BU, TD, policy_from

# a top-down level claims over pieces of at most this many edges, so its
# record buffer (8 bytes an entry, kept per thread) is bounded: sized by the
# level's edges it grew inside timed searches (a pure top-down SCALE 20
# search took 1 s instead of 90 ms when a root's widest level outgrew it)
_TD_PIECE = 1 << 22
# edges per top-down work chunk, and a cap on the number of chunks
_TD_GRAIN = 2048
_MAX_CHUNKS = 1024
# edges ahead whose parent entry a top-down claim prefetches (8..24 alike)
_TD_PREFETCH = 16
# below this many frontier edges a top-down step runs on one thread
_TD_SERIAL_EDGES = 16384
# below this many words bitmap_to_queue runs on one thread
_B2Q_SERIAL_WORDS = 1 << 16
# below this many vertices a frontier's degree sum / offsets run on one thread
# (each vertex is a random read of indptr: worth two threads from a few thousand)
_DEG_SERIAL_VERTICES = 4096


# ----------------------------------------------------------------- helpers
@intrinsic
def _cttz(typingctx, x):
    """Count trailing zeros of an int64 (LLVM cttz; x != 0)."""
    sig = types.int64(types.int64)

    def codegen(context, builder, signature, args):
        return builder.cttz(args[0], ir.Constant(ir.IntType(1), 1))

    return sig, codegen


@intrinsic
def atomic_or(typingctx, arr, idx, val):
    """``old = arr[idx]; arr[idx] |= val`` as one atomic instruction (LLVM
    ``atomicrmw or``, monotonic); returns ``old``. For int64 arrays (bitmaps)
    shared between the threads of a ``prange``."""
    if not (isinstance(arr, types.Array) and arr.dtype == types.int64):
        return None
    sig = types.int64(arr, types.int64, types.int64)

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]])
        return builder.atomic_rmw("or", ptr, args[2], "monotonic")

    return sig, codegen


@intrinsic
def prefetch(typingctx, arr, idx):
    """Hint the CPU to fetch ``arr[idx]`` into cache (LLVM ``llvm.prefetch``,
    read, high locality); no effect on results. For independent random rows
    read soon after: their misses then overlap."""
    if not isinstance(arr, types.Array):
        return None
    sig = types.void(arr, types.int64)

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]])
        i32 = ir.IntType(32)
        if getattr(ptr.type, "is_opaque", False):
            name = "llvm.prefetch.p0"
        else:                                   # typed pointers (older LLVM)
            ptr = builder.bitcast(ptr, ir.IntType(8).as_pointer())
            name = "llvm.prefetch.p0i8"
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [ptr.type, i32, i32, i32]),
                                            name)
        builder.call(fn, [ptr, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen


def _fill_parent(n):
    """A fresh int64 array of n -1s (unpooled: :func:`parent_array` for a search's parents)."""
    parent = np.empty(n, np.int64)
    _set_unreached(parent)
    return parent


@njit(parallel=True, nogil=True, cache=True)
def _set_unreached(parent):
    for i in prange(parent.shape[0]):
        parent[i] = -1


@njit(parallel=True, nogil=True, cache=True)
def _fill_unreached(parent, visited, no_edge):
    """``parent[v] = -1`` for every v not reached: clear in ``visited`` or
    without edges (the -1s of a search whose bottom-up step did not write
    them; the caller re-sets the root)."""
    n = parent.shape[0]
    for w in prange((n + 63) >> 6):
        base = w << 6
        _set_lanes(parent[base:min(base + 64, n)], ~visited[w] | no_edge[w], min(64, n - base))


_NO_CAP = 1 << 62     # a cap no degree sum reaches


def _cap(cap) -> int:
    return _NO_CAP if cap is None or cap >= _NO_CAP else max(int(cap), 0)


def frontier_edges(indptr, offset, queue, cap=None):
    """Sum of the degrees of the (local) vertices in ``queue``; with ``cap``,
    exact when it is <= cap, else some value > cap (the sum stops early:
    see :meth:`dbfs.bfs.policy.BeamerPolicy.m_f_cap`)."""
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


@njit(nogil=True, cache=True)
def _degree_offsets(indptr, offset, queue):
    f = queue.shape[0]
    off = np.empty(f + 1, np.int64)
    off[0] = 0
    acc = 0
    for i in range(f):
        r = queue[i] - offset
        acc += indptr[r + 1] - indptr[r]
        off[i + 1] = acc
    return off


@njit(parallel=True, nogil=True, cache=True)
def _degree_offsets_par(indptr, offset, queue):
    """Exclusive prefix sum of frontier degrees (len f + 1), two-pass parallel."""
    f = queue.shape[0]
    nb = 64
    sums = np.zeros(nb + 1, np.int64)
    for b in prange(nb):
        i0 = b * f // nb
        i1 = (b + 1) * f // nb
        s = 0
        for i in range(i0, i1):
            r = queue[i] - offset
            s += indptr[r + 1] - indptr[r]
        sums[b + 1] = s
    for b in range(nb):
        sums[b + 1] += sums[b]
    off = np.empty(f + 1, np.int64)
    off[0] = 0
    for b in prange(nb):
        i0 = b * f // nb
        i1 = (b + 1) * f // nb
        acc = sums[b]
        for i in range(i0, i1):
            r = queue[i] - offset
            acc += indptr[r + 1] - indptr[r]
            off[i + 1] = acc
    return off


# ------------------------------------------------------------- named steps
# Each public step is a thin Python function choosing a serial or a parallel
# Numba kernel by size: the parallel kernels are only ever called from Python
# (a cached non-parallel kernel calling a parallel one is recompiled in every
# process), and small steps must not wake threads.
def td_step(indptr, indices, offset, frontier, parent, visited, front=None):
    """Top-down step: claim every unvisited neighbour of the frontier.

    frontier: int64 global ids of local vertices (rows ``frontier - offset``);
    parent: indexed by global id (the claim targets); visited: bitmap over
    global ids, EXACT on entry (bit set = reached before this level). On
    return the new frontier has no duplicates and its bits are set in
    ``visited``. ``parent`` is only written, never read.

    Small frontiers (fewer than ``_TD_SERIAL_EDGES`` edges) run serially:
    waking threads costs more than the work. Otherwise the work is split into
    equal EDGE ranges (a hub's list may span several chunks); each chunk, for
    every neighbour whose visited bit is clear, sets the bit (a plain
    read-modify-write: a concurrent update may lose it), writes ``parent[v] =
    u`` and records v in its own slice of a reused buffer. A vertex may so be
    recorded twice (two chunks racing, or a lost bit); every such u is in the
    frontier, so whichever store lands last is a valid parent. When the
    records outnumber the bitmap's words, a pass re-sets the visited bits a
    race lost (a plain read per record) and the new frontier is read, in
    ascending order, from the bits ``visited`` gained (against a copy taken
    before the claims in a reused ``seen`` bitmap): duplicates vanish in the
    bitmap, with no atomic per record (0.3-0.4 ms off the 1.5 ms top-down
    level of a SCALE 20 search on 2 cores). Otherwise a parallel pass keeps
    one record per vertex (an atomic OR on ``seen`` picks it), re-sets lost
    visited bits, and the new frontier is gathered from the slices. A level
    of more than ``_TD_PIECE`` edges claims piece by piece (each piece's
    lost bits re-set from its records, which the next piece overwrites) and
    always reads its new frontier from the bits: the record buffer stays
    bounded however wide the level.

    Returns (next_frontier int64, edges examined). With ``front`` (a local
    bitmap, ``offset`` 0), a large new frontier is left there as a bitmap
    and next_frontier is None: a single-process search then goes bottom-up
    from it without building a queue.
    """
    f = frontier.shape[0]
    if f <= _TD_SERIAL_EDGES:
        E = _frontier_edges_serial(indptr, offset, frontier, 0, f, _NO_CAP)
        if E <= _TD_SERIAL_EDGES:
            return _td_step_serial(indptr, indices, offset, frontier, parent, visited, E)
    if f <= _DEG_SERIAL_VERTICES:
        degoff = _degree_offsets(indptr, offset, frontier)
    else:
        degoff = _degree_offsets_par(indptr, offset, frontier)
    E = int(degoff[f])
    if E == 0:
        return np.empty(0, np.int64), 0
    seen = _seen_bitmap(visited.shape[0])
    may_be_big = E > seen.shape[0] or E > _TD_PIECE
    if may_be_big:
        seen[:] = visited           # the visited set before this level
    if E > _TD_PIECE:
        # claims over edge pieces of at most _TD_PIECE, each piece's lost
        # bits re-set from its records before the next reuses the buffer
        for e_lo in range(0, E, _TD_PIECE):
            e_hi = min(e_lo + _TD_PIECE, E)
            C = min(max((e_hi - e_lo) // _TD_GRAIN, 1), _MAX_CHUNKS)
            out = _record_buffer(e_hi - e_lo)
            cnt = _td_claim_chunks(indptr, indices, offset, frontier, parent, visited, degoff, e_lo, e_hi, C, out)
            _td_fix_lost_bits(out, cnt, e_hi - e_lo, visited)
        big = True
    else:
        C = min(max(E // _TD_GRAIN, 1), _MAX_CHUNKS)
        out = _record_buffer(E)
        cnt = _td_claim_chunks(indptr, indices, offset, frontier, parent, visited, degoff, 0, E, C, out)
        big = may_be_big and int(cnt.sum()) > seen.shape[0]
        if big:
            _td_fix_lost_bits(out, cnt, E, visited)
    if big:
        # a large frontier: the bits the level added to `visited` (after
        # re-setting any a race lost), in ascending order, so the next step
        # reads indptr and the rows front to back, not at random
        if front is not None:
            _diff_bits(visited, seen, front)
            seen.fill(0)
            return None, E
        _diff_bits(visited, seen, seen)
        q = bitmap_to_queue(seen, 0)
        seen.fill(0)
        return q, E
    if may_be_big:
        seen.fill(0)
    _td_dedupe(out, cnt, E, visited, seen)
    return _td_gather(out, cnt, E, seen), E


_SEEN = threading.local()
_PARENT_POOL_LOCK = threading.Lock()
_PARENT_POOL_KEEP = 2


def _refcounts(pool: list) -> list:
    """``sys.getrefcount`` of each array in ``pool``, taken the same way
    here and for ``_ONLY_POOLED``, so the count of an array nothing else
    refers to does not depend on the Python version."""
    out = []
    for a in pool:
        out.append(sys.getrefcount(a))
    return out


_ONLY_POOLED = _refcounts([np.empty(0)])[0]


def parent_array(graph, fill: bool = True) -> np.ndarray:
    """The int64 parent array of one search over ``graph.n_vertices``: all
    -1 when ``fill``, else arbitrary contents (a caller whose first
    bottom-up level writes every entry).

    A memory pool, as CuPy's and RMM's are on the GPU: up to
    ``_PARENT_POOL_KEEP`` arrays per graph are kept in
    ``graph.meta["_parent_pool"]`` and one is handed out again once nothing
    but the pool refers to it (the caller dropped it and every view of it).
    A fresh ``np.empty`` of 8 bytes per vertex is a fresh mapping whenever
    the previous search's parents are still held (``p = bfs(g, r)`` in a
    loop, ``dbfs run``'s runner): its page faults, which zero the pages,
    took about 1.2 ms of a 3-5 ms search at SCALE 20 on 2 cores. A caller
    that keeps both pooled arrays gets a fresh, unpooled one."""
    with _PARENT_POOL_LOCK:
        pool = graph.meta.setdefault("_parent_pool", [])
        free = [a for a, c in zip(pool, _refcounts(pool)) if c <= _ONLY_POOLED]
        if free:
            parent = free[0]
        else:
            parent = np.empty(graph.n_vertices, np.int64)
            if len(pool) < _PARENT_POOL_KEEP:
                pool.append(parent)
        free = None
    if fill:
        _set_unreached(parent)
    return parent


def reused_int64(holder: dict, key, n: int) -> np.ndarray:
    """A reusable, pre-faulted int64 work array of at least ``n`` entries
    (contents undefined), kept in ``holder[key]`` across levels and searches
    and grown by doubling. A fresh ``np.empty`` per level of more than
    glibc's 32 MiB mmap threshold is a fresh mapping whose page faults
    (parallel faults serialize in the kernel) land inside the timed search:
    they made top-down levels at SCALE 18-20 2-5x slower."""
    a = holder.get(key)
    if a is None or a.shape[0] < n:
        a = np.empty(max(n, 2 * (0 if a is None else a.shape[0])), np.int64)
        a.fill(0)
        holder[key] = a
    return a


def _record_buffer(n: int) -> np.ndarray:
    """This thread's record buffer for :func:`_td_claim_chunks` (see
    :func:`reused_int64`; at most ``_TD_PIECE`` entries are asked for)."""
    return reused_int64(_SEEN.__dict__, "rec", n)


def _thread_bitmaps(key: str, rows: int, nwords: int) -> np.ndarray:
    """This thread's reusable (rows, nwords) int64 array ``key``, zeroed when
    (re)allocated for a new ``nwords`` and otherwise as its users left it:
    allocated and touched once, not fresh (page-faulting) arrays per level
    or search."""
    a = _SEEN.__dict__.get(key)
    if a is None or a.shape != (rows, nwords):
        a = _SEEN.__dict__[key] = np.zeros((rows, nwords), np.int64)
    return a


def _seen_bitmap(nwords: int) -> np.ndarray:
    """This thread's all-zero bitmap of ``nwords`` words for the new
    frontier of :func:`td_step`, which leaves it all zero again."""
    return _thread_bitmaps("seen", 1, nwords)[0]


@njit(nogil=True, cache=True)
def _td_step_serial(indptr, indices, offset, frontier, parent, visited, E):
    out = np.empty(min(E, parent.shape[0]), np.int64)
    w = 0
    for i in range(frontier.shape[0]):
        u = frontier[i]
        r = u - offset
        for j in range(indptr[r], indptr[r + 1]):
            v = indices[j]
            bit = np.int64(1) << (v & 63)
            if visited[v >> 6] & bit:
                continue
            visited[v >> 6] |= bit
            parent[v] = u
            out[w] = v
            w += 1
    return out[:w].copy(), E


@njit(parallel=True, nogil=True, cache=True)
def _td_claim_chunks(indptr, indices, offset, frontier, parent, visited, degoff, e_lo, e_hi, C, out):
    """Claim over the frontier's edges ``[e_lo, e_hi)`` (indices into the
    concatenation of its rows, ``degoff`` its degree offsets) split in ``C``
    equal ranges in parallel: every neighbour whose
    ``visited`` bit is clear gets the bit (a plain read-modify-write: a
    concurrent update may lose it), ``parent[v] = u`` and a record in the
    chunk's slice of ``out`` (from the chunk's first edge index - e_lo). A vertex
    may so be recorded twice (two chunks racing, or a lost bit); every such
    u is in the frontier, so whichever store lands last is a valid parent.
    The parent entry of the neighbour ``_TD_PREFETCH`` edges ahead is
    prefetched: the claims' stores go to random lines of a parent array that
    no fill has brought in (1.2-1.5x faster claims at SCALE 20).
    Returns the records per chunk."""
    E = e_hi - e_lo
    cnt = np.zeros(C, np.int64)
    for c in prange(C):
        e0 = e_lo + c * E // C
        e1 = e_lo + (c + 1) * E // C
        i = np.searchsorted(degoff, e0, side="right") - 1
        k = e0
        w = e0 - e_lo
        while k < e1:
            u = frontier[i]
            row = u - offset
            base = indptr[row] - degoff[i]
            stop = degoff[i + 1]
            if stop > e1:
                stop = e1
            end = base + stop
            for j in range(base + k, end):
                if j + _TD_PREFETCH < end:
                    prefetch(parent, np.int64(indices[j + _TD_PREFETCH]))
                v = indices[j]
                bit = np.int64(1) << (v & 63)
                word = visited[v >> 6]
                if word & bit:
                    continue
                visited[v >> 6] = word | bit  # racy: a lost bit only means a duplicate record
                parent[v] = u
                out[w] = v
                w += 1
            k = stop
            i += 1
        cnt[c] = w - (e0 - e_lo)
    return cnt


@njit(nogil=True, cache=True, inline="always")
def _reset_lost_bit(visited, v):
    """Set v's ``visited`` bit if a racy claim update lost it (a plain read;
    the atomic OR only where the bit is clear, which is rare)."""
    bit = np.int64(1) << (v & 63)
    if not visited[v >> 6] & bit:
        atomic_or(visited, v >> 6, bit)


@njit(parallel=True, nogil=True, cache=True)
def _td_dedupe(out, cnt, E, visited, seen):
    """Keep one record of each vertex, chunks in parallel: a record
    survives when its atomic OR on ``seen`` finds the bit clear (so exactly
    one survives), compacted in place at the front of its chunk's slice; its
    ``visited`` bit is re-set (atomically) if a racy update lost it. ``cnt``
    becomes the survivors per chunk."""
    C = cnt.shape[0]
    for c in prange(C):
        e0 = c * E // C
        w = e0
        for k in range(e0, e0 + cnt[c]):
            v = out[k]
            bit = np.int64(1) << (v & 63)
            if seen[v >> 6] & bit:
                continue
            if atomic_or(seen, v >> 6, bit) & bit:
                continue
            _reset_lost_bit(visited, v)
            out[w] = v
            w += 1
        cnt[c] = w - e0


@njit(parallel=True, nogil=True, cache=True)
def _td_fix_lost_bits(out, cnt, E, visited):
    """Re-set the ``visited`` bit of every recorded vertex whose bit a racy
    claim update lost (rare: a plain read per record, an atomic OR only
    where the bit is clear)."""
    C = cnt.shape[0]
    for c in prange(C):
        e0 = c * E // C
        for k in range(e0, e0 + cnt[c]):
            _reset_lost_bit(visited, out[k])


@njit(parallel=True, nogil=True, cache=True)
def _diff_bits(now, before, out):
    """``out[w] = now[w] & ~before[w]``: the bits set since ``before``
    (``out`` may be ``before``)."""
    for w in prange(now.shape[0]):
        out[w] = now[w] & ~before[w]


def bitmap_degrees(bitmap, indptr, cap=None):
    """(set bits, sum of their rows' degrees) of a local bitmap; with
    ``cap`` the sum is exact when it is <= cap, else some value > cap."""
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


@njit(parallel=True, nogil=True, cache=True)
def _td_gather(out, cnt, E, seen):
    """The new frontier from the chunks' record slices (each vertex once),
    in chunk order; clears its bits in ``seen``."""
    C = cnt.shape[0]
    offs = np.zeros(C + 1, np.int64)
    for c in range(C):
        offs[c + 1] = offs[c] + cnt[c]
    q = np.empty(offs[C], np.int64)
    for c in prange(C):
        e0 = c * E // C
        o = offs[c]
        for k in range(cnt[c]):
            v = out[e0 + k]
            q[o + k] = v
            seen[v >> 6] = 0          # every writer of a word writes 0
    return q


# a word with at least this many unvisited vertices tests all 64 hubs with a
# branch-free (vectorisable) loop; sparser words walk their clear bits
_BU_DENSE_WORD = 16
# words per bottom-up block: pass 1 over its words, then pass 2 (4..16
# measured alike at SCALE 20 on 2 cores)
_BU_BLOCK = 8
# rows a bottom-up block prefetches in pass 1; pass 2 keeps that many ahead
_BU_LEAD = 16


@intrinsic
def _popcount(typingctx, x):
    """Set bits of an int64 (LLVM ctpop: one instruction)."""
    sig = types.int64(types.int64)

    def codegen(context, builder, signature, args):
        return builder.ctpop(args[0])

    return sig, codegen


@njit(nogil=True, cache=True, inline="always")
def _hub_hits(hv, front, count):
    """Bit b set iff hub ``hv[b] >= 0`` is in ``front`` (b < count; ``hv``
    is one word's slice of the hub array, so its loads are contiguous): a
    branch-free loop that LLVM turns into vector loads and gathers."""
    m = np.int64(0)
    for b in range(count):
        h = np.int64(hv[b])
        hc = h if h > 0 else np.int64(0)
        m |= (((front[hc >> 6] >> (hc & 63)) & 1) & np.int64(h >= 0)) << b
    return m


@njit(nogil=True, cache=True, inline="always")
def _scan_row(indptr, indices, front, vl):
    """(first neighbour of local row vl in ``front`` or -1, entries read)."""
    s = indptr[vl]
    e = indptr[vl + 1]
    j = s
    while j < e:
        u = indices[j]
        j += 1
        if (front[u >> 6] >> (u & 63)) & 1:
            return np.int64(u), j - s
    return np.int64(-1), j - s


@njit(nogil=True, cache=True, inline="always")
def _bu_word_hits(hv, pv, dv, front, todo, count, want_deg):
    """One word of bottom-up pass 1: the bits of ``todo`` whose hub is in
    ``front``, their parents written (``pv[b] = hv[b]``) and the sum of
    their degrees (from ``dv``, the word's indptr slice; a sparse word
    reads them only with ``want_deg``). A word with many
    unvisited vertices works on all 64 lanes branch-free (vector gathers and
    masked stores); a sparse one walks its clear bits."""
    d = np.int64(0)
    if _popcount(todo) >= _BU_DENSE_WORD:
        hits = _hub_hits(hv, front, count) & todo
        for b in range(count):
            if (hits >> b) & 1:
                pv[b] = hv[b]
        for b in range(count):
            d += ((hits >> b) & 1) * (dv[b + 1] - dv[b])
        return hits, d
    hits = np.int64(0)
    t = todo
    while t != 0:
        b = _cttz(t)
        t &= t - 1
        h = hv[b]
        if h >= 0 and (front[h >> 6] >> (h & 63)) & 1:
            hits |= np.int64(1) << b
            pv[b] = h
            if want_deg:
                d += dv[b + 1] - dv[b]
    return hits, d


@njit(nogil=True, cache=True, inline="always")
def _prefetch_sparse_words(visited, hub, parent, w0, w1, nloc):
    """Prefetch the ``hub`` and ``parent`` entries of the unvisited vertices
    of the sparse words in [w0, w1) (the next block): in a level that finds
    the last few vertices the walk over a word's clear bits mispredicts its
    exit about once per vertex, so its misses did not overlap (1.1-1.35x
    faster such levels at SCALE 20); dense words stream without help."""
    for w in range(w0, w1):
        x = ~visited[w]
        if x != 0 and _popcount(x) < _BU_DENSE_WORD:
            base = w << 6
            while x != 0:
                vl = base + _cttz(x)
                x &= x - 1
                if vl < nloc:
                    prefetch(hub, vl)
                    prefetch(parent, vl)


@njit(nogil=True, cache=True, inline="always")
def _next_miss(visited, multi, lw, lx, w1):
    """One step of ``bu_step``'s lead cursor over a block's misses to scan
    (``~visited & multi`` of words up to ``w1``; ``lx``: the bits of word
    ``lw`` not yet taken): (lw, lx, the local vertex taken, -1 past the end)."""
    while lx == 0 and lw + 1 < w1:
        lw += 1
        lx = ~visited[lw] & multi[lw]
    if lx == 0:
        return lw, lx, np.int64(-1)
    return lw, lx & (lx - 1), np.int64((lw << 6) + _cttz(lx))


@njit(nogil=True, cache=True, inline="always")
def _set_lanes(pv, lanes, count):
    """``pv[b] = -1`` for the set bits b < count of ``lanes`` (masked stores)."""
    for b in range(count):
        if (lanes >> b) & 1:
            pv[b] = -1


@njit(parallel=True, nogil=True, cache=True)
def bu_step(indptr, indices, offset, front, parent, visited, nxt, hub, no_edge, multi, fill, want_deg):
    """Bottom-up step over the local rows (GAP's BUStep).

    front: global frontier bitmap; parent, visited, nxt, hub, no_edge,
    multi: local (index =
    global id - offset, ``offset % 64 == 0``). ``visited`` must be EXACT here
    (every reached vertex has its bit; bits may also mark vertices never to
    search, such as isolated ones). ``hub[v]`` is v's highest-degree
    neighbour (:func:`hub_neighbours`, -1 for an empty row): it is the
    likeliest to be in the frontier, so it is tested first from a dense array
    and most vertices never touch their adjacency row.

    Each thread owns blocks of ``_BU_BLOCK`` whole 64-vertex words, in two
    passes. Pass 1, per word: the hub tests and the hits' parents
    (:func:`_bu_word_hits`; a dense word works on all 64 lanes branch-free,
    vectorised over slices of ``hub``, ``parent`` and ``indptr``: 1.1-1.2x
    faster than walking the hits bit by bit), and a software prefetch of
    the rows of the first ``_BU_LEAD`` vertices of degree > 1 whose hub
    missed. Pass 2 scans those rows up to the first neighbour in the
    frontier (early exit), each scan prefetching the row of the miss
    ``_BU_LEAD`` ahead (a second cursor over the block's miss bits): the
    rows are in flight while the block's tests and scans run, where a scan
    right after its word's tests waited for each row in turn (1.3-1.5x
    faster bottom-up levels on the 2-core machine at SCALE 20); the steady
    window, in place of prefetching all of a block's rows in pass 1, made
    the hub root's widest level (126 rows to scan per block) 1.10-1.16x
    faster, the others alike. A vertex of
    degree 1 is not scanned at all: its only neighbour is the hub (on
    Kronecker graphs most misses: SCALE 20, 31K of the widest level's 39K;
    skipping them made the whole search 1.27x faster). ``multi`` (a local
    bitmap of the rows with more than one entry, :func:`degree_over_bitmap`
    ``(indptr, 1)``, Kernel-1 data) takes them out of both passes' walks a
    word at a time, and a scanned row's outcome is recorded branch-free:
    per vertex, whether its degree exceeds 1 and whether its scan finds a
    parent are coin flips on the weak roots' widest level (87K and 80K of
    167K hub misses), and their mispredicts cost more than the row reads
    (in-process A/B at SCALE 20: 1.1-1.2x such levels, 1.05-1.1x the
    others). Between the passes a
    word's hits are kept in ``nxt`` and ``visited``; each word is written by
    its owner only, so no atomics are needed. Before its pass 1 a block
    prefetches the hub and parent entries of the next block's sparse words
    (:func:`_prefetch_sparse_words`). Without ``fill``, a block whose words
    are all visited (most blocks of the late levels) only clears its
    ``nxt`` words: one OR over the block instead of three walks (a SCALE 20
    step with every vertex visited took 55 us, now 28 us).

    ``fill`` (the first bottom-up level of a single-process search): on
    entry ``parent`` holds values only for the vertices ``visited`` marks
    as reached, garbage elsewhere, and the step writes the -1 of every other
    vertex itself: those without edges (``no_edge``, a local bitmap) and
    those whose hub misses (before pass 2 looks for their parent). The
    parent array's lines are then written in this one pass instead of
    first by a -1 fill of the whole array. Without ``fill`` (``no_edge`` is
    then not read) ``parent`` must hold -1 for every unreached vertex.

    Returns (vertices awakened, edges examined, sum of their degrees or -1,
    sum of the degrees of the vertices left unvisited). Edges examined count
    one per hub test plus the row entries read. The awakened degree sum
    (Beamer's m_f of the next frontier) is returned only with ``want_deg``:
    without it a sparse word does not read the hits' rows in ``indptr``
    (0.1-0.2 ms of a SCALE 20 level that finds 36K-110K vertices); a dense
    word reads them anyway, as a sequential stream that also brings in the
    row starts its misses need. The unvisited degree sum (m_u) comes from
    the misses' rows, which the step reads anyway.
    """
    nloc = indptr.shape[0] - 1
    nwords = (nloc + 63) >> 6
    nblocks = (nwords + _BU_BLOCK - 1) // _BU_BLOCK
    awake = 0
    examined = 0
    awake_deg = 0
    left_deg = 0
    for blk in prange(nblocks):
        w0 = blk * _BU_BLOCK
        w1 = min(w0 + _BU_BLOCK, nwords)
        n_ex = 0
        n_deg = 0
        n_aw = 0
        n_left = 0
        n_pf = 0
        n_miss = 0
        _prefetch_sparse_words(visited, hub, parent, w1, min(w1 + _BU_BLOCK, nwords), nloc)
        if not fill:
            left = np.int64(0)
            for w in range(w0, w1):
                left |= ~visited[w]
            if left == 0:              # a block with nothing left to find (late levels: most blocks)
                for w in range(w0, w1):
                    nxt[w] = 0
                continue
        for w in range(w0, w1):        # pass 1: hubs, prefetch the misses' rows
            vis = visited[w]
            todo = ~vis
            base = w << 6
            count = min(64, nloc - base)
            pv = parent[base:base + count]
            if todo == 0:
                nxt[w] = 0
                if fill:
                    _set_lanes(pv, no_edge[w], count)
                continue
            dv = indptr[base:base + count + 1]
            hits, d = _bu_word_hits(hub[base:base + count], pv, dv, front, todo, count, want_deg)
            if fill:
                _set_lanes(pv, (todo & ~hits) | no_edge[w], count)
            n_ex += _popcount(todo)
            n_deg += d
            x = todo & ~hits & multi[w]
            n_miss += _popcount(x)
            while x != 0 and n_pf < _BU_LEAD:
                b = _cttz(x)
                x &= x - 1
                prefetch(indices, dv[b])
                n_pf += 1
            nxt[w] = hits
            visited[w] = vis | hits
            n_aw += _popcount(hits)
        # the lead cursor: the miss _BU_LEAD ahead of the one being scanned
        lw = w0
        lx = np.int64(0)
        if n_miss > _BU_LEAD:
            lx = ~visited[w0] & multi[w0]
            for _ in range(_BU_LEAD):          # pass 1 prefetched these
                lw, lx, _v = _next_miss(visited, multi, lw, lx, w1)
        for w in range(w0, w1):        # pass 2: scan the misses' rows
            vis = visited[w]
            miss = ~vis
            if miss == 0:
                continue
            base = w << 6
            # a miss of degree 1 is settled (its only neighbour is the hub)
            n_left += _popcount(miss & ~multi[w])
            miss &= multi[w]
            nb = np.int64(0)
            while miss != 0:
                b = _cttz(miss)
                miss &= miss - 1
                if n_miss > _BU_LEAD:
                    lw, lx, ahead = _next_miss(visited, multi, lw, lx, w1)
                    if ahead >= 0:
                        prefetch(indices, indptr[ahead])
                vl = base + b
                dg = indptr[vl + 1] - indptr[vl]
                u, k = _scan_row(indptr, indices, front, vl)
                n_ex += k
                # branch-free from here (found or not is a coin flip):
                # a miss's parent is already -1
                parent[vl] = u
                f = np.int64(u >= 0)
                nb |= f << b
                n_deg += f * dg
                n_left += (1 - f) * dg
            nxt[w] |= nb
            visited[w] = vis | nb
            n_aw += _popcount(nb)
        awake += n_aw
        examined += n_ex
        awake_deg += n_deg
        left_deg += n_left
    return awake, examined, awake_deg if want_deg else -1, left_deg


@njit(parallel=True, nogil=True, cache=True)
def hub_by_degree(indptr, indices, deg):
    """``hub[i]``: row i's highest-degree neighbour by ``deg`` (indexed by the
    ids in ``indices``; first in row order on ties; -1 for an empty row). A
    partition passes GLOBAL degrees, the single-process backend ``diff(indptr)``."""
    n = indptr.shape[0] - 1
    hub = np.empty(n, indices.dtype)
    for v in prange(n):
        best = -1
        bd = -1
        for j in range(indptr[v], indptr[v + 1]):
            u = indices[j]
            d = deg[u]
            if d > bd:
                bd = d
                best = u
        hub[v] = best
    return hub


def hub_neighbours(graph):
    """``hub[v]``: v's highest-degree neighbour (-1 if none), same dtype as
    ``indices``. Kernel-1 data: built once per graph, cached in
    ``graph.meta["_hub"]`` (see :func:`prepare`)."""
    hub = graph.meta.get("_hub")
    if hub is None:
        hub = graph.meta["_hub"] = hub_by_degree(graph.indptr, graph.indices, np.diff(graph.indptr))
    return hub


@njit(nogil=True, cache=True)
def mark_queue(queue, offset, bitmap):
    """Set the bits of ``queue - offset`` (serial: a bit set is a
    read-modify-write of a shared word, so threads could lose bits)."""
    for i in range(queue.shape[0]):
        v = queue[i] - offset
        bitmap[v >> 6] |= np.int64(1) << (v & 63)


@njit(nogil=True, cache=True)
def queue_to_bitmap(queue, offset, bitmap):
    """Clear ``bitmap`` and set the bits of ``queue - offset``."""
    for w in range(bitmap.shape[0]):
        bitmap[w] = 0
    mark_queue(queue, offset, bitmap)


def bitmap_to_queue(bitmap, offset):
    """Global ids ``offset + i`` of the set bits, ascending (count, scan, write)."""
    if bitmap.shape[0] < _B2Q_SERIAL_WORDS:
        return _bitmap_to_queue_serial(bitmap, offset)
    return _bitmap_to_queue_parallel(bitmap, offset)


@njit(nogil=True, cache=True)
def _bitmap_to_queue_serial(bitmap, offset):
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


# ------------------------------------------------- linear-algebra steps (spmv)
@njit(parallel=True, nogil=True, cache=True)
def spmv_pull_step(indptr, indices, offset, front, parent, visited, nxt, rows_sorted):
    """Masked SpMV over (min, select-index): for each unvisited local v,
    parent[v] = min{u in adj(v) : u in front}. With sorted rows the first hit
    is the minimum (early exit); otherwise the whole row is scanned.

    Returns (vertices awakened, edges examined, sum of their degrees).
    """
    nloc = indptr.shape[0] - 1
    nwords = (nloc + 63) >> 6
    awake = 0
    examined = 0
    awake_deg = 0
    big = np.int64(1) << 62
    for w in prange(nwords):
        vis = visited[w]
        todo = ~vis
        nb = np.int64(0)
        base = w << 6
        while todo != 0:
            b = _cttz(todo)
            todo &= todo - 1
            bit = np.int64(1) << b
            vl = base + b
            s = indptr[vl]
            e = indptr[vl + 1]
            best = big
            j = s
            while j < e:
                u = indices[j]
                j += 1
                if (front[u >> 6] >> (u & 63)) & 1:
                    if u < best:
                        best = u
                    if rows_sorted:
                        break
            examined += j - s
            if best != big:
                parent[vl] = best
                nb |= bit
                awake += 1
                awake_deg += e - s
        nxt[w] = nb
        visited[w] = vis | nb
    return awake, examined, awake_deg


@njit(nogil=True, cache=True)
def _min_frontier_neighbour(indptr, indices, r, front, rows_sorted):
    """(smallest neighbour of local row r in ``front`` or 2**62, entries read)."""
    s = indptr[r]
    e = indptr[r + 1]
    best = np.int64(1) << 62
    j = s
    while j < e:
        u = indices[j]
        j += 1
        if (front[u >> 6] >> (u & 63)) & 1:
            if u < best:
                best = u
            if rows_sorted:
                break
    return best, j - s


def min_parent_fixup(indptr, offset, indices, queue, front, parent, rows_sorted):
    """After a push (top-down) step: set parent[v] of each newly reached v to
    its smallest neighbour in the old frontier ``front`` (the SpMSpV result).
    Returns the adjacency entries read."""
    if queue.shape[0] > 4096:
        return int(_min_parent_fixup_parallel(indptr, offset, indices, queue, front, parent, rows_sorted))
    return int(_min_parent_fixup_serial(indptr, offset, indices, queue, front, parent, rows_sorted))


@njit(nogil=True, cache=True)
def _min_parent_fixup_serial(indptr, offset, indices, queue, front, parent, rows_sorted):
    examined = 0
    for i in range(queue.shape[0]):
        v = queue[i]
        best, k = _min_frontier_neighbour(indptr, indices, v - offset, front, rows_sorted)
        examined += k
        parent[v] = best
    return examined


@njit(parallel=True, nogil=True, cache=True)
def _min_parent_fixup_parallel(indptr, offset, indices, queue, front, parent, rows_sorted):
    examined = 0
    for i in prange(queue.shape[0]):
        v = queue[i]
        best, k = _min_frontier_neighbour(indptr, indices, v - offset, front, rows_sorted)
        examined += k
        parent[v] = best
    return examined


@njit(parallel=True, nogil=True, cache=True)
def _rows_sorted(indptr, indices):
    n = indptr.shape[0] - 1
    bad = 0
    for v in prange(n):
        for j in range(indptr[v] + 1, indptr[v + 1]):
            if indices[j - 1] > indices[j]:
                bad += 1
                break
    return bad == 0


# ------------------------------------------------------- sequential searches
@njit(nogil=True, cache=True)
def _seq_csr_levels(indptr, indices, parent, queue, head, tail, max_levels, lv_n, lv_e):
    """Run up to max_levels levels of a queue BFS; queue[head:tail] is the
    current frontier. Records frontier size / edges per level into lv_n/lv_e
    (from index 0). Returns (new head, new tail, levels run)."""
    done = 0
    while head < tail and done < max_levels:
        end = tail
        ecount = 0
        lv_n[done] = end - head
        while head < end:
            u = queue[head]
            head += 1
            s = indptr[u]
            e = indptr[u + 1]
            ecount += e - s
            for j in range(s, e):
                v = indices[j]
                if parent[v] < 0:
                    parent[v] = u
                    queue[tail] = v
                    tail += 1
        lv_e[done] = ecount
        done += 1
    return head, tail, done


@njit(nogil=True, cache=True)
def _seq_list_levels(head_of, next_of, ends, parent, queue, head, tail, max_levels, lv_n, lv_e):
    """Graph500 2.x seq-list: walk the linked half-edge list of each queued
    vertex; half-edge k is tuple k >> 1 seen from endpoint k & 1."""
    done = 0
    while head < tail and done < max_levels:
        end = tail
        ecount = 0
        lv_n[done] = end - head
        while head < end:
            u = queue[head]
            head += 1
            k = head_of[u]
            while k >= 0:
                v = ends[k >> 1, 1 - (k & 1)]
                ecount += 1
                if parent[v] < 0:
                    parent[v] = u
                    queue[tail] = v
                    tail += 1
                k = next_of[k]
        lv_e[done] = ecount
        done += 1
    return head, tail, done


@njit(nogil=True, cache=True)
def _build_seq_list(ends, n):
    """head/next over the tuples (Graph500 2.x seq-list make_graph_data_structure):
    self-loops and out-of-range tuples are left out of the lists."""
    m = ends.shape[0]
    head_of = np.full(n, -1, np.int64)
    next_of = np.full(2 * m, -1, np.int64)
    for k in range(m):
        i = ends[k, 0]
        j = ends[k, 1]
        if i < 0 or j < 0 or i >= n or j >= n or i == j:
            continue
        next_of[2 * k] = head_of[i]
        head_of[i] = 2 * k
        next_of[2 * k + 1] = head_of[j]
        head_of[j] = 2 * k + 1
    return head_of, next_of


@njit(nogil=True, cache=True)
def levels_from_parent(parent, root):
    """BFS levels implied by a VALID parent array (-1 where unreached)."""
    n = parent.shape[0]
    lev = np.full(n, -1, np.int64)
    lev[root] = 0
    stack = np.empty(n, np.int64)
    for v in range(n):
        if parent[v] < 0 or lev[v] >= 0:
            continue
        sp = 0
        x = v
        while lev[x] < 0 and sp < n:
            stack[sp] = x
            sp += 1
            x = parent[x]
        d = lev[x]
        while sp > 0:
            sp -= 1
            d += 1
            lev[stack[sp]] = d
    return lev


# --------------------------------------------------------------- drivers

def _level_record(level, direction, n_f, edges, t0, discovered):
    return {"level": level, "direction": direction, "frontier": int(n_f),
            "edges": int(edges), "discovered": int(discovered), "time": time.perf_counter() - t0}


def _seq_driver(step, args, graph, root, stats):
    n = graph.n_vertices
    parent = parent_array(graph)
    parent[root] = root
    queue = np.empty(n, np.int64)
    queue[0] = root
    lv_n = np.empty(max(n, 1), np.int64)
    lv_e = np.empty(max(n, 1), np.int64)
    if not stats:
        step(*args, parent, queue, 0, 1, n + 1, lv_n, lv_e)
        return parent, []
    rec = []
    head, tail, level = 0, 1, 0
    while head < tail:
        t0 = time.perf_counter()
        old_tail = tail
        head, tail, _ = step(*args, parent, queue, head, tail, 1, lv_n, lv_e)
        rec.append(_level_record(level, TD, lv_n[0], lv_e[0], t0, tail - old_tail))
        level += 1
    return parent, rec


@register("seq-csr")
def seq_csr(graph, root, stats=False):
    """Sequential queue BFS on the CSR."""
    return _seq_driver(_seq_csr_levels, (graph.indptr, graph.indices), graph, root, stats)


def seq_list_structure(graph):
    """(head, next, ends): the seq-list linked lists over internal ids, built
    once per graph (Kernel-1 data) and cached in ``graph.meta["_seq_list"]``."""
    cached = graph.meta.get("_seq_list")
    if cached is not None:
        return cached
    edges = graph.meta.get("edges")
    if edges is not None:
        ends = np.ascontiguousarray(np.asarray(edges), dtype=np.int64)
        if graph.iperm is not None:
            ends = np.asarray(graph.iperm, dtype=np.int64)[ends]
    else:
        rows = np.repeat(np.arange(graph.n_vertices, dtype=np.int64), np.diff(graph.indptr))
        cols = np.asarray(graph.indices, dtype=np.int64)
        keep = rows < cols
        ends = np.ascontiguousarray(np.stack([rows[keep], cols[keep]], axis=1))
    head_of, next_of = _build_seq_list(ends, graph.n_vertices)
    graph.meta["_seq_list"] = (head_of, next_of, ends)
    return graph.meta["_seq_list"]


@register("seq-list")
def seq_list(graph, root, stats=False):
    """Graph500 2.x seq-list (linked lists over the edge list)."""
    head_of, next_of, ends = seq_list_structure(graph)
    return _seq_driver(_seq_list_levels, (head_of, next_of, ends), graph, root, stats)


def _deg(indptr, v):
    return int(indptr[v + 1] - indptr[v])


@njit(parallel=True, nogil=True, cache=True)
def degree_over_bitmap(indptr, k):
    """Bits of the rows with more than k entries (padding bits clear)."""
    nloc = indptr.shape[0] - 1
    nwords = (nloc + 63) >> 6
    bm = np.empty(nwords, np.int64)
    for w in prange(nwords):
        x = np.int64(0)
        for b in range(64):
            v = (w << 6) + b
            if v < nloc and indptr[v + 1] - indptr[v] > k:
                x |= np.int64(1) << b
        bm[w] = x
    return bm


def _no_edge_bitmap(indptr):
    """Bits of the vertices without edges, plus the padding bits."""
    return ~degree_over_bitmap(indptr, 0)


def multi_edge_bitmap(graph):
    """Bits of the vertices with more than one edge (``bu_step``'s
    ``multi``); Kernel-1 data, cached in ``graph.meta["_multi_bitmap"]``."""
    bm = graph.meta.get("_multi_bitmap")
    if bm is None:
        bm = graph.meta["_multi_bitmap"] = degree_over_bitmap(graph.indptr, 1)
    return bm


def start_visited(graph, root, out=None):
    """The visited bitmap a search starts from: the root, the vertices that
    have no edges (never reachable, so bottom-up never looks at them) and the
    padding bits (written into ``out`` when given). The no-edge bitmap is
    Kernel-1 data, computed once per graph and cached in
    ``graph.meta["_no_edge_bitmap"]``."""
    bm = graph.meta.get("_no_edge_bitmap")
    if bm is None:
        bm = graph.meta["_no_edge_bitmap"] = _no_edge_bitmap(graph.indptr)
    if out is None:
        out = bm.copy()
    else:
        np.copyto(out, bm)
    out[root >> 6] |= np.int64(1) << (root & 63)
    return out


def _scratch_bitmaps(n):
    """This thread's three reusable bitmaps over n vertices (visited, front,
    next; contents undefined) for a search that returns none of them, in
    place of three fresh zeroed ones (two of them Numba calls) per search.
    Every step writes all the words it later reads (``bu_step`` and
    ``spmv_pull_step`` every word of ``nxt``, ``queue_to_bitmap`` and
    ``td_step`` every word of ``front``)."""
    a = _thread_bitmaps("bitmaps", 3, (n + 63) >> 6)
    return a[0], a[1], a[2]


@register("td")
def top_down(graph, root, stats=False):
    """Parallel top-down BFS: td_step per level."""
    indptr, indices = graph.indptr, graph.indices
    warm_kernels(indptr, indices)
    parent = parent_array(graph)
    parent[root] = root
    visited = start_visited(graph, root)
    queue = np.array([root], dtype=np.int64)
    rec = []
    level = 0
    while queue.shape[0]:
        t0 = time.perf_counter()
        n_f = queue.shape[0]
        queue, examined = td_step(indptr, indices, 0, queue, parent, visited)
        if stats:
            rec.append(_level_record(level, TD, n_f, examined, t0, queue.shape[0]))
        level += 1
    return parent, rec


@register("bu")
def bottom_up(graph, root, stats=False):
    """Parallel bottom-up BFS: bu_step per level (frontier bitmap)."""
    indptr, indices, n = graph.indptr, graph.indices, graph.n_vertices
    warm_kernels(indptr, indices)
    parent = parent_array(graph, fill=False)   # the first bu_step writes the -1s
    parent[root] = root
    hub = hub_neighbours(graph)
    multi = multi_edge_bitmap(graph)
    visited, front, nxt = _scratch_bitmaps(n)
    start_visited(graph, root, visited)
    no_edge = graph.meta["_no_edge_bitmap"]
    front.fill(0)
    front[root >> 6] |= np.int64(1) << (root & 63)
    rec = []
    n_f, level = 1, 0
    while n_f:
        t0 = time.perf_counter()
        awake, examined, _, _ = bu_step(indptr, indices, 0, front, parent, visited, nxt, hub, no_edge, multi,
                                        level == 0, False)
        if stats:
            rec.append(_level_record(level, BU, n_f, examined, t0, awake))
        front, nxt = nxt, front
        n_f = awake
        level += 1
    parent[root] = root                 # an isolated root is in no_edge: level 0's -1s covered it
    return parent, rec


def _hybrid(graph, root, stats, pol, semiring):
    """Direction-optimizing loop shared by ``do`` (any parent) and ``spmv``
    (min-id parent). The frontier lives in one representation at a time:
    a queue for top-down/push, a bitmap for bottom-up/pull; a top-down
    level of ``do`` whose new frontier is large leaves it as a bitmap (the
    next level is then usually bottom-up) and converts only if it is not.
    The new frontier's degree sum (m_f) is summed only as far as the
    policy's next decision needs (:meth:`~dbfs.bfs.policy.BeamerPolicy.m_f_cap`);
    after a ``do`` bottom-up level m_u is the step's exact count of the
    edges of the vertices left unvisited."""
    indptr, indices, n = graph.indptr, graph.indices, graph.n_vertices
    warm_kernels(indptr, indices)
    rows_sorted = False
    if semiring:
        rows_sorted = graph.meta.get("_rows_sorted")
        if rows_sorted is None:
            rows_sorted = bool(_rows_sorted(indptr, indices))
            graph.meta["_rows_sorted"] = rows_sorted
    hub = None if semiring else hub_neighbours(graph)
    multi = None if semiring else multi_edge_bitmap(graph)
    # do: the first bottom-up level writes the -1s (bu_step's ``fill``)
    need_fill = not semiring
    parent = parent_array(graph, fill=not need_fill)
    parent[root] = root
    visited, front, nxt = _scratch_bitmaps(n)
    start_visited(graph, root, visited)   # exact at every level boundary
    no_edge = graph.meta["_no_edge_bitmap"]
    queue = np.array([root], dtype=np.int64)
    have_queue = True  # else the frontier is in `front`
    n_f = 1
    m_f = _deg(indptr, root)
    m_u = int(indptr[-1]) - m_f
    pol.start(n)
    rec = []
    level = 0
    while n_f:
        t0 = time.perf_counter()
        d = pol.next(n_f, m_f, m_u)
        if d == TD:
            if not have_queue:
                queue = bitmap_to_queue(front, 0)
                have_queue = True
            if semiring:
                queue_to_bitmap(queue, 0, front)
            new_q, examined = td_step(indptr, indices, 0, queue, parent, visited, None if semiring else front)
            # the degree sum stops early once the policy's decision is known
            # (m_u is then inexact until the bottom-up level that follows)
            cap = pol.m_f_cap(None, m_u)
            if new_q is None:           # a large frontier, left in `front`
                have_queue = False
                new_n, new_m = bitmap_degrees(front, indptr, cap)
            else:
                if semiring:
                    examined += min_parent_fixup(indptr, 0, indices, new_q, front, parent, rows_sorted)
                queue = new_q
                new_n = queue.shape[0]
                new_m = frontier_edges(indptr, 0, queue, cap) if new_n else 0
            m_u -= new_m
        else:
            if have_queue:
                queue_to_bitmap(queue, 0, front)
                have_queue = False
            if semiring:
                new_n, examined, new_m = spmv_pull_step(indptr, indices, 0, front, parent, visited,
                                                        nxt, rows_sorted)
                m_u -= new_m
            else:
                new_n, examined, _, m_u = bu_step(indptr, indices, 0, front, parent, visited, nxt, hub,
                                                  no_edge, multi, need_fill, False)
                need_fill = False
                # the new frontier's degree sum only when the policy reads it
                cap = pol.m_f_cap(new_n, m_u) if new_n else None
                new_m = 0 if cap is None else bitmap_degrees(nxt, indptr, cap)[1]
            front, nxt = nxt, front
        if stats:
            rec.append(_level_record(level, d, n_f, examined, t0, new_n))
        n_f, m_f = new_n, new_m
        level += 1
    if need_fill:                       # no bottom-up level ran
        _fill_unreached(parent, visited, no_edge)
    parent[root] = root                 # an isolated root is in no_edge: the -1s covered it
    return parent, rec


@register("do")
def direction_optimizing(graph, root, stats=False, policy="beamer", alpha=None, beta=None,
                         unexplored="gap", tail="cost"):
    """Direction-optimizing BFS; see :mod:`dbfs.bfs.policy` for the rules
    (alpha/beta None: the policy's defaults; unexplored, tail: beamer only)."""
    return _hybrid(graph, root, stats, policy_from(policy, alpha, beta, unexplored, tail), semiring=False)


@register("spmv")
def spmv(graph, root, stats=False, policy="beamer", alpha=None, beta=None, unexplored="gap", tail="cost"):
    """Linear-algebra BFS over (min, select-index); deterministic parents;
    push/pull chosen per level by the same policies as ``do``."""
    return _hybrid(graph, root, stats, policy_from(policy, alpha, beta, unexplored, tail), semiring=True)


def prepare(graph):
    """Build the per-graph helper structures the kernels would otherwise build
    on their first search (hub neighbours, no-edge bitmap, row order). They
    are Kernel-1 data: call this inside the construction timer. (The search
    kernels are loaded by the first search, :func:`warm_kernels`: not
    Kernel-1 work.)"""
    hub_neighbours(graph)
    multi_edge_bitmap(graph)
    if graph.n_vertices:
        start_visited(graph, 0)
    if "_rows_sorted" not in graph.meta:
        graph.meta["_rows_sorted"] = bool(_rows_sorted(graph.indptr, graph.indices))
    return graph


# ------------------------------------------------------------- kernel warm-up
_WARM_LOCK = threading.Lock()
_WARMED: set = set()


def _like(a: np.ndarray, values) -> np.ndarray:
    """``values`` as a small array of ``a``'s dtype and writeability (Numba
    compiles one specialisation per array type, read-only ones included)."""
    out = np.ascontiguousarray(values, dtype=a.dtype)
    out.setflags(write=a.flags.writeable)
    return out


def warm_kernels(indptr, indices) -> None:
    """Compile (or load from Numba's cache) every kernel a ``td``, ``bu``,
    ``do`` or ``spmv`` search may call on arrays of these types, once per
    process and type: a search reaches its parallel or serial variants by
    frontier size, so one warm-up search leaves some unloaded, and loading
    one inside a timed search cost it 3-15 ms (SCALE 20: 2-3 ms searches).
    Runs each kernel on a tiny graph (a star of 100 leaves and 30 isolated
    vertices) whose arrays have the dtypes and writeability of ``indptr``
    and ``indices``. ``tests/test_bfs_cpu.py`` checks that searches then
    compile nothing."""
    key = (indptr.dtype.str, indices.dtype.str, indptr.flags.writeable, indices.flags.writeable)
    if key in _WARMED:
        return
    with _WARM_LOCK:
        if key in _WARMED:
            return
        n, k = 130, 100                       # vertex 0 joined to 1..k
        ip = _like(indptr, np.concatenate([[0, k], np.arange(k + 1, 2 * k + 1), np.full(n - k - 1, 2 * k)]))
        ix = _like(indices, np.concatenate([np.arange(1, k + 1), np.zeros(k)]))
        deg = np.diff(ip)
        hub = hub_by_degree(ip, ix, deg)
        no_edge = _no_edge_bitmap(ip)
        multi = degree_over_bitmap(ip, 1)
        _rows_sorted(ip, ix)
        parent = _fill_parent(n)
        nbw = no_edge.shape[0]
        visited, front, nxt = no_edge.copy(), np.zeros(nbw, np.int64), np.zeros(nbw, np.int64)
        q = np.array([0], np.int64)
        E = int(_frontier_edges_serial(ip, 0, q, 0, 1, _NO_CAP))
        _frontier_edges_parallel(ip, 0, q, _NO_CAP, num_threads())
        _td_step_serial(ip, ix, 0, q, parent, visited.copy(), E)
        _degree_offsets(ip, 0, q)
        degoff = _degree_offsets_par(ip, 0, q)
        out = np.empty(E, np.int64)
        seen = np.zeros(nbw, np.int64)
        cnt = _td_claim_chunks(ip, ix, 0, q, parent, visited, degoff, 0, E, 2, out)
        _td_fix_lost_bits(out, cnt, E, visited)
        _diff_bits(visited, no_edge, front)
        _bitmap_to_queue_serial(front, 0)
        _bitmap_to_queue_parallel(front, 0)
        _bitmap_degrees(front, ip, _NO_CAP, num_threads())
        _td_dedupe(out, cnt, E, visited, seen)
        _td_gather(out, cnt, E, seen)
        queue_to_bitmap(q, 0, front)
        visited = no_edge.copy()
        parent = np.empty(n, np.int64)
        bu_step(ip, ix, 0, front, parent, visited, nxt, hub, no_edge, multi, True, False)
        _fill_unreached(parent, visited, no_edge)
        visited = no_edge.copy()
        parent = _fill_parent(n)
        spmv_pull_step(ip, ix, 0, front, parent, visited, nxt, True)
        leaves = np.arange(1, k + 1, dtype=np.int64)
        _min_parent_fixup_serial(ip, 0, ix, leaves, front, parent, True)
        _min_parent_fixup_parallel(ip, 0, ix, leaves, front, parent, True)
        _WARMED.add(key)


def num_threads() -> int:
    return numba.get_num_threads()

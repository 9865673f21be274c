"""The top-down step of the CPU BFS (GAP's ``TDStep``): every unvisited
neighbour of the frontier queue is claimed.

Contract (:func:`td_step`): on a LOCAL vertex range (``indptr`` one row per
local vertex, local row ``i`` is global vertex ``offset + i``, ``indices``
global ids), for a frontier queue of global ids and a ``visited`` bitmap over
global ids that is EXACT on entry, every neighbour v whose bit is clear gets
``parent[v] = u`` for some frontier vertex u and its bit set; the returned
next frontier holds each such v once and ``visited`` is exact again.
``parent`` is written, never read. ``indices`` may also be a
:class:`~dbfs.bfs.cpu.adjacency.SplitAdjacency` (two pieces, entry ``j``
read through ``adj_at``): same claims, separately compiled kernels.

Method (Beamer, Asanovic and Patterson, "Direction-Optimizing
Breadth-First Search", SC'12, top-down step; work split as GAP does by
edges): small frontiers (fewer than ``_TD_SERIAL_EDGES`` edges) run
serially. Otherwise the frontier's edges are split into equal ranges
(``_td_claim_chunks``), each recording its claims in its own slice of a
reused buffer; a level of more than ``_TD_PIECE`` edges claims piece by
piece so that buffer stays bounded. The new frontier is then either read
from the bits ``visited`` gained (``_diff_bits``, large frontiers) or
deduplicated from the records (``_td_dedupe``, ``_td_gather``).

Races (Numba has no compare-and-swap): claims store ``parent[v] = u`` with
plain stores from several threads, for every v whose visited bit was clear
when the level started; aligned 8-byte stores are atomic on the supported
CPUs, so ``parent[v]`` ends as one of the writers, all in the current
frontier, hence a valid BFS parent. Visited bits are set with plain
read-modify-writes that a race may undo; lost bits are then re-set
(``atomic_or``, LLVM ``atomicrmw or``) and the recorded vertices
deduplicated, either through the bits ``visited`` gained (large frontiers)
or by an atomic OR per record on a second bitmap, so the next frontier
holds each vertex once and ``visited`` is exact again.

Encoding: queue: int64 global ids; bitmaps: int64 words, bit ``v & 63`` of
word ``v >> 6``; ``degoff``: exclusive prefix sum of the frontier's degrees
(length f + 1).
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from .adjacency import adj_at
from .buffers import _record_buffer, _seen_bitmap
from .frontier import _DEG_SERIAL_VERTICES, _frontier_edges_serial, bitmap_to_queue
from .primitives import _MAX_CHUNKS, _NO_CAP, atomic_or, prefetch


# a top-down level claims over pieces of at most this many edges, so its
# record buffer (8 bytes an entry, kept per thread) is bounded: sized by the
# level's edges, it grew inside timed searches
_TD_PIECE = 1 << 22
# edges per top-down work chunk (the number of chunks is capped by _MAX_CHUNKS)
_TD_GRAIN = 2048
# edges ahead whose parent entry a top-down claim prefetches
_TD_PREFETCH = 16
# below this many frontier edges a top-down step runs on one thread
_TD_SERIAL_EDGES = 16384


# td_step is a thin Python function choosing a serial or a parallel Numba
# kernel by size: the parallel kernels are only ever called from Python (a
# cached non-parallel kernel calling a parallel one is recompiled in every
# process), and small steps must not wake threads.
def td_step(indptr, indices, offset, frontier, parent, visited, front=None):
    """Top-down step: claim every unvisited neighbour of the frontier.

    On return the new frontier has no duplicates and its bits are set in
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
    bitmap, with no atomic per record. Otherwise a parallel pass keeps
    one record per vertex (an atomic OR on ``seen`` picks it), re-sets lost
    visited bits, and the new frontier is gathered from the slices. A level
    of more than ``_TD_PIECE`` edges claims piece by piece (each piece's
    lost bits re-set from its records, which the next piece overwrites) and
    always reads its new frontier from the bits: the record buffer stays
    bounded however wide the level.

    Parameters
    ----------
    indptr, indices : ndarray
        Local rows (``indices`` hold global ids).
    offset : int
        Global id of local row 0.
    frontier : ndarray of int64
        Global ids of local vertices (rows ``frontier - offset``).
    parent : ndarray of int64
        Indexed by global id (the claim targets); written, never read.
    visited : ndarray of int64
        Bitmap over global ids, EXACT on entry (bit set = reached before
        this level); exact again on return.
    front : ndarray of int64, optional
        A local bitmap (``offset`` 0): a large new frontier is left there
        as a bitmap instead of a queue, so a single-process search goes
        bottom-up from it without building one.

    Returns
    -------
    next_frontier : ndarray of int64 or None
        The new frontier's global ids (None when it was left in ``front``).
    examined : int
        Edges examined (the frontier's degree sum).
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

    def claim(e_lo, e_hi, C, out):
        return _td_claim_chunks(indptr, indices, offset, frontier, parent, visited, degoff, e_lo, e_hi, C, out)

    q, E, _ = _td_parallel(claim, E, visited, front)
    return q, E


def reserve_td(bufs, nnz: int, gwords: int) -> None:
    """Size (and page in) the record buffer and seen bitmap :func:`_td_parallel` keeps in ``bufs`` (a Dask
    worker's store; None: the calling thread's, :func:`td_step`'s) for rows of ``nnz`` edges in all and visited
    bitmaps of ``gwords`` words, at their largest: called before the searches, no top-down level grows them
    inside its timer."""
    _record_buffer(max(1, min(int(nnz), _TD_PIECE)), bufs)
    _seen_bitmap(int(gwords), bufs)


def _td_parallel(claim, E, visited, front=None, bufs=None):
    """The parallel part of :func:`td_step` for a frontier of ``E > 0`` edges: ``claim(e_lo, e_hi, C, out)``
    claims over the frontier's edges ``[e_lo, e_hi)`` in ``C`` chunks into the record buffer ``out`` and
    returns the records per chunk (:func:`_td_claim_chunks` or a kernel of that contract); pieces of at most
    ``_TD_PIECE`` edges, then the new frontier read from the bits ``visited`` gained or deduplicated from the
    records. Returns (next frontier or None when left in ``front``, E, whether it is ascending: read from the
    bits). ``bufs``: where the record buffer and the seen bitmap are kept (a Dask worker's store; None: this
    thread's)."""
    seen = _seen_bitmap(visited.shape[0], bufs)
    may_be_big = E > seen.shape[0] or E > _TD_PIECE
    if may_be_big:
        seen[:] = visited           # the visited set before this level
    if E > _TD_PIECE:
        # claims over edge pieces of at most _TD_PIECE, each piece's lost
        # bits re-set from its records before the next reuses the buffer
        for e_lo in range(0, E, _TD_PIECE):
            e_hi = min(e_lo + _TD_PIECE, E)
            C = min(max((e_hi - e_lo) // _TD_GRAIN, 1), _MAX_CHUNKS)
            out = _record_buffer(e_hi - e_lo, bufs)
            cnt = claim(e_lo, e_hi, C, out)
            _td_fix_lost_bits(out, cnt, e_hi - e_lo, visited)
        big = True
    else:
        C = min(max(E // _TD_GRAIN, 1), _MAX_CHUNKS)
        out = _record_buffer(E, bufs)
        cnt = claim(0, E, C, out)
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
            return None, E, True
        _diff_bits(visited, seen, seen)
        q = bitmap_to_queue(seen, 0)
        seen.fill(0)
        return q, E, True
    if may_be_big:
        seen.fill(0)
    _td_dedupe(out, cnt, E, visited, seen)
    return _td_gather(out, cnt, E, seen), E, False


@njit(nogil=True, cache=True)
def _td_step_serial(indptr, indices, offset, frontier, parent, visited, E):
    """:func:`td_step` on one thread (``E``: the frontier's degree sum)."""
    out = np.empty(min(E, parent.shape[0]), np.int64)
    w = 0
    for i in range(frontier.shape[0]):
        u = frontier[i]
        r = u - offset
        for j in range(indptr[r], indptr[r + 1]):
            v = adj_at(indices, j)
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
    no fill has brought in.
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
                    prefetch(parent, np.int64(adj_at(indices, j + _TD_PREFETCH)))
                v = adj_at(indices, j)
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


@njit(nogil=True, cache=True)
def _degree_offsets(indptr, offset, queue):
    """Exclusive prefix sum of frontier degrees (len f + 1), serial."""
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

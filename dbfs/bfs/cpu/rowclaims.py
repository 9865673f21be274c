"""The owner side of a worker's top-down level: its claims split by owner rank, pairs absorbed into the owners' rows.

Contract
--------
Over a :class:`~dbfs.bfs.cpu.rowtable.RowTable` ``t`` (a worker's partitions
end to end in one row space), after :func:`~dbfs.bfs.cpu.rowtable.td_rows`
claimed the level's vertices (their bits set in the worker's global
``gvis``, ``claim[v]`` the global id of a frontier vertex adjacent to v):

- :func:`split_claims` ``(t, claimed, claim, code, P, q, r, slot_of, parent,
  visited, tmp, out, C, skip_own=False) -> (L, U, cnt, end, degrees)``: the
  claims of the ranks this worker holds (``slot_of[rank]`` >= 0) absorbed
  at once (as :func:`absorb_rows` would, in the same pass), the others'
  (owner-local index, ``claim[v]``) pairs grouped by owner rank
  (:func:`dbfs.partition.owner_local`), a stable counting sort; ``cnt``: P
  + 1 offsets (a held rank's bucket empty); pairs of ``claim``'s dtype.
  With ``skip_own`` the held ranks' claims are left for
  :func:`absorb_bits`.
- :func:`absorb_rows` ``(t, L, U, seg_lo, seg_n, seg_slot, parent, visited,
  gvis, tmp, out, w, C) -> (w, degrees)``: the pairs peers sent: segment
  ``k``, pairs ``[seg_lo[k], seg_lo[k] + seg_n[k])`` of ``L``/``U``, names
  rows of slot ``seg_slot[k]``; each unvisited vertex keeps one parent (an
  atomic OR on its ``visited`` bit picks one winner among pairs racing for
  it), gets its bit in ``gvis`` (global ids) too and its worker row
  appended to ``out`` from ``w``; returns the new end and the sum of the new
  vertices' degrees.

On BLOCK partitions (``gs == 1``, ``gb`` a multiple of 64: slot ``s``'s word
``w`` is global word ``(gb[s] >> 6) + w``) the same levels from the bits:

- :func:`split_sorted` ``(claimed, claim, starts, slot_of, C) -> (L, U,
  cnt)``: :func:`split_claims`'s pairs, the same bytes, for ASCENDING claims
  (a rank's claims one run, found by binary search on the ranks' first
  vertices ``starts``), the held ranks' claims left to :func:`absorb_bits`;
  :func:`claims_in` ``(bits, words_elsewhere(starts, slot_of))``: those
  claims of a level ``td_rows`` left as bits, only the words of the ranks
  not held read.
- :func:`absorb_bits` ``(t, gvis, visited, parent, claim, take_claim, out,
  w, front=None, keep=False) -> (end, degrees)``: every worker row whose
  GLOBAL bit is set in ``gvis`` and whose worker bit is clear in
  ``visited`` is a vertex this level reached: it gets its worker bit, its
  worker row appended to ``out`` from ``w`` (ascending), its bit in
  ``front`` (a worker bitmap: every word set, or with ``keep`` OR'd), and,
  with ``take_claim``, ``parent[x] = claim[v]``. The caller's invariant: on a worker's own rows ``gvis`` and
  ``visited`` agree but for this level's new vertices (rows without edges,
  pad and tail rows have their worker bit set and are never reached).
- :func:`take_bits` ``(t, gvis, visited, front) -> (count, degrees)``:
  :func:`absorb_bits` without ``take_claim``, the level's new vertices left
  as bits (``front``'s every word set) and no queue written.
- :func:`mark_pairs` ``(t, L, U, seg_lo, seg_n, seg_slot, parent, visited,
  gvis, C)``: the vertex of every pair whose worker bit is clear gets its
  global bit and ``parent[x] = U`` of one of its pairs (a vertex this
  worker claimed too may so take a pair's parent); :func:`absorb_bits`
  without ``take_claim``, or :func:`take_bits`, then takes them.
- :func:`by_bits` says when a level takes the bit pass.

Method: the claims split by owner as the 1-D exchange of Buluc and Madduri
("Parallel Breadth-First Search on Distributed Memory Systems", SC'11), by
pairs over the threads (``C`` chunks; one chunk runs on the calling thread,
waking no other). :func:`split_claims` and :func:`absorb_rows` take each new
vertex with an atomic OR on its worker bit; on x86 a locked instruction
waits for the stores and loads before it, so the claims' cache misses
(parent, degree, claim) run one after another. The bit pass takes no bit
per claim: the global bits already name the level's vertices (``td_rows``
leaves them exact; :func:`mark_pairs` sets the pairs' in a loop of atomics
that reads nothing else), and one pass over the worker's words (split by
words over the threads, count then write, as GAP's ``BitmapToQueue``)
takes each vertex once, in row order, so the parent and ``indptr`` reads
of the pass and of the next level run front to back. A pair's parent is a
plain store: racing stores leave one of them, each a frontier vertex of
this level (the argument of GAP's top-down step). It pays once the level
reaches a vertex per few words of the worker (:func:`by_bits`); sparser
levels, and cyclic partitions, keep the atomic per claim.

Encoding: bitmaps int64 words over worker rows (``visited``) or global ids
(``gvis``); ``out`` int64 worker rows; ``claim`` over global ids (the
vertex-id width of N); pairs ``L`` (owner-local index) / ``U`` (parent's
global id) of ``claim``'s dtype; slot tables int64.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from dbfs.partition import owner_local

from .frontier import bitmap_to_queue
from .primitives import _cttz, _popcount, atomic_or
from .rowtable import _find_slot, _indptr

__all__ = ["split_claims", "absorb_rows", "split_sorted", "absorb_bits", "take_bits", "mark_pairs", "by_bits",
           "words_elsewhere", "claims_in"]


# --------------------------------------------------------- one atomic a claim
@njit(nogil=True, cache=True, inline="always")
def _bucket_starts(hist, P, C):
    """(cnt: the P + 1 bucket offsets, pos: where chunk c's pairs of owner o start)."""
    cnt = np.zeros(P + 1, np.int64)
    pos = np.empty((C, P), np.int64)
    s = 0
    for o in range(P):
        cnt[o] = s
        for c in range(C):
            pos[c, o] = s
            s += hist[c, o]
    cnt[P] = s
    return cnt, pos


@njit(nogil=True, cache=True, inline="always")
def _scatter(claimed, claim, own, loc, pos, L, U, c, k0, k1):
    for k in range(k0, k1):
        o = own[k]
        if o < 0:                   # absorbed in place (split_claims)
            continue
        p = pos[c, o]
        L[p] = loc[k]
        U[p] = claim[claimed[k]]
        pos[c, o] = p + 1


@njit(nogil=True, cache=True, inline="always")
def _take(x, parent, visited, p, write=True):
    """Whether worker row ``x`` took parent ``p`` (``write``; else its parent is written already): its
    ``visited`` bit was clear (an atomic OR: one winner)."""
    bit = np.int64(1) << (x & 63)
    if visited[x >> 6] & bit:
        return False
    if atomic_or(visited, x >> 6, bit) & bit:
        return False
    if write:
        parent[x] = p
    return True


@njit(nogil=True, cache=True, inline="always")
def _split_chunk(t, claimed, claim, code, P, q, r, slot_of, skip_own, direct, parent, visited, own, loc, hist, dst,
                 c, k0, k1):
    """:func:`split_claims` over the claims ``[k0, k1)``: a vertex of a rank held here (``slot_of[o]`` >= 0)
    absorbed at once (its worker row written to ``dst`` from ``dst[k0]``; left alone with ``skip_own``; its
    parent not written with ``direct`` on a block slot), the others' owner rank and owner-local index kept and
    counted in ``hist[c]``; returns (the absorbed count, their degree sum)."""
    n = 0
    d = 0
    for k in range(k0, k1):
        v = claimed[k]
        o, l = owner_local(v, code, P, q, r)
        s = slot_of[o]
        if s < 0:
            own[k] = o
            loc[k] = l
            hist[c, o] += 1
            continue
        own[k] = -1
        if skip_own:
            continue
        i = np.int64(l) + t.pad[s]
        x = t.off[s] + i
        if direct and t.gs[s] == 1:
            if not _take(x, parent, visited, 0, False):
                continue
        elif not _take(x, parent, visited, claim[v]):
            continue
        ip = _indptr(t, s)
        d += ip[i + 1] - ip[i]
        dst[k0 + n] = x
        n += 1
    return n, d


@njit(parallel=True, nogil=True, cache=True)
def _split_par(t, claimed, claim, code, P, q, r, slot_of, skip_own, direct, parent, visited, tmp, out, C):
    m = claimed.shape[0]
    own = np.empty(m, np.int32)
    loc = np.empty(m, claim.dtype)
    hist = np.zeros((C, P), np.int64)
    cn = np.zeros(C, np.int64)
    dg = np.zeros(C, np.int64)
    for c in prange(C):
        cn[c], dg[c] = _split_chunk(t, claimed, claim, code, P, q, r, slot_of, skip_own, direct, parent, visited,
                                    own, loc, hist, tmp, c, c * m // C, (c + 1) * m // C)
    cnt, pos = _bucket_starts(hist, P, C)
    L = np.empty(cnt[P], claim.dtype)
    U = np.empty(cnt[P], claim.dtype)
    offs = np.empty(C, np.int64)
    e = 0
    for c in range(C):
        offs[c] = e
        e += cn[c]
    for c in prange(C):
        k0 = c * m // C
        _scatter(claimed, claim, own, loc, pos, L, U, c, k0, (c + 1) * m // C)
        for j in range(cn[c]):
            out[offs[c] + j] = tmp[k0 + j]
    return L, U, cnt, e, dg.sum()


@njit(nogil=True, cache=True)
def _split_serial(t, claimed, claim, code, P, q, r, slot_of, skip_own, direct, parent, visited, out):
    m = claimed.shape[0]
    own = np.empty(m, np.int32)
    loc = np.empty(m, claim.dtype)
    hist = np.zeros((1, P), np.int64)
    n, d = _split_chunk(t, claimed, claim, code, P, q, r, slot_of, skip_own, direct, parent, visited, own, loc, hist,
                        out, 0, 0, m)
    cnt, pos = _bucket_starts(hist, P, 1)
    L = np.empty(cnt[P], claim.dtype)
    U = np.empty(cnt[P], claim.dtype)
    _scatter(claimed, claim, own, loc, pos, L, U, 0, 0, m)
    return L, U, cnt, n, d


def split_claims(t, claimed, claim, code, P, q, r, slot_of, parent, visited, tmp, out, C, skip_own=False,
                 direct=False):
    """A worker's claims split by owner: those of the ranks it holds absorbed at once into its rows (one pass:
    no pairs made for them), the others' (owner-local index, ``claim[v]``) pairs grouped by owner rank (a
    stable counting sort); ``C`` chunks in parallel (one chunk: on this thread); ``tmp``: scratch of at least
    as many entries as claims.

    Parameters
    ----------
    slot_of : ndarray of int64
        Per rank, its slot in ``t`` when this worker holds it, else -1.
    parent, visited : ndarray
        Over worker rows (as :func:`absorb_rows`'s); the claims' global bits are set already.
    out : ndarray of int64
        The absorbed vertices' worker rows, from 0.
    skip_own : bool
        Leave the held ranks' claims alone (none absorbed, none bucketed; end and degrees 0): the caller takes
        them from the bits (:func:`absorb_bits`).
    direct : bool
        The claims wrote the parents of the block slots' vertices already (``td_rows``'s ``parent``): those
        vertices only take their bits.

    Returns
    -------
    L, U, cnt
        The other ranks' pairs and the P + 1 offsets (a held rank's bucket empty).
    end : int
        The absorbed vertices' count in ``out``.
    degrees : int
        Their degree sum.
    """
    if C == 1:
        return _split_serial(t, claimed, claim, code, P, q, r, slot_of, skip_own, direct, parent, visited, out)
    return _split_par(t, claimed, claim, code, P, q, r, slot_of, skip_own, direct, parent, visited, tmp, out, C)


@njit(nogil=True, cache=True, inline="always")
def _absorb_chunk(t, L, U, seg_lo, seg_slot, pos, parent, visited, gvis, dst, m0, m1):
    """:func:`absorb_rows` over the pairs ``[m0, m1)`` of the segments' concatenation (``pos``: the
    segments' starts in it): the new vertices' worker rows written to ``dst`` from ``dst[0]``; returns
    (their count, their degree sum)."""
    k = np.searchsorted(pos, m0, side="right") - 1
    j = m0
    n = 0
    d = 0
    while j < m1:
        s = seg_slot[k]
        ip = _indptr(t, s)
        o, pd, gb, gs = t.off[s], t.pad[s], t.gb[s], t.gs[s]
        src = seg_lo[k] - pos[k]
        stop = min(pos[k + 1], m1)
        for jj in range(j, stop):
            i = np.int64(L[src + jj]) + pd
            x = o + i
            if not _take(x, parent, visited, U[src + jj]):
                continue
            v = gb + i * gs
            atomic_or(gvis, v >> 6, np.int64(1) << (v & 63))
            d += ip[i + 1] - ip[i]
            dst[n] = x
            n += 1
        j = stop
        k += 1
    return n, d


@njit(nogil=True, cache=True, inline="always")
def _segment_starts(seg_n):
    K = seg_n.shape[0]
    pos = np.zeros(K + 1, np.int64)
    for k in range(K):
        pos[k + 1] = pos[k] + seg_n[k]
    return pos


@njit(parallel=True, nogil=True, cache=True)
def _absorb_par(t, L, U, seg_lo, seg_n, seg_slot, parent, visited, gvis, tmp, out, w, C):
    pos = _segment_starts(seg_n)
    M = pos[seg_n.shape[0]]
    cnt = np.zeros(C, np.int64)
    deg = np.zeros(C, np.int64)
    for c in prange(C):
        m0 = c * M // C
        cnt[c], deg[c] = _absorb_chunk(t, L, U, seg_lo, seg_slot, pos, parent, visited, gvis, tmp[m0:], m0,
                                       (c + 1) * M // C)
    offs = np.empty(C, np.int64)
    e = w
    for c in range(C):
        offs[c] = e
        e += cnt[c]
    for c in prange(C):
        m0 = c * M // C
        o = offs[c]
        for k in range(cnt[c]):
            out[o + k] = tmp[m0 + k]
    return e, deg.sum()


@njit(nogil=True, cache=True)
def _absorb_serial(t, L, U, seg_lo, seg_n, seg_slot, parent, visited, gvis, out, w):
    pos = _segment_starts(seg_n)
    n, d = _absorb_chunk(t, L, U, seg_lo, seg_slot, pos, parent, visited, gvis, out[w:], 0, pos[seg_n.shape[0]])
    return w + n, d


def absorb_rows(t, L, U, seg_lo, seg_n, seg_slot, parent, visited, gvis, tmp, out, w, C):
    """The owner side of a top-down level over every slot (module docstring): ``C`` chunks of the
    segments' pairs in parallel (one chunk: on this thread, waking no other); ``tmp``: scratch of at least
    as many entries as pairs.

    Returns
    -------
    end : int
        The new end of ``out`` (the new vertices' worker rows from ``w``).
    degrees : int
        The new vertices' degree sum.
    """
    if C == 1:
        return _absorb_serial(t, L, U, seg_lo, seg_n, seg_slot, parent, visited, gvis, out, w)
    return _absorb_par(t, L, U, seg_lo, seg_n, seg_slot, parent, visited, gvis, tmp, out, w, C)


# ------------------------------------------------------------ from the bits
# worker words per chunk of the word passes
_WORD_GRAIN = 1024
# a level takes its vertices from the bits once it reaches more than one vertex per this many worker words
# (a word of the pass costs a fraction of one claim's atomic)
_WORDS_PER_VERTEX = 8


def by_bits(block: bool, vertices: int, words: int) -> bool:
    """Whether a level reaching up to ``vertices`` vertices on a worker of ``words`` row words (its slots
    block partitions or not) takes them by one pass over the words rather than an atomic per claim."""
    return block and vertices * _WORDS_PER_VERTEX > words


@njit(nogil=True, cache=True)
def _bits_range(t, gvis, visited, parent, claim, take_claim, out, k, d, a, b, write, front, fmode):
    """Worker words ``[a, b)``, slot by slot (a slot's words are a run of its global words): the bits of
    rows reached and not yet taken (``gvis`` set, ``visited`` clear); counted only, or (``write``) taken,
    their rows written to ``out`` from ``k``, their degrees added to ``d``, and each word's bits stored to
    (``fmode`` 1) or OR'd into (2) ``front``'s word (an empty ``out``: taken and counted, no row written).
    Returns (k, d): the count (popcounts) when not writing."""
    off = t.off
    ww = a
    s = _find_slot(off, a << 6) if a < b else 0
    while ww < b:
        o = off[s]
        stop = min(b, off[s + 1] >> 6)
        g = (t.gb[s] >> 6) - (o >> 6)
        if not write:
            for x in range(ww, stop):
                k += _popcount(gvis[g + x] & ~visited[x])
        else:
            ip = _indptr(t, s)
            gb = t.gb[s]
            for x in range(ww, stop):
                y = gvis[g + x] & ~visited[x]
                if fmode == 1:
                    front[x] = y
                elif fmode == 2:
                    front[x] |= y
                if y == 0:
                    continue
                visited[x] |= y
                i0 = (x << 6) - o
                while y != 0:
                    i = i0 + _cttz(y)
                    y &= y - 1
                    if take_claim:
                        parent[o + i] = claim[gb + i]
                    d += ip[i + 1] - ip[i]
                    if out.shape[0]:
                        out[k] = o + i
                    k += 1
        ww = stop
        s += 1
    return k, d


@njit(parallel=True, nogil=True, cache=True)
def _absorb_bits(t, gvis, visited, parent, claim, take_claim, out, w, C, front, fmode):
    WW = t.off[t.nrow.shape[0]] >> 6
    cnt = np.zeros(C + 1, np.int64)
    for c in prange(C):
        cnt[c + 1] = _bits_range(t, gvis, visited, parent, claim, take_claim, out, 0, 0, c * WW // C,
                                 (c + 1) * WW // C, False, front, 0)[0]
    cnt[0] = w
    for c in range(C):
        cnt[c + 1] += cnt[c]
    deg = np.zeros(C, np.int64)
    for c in prange(C):
        deg[c] = _bits_range(t, gvis, visited, parent, claim, take_claim, out, cnt[c], 0, c * WW // C,
                             (c + 1) * WW // C, True, front, fmode)[1]
    return cnt[C], deg.sum()


_NO_FRONT = np.empty(0, np.int64)


def absorb_bits(t, gvis, visited, parent, claim, take_claim, out, w, front=None, keep=False):
    """The level's new vertices on the worker's rows from the bits (module docstring); returns (the new end of
    ``out``, their degree sum). Given ``front`` (a bitmap over worker rows), every worker word of it is set to
    the new vertices' bits in that word, or (``keep``) those bits are OR'd into it: the bitmap of ``out[w:end]``,
    as :func:`~dbfs.bfs.cpu.frontier.queue_to_bitmap` of it would make it."""
    WW = int(t.off[-1]) >> 6
    C = min(max(WW // _WORD_GRAIN, 1), 256)
    fmode = 0 if front is None else 2 if keep else 1
    end, deg = _absorb_bits(t, gvis, visited, parent, claim, take_claim, out, w, C,
                            _NO_FRONT if front is None else front, fmode)
    return int(end), int(deg)


@njit(parallel=True, nogil=True, cache=True)
def _take_bits(t, gvis, visited, front, none, C):
    WW = t.off[t.nrow.shape[0]] >> 6
    cn = np.zeros(C, np.int64)
    dg = np.zeros(C, np.int64)
    for c in prange(C):
        cn[c], dg[c] = _bits_range(t, gvis, visited, none, none, False, none, 0, 0, c * WW // C,
                                   (c + 1) * WW // C, True, front, 1)
    return cn.sum(), dg.sum()


def take_bits(t, gvis, visited, front):
    """The level's new vertices on the worker's rows from the bits, as :func:`absorb_bits` without
    ``take_claim`` takes them, but left as a bitmap: every worker word of ``front`` set to the new vertices'
    bits in it, no queue written (one pass over the words, no count pass); returns (their count, their
    degree sum)."""
    WW = int(t.off[-1]) >> 6
    n, d = _take_bits(t, gvis, visited, front, _NO_FRONT, min(max(WW // _WORD_GRAIN, 1), 256))
    return int(n), int(d)


@njit(parallel=True, nogil=True, cache=True)
def mark_pairs(t, L, U, seg_lo, seg_n, seg_slot, parent, visited, gvis, C):
    """The pairs' new vertices marked (module docstring): per chunk of pairs, first their global bits (atomic
    ORs reading nothing else), then their parents (plain stores)."""
    pos = _segment_starts(seg_n)
    M = pos[seg_n.shape[0]]
    for c in prange(C):
        m0 = c * M // C
        m1 = (c + 1) * M // C
        for step in range(2):
            k = np.searchsorted(pos, m0, side="right") - 1
            j = m0
            while j < m1:
                s = seg_slot[k]
                o, pd, gb = t.off[s], t.pad[s], t.gb[s]
                src = seg_lo[k] - pos[k]
                stop = min(pos[k + 1], m1)
                for jj in range(j, stop):
                    i = np.int64(L[src + jj]) + pd
                    x = o + i
                    if visited[x >> 6] & (np.int64(1) << (x & 63)):
                        continue
                    if step == 0:
                        v = gb + i
                        atomic_or(gvis, v >> 6, np.int64(1) << (v & 63))
                    else:
                        parent[x] = U[src + jj]
                j = stop
                k += 1


@njit(nogil=True, cache=True)
def _sorted_bounds(claimed, starts, slot_of):
    """Per rank, where its claims start in ``claimed`` (ascending) and the pair offsets (held ranks empty)."""
    P = starts.shape[0] - 1
    lo = np.empty(P, np.int64)
    cnt = np.zeros(P + 1, np.int64)
    for o in range(P):
        a = np.searchsorted(claimed, starts[o])
        lo[o] = a
        cnt[o + 1] = cnt[o] + (np.searchsorted(claimed, starts[o + 1]) - a if slot_of[o] < 0 else 0)
    return lo, cnt


@njit(parallel=True, nogil=True, cache=True)
def _sorted_pairs(claimed, claim, starts, lo, cnt, L, U, C):
    P = lo.shape[0]
    M = cnt[P]
    for c in prange(C):
        m1 = (c + 1) * M // C
        j = c * M // C
        o = np.searchsorted(cnt, j, side="right") - 1
        while j < m1:
            stop = min(cnt[o + 1], m1)
            src = lo[o] - cnt[o]
            for jj in range(j, stop):
                v = claimed[src + jj]
                L[jj] = v - starts[o]
                U[jj] = claim[v]
            j = stop
            o += 1


def words_elsewhere(starts, slot_of):
    """The global word runs ``[a, b)`` holding the vertices of the ranks not held here (``slot_of`` < 0;
    ``starts``: the ranks' first vertices, P + 1 entries), ascending, runs that share a word merged (a
    run's end words may hold a held rank's vertices too)."""
    runs = []
    for o in range(starts.shape[0] - 1):
        if slot_of[o] >= 0 or starts[o + 1] <= starts[o]:
            continue
        a, b = int(starts[o]) >> 6, (int(starts[o + 1]) + 63) >> 6
        if runs and runs[-1][1] >= a:
            runs[-1][1] = max(runs[-1][1], b)
        else:
            runs.append([a, b])
    return [(a, b) for a, b in runs]


def claims_in(bits, runs):
    """The set bits of ``bits`` (a bitmap over global ids) in the word runs ``runs``
    (:func:`words_elsewhere`), as ascending global ids: what :func:`split_sorted` needs of a level whose
    claims :func:`~dbfs.bfs.cpu.rowtable.td_rows` left as bits."""
    if not runs:
        return np.empty(0, np.int64)
    qs = [bitmap_to_queue(bits[a:b], a << 6) for a, b in runs]
    return qs[0] if len(qs) == 1 else np.concatenate(qs)


def split_sorted(claimed, claim, starts, slot_of, C):
    """:func:`split_claims`'s pairs (the same bytes) for ASCENDING claims on block
    partitions, the held ranks' claims left to :func:`absorb_bits`: a rank's claims are one run of
    ``claimed``, found by binary search on the ranks' first vertices ``starts`` (P + 1 entries), so no claim
    is divided by the rank size or counted twice; returns (L, U, cnt)."""
    lo, cnt = _sorted_bounds(claimed, starts, slot_of)
    M = int(cnt[-1])
    L = np.empty(M, claim.dtype)
    U = np.empty(M, claim.dtype)
    if M:
        _sorted_pairs(claimed, claim, starts, lo, cnt, L, U, C)
    return L, U, cnt

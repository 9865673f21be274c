"""One BFS level over several local row ranges at once: every partition a worker holds, in one pass.

Contract
--------
:func:`row_table` lays S local row ranges ("slots": the partitions of one
worker, each with its own CSR arrays, hub array and multi-edge bitmap, the
inputs of :func:`~dbfs.bfs.cpu.bottomup.bu_step`) end to end in one WORKER
row space: local row ``i`` of slot ``s`` is worker row ``off[s] + i``, with
``off[s]`` a multiple of 64, so slot ``s``'s words of a worker bitmap are a
run starting at word ``off[s] >> 6`` (a view of them is the partition's
local bitmap), and global vertex ``gb[s] + i * gs[s]`` (block: its base and
1; cyclic: its rank and P). Parent arrays, visited and frontier bitmaps
and queues are over worker rows. The steps are :mod:`dbfs.bfs.cpu`'s, over
every slot in ONE call:

- :func:`td_rows` ``(t, queue, claim, visited) -> (claimed, examined)``:
  :func:`~dbfs.bfs.cpu.topdown.td_step`'s claims for a queue of worker rows:
  every neighbour v whose bit is clear in ``visited`` (a bitmap over global
  ids, exact on entry and again on return) gets the bit and
  ``claim[v] = `` the global id of a queued vertex adjacent to it;
  ``claimed`` holds each such v once (global ids).
- :func:`split_claims` ``(t, claimed, claim, code, P, q, r, slot_of, parent,
  visited, tmp, out, C) -> (L, U, cnt, end, degrees)``: the claims of the
  ranks this worker holds (``slot_of[rank]`` >= 0) absorbed at once (as
  :func:`absorb_rows` would, in the same pass: a worker's own vertices cost
  one pass after the claims), the others' (owner-local index, ``claim[v]``)
  pairs grouped by owner rank (:func:`dbfs.partition.owner_local`), a stable
  counting sort; ``cnt``: P + 1 offsets (a held rank's bucket empty); pairs
  of ``claim``'s dtype.
- :func:`absorb_rows` ``(t, L, U, seg_lo, seg_n, seg_slot, parent, visited,
  gvis, tmp, out, w, C) -> (w, degrees)``: the owner side: segment ``k``,
  pairs ``[seg_lo[k], seg_lo[k] + seg_n[k])`` of ``L``/``U``, names rows of
  slot ``seg_slot[k]``; each unvisited vertex keeps one parent (an atomic OR
  on its ``visited`` bit picks one winner among pairs racing for it), gets
  its bit in ``gvis`` (global ids) too and its worker row appended to ``out``
  from ``w``; returns the new end and the sum of the new vertices' degrees.
- :func:`bu_rows` ``(t, front, parent, visited, nxt, want_deg)``: ``bu_step``
  (without ``fill``) over every slot against the GLOBAL frontier bitmap
  ``front``; its counts summed over the slots.
- :func:`or_rows` ``(front, fbm, t)``: OR the slots' frontier words into a
  global bitmap (block: runs of words; cyclic: scattered bits);
  :func:`copy_rows` ``(dst, fbm, t)``: copy them, a slot's first word left
  out where its rows start inside a word (a block partition's ``pad``).

Method: the slots' arrays are separate allocations (one per partition,
loaded by separate tasks), so a kernel reaches them through a table of their
addresses (``_view``: the address cast to a typed pointer and wrapped by
``numba.carray``), as C code does through an array of row pointers; the
:class:`RowTable` holds a reference to every array it points into, and a
caller keeps the table for as long as it calls the kernels. The work is
split over the threads by EDGES for the top-down claims (equal ranges of
the concatenated rows of the whole queue, a range crossing slots, as
``td_step`` splits one frontier: Beamer, Asanovic and Patterson,
"Direction-Optimizing Breadth-First Search", SC'12, with GAP's split), by
pairs for the owner side (the 1-D exchange of Buluc and Madduri, "Parallel
Breadth-First Search on Distributed Memory Systems", SC'11) and by blocks of
bitmap words for bottom-up (``bu_step``'s blocks, each inside one slot),
never by slot: a level's work costs the same kernel calls however many
partitions the worker holds, and a small partition's work is not held to one
thread while another's runs.

Encoding: bitmaps are int64 words, bit ``x & 63`` of word ``x >> 6``; queues
int64 worker rows; ``claim`` the worker's claim scratch over global ids
(:func:`dbfs.graph.id_dtype` of N); slot tables int64.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import carray, njit, prange, types
from numba.extending import intrinsic

from dbfs.partition import owner_local

from .bottomup import _BU_BLOCK, _bu_block
from .frontier import _DEG_SERIAL_VERTICES
from .primitives import _cttz, atomic_or, prefetch
from .topdown import _TD_PREFETCH, _TD_SERIAL_EDGES, _td_parallel

__all__ = ["RowTable", "row_table", "td_rows", "split_claims", "absorb_rows", "bu_rows", "or_rows", "copy_rows"]


class _Rows(NamedTuple):
    """The kernels' view of a :class:`RowTable` (int64 arrays per slot; ``*0``: empty arrays giving the
    element types the addresses point to)."""

    ipa: np.ndarray     # address of the slot's indptr (int64, nrow + 1 entries)
    ixa: np.ndarray     # address of its indices (nnz entries)
    hba: np.ndarray     # address of its hub array (nrow entries)
    mua: np.ndarray     # address of its multi-edge bitmap (int64 words)
    nrow: np.ndarray    # local rows (a block partition's pad rows included)
    nnz: np.ndarray
    off: np.ndarray     # worker row of local row 0 (S + 1 entries: off[S] = worker rows)
    pad: np.ndarray     # rows before the partition's first vertex (block), else 0
    gb: np.ndarray      # global id of local row i: gb + i * gs
    gs: np.ndarray
    bo: np.ndarray      # first bottom-up block (S + 1 entries)
    ip0: np.ndarray
    ix0: np.ndarray
    hb0: np.ndarray


class RowTable:
    """S slots laid end to end (see the module docstring): ``t`` for the kernels, ``rows`` worker rows,
    ``off`` / ``words`` per slot; holds every array ``t`` points into."""

    def __init__(self, t: _Rows, keep: list):
        self.t = t
        self._keep = keep
        self.S = int(t.nrow.shape[0])
        self.rows = int(t.off[-1])
        self.off = [int(x) for x in t.off[:-1]]
        self.words = [(int(n) + 63) >> 6 for n in t.nrow]


def row_table(slots) -> RowTable:
    """A :class:`RowTable` of ``slots``: per slot ``(indptr, indices, hub, multi, pad, gb, gs)``, its CSR
    arrays (C-contiguous, one dtype each across slots), hub array, multi-edge bitmap, pad rows and global id
    ``gb + i * gs`` of local row ``i``."""
    keep, cols = [], {k: [] for k in ("ipa", "ixa", "hba", "mua", "nrow", "nnz", "pad", "gb", "gs")}
    off, bo = [0], [0]
    for indptr, indices, hub, multi, pad, gb, gs in slots:
        arrs = [np.ascontiguousarray(a) for a in (indptr, indices, hub, multi)]
        keep += arrs
        n = arrs[0].shape[0] - 1
        words = (n + 63) >> 6
        if arrs[2].shape[0] < n or arrs[3].shape[0] < words or arrs[3].dtype != np.int64:
            raise ValueError(f"a slot of {n} rows needs a hub entry per row and {words} int64 multi words")
        for k, a in zip(("ipa", "ixa", "hba", "mua"), arrs):
            cols[k].append(a.ctypes.data)
        cols["nrow"].append(n)
        cols["nnz"].append(arrs[1].shape[0])
        cols["pad"].append(int(pad))
        cols["gb"].append(int(gb))
        cols["gs"].append(int(gs))
        off.append(off[-1] + (words << 6))
        bo.append(bo[-1] + (words + _BU_BLOCK - 1) // _BU_BLOCK)
    if not keep:
        raise ValueError("a row table needs at least one slot")
    dt = {a.dtype for a in keep[1::4]}, {a.dtype for a in keep[2::4]}
    if len(dt[0]) != 1 or len(dt[1]) != 1 or keep[0].dtype != np.int64:
        raise ValueError("the slots' indptr must be int64, their indices and hub arrays of one dtype each")
    t = _Rows(**{k: np.asarray(v, np.int64) for k, v in cols.items()}, off=np.asarray(off, np.int64),
              bo=np.asarray(bo, np.int64), ip0=np.empty(0, np.int64), ix0=np.empty(0, dt[0].pop()),
              hb0=np.empty(0, dt[1].pop()))
    return RowTable(t, keep)


# ------------------------------------------------------------------ access
@intrinsic
def _ptr(typingctx, addr, like):
    """``addr`` (an integer) as a pointer to ``like``'s element type."""
    if not isinstance(addr, types.Integer) or not isinstance(like, types.Array):
        return None
    sig = types.CPointer(like.dtype)(addr, like)

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(signature.return_type))

    return sig, codegen


@njit(nogil=True, cache=True, inline="always")
def _view(addr, n, like):
    """The ``n`` elements of ``like``'s type at ``addr`` (an array the table keeps alive)."""
    return carray(_ptr(addr, like), n)


@njit(nogil=True, cache=True, inline="always")
def _indptr(t, s):
    return _view(t.ipa[s], t.nrow[s] + 1, t.ip0)


@njit(nogil=True, cache=True, inline="always")
def _indices(t, s):
    return _view(t.ixa[s], t.nnz[s], t.ix0)


@njit(nogil=True, cache=True, inline="always")
def _slot_of(t, wr, s):
    """The slot holding worker row ``wr`` (``s``: a guess, kept while it holds)."""
    if wr < t.off[s] or wr >= t.off[s + 1]:
        s = np.searchsorted(t.off, wr, side="right") - 1
    return s


@njit(nogil=True, cache=True, inline="always")
def _row_degree(t, wr, s):
    """(slot of worker row ``wr``, its degree); ``s``: the slot guess (:func:`_slot_of`)."""
    s = _slot_of(t, wr, s)
    ip = _indptr(t, s)
    r = wr - t.off[s]
    return s, ip[r + 1] - ip[r]


# --------------------------------------------------------------- top-down
@njit(nogil=True, cache=True)
def _rows_edges(t, queue):
    """The queue's degree sum, serial."""
    s = 0
    e = 0
    for k in range(queue.shape[0]):
        s, d = _row_degree(t, queue[k], s)
        e += d
    return e


@njit(nogil=True, cache=True)
def _rows_degree_offsets(t, queue):
    """Exclusive prefix sum of the queue's degrees (len f + 1), serial."""
    f = queue.shape[0]
    off = np.empty(f + 1, np.int64)
    off[0] = 0
    s = 0
    acc = 0
    for k in range(f):
        s, d = _row_degree(t, queue[k], s)
        acc += d
        off[k + 1] = acc
    return off


@njit(parallel=True, nogil=True, cache=True)
def _rows_degree_offsets_par(t, queue):
    """Exclusive prefix sum of the queue's degrees (len f + 1), two-pass parallel."""
    f = queue.shape[0]
    nb = 64
    sums = np.zeros(nb + 1, np.int64)
    for b in prange(nb):
        s = 0
        acc = 0
        for k in range(b * f // nb, (b + 1) * f // nb):
            s, d = _row_degree(t, queue[k], s)
            acc += d
        sums[b + 1] = acc
    for b in range(nb):
        sums[b + 1] += sums[b]
    off = np.empty(f + 1, np.int64)
    off[0] = 0
    for b in prange(nb):
        s = 0
        acc = sums[b]
        for k in range(b * f // nb, (b + 1) * f // nb):
            s, d = _row_degree(t, queue[k], s)
            acc += d
            off[k + 1] = acc
    return off


@njit(nogil=True, cache=True)
def _rows_claim_serial(t, queue, claim, visited, E):
    """:func:`td_rows` on one thread (``E``: the queue's degree sum)."""
    out = np.empty(min(E, claim.shape[0]), np.int64)
    w = 0
    s = 0
    for k in range(queue.shape[0]):
        s = _slot_of(t, queue[k], s)
        ip = _indptr(t, s)
        ix = _indices(t, s)
        r = queue[k] - t.off[s]
        u = t.gb[s] + r * t.gs[s]
        for j in range(ip[r], ip[r + 1]):
            v = np.int64(ix[j])
            bit = np.int64(1) << (v & 63)
            if visited[v >> 6] & bit:
                continue
            visited[v >> 6] |= bit
            claim[v] = u
            out[w] = v
            w += 1
    return out[:w].copy(), E


@njit(parallel=True, nogil=True, cache=True)
def _rows_claim_chunks(t, queue, claim, visited, degoff, e_lo, e_hi, C, out):
    """:func:`~dbfs.bfs.cpu.topdown._td_claim_chunks` over worker rows: the queue's edges ``[e_lo, e_hi)``
    (indices into the concatenation of its rows, whatever their slots) in ``C`` equal ranges in parallel,
    claims (racy bit updates, ``claim[v]`` = the claiming vertex's global id) recorded in each chunk's slice
    of ``out``; returns the records per chunk."""
    E = e_hi - e_lo
    cnt = np.zeros(C, np.int64)
    for c in prange(C):
        e0 = e_lo + c * E // C
        e1 = e_lo + (c + 1) * E // C
        i = np.searchsorted(degoff, e0, side="right") - 1
        k = e0
        w = e0 - e_lo
        s = 0
        while k < e1:
            s = _slot_of(t, queue[i], s)
            ip = _indptr(t, s)
            ix = _indices(t, s)
            row = queue[i] - t.off[s]
            u = t.gb[s] + row * t.gs[s]
            base = ip[row] - degoff[i]
            stop = degoff[i + 1]
            if stop > e1:
                stop = e1
            end = base + stop
            for j in range(base + k, end):
                if j + _TD_PREFETCH < end:
                    prefetch(claim, np.int64(ix[j + _TD_PREFETCH]))
                v = np.int64(ix[j])
                bit = np.int64(1) << (v & 63)
                word = visited[v >> 6]
                if word & bit:
                    continue
                visited[v >> 6] = word | bit  # racy: a lost bit only means a duplicate record
                claim[v] = u
                out[w] = v
                w += 1
            k = stop
            i += 1
        cnt[c] = w - (e0 - e_lo)
    return cnt


def td_rows(t, queue, claim, visited):
    """Top-down claims of a queue of worker rows over every slot of ``t`` (a :class:`RowTable`'s ``t``; see
    the module docstring): serial below ``td_step``'s limit, else by equal edge ranges in parallel.

    Parameters
    ----------
    t : _Rows
    queue : ndarray of int64
        Worker rows of the frontier.
    claim : ndarray
        Over global ids; ``claim[v]`` is written (the claiming vertex's global id), never read.
    visited : ndarray of int64
        Bitmap over global ids, exact on entry and on return.

    Returns
    -------
    claimed : ndarray of int64
        Each newly claimed vertex once (global ids).
    examined : int
        The queue's degree sum.
    """
    f = queue.shape[0]
    if f <= _TD_SERIAL_EDGES:
        E = _rows_edges(t, queue)
        if E <= _TD_SERIAL_EDGES:
            return _rows_claim_serial(t, queue, claim, visited, E)
    degoff = _rows_degree_offsets(t, queue) if f <= _DEG_SERIAL_VERTICES else _rows_degree_offsets_par(t, queue)
    E = int(degoff[f])
    if E == 0:
        return np.empty(0, np.int64), 0

    def claims(e_lo, e_hi, C, out):
        return _rows_claim_chunks(t, queue, claim, visited, degoff, e_lo, e_hi, C, out)

    return _td_parallel(claims, E, visited)


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
def _take(x, parent, visited, p):
    """Whether worker row ``x`` took parent ``p``: its ``visited`` bit was clear (an atomic OR: one winner)."""
    bit = np.int64(1) << (x & 63)
    if visited[x >> 6] & bit:
        return False
    if atomic_or(visited, x >> 6, bit) & bit:
        return False
    parent[x] = p
    return True


@njit(nogil=True, cache=True, inline="always")
def _split_chunk(t, claimed, claim, code, P, q, r, slot_of, parent, visited, own, loc, hist, dst, c, k0, k1):
    """:func:`split_claims` over the claims ``[k0, k1)``: a vertex of a rank held here (``slot_of[o]`` >= 0)
    absorbed at once (its worker row written to ``dst`` from ``dst[k0]``), the others' owner rank and owner-local
    index kept and counted in ``hist[c]``; returns (the absorbed count, their degree sum)."""
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
        i = np.int64(l) + t.pad[s]
        x = t.off[s] + i
        if not _take(x, parent, visited, claim[v]):
            continue
        ip = _indptr(t, s)
        d += ip[i + 1] - ip[i]
        dst[k0 + n] = x
        n += 1
    return n, d


@njit(parallel=True, nogil=True, cache=True)
def _split_par(t, claimed, claim, code, P, q, r, slot_of, parent, visited, tmp, out, C):
    m = claimed.shape[0]
    own = np.empty(m, np.int32)
    loc = np.empty(m, claim.dtype)
    hist = np.zeros((C, P), np.int64)
    cn = np.zeros(C, np.int64)
    dg = np.zeros(C, np.int64)
    for c in prange(C):
        cn[c], dg[c] = _split_chunk(t, claimed, claim, code, P, q, r, slot_of, parent, visited, own, loc, hist, tmp,
                                    c, c * m // C, (c + 1) * m // C)
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
def _split_serial(t, claimed, claim, code, P, q, r, slot_of, parent, visited, out):
    m = claimed.shape[0]
    own = np.empty(m, np.int32)
    loc = np.empty(m, claim.dtype)
    hist = np.zeros((1, P), np.int64)
    n, d = _split_chunk(t, claimed, claim, code, P, q, r, slot_of, parent, visited, own, loc, hist, out, 0, 0, m)
    cnt, pos = _bucket_starts(hist, P, 1)
    L = np.empty(cnt[P], claim.dtype)
    U = np.empty(cnt[P], claim.dtype)
    _scatter(claimed, claim, own, loc, pos, L, U, 0, 0, m)
    return L, U, cnt, n, d


def split_claims(t, claimed, claim, code, P, q, r, slot_of, parent, visited, tmp, out, C):
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
        return _split_serial(t, claimed, claim, code, P, q, r, slot_of, parent, visited, out)
    return _split_par(t, claimed, claim, code, P, q, r, slot_of, parent, visited, tmp, out, C)


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


# --------------------------------------------------------------- bottom-up
@njit(parallel=True, nogil=True, cache=True)
def bu_rows(t, front, parent, visited, nxt, want_deg):
    """``bu_step`` (no ``fill``) over every slot, its blocks in one parallel loop (module docstring);
    returns (awake, examined, awake_deg or -1 without ``want_deg``, left_deg)."""
    S = t.nrow.shape[0]
    awake = 0
    examined = 0
    awake_deg = 0
    left_deg = 0
    for b in prange(t.bo[S]):
        s = np.searchsorted(t.bo, b, side="right") - 1
        nloc = t.nrow[s]
        nwords = (nloc + 63) >> 6
        o = t.off[s]
        w0 = o >> 6
        mu = _view(t.mua[s], nwords, t.ip0)
        n_aw, n_ex, n_deg, n_left = _bu_block(_indptr(t, s), _indices(t, s), front, parent[o:o + nloc],
                                              visited[w0:w0 + nwords], nxt[w0:w0 + nwords],
                                              _view(t.hba[s], nloc, t.hb0), mu, mu, False, want_deg, b - t.bo[s],
                                              nwords, nloc)
        awake += n_aw
        examined += n_ex
        awake_deg += n_deg
        left_deg += n_left
    return awake, examined, awake_deg if want_deg else -1, left_deg


# ---------------------------------------------------------- global bitmaps
@njit(nogil=True, cache=True)
def or_rows(front, fbm, t):
    """OR every slot's words of ``fbm`` (a worker bitmap) into the global bitmap ``front``."""
    for s in range(t.nrow.shape[0]):
        w0 = t.off[s] >> 6
        nw = (t.nrow[s] + 63) >> 6
        if t.gs[s] == 1:
            g0 = t.gb[s] >> 6
            for w in range(nw):
                front[g0 + w] |= fbm[w0 + w]
            continue
        for w in range(nw):
            x = fbm[w0 + w]
            while x != 0:
                b = _cttz(x)
                x &= x - 1
                v = t.gb[s] + ((w << 6) + b) * t.gs[s]
                front[v >> 6] |= np.int64(1) << (v & 63)


@njit(parallel=True, nogil=True, cache=True)
def copy_rows(dst, fbm, t):
    """Copy every slot's words of ``fbm`` (a worker bitmap) to their global words in ``dst`` (block slots),
    leaving out a slot's first word where its rows start inside a word (``pad``: a lower rank's rows share
    it); parallel over the words."""
    S = t.nrow.shape[0]
    total = t.off[S] >> 6
    nb = min(max(total >> 12, 1), 256)
    for c in prange(nb):
        j0 = c * total // nb
        j1 = (c + 1) * total // nb
        s = np.searchsorted(t.off, j0 << 6, side="right") - 1
        j = j0
        while j < j1:
            w0 = t.off[s] >> 6
            nw = (t.nrow[s] + 63) >> 6
            stop = min(w0 + nw, j1)
            first = w0 + 1 if t.pad[s] > 0 else w0
            g = (t.gb[s] >> 6) - w0
            for x in range(max(j, first), stop):
                dst[g + x] = fbm[x]
            j = t.off[s + 1] >> 6
            s += 1

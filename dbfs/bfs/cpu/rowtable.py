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

- :func:`td_rows` ``(t, queue, claim, visited, front=None, parent=None,
  bufs=None) -> (claimed, examined, ascending)``:
  :func:`~dbfs.bfs.cpu.topdown.td_step`'s claims for a queue of worker rows:
  every neighbour v whose bit is clear in ``visited`` (a bitmap over global
  ids, exact on entry and again on return) gets the bit and
  ``claim[v] = `` the global id of a queued vertex adjacent to it (given
  ``parent``, a vertex of a block slot's rows gets ``parent[x] = `` it
  instead, at its worker row x, as ``td_step`` writes its parents);
  ``claimed`` holds each such v once (global ids), ascending when
  ``ascending`` (a large level's, read from the bits it set), or, given
  ``front``, a large level's left there as bits (``claimed`` None). The owner
  side of the claims (split by owner rank, absorbed into the owners' rows)
  is :mod:`dbfs.bfs.cpu.rowclaims`'s. ``bufs``: a worker's store for the
  claims' record buffer and seen bitmap, sized by
  :func:`~dbfs.bfs.cpu.topdown.reserve_td` before
  the searches (a per-thread buffer would be grown again on each thread of
  the worker a search task lands on, inside timed levels).
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
"Direction-Optimizing Breadth-First Search", SC'12, with GAP's split; the
owner side, :mod:`dbfs.bfs.cpu.rowclaims`, by pairs or by words) and by
blocks of bitmap words for bottom-up (``bu_step``'s blocks, each inside one slot),
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

from .bottomup import _BU_BLOCK, _bu_block
from .frontier import _DEG_SERIAL_VERTICES
from .primitives import _NO_CAP, _cttz, prefetch
from .topdown import _TD_PREFETCH, _TD_SERIAL_EDGES, _td_parallel

__all__ = ["RowTable", "row_table", "td_rows", "bu_rows", "or_rows", "copy_rows"]


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


@njit(nogil=True, cache=True)
def _find_slot(off, wr):
    """The slot holding worker row ``wr`` (``off``: the table's S + 1 slot offsets)."""
    return np.searchsorted(off, wr, side="right") - 1


# --------------------------------------------------------------- top-down
# The loops over queue rows below find each row's slot from the bounds [lo, hi) of the previous row's slot,
# held in scalars, and reach the slot's arrays through views made when the slot changes (_find_slot only
# then). Not a helper taking ``t`` per element: inlined where its body branches around a call, it costs
# increments and decrements of the reference counts of all of t's arrays (atomics on lines every thread
# shares) per element, far more than the degree read it guards.
@njit(nogil=True, cache=True)
def _rows_degree_sum(t, queue, k0, k1, off_out, acc, cap):
    """The degree sum of ``queue[k0:k1]`` plus ``acc``, stopping once it exceeds ``cap``; with ``off_out``
    of more than one entry, the running sums written to ``off_out[k + 1]``."""
    off = t.off
    s = _find_slot(off, queue[k0]) if k1 > k0 else 0
    lo, hi = off[s], off[s + 1]
    ip = _indptr(t, s)
    write = off_out.shape[0] > 1
    for k in range(k0, k1):
        wr = queue[k]
        if wr < lo or wr >= hi:
            s = _find_slot(off, wr)
            lo, hi = off[s], off[s + 1]
            ip = _indptr(t, s)
        r = wr - lo
        acc += ip[r + 1] - ip[r]
        if write:
            off_out[k + 1] = acc
        elif acc > cap:
            break
    return acc


@njit(nogil=True, cache=True)
def _rows_edges(t, queue):
    """The queue's degree sum, serial."""
    return _rows_degree_sum(t, queue, 0, queue.shape[0], np.empty(0, np.int64), 0, _NO_CAP)


@njit(nogil=True, cache=True)
def _rows_degree_offsets(t, queue):
    """Exclusive prefix sum of the queue's degrees (len f + 1), serial."""
    f = queue.shape[0]
    off = np.empty(f + 1, np.int64)
    off[0] = 0
    if f:
        _rows_degree_sum(t, queue, 0, f, off, 0, _NO_CAP)
    return off


@njit(parallel=True, nogil=True, cache=True)
def _rows_degree_offsets_par(t, queue):
    """Exclusive prefix sum of the queue's degrees (len f + 1), two-pass parallel."""
    f = queue.shape[0]
    nb = 64
    none = np.empty(0, np.int64)
    sums = np.zeros(nb + 1, np.int64)
    for b in prange(nb):
        sums[b + 1] = _rows_degree_sum(t, queue, b * f // nb, (b + 1) * f // nb, none, 0, _NO_CAP)
    for b in range(nb):
        sums[b + 1] += sums[b]
    off = np.empty(f + 1, np.int64)
    off[0] = 0
    for b in prange(nb):
        _rows_degree_sum(t, queue, b * f // nb, (b + 1) * f // nb, off, sums[b], _NO_CAP)
    return off


@njit(nogil=True, cache=True)
def _held_ranges(t, direct):
    """(lo, hi, sh): the global id ranges ``[lo, hi)`` of the block slots' vertices (pad rows left out) and
    the shift to their worker rows (``x = v + sh``), ranges adjacent in both spaces merged; none unless
    ``direct``."""
    S = t.nrow.shape[0]
    lo = np.empty(S, np.int64)
    hi = np.empty(S, np.int64)
    sh = np.empty(S, np.int64)
    K = 0
    for s in range(S if direct else 0):
        a, b, d = t.gb[s] + t.pad[s], t.gb[s] + t.nrow[s], t.off[s] - t.gb[s]
        if t.gs[s] != 1 or b <= a:
            continue
        if K and hi[K - 1] == a and sh[K - 1] == d:
            hi[K - 1] = b
        else:
            lo[K], hi[K], sh[K] = a, b, d
            K += 1
    return lo[:K], hi[:K], sh[:K]


@njit(nogil=True, cache=True, inline="always")
def _held_row(v, lo, hi, sh):
    """The worker row of global id ``v`` in the ranges of :func:`_held_ranges`, else -1."""
    for h in range(lo.shape[0]):
        if v >= lo[h] and v < hi[h]:
            return v + sh[h]
    return -1


@njit(nogil=True, cache=True)
def _rows_claim_serial(t, queue, claim, parent, visited, E):
    """:func:`td_rows` on one thread (``E``: the queue's degree sum, or -1: summed here first, and a queue
    of more than ``_TD_SERIAL_EDGES`` edges left unclaimed, an empty array and some sum above the limit
    returned: a small level costs one kernel call; ``parent``: as :func:`td_rows`'s, empty for none)."""
    off = t.off
    f = queue.shape[0]
    if E < 0:
        E = _rows_degree_sum(t, queue, 0, f, np.empty(0, np.int64), 0, _TD_SERIAL_EDGES)
        if E > _TD_SERIAL_EDGES:
            return np.empty(0, np.int64), E
    hlo, hhi, hsh = _held_ranges(t, parent.shape[0] > 0)
    out = np.empty(min(E, claim.shape[0]), np.int64)
    w = 0
    s = _find_slot(off, queue[0]) if f else 0
    lo, hi, gb, gs = off[s], off[s + 1], t.gb[s], t.gs[s]
    ip, ix = _indptr(t, s), _indices(t, s)
    for k in range(f):
        wr = queue[k]
        if wr < lo or wr >= hi:
            s = _find_slot(off, wr)
            lo, hi, gb, gs = off[s], off[s + 1], t.gb[s], t.gs[s]
            ip, ix = _indptr(t, s), _indices(t, s)
        r = wr - lo
        u = gb + r * gs
        for j in range(ip[r], ip[r + 1]):
            v = np.int64(ix[j])
            bit = np.int64(1) << (v & 63)
            if visited[v >> 6] & bit:
                continue
            visited[v >> 6] |= bit
            x = _held_row(v, hlo, hhi, hsh)
            if x >= 0:
                parent[x] = u
            else:
                claim[v] = u
            out[w] = v
            w += 1
    return out[:w].copy(), E


@njit(parallel=True, nogil=True, cache=True)
def _rows_claim_chunks(t, queue, claim, parent, visited, degoff, e_lo, e_hi, C, out):
    """:func:`~dbfs.bfs.cpu.topdown._td_claim_chunks` over worker rows: the queue's edges ``[e_lo, e_hi)``
    (indices into the concatenation of its rows, whatever their slots) in ``C`` equal ranges in parallel,
    claims (racy bit updates, ``claim[v]`` or, given ``parent``, a held block row's ``parent[x]`` = the
    claiming vertex's global id) recorded in each chunk's slice of ``out``; returns the records per chunk."""
    E = e_hi - e_lo
    cnt = np.zeros(C, np.int64)
    off = t.off
    hlo, hhi, hsh = _held_ranges(t, parent.shape[0] > 0)
    # the prefetches check the first held range only (most often the only one)
    lo0, hi0, sh0 = (hlo[0], hhi[0], hsh[0]) if hlo.shape[0] else (0, 0, 0)
    for c in prange(C):
        e0 = e_lo + c * E // C
        e1 = e_lo + (c + 1) * E // C
        i = np.searchsorted(degoff, e0, side="right") - 1
        k = e0
        w = e0 - e_lo
        s = _find_slot(off, queue[i]) if k < e1 else 0
        lo, hi, gb, gs = off[s], off[s + 1], t.gb[s], t.gs[s]
        ip, ix = _indptr(t, s), _indices(t, s)
        while k < e1:
            wr = queue[i]
            if wr < lo or wr >= hi:
                s = _find_slot(off, wr)
                lo, hi, gb, gs = off[s], off[s + 1], t.gb[s], t.gs[s]
                ip, ix = _indptr(t, s), _indices(t, s)
            row = wr - lo
            u = gb + row * gs
            base = ip[row] - degoff[i]
            stop = degoff[i + 1]
            if stop > e1:
                stop = e1
            end = base + stop
            for j in range(base + k, end):
                if j + _TD_PREFETCH < end:
                    va = np.int64(ix[j + _TD_PREFETCH])
                    if va >= lo0 and va < hi0:
                        prefetch(parent, va + sh0)
                    else:
                        prefetch(claim, va)
                v = np.int64(ix[j])
                bit = np.int64(1) << (v & 63)
                word = visited[v >> 6]
                if word & bit:
                    continue
                visited[v >> 6] = word | bit  # racy: a lost bit only means a duplicate record
                x = _held_row(v, hlo, hhi, hsh)
                if x >= 0:
                    parent[x] = u   # racing claims store frontier vertices of this level, each a valid parent
                else:
                    claim[v] = u
                out[w] = v
                w += 1
            k = stop
            i += 1
        cnt[c] = w - (e0 - e_lo)
    return cnt


_NO_PARENT = np.empty(0, np.int64)     # td_rows without direct parent writes


def td_rows(t, queue, claim, visited, front=None, parent=None, bufs=None):
    """Top-down claims of a queue of worker rows over every slot of ``t`` (a :class:`RowTable`'s ``t``; see
    the module docstring): serial below ``td_step``'s limit, else by equal edge ranges in parallel.
    With ``front``, a large level's claims are left there as bits (as ``td_step``'s ``front``): no queue
    is read from them, whose count and write passes go over every global word.

    Parameters
    ----------
    t : _Rows
    queue : ndarray of int64
        Worker rows of the frontier.
    claim : ndarray
        Over global ids; ``claim[v]`` is written (the claiming vertex's global id), never read.
    parent : ndarray of int64, optional
        Over worker rows: a vertex of a block slot's rows (its pad rows left out) gets ``parent[x]`` (its
        worker row) instead of ``claim[v]``, as ``td_step`` writes its parents; its worker bit is not set.
    visited : ndarray of int64
        Bitmap over global ids, exact on entry and on return.
    front : ndarray of int64, optional
        A bitmap over global ids (every word written when used): a large level's claims, the bits
        ``visited`` gained, are left there instead of in ``claimed``.
    bufs : dict, optional
        Where the claims' record buffer and seen bitmap are kept (the worker's store, sized before its
        searches: :func:`~dbfs.bfs.cpu.topdown.reserve_td`); None: the calling thread's.

    Returns
    -------
    claimed : ndarray of int64 or None
        Each newly claimed vertex once (global ids); None when they were left in ``front``.
    examined : int
        The queue's degree sum.
    ascending : bool
        Whether ``claimed`` is in ascending order (a large level's, read from the bits it set).
    """
    f = queue.shape[0]
    if parent is None:
        parent = _NO_PARENT
    if f <= _TD_SERIAL_EDGES:
        claimed, E = _rows_claim_serial(t, queue, claim, parent, visited, -1)
        if E <= _TD_SERIAL_EDGES:
            return claimed, E, False
    degoff = _rows_degree_offsets(t, queue) if f <= _DEG_SERIAL_VERTICES else _rows_degree_offsets_par(t, queue)
    E = int(degoff[f])
    if E == 0:
        return np.empty(0, np.int64), 0, True

    def claims(e_lo, e_hi, C, out):
        return _rows_claim_chunks(t, queue, claim, parent, visited, degoff, e_lo, e_hi, C, out)

    return _td_parallel(claims, E, visited, front, bufs)


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

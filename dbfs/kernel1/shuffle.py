"""Kernel 1 as one shuffle: the edge chunks read once by G readers, each rank's rows built from what it receives.

Contract
--------
For ``P`` partitions of ``N`` vertices (:class:`dbfs.partition.Partitioning`,
held by a :class:`ShufflePlan`):

- :func:`reader_spans` cuts ``M`` edge rows, chunked by ``C`` rows, into ``G``
  contiguous runs of whole chunks (reader ``g`` takes chunks ``[g K / G,
  (g + 1) K / G)`` of the ``K``); together they cover every row exactly once.
- :func:`bucket_chunk` turns tuples ``(u, v)`` into ``P`` pieces ``(src,
  dst)``: every tuple with ``u != v`` gives the entries ``u -> v`` and ``v ->
  u``, each in the piece of its source's owner; ``src`` is the source's local
  index (width :func:`dbfs.graph.id_dtype` of the largest partition), ``dst``
  the neighbour's global id (width ``id_dtype(N)``). Self-loops are dropped
  here; duplicates are kept (the build drops them). Order inside a piece is
  unspecified (the build sorts every row).
- :func:`read_buckets` reads rows ``[r0, r1)`` of an edge reader chunk by
  chunk, buckets each chunk and returns the pieces of the ranks asked for
  (concatenated at the end, in row order) with what it read: ``rows`` (the
  edge rows read, each once), the rows' :mod:`dbfs.checksum` part and the
  seconds. Ids outside ``[0, N)`` are a one-line error naming the chunk.
- :func:`check_sum` adds up the readers' parts against the reader's
  ``edges_checksum`` (a mismatch: the reader's one-line error).
- :func:`build_rank` builds partition ``rank``'s rows from the pieces every
  reader sent it: ``indptr`` int64 (``count + 1``, from 0) and ``indices`` of
  width ``id_dtype(N)``, byte for byte partition ``rank`` of the stored
  variant (:func:`dbfs.kernel1.partitioned.build_partitioned`) and the rows of
  :func:`dbfs.kernel1.build_csr` it owns: rows ascending, duplicates dropped
  unless ``dedupe=False``, whatever the readers, their order or the budget.

Method
------
Bucketing is the partitioned build's phase 1 (:func:`.kernels._count_keys`,
:func:`.kernels._scatter_keys`: a counting sort by owner, both directions,
race-free per thread slice) with one fine block per partition, into a
scratch sized by one chunk and copied out per rank, so a reader holds its
share of the entries plus one chunk. :func:`bucket_chunk` also takes an array
module ``xp`` (NumPy or CuPy) and then buckets with array operations only
(owner arithmetic, an argsort by owner, a split): the same pieces up to
order. A rank's build is the in-memory row builder on local rows
(:func:`.inmemory._build_rows`, the partitioned build's phase 2); when its
entries do not fit ``memory_budget`` its rows are cut into ranges
(:func:`.passes.plan_ranges` on the raw row counts), each range's entries
gathered from the pieces and built apart.

Memory (bytes; ``s``/``d`` source/neighbour width, 4 for int32 ids): a
reader ``(s + d)`` per directed entry it keeps (twice the largest rank's
share while concatenating) plus ``2 (s + d) C`` of scratch and one decoded
chunk; a build ``s + d + 8`` per directed entry of a range plus 16 per row
(within ``memory_budget``), besides the pieces received and its CSR.

Encoding: pieces are ``(src, dst)`` pairs of 1-D arrays of equal length; a
reader's result maps rank -> piece.

Reference: Graph 500 Benchmark 1 specification 3.0.1, Kernel 1,
https://graph500.org/?page_id=12; the read-once bucket exchange is the
distributed CSR construction of the Graph500 reference's MPI code
(``convert_graph_to_oned_csr``: edges scattered to their owners, rows built
locally).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numba
import numpy as np
from numba import njit

from dbfs.checksum import combine, partial_checksum
from dbfs.errors import DbfsError
from dbfs.graph import index_dtype, id_dtype
from dbfs.kernel1.inmemory import _build_rows
from dbfs.kernel1.kernels import _count_keys, _scatter_keys
from dbfs.kernel1.passes import _NUMPY_STEP, plan_ranges, plan_rows
from dbfs.partition import Partitioning

__all__ = ["ShufflePlan", "reader_spans", "bucket_chunk", "read_buckets", "check_sum", "build_rank", "SpanReads",
           "rank_passes", "placed_passes"]

_PARALLEL_FROM = 1 << 16    # tuples from which a chunk is bucketed on every Numba thread
_ENTRY_EXTRA = 8            # a build's bytes per entry besides src and dst (the packed key)
_ROW_COST = 16              # a build's bytes per row (degrees, indptr)


@dataclass(frozen=True)
class ShufflePlan:
    """Who owns what: the partitioning and the widths of the pieces (``sdt`` local ids, ``idt`` global ids)."""

    part: Partitioning

    @classmethod
    def make(cls, n_vertices: int, P: int, kind: str = "block") -> "ShufflePlan":
        return cls(Partitioning(int(n_vertices), int(P), kind))

    @property
    def n(self) -> int:
        return self.part.n_vertices

    @property
    def P(self) -> int:
        return self.part.P

    @property
    def idt(self) -> np.dtype:
        return index_dtype(self.n)

    @property
    def sdt(self) -> np.dtype:
        return id_dtype(int(self.part.counts().max()) if self.P else 0)

    def _key_args(self):
        """The arguments of :func:`.kernels._key` with one fine block per partition (key = owner)."""
        big = int(self.part.counts().max()) if self.P else 0
        fshift = max(0, (max(big, 1) - 1).bit_length())
        return (self.part.code, self.P, self.part.q, self.part.r, 1, fshift, np.zeros((self.P, 2), np.int64))


def reader_spans(m: int, chunk_rows: int, G: int) -> list:
    """``G`` row spans ``(r0, r1)`` of whole chunks of ``chunk_rows`` covering ``[0, m)`` once (some may be empty)."""
    if int(G) < 1:
        raise DbfsError(f"{G} readers cannot read an edge list: use 1 or more")
    m, step, G = int(m), max(1, int(chunk_rows)), int(G)
    k = -(-m // step)
    return [(min(m, (g * k // G) * step), min(m, ((g + 1) * k // G) * step)) for g in range(G)]


class SpanReads:
    """Rows ``[r0, r1)`` of a chunk source (``step``, ``read(a, b)``: NumPy or CuPy (rows, 2)) swept chunk by chunk:
    read ONCE and kept (``keep``; narrowed to ``narrow``, e.g. 32-bit ids, when given) or read again each sweep.
    ``rows_read`` counts the rows asked of the source; :meth:`renumber` maps every id later sweeps yield."""

    def __init__(self, source, r0: int, r1: int, keep: bool = True, narrow=None):
        self.source, self.r0, self.r1 = source, int(r0), int(r1)
        self.step = max(1, int(source.step))
        self.keep, self.narrow = bool(keep), narrow
        self.kept = []
        self.rows_read = 0
        self.iperm = None

    def _narrowed(self, e):
        """``e`` in ``narrow`` when every id fits it (an id that does not stays as read, for the caller's check)."""
        if self.narrow is None or not e.size:
            return e
        top = np.iinfo(self.narrow).max
        return e.astype(self.narrow) if 0 <= int(e.min()) and int(e.max()) <= top else e

    def _spans(self):
        return [(a, min(a + self.step, self.r1)) for a in range(self.r0, self.r1, self.step)]

    @property
    def _all_kept(self) -> bool:
        """Whether every chunk of the span is kept already (a sweep then reads nothing)."""
        return self.keep and len(self.kept) == len(self._spans())

    def renumber(self, iperm) -> None:
        """Every id the later sweeps yield is ``iperm[id]``: a kept span is renumbered once, here, chunk by chunk
        in its own width (``iperm``'s values fit it: they are ids); a span read again is mapped each sweep."""
        if not self._all_kept:
            self.iperm = iperm
            return
        for i, e in enumerate(self.kept):
            self.kept[i] = iperm[e.astype(np.int64, copy=False)].astype(e.dtype, copy=False)

    def sweep(self, mapped: bool = True):
        """Yield ``(a, b, rows)`` for every chunk of the span, in row order (``mapped=False``: a span read again
        yields its rows as read, for a caller that maps them by :attr:`iperm` itself)."""
        have = self._all_kept
        if self.keep and not have:
            self.kept = []
        for i, (a, b) in enumerate(self._spans()):
            if have:
                e = self.kept[i]
            else:
                e = self.source.read(a, b)
                self.rows_read += b - a
                if self.keep:
                    e = self._narrowed(e)
                    self.kept.append(e)
            yield a, b, (e if self.iperm is None or not mapped else self.iperm[e.astype(np.int64, copy=False)])


def rank_passes(raw_ptr: np.ndarray, part: Partitioning, budget: int, i_isz: int, fixed: int,
                budget_name: str = "memory_budget", row_cost: int = _ROW_COST) -> list:
    """Every rank's row ranges ``(lo, hi)`` within ``budget`` (:func:`.passes.plan_rows` over its rows on the
    global raw row starts), padded with empty ranges at its end so every rank has as many passes as the rank
    with the most: ``plans[rank][pass]``. The same on every process that has the same row starts and budget."""
    plans = []
    for r in range(part.P):
        rg = part.vertex_range(r)
        plans.append([(lo, hi) for lo, hi, _ in plan_rows(raw_ptr, (rg.start, rg.stop), budget, i_isz, fixed,
                                                          budget_name, row_cost=row_cost)] or [(rg.start, rg.start)])
    most = max((len(p) for p in plans), default=0)
    return [p + [(p[-1][1], p[-1][1])] * (most - len(p)) for p in plans]


def placed_passes(raw_ptr, part: Partitioning, budget: int, i_isz: int, fixed: int, idw: int, room,
                  budget_name: str = "memory_budget", row_cost: int = _ROW_COST):
    """:func:`rank_passes` of a build that may split its ranks between the device and host memory
    (:mod:`.shuffle_gpu`), with every rank's raw entries and the most of them its device piece may hold: all of
    them where ``room`` (the device bytes a rank's rows, ``idw`` bytes an entry and 8 a row start, may keep) is
    None or holds every rank whole, else at most ``room`` and at most what leaves the passes a fifth of
    ``budget``; the passes plan with what stays on the device. ``(plans, entries, caps)``, the same on every
    process with the same row starts."""
    rgs = [part.vertex_range(r) for r in range(part.P)]
    ents = [int(raw_ptr[rg.stop] - raw_ptr[rg.start]) for rg in rgs]
    caps = list(ents)
    if room is not None and any(idw * e + 8 * (len(rg) + 1) > int(room) for rg, e in zip(rgs, ents)):
        room = min(int(room), budget - fixed - budget // 5)
        caps = [max(0, min(e, (room - 8 * (len(rg) + 1)) // idw)) for rg, e in zip(rgs, ents)]
    out = max(idw * c + 8 * len(rg) for rg, c in zip(rgs, caps))      # what stays on the device
    return rank_passes(raw_ptr, part, budget, i_isz, fixed + out, budget_name, row_cost), ents, caps


def _no_perm():
    return np.empty(0, np.int64)


def _bucket_numba(u, v, plan: ShufflePlan, src, dst):
    """Entries of tuples (u, v) counting-sorted by owner into ``src``/``dst`` -> (offsets (P + 1,), bad tuples)."""
    args = plan._key_args()
    nchunks = numba.get_num_threads() if u.size >= _PARALLEL_FROM else 1
    counts = _count_keys(u, v, True, _no_perm(), *args, nchunks, plan.n)
    bad = int(counts[:, -1].sum())
    off = np.zeros(plan.P + 1, np.int64)
    if bad:
        return off, bad
    counts = counts[:, :-1]
    tot = counts.sum(axis=0)
    np.cumsum(tot, out=off[1:])
    cursors = off[:-1] + np.cumsum(counts, axis=0) - counts
    _scatter_keys(u, v, True, _no_perm(), *args, np.arange(plan.P, dtype=np.int64), cursors, src, dst)
    return off, 0


def _bucket_xp(u, v, plan: ShufflePlan, xp):
    """:func:`bucket_chunk` with array operations of ``xp`` only (NumPy or CuPy): owner arithmetic, a sort, a split."""
    part = plan.part
    u = u.astype(xp.int64)
    v = v.astype(xp.int64)
    if int(((u < 0) | (v < 0) | (u >= plan.n) | (v >= plan.n)).sum()):
        raise DbfsError(f"edge list holds tuples with ids outside [0, {plan.n}): "
                        f"pass n_vertices above the largest id")
    keep = u != v
    a = xp.concatenate([v[keep], u[keep]])
    b = xp.concatenate([u[keep], v[keep]])
    if part.kind == "cyclic":
        own, loc = a % part.P, a // part.P
    else:
        big = part.r * (part.q + 1)
        own = xp.where(a < big, a // (part.q + 1), part.r + (a - big) // max(part.q, 1))
        first = own * part.q + xp.minimum(own, part.r)
        loc = a - first
    order = xp.argsort(own)
    cnt = xp.bincount(own, minlength=part.P)
    off = np.zeros(part.P + 1, np.int64)
    np.cumsum(np.asarray(cnt.get() if hasattr(cnt, "get") else cnt), out=off[1:])
    src = loc[order].astype(plan.sdt)
    dst = b[order].astype(plan.idt)
    return [(src[off[j]:off[j + 1]], dst[off[j]:off[j + 1]]) for j in range(part.P)]


def bucket_chunk(u, v, plan: ShufflePlan, xp=np) -> list:
    """Tuples ``(u, v)`` (1-D arrays of one chunk) -> ``P`` pieces ``(src, dst)`` (module docstring).

    ``xp`` is the array module of ``u`` and ``v``: NumPy buckets with the
    Numba counting sort, any other (CuPy) with array operations. Ids
    outside ``[0, N)`` are a one-line DbfsError.
    """
    if xp is not np:
        return _bucket_xp(u, v, plan, xp)
    u, v = np.ascontiguousarray(u), np.ascontiguousarray(v)
    src, dst = np.empty(2 * u.size, plan.sdt), np.empty(2 * u.size, plan.idt)
    off, bad = _bucket_numba(u, v, plan, src, dst)
    if bad:
        raise DbfsError(f"edge list holds {bad} tuples with ids outside [0, {plan.n}): "
                        f"pass n_vertices above the largest id")
    return [(src[off[j]:off[j + 1]], dst[off[j]:off[j + 1]]) for j in range(plan.P)]


def _chunk_rows(edges) -> int:
    if isinstance(edges, np.ndarray) or not hasattr(edges, "chunks"):
        return _NUMPY_STEP
    return int(edges.chunks[0])


def _out_of_range(edges, blk, a: int, n: int):
    """The one-line error for rows ``a..`` of ``edges`` (``blk``) holding ids outside [0, n)."""
    row = a + int(np.flatnonzero(((blk < 0) | (blk >= n)).any(axis=1))[0])
    if not hasattr(edges, "error"):
        return DbfsError(f"edge list holds ids outside [0, {n}), first at row {row}: "
                         f"pass n_vertices above the largest id")
    step = _chunk_rows(edges)
    chunk = row // step
    return edges.error(chunk, f"ids outside [0, {n}) (n_vertices), first at row {row}",
                       (chunk * step, min((chunk + 1) * step, int(edges.shape[0]))))


def read_buckets(edges, r0: int, r1: int, plan: ShufflePlan, ranks=None):
    """Read edge rows ``[r0, r1)`` once, chunk by chunk, and bucket them by owner.

    Parameters
    ----------
    edges : numpy.ndarray, CheckedArray or VirtualEdges
        (M, 2) integer rows read by row slices (:func:`dbfs.store.open_edges`).
    r0, r1 : int
        The rows this reader takes (whole chunks: :func:`reader_spans`).
    plan : ShufflePlan
    ranks : iterable of int, optional
        The ranks whose pieces are kept (None: all); the others' entries are dropped.

    Returns
    -------
    (dict, dict)
        rank -> piece ``(src, dst)``; and ``{"rows": rows read, "span": (r0, r1),
        "checksum": the rows' :mod:`dbfs.checksum` part, "entries": entries kept,
        "seconds": wall seconds}``.
    """
    t0 = time.perf_counter()
    keep = list(range(plan.P)) if ranks is None else sorted({int(r) for r in ranks})
    step = _chunk_rows(edges)
    width = min(step, max(int(r1) - int(r0), 0))
    src, dst = np.empty(2 * width, plan.sdt), np.empty(2 * width, plan.idt)     # one chunk's scratch
    got = {rk: ([], []) for rk in keep}
    rows, part = 0, 0
    for a in range(int(r0), int(r1), step):
        b = min(a + step, int(r1))
        blk = edges[a:b]
        u, v = blk[:, 0], blk[:, 1]
        off, bad = _bucket_numba(u, v, plan, src, dst)
        if bad:
            raise _out_of_range(edges, blk, a, plan.n)
        part = (part + partial_checksum(blk, a)) % (1 << 64)
        rows += b - a
        for rk in keep:
            got[rk][0].append(src[off[rk]:off[rk + 1]].copy())
            got[rk][1].append(dst[off[rk]:off[rk + 1]].copy())
        del blk, u, v
    del src, dst
    out = {}
    for rk in keep:             # rank by rank: a rank's chunk copies go as its piece is made
        s, d = got.pop(rk)
        out[rk] = (np.concatenate(s) if s else np.empty(0, plan.sdt), np.concatenate(d) if d else
                   np.empty(0, plan.idt))
        del s, d
    info = {"rows": rows, "span": (int(r0), int(r1)), "checksum": part,
            "entries": int(sum(p[0].size for p in out.values())), "seconds": time.perf_counter() - t0}
    return out, info


def check_sum(edges, infos) -> None:
    """Check that the readers' ``infos`` cover every row of ``edges`` once and, when the reader carries
    ``checksum``, that their parts add up to it (else the reader's one-line error)."""
    spans = sorted(tuple(i["span"]) for i in infos if i["span"][1] > i["span"][0])
    m, at = int(edges.shape[0]), 0
    for a, b in spans:
        at = b if a == at else -1
    if at != m:
        raise DbfsError(f"the readers' spans {spans} do not cover the {m} edge rows once: "
                        f"cut them with reader_spans")
    want = getattr(edges, "checksum", None)
    if want and combine([int(i["checksum"]) for i in infos]) != want:
        raise edges.error(None, "rows differ from the edges_checksum recorded at generation")


@njit(nogil=True, cache=True)
def _count_rows(src, raw):
    """raw[s + 1] += 1 for every entry's local source s."""
    for i in range(src.size):
        raw[np.int64(src[i]) + 1] += 1


@njit(nogil=True, cache=True)
def _take_rows(src, dst, lo, hi, out_src, out_dst, pos):
    """Entries with local source in [lo, hi) appended at ``pos`` (sources made relative to ``lo``)."""
    for i in range(src.size):
        s = np.int64(src[i])
        if lo <= s < hi:
            out_src[pos] = s - lo
            out_dst[pos] = dst[i]
            pos += 1
    return pos


def _one_range(pieces, plan: ShufflePlan, lo: int, hi: int, count: int, whole: bool, dedupe: bool):
    """Rows [lo, hi) from the pieces' ``count`` entries of them: (ptr int64 from 0, indices)."""
    if whole:
        pairs = [np.concatenate([p[0] for p in pieces]) if pieces else np.empty(0, plan.sdt),
                 np.concatenate([p[1] for p in pieces]) if pieces else np.empty(0, plan.idt)]
    else:
        s, d = np.empty(count, plan.sdt), np.empty(count, plan.idt)
        k = 0
        for ps, pd in pieces:
            k = _take_rows(ps, pd, lo, hi, s, d, k)
        pairs = [s, d]
        del s, d
    return _build_rows(pairs, hi - lo, False, None, plan.idt, bool(dedupe), plan.n)


def build_rank(pieces, plan: ShufflePlan, rank: int, dedupe: bool = True, memory_budget: int | None = None):
    """Partition ``rank``'s CSR from the pieces every reader sent it (module docstring).

    Parameters
    ----------
    pieces : list of (src, dst)
        NumPy pieces of this rank, one per reader (any order).
    plan : ShufflePlan
    rank : int
    dedupe : bool
        Drop duplicate entries.
    memory_budget : int, optional
        Bytes a build may hold besides the pieces and its CSR (module docstring);
        None: all rows at once.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray, dict)
        ``indptr`` int64 (count + 1,), ``indices`` ``plan.idt``, and ``{"ranges": rows built
        per range, "entries": directed entries received}``.
    """
    n_rows = plan.part.local_count(int(rank))
    pieces = [(np.asarray(s), np.asarray(d)) for s, d in pieces if len(s)]
    E = int(sum(s.size for s, _ in pieces))
    isz = plan.sdt.itemsize + plan.idt.itemsize + _ENTRY_EXTRA
    if memory_budget is None or isz * E + _ROW_COST * (n_rows + 1) <= int(memory_budget) or not n_rows:
        ptr, idx = _one_range(pieces, plan, 0, n_rows, E, True, dedupe)
        return ptr, idx, {"ranges": 1 if n_rows else 0, "entries": E}
    raw = np.zeros(n_rows + 1, np.int64)
    for s, _ in pieces:
        _count_rows(s, raw)
    np.cumsum(raw, out=raw)
    ranges = plan_ranges(raw, int(memory_budget), isz, 0, "memory_budget", _ROW_COST)
    indptr = np.zeros(n_rows + 1, np.int64)
    indices = np.empty(E, plan.idt)
    pos = 0
    for lo, hi, _ in ranges:
        ptr, idx = _one_range(pieces, plan, lo, hi, int(raw[hi] - raw[lo]), False, dedupe)
        indices[pos:pos + idx.size] = idx
        indptr[lo + 1:hi + 1] = pos + ptr[1:]
        pos += idx.size
        del ptr, idx
    return indptr, indices[:pos], {"ranges": len(ranges), "entries": E}

"""Kernel 1 on G GPUs as one shuffle: each GPU reads 1/G of the edges once, the entries swapped over NCCL.

Contract
--------
``build_shuffled_gpu(source, span, part, rank, comm, ...)`` runs on every
GPU of a communicator at once (``comm``: :class:`dbfs.bfs.dask.mesh.nccl._Comm`,
worker ``g`` of ``G`` is rank ``g`` of the block partitioning ``part``, one
rank a GPU). Each call reads the edge rows ``span`` of ``source`` (its
:func:`dbfs.kernel1.shuffle.reader_spans` share; ``source`` as
:mod:`.passes_gpu`'s: ``m``, ``step``, ``read(a, b)``, optionally
``partial()`` giving the rows' :mod:`dbfs.checksum` part) and returns
``(csr, deg)``: a :class:`.passes_gpu.DeviceCSR` of its rank's rows, byte for
byte partition ``rank`` of the stored ``p<G>-block`` variant (rows ascending,
self-loops dropped, duplicates dropped unless ``dedupe=False``; with
``relabel_bounds`` the rows and ids of :func:`.passes_gpu.degree_order` within
each block, ``meta["perm"]`` as there), and ``deg``, the deduplicated degree
of EVERY vertex on the device (the id width: what the hub table needs).
``meta["edge_rows_read"]`` is the rows this GPU read from ``source`` (its
span, once, when the span fits the budget kept on the device: pinned by a
test through :class:`dbfs.kernel1.shuffle.SpanReads`). Ids outside ``[0,
N)`` and a checksum that does not add up are one-line errors raised on every
GPU at once (never one GPU waiting on a collective the others left).

Method: (1) the span is read chunk by chunk and kept on the device in 32-bit
ids (:class:`dbfs.kernel1.shuffle.SpanReads`), ``k1_count`` giving this
GPU's raw degrees; one allreduce adds every GPU's checksum part and bad-id
flag, one the degrees: every GPU then holds the global raw row starts and
its own. (2) The same ranges are planned on every GPU for every rank
(:func:`dbfs.kernel1.shuffle.rank_passes` on the global row starts, on the
device: only the starts at the ranges' bounds are read back; one ``memory_budget``
given to all), as many passes as the rank with the most; one allgather
tells every GPU what each sends each rank in each pass. (3) Per pass each
GPU uploads the cursors of every rank's range from its own starts' host copy
and writes its entries for all of them with one ``k1_emit_ranges`` launch a
chunk (a counting sort by row, ``(row - lo) << 32 | neighbour`` keys; a span
read again is mapped by ``iperm`` in the same kernel) into one send buffer,
one NCCL group swaps the segments, and the received keys become the rows
of the range by :func:`.passes_gpu.rows_from_keys` (one key sort, first of
each run kept). (4) One allgather joins the ranks' deduplicated degrees.

A rank too large for the device (``room``: the bytes its rows may keep there
once built, what the searches leave) is split as one GPU's placed build is
(:mod:`.placed_gpu`): where any rank's entries and row starts pass ``room``,
every GPU gives its passes' rows to a :class:`dbfs.kernel1.placer.Placer`
(one device piece of at most ``room`` less the row starts, and at most what
leaves the passes a fifth of the budget, then one mapped pinned host piece),
the passes taken in row order (``prefix``) or backwards (``suffix``, the
low-degree tail of a rank relabelled by degree on the device) on every GPU
alike; the CSR then carries ``meta["pieces"]`` (the
kernels' ``ADJ_PARAMS``, the :class:`dbfs.split.Split`, the pinned
allocation's owner, the row starts' host copy) and no ``indices``.

Device memory model (bytes), through the passes (the most of any GPU, one
allreduce: the plan is the same on every GPU): one chunk, the kept span
(``8`` per tuple, 32-bit ids) where it is kept, and for a relabelled build
the new numbering (``perm``, and ``iperm`` where the span is read again and
mapped each pass: the id width per vertex each); per pass ``_ENTRY`` per
raw entry of the largest range (send and receive keys 8 + 8, the sort's
buffer 8, the dedupe's flag, scan and output words) and ``_ROW`` per row;
and the rank's rows built so far (at most its raw entries in the id width
and 8 per row, or a split rank's device piece), which stay on the device. The raw row starts (global and
own, ``16 N``) live on the device only while the passes are planned; the
passes take their cursors from the own starts' host copy, so at SCALE 31
on four GPUs the passes get those 34 GB.

Reference: Graph 500 Benchmark 1 specification 3.0.1, Kernel 1; the read
once and swap by owner is the reference MPI code's
``convert_graph_to_oned_csr``; collectives from NVIDIA's NCCL user guide
(group calls for point-to-point), as cuGraph's multi-GPU graph creation.
"""
from __future__ import annotations

import cupy as cp
import numpy as np

from dbfs.errors import DbfsError
from dbfs.graph import id_dtype, index_dtype
from dbfs.kernel1.gpu import _BLOCK, _grid, _kernels
from dbfs.kernel1.passes_gpu import (_CHUNK_FIXED, _CHUNK_ROW, _ROW, DeviceCSR, _DeviceBlocks, _as_i64, check_ids,
                                     degree_order, rows_from_keys)
from dbfs.kernel1.placer import PassStarts, Placer
from dbfs.kernel1.shuffle import SpanReads, placed_passes
from dbfs.pinned import mapped_host_empty
from dbfs.partition import Partitioning
from dbfs.progress import say

__all__ = ["build_shuffled_gpu", "shuffle_fixed"]

_ENTRY = 32         # device bytes a raw entry of a rank's pass holds (the pass's own per row and chunk: passes_gpu's)


def shuffle_fixed(n_vertices: int, step: int, span_rows: int, keep: bool, numbering: int = 0) -> int:
    """Device bytes held through every pass: a chunk, with ``keep`` the span, and a relabelled build's numbering
    (``numbering``: its bytes per vertex, the id width; ``iperm`` too where the span is not kept)."""
    held = int(numbering) * (int(n_vertices) + 1) * (1 if keep else 2)
    return _CHUNK_ROW * int(step) + _CHUNK_FIXED + (8 * int(span_rows) if keep else 0) + held


def _degrees(reads, n: int, k):
    """This GPU's raw degrees (uint64, N) over its span; the first id outside [0, n) seen, or None."""
    counts = cp.zeros(max(n, 1), cp.uint64)
    bad = None
    for a, b, e in reads.sweep():
        e = _as_i64(e)
        if e.size and bad is None:
            bad = check_ids(e, n)
        if e.size and bad is None:
            k["k1_count"](_grid(b - a), (_BLOCK,), (e, np.int64(b - a), counts))
        del e
    return counts, bad


def _prefix(counts, n: int):
    ptr = cp.zeros(n + 1, cp.int64)
    if n:
        cp.cumsum(counts[:n].view(cp.int64), out=ptr[1:])
    return ptr


def _agree(comm, part_sum: int, bad, want, rank: int, n: int) -> None:
    """One allreduce of every GPU's checksum part and bad-id flag; the same one-line error on every GPU."""
    v = cp.asarray([int(part_sum) & 0xFFFFFFFFFFFFFFFF, 0 if bad is None else 1], cp.uint64)
    comm.allreduce(v)
    total, nbad = (int(x) for x in cp.asnumpy(v))
    if nbad:
        mine = f" (this reader, rank {rank}, found id {bad})" if bad is not None else ""
        raise DbfsError(f"edge list holds vertex ids outside [0, {n}){mine}: pass n_vertices above the largest id")
    if want and f"{total:016x}" != want:
        raise DbfsError("the edge rows the GPUs read differ from the edges_checksum recorded at generation: the "
                        "dataset is corrupt; regenerate it with `dbfs generate`")


class _Clock:
    """Seconds of each phase of a build on this GPU (``meta["seconds"]``): a CUDA event recorded on the stream at
    each mark, no host sync on a pass's chunk loop; each span between two events counts for the later mark's
    phase (host gaps included: an idle stream records an event at once) and is summed by :meth:`settle`, where
    the build waits on the device anyway (once a pass)."""

    def __init__(self):
        self.seconds, self.events = {}, []
        self.mark(None)

    def mark(self, what) -> None:
        ev = cp.cuda.Event()
        ev.record()
        self.events.append((ev, what))

    def settle(self) -> dict:
        self.events[-1][0].synchronize()
        for (a, _), (b, what) in zip(self.events, self.events[1:]):
            self.seconds[what] = self.seconds.get(what, 0.0) + cp.cuda.get_elapsed_time(a, b) / 1e3
        self.events = self.events[-1:]          # the next span starts at the last mark
        return self.seconds


def _cursors(own_host, ranges, off):
    """A pass's cursors on the device, rank after rank: row ``x`` of rank ``j``'s range ``[lo, hi)`` at
    ``cbase[j] + x - lo``, holding where its next key goes in the send buffer (this GPU's raw row starts
    ``own_host``, on the host, shifted to rank ``j``'s segment ``off[j]``); returns (cursors, cbase)."""
    lens = [hi - lo for lo, hi in ranges]
    cbase = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    cur = cp.empty(max(int(cbase[-1]), 1), cp.int64)
    for j, (lo, hi) in enumerate(ranges):
        if hi > lo:
            seg = cur[int(cbase[j]):int(cbase[j + 1])]
            seg.set(own_host[lo:hi])
            seg -= int(own_host[lo]) - int(off[j])
    return cur.view(cp.uint64), cbase


def _emit(reads, ranges, own_host, k, clock):
    """This GPU's keys for every rank's range ``ranges[j]``, rank after rank in one buffer; the counts.
    ``own_host``: this GPU's raw row starts on the host (the cursors of a pass uploaded from it); one launch a
    chunk writes every rank's keys, mapping the ids by the span's ``iperm`` itself where it is read again
    (``k1_emit_ranges``); ``clock`` splits the rows made (read or regenerated) from the keys written."""
    cnt = [int(own_host[hi] - own_host[lo]) for lo, hi in ranges]
    off = np.concatenate([[0], np.cumsum(cnt)]).astype(np.int64)
    send = cp.empty(int(off[-1]), cp.uint64)
    if off[-1]:
        cursor, cbase = _cursors(own_host, ranges, off)
        lo = cp.asarray([r[0] for r in ranges], cp.int64)
        hi = cp.asarray([r[1] for r in ranges], cp.int64)
        cb = cp.asarray(cbase[:-1])
        iperm = reads.iperm
        name = "k1_emit_ranges_i64" if iperm is not None and iperm.dtype == cp.int64 else "k1_emit_ranges_i32"
        iperm = np.uint64(0) if iperm is None else iperm        # a null pointer: the ids as read
        clock.mark("cursors")
        for a, b, e in reads.sweep(mapped=False):
            e = _as_i64(e)
            clock.mark("read")
            k[name](_grid(b - a), (_BLOCK,), (e, np.int64(b - a), iperm, np.int32(len(ranges)), lo, hi, cb, cursor,
                                                send))
            del e
            clock.mark("emit")
    return send, off


def _swap(comm, send, off, counts_from, me: int):
    """One NCCL group: segment j of ``send`` to GPU j, GPU g's segment for me into ``recv`` in g order."""
    roff = np.concatenate([[0], np.cumsum(counts_from)]).astype(np.int64)
    recv = cp.empty(int(roff[-1]), cp.uint64)
    W = len(counts_from)
    if off[me + 1] > off[me]:
        recv[roff[me]:roff[me + 1]] = send[off[me]:off[me + 1]]
    with comm.group():
        for j in range(W):
            if j != me and off[j + 1] > off[j]:
                comm.send(send[off[j]:off[j + 1]], j)
            if j != me and roff[j + 1] > roff[j]:
                comm.recv(recv[roff[j]:roff[j + 1]], j)
    return recv


def _all_degrees(comm, ptr, part: Partitioning, rank: int, idt):
    """Every vertex's deduplicated degree (device, ``idt``) from each rank's row starts: one allgather."""
    counts = part.counts()
    width = int(counts.max()) if part.P else 0
    mine = cp.zeros(max(width, 1), idt)
    mine[:int(counts[rank])] = cp.diff(ptr).astype(idt)
    every = cp.empty(part.P * mine.size, idt)
    comm.allgather(mine, every)
    return cp.concatenate([every[j * mine.size:j * mine.size + int(counts[j])] for j in range(part.P)])


def _span(source, span, n: int, budget: int, numbering: int, comm):
    """This GPU's reads of its span (kept on the device in 32-bit ids where it takes a third of ``budget`` at most),
    its rows, whether kept, and the bytes held through every pass: the most any GPU holds (one allreduce), so the
    plan is the same on every GPU (a GPU's span, and whether it is kept, differ where the spans do)."""
    r0, r1 = (int(x) for x in span)
    rows = max(0, r1 - r0)
    keep = 8 * rows <= (budget - shuffle_fixed(n, source.step, 0, False, numbering)) // 3
    reads = SpanReads(source, r0, r1, keep=keep, narrow=np.uint32 if keep else None)
    most = cp.asarray([shuffle_fixed(n, source.step, rows, keep, numbering)], cp.int64)
    comm.allreduce(most, "max")
    return reads, rows, keep, int(most.get()[0])


def _placed(placer, n: int, meta: dict) -> DeviceCSR:
    """A split rank's CSR: its row starts on the device, no ``indices``, ``meta["pieces"]`` (module docstring)."""
    indptr, sp, adj = placer.finish()
    meta["passes"]["placement"] = sp.report()
    meta["pieces"] = {"adj": adj, "split": sp, "keep": placer.keep, "indptr_host": indptr}
    return DeviceCSR(cp.asarray(indptr), None, n, meta)


def build_shuffled_gpu(source, span, part: Partitioning, rank: int, comm, dedupe: bool = True,
                       memory_budget: int = 1 << 30, relabel_bounds=None, budget_name: str = "memory_budget",
                       quiet: bool = True, room: int | None = None, order: str = "prefix"):
    """Rank ``rank``'s rows of the undirected CSR, built by every GPU of ``comm`` at once (module docstring).

    Parameters
    ----------
    source : object
        The whole edge list as device chunks (``m``, ``step``, ``read``; ``partial()`` optional).
    span : (int, int)
        The rows this GPU reads (:func:`dbfs.kernel1.shuffle.reader_spans`, whole chunks).
    part : Partitioning
        Block partitioning of the N vertices into ``comm.W`` ranks; this GPU builds ``rank`` (its ``comm`` index).
    comm : dbfs.bfs.dask.mesh.nccl._Comm
    dedupe : bool
    memory_budget : int
        Device bytes for the whole build, the SAME on every GPU (the plan is computed on each).
    relabel_bounds : sequence of int, optional
        Renumber each block's vertices by descending raw degree within it (:func:`.passes_gpu.degree_order`).
    budget_name : str
        The option named in budget errors.
    room, order : int or None, {"prefix", "suffix"}
        Device bytes a rank's rows may keep once built (None: no limit); past it a rank is split, the ``order`` end
        of its rows on the device (module docstring, :mod:`dbfs.split`).

    Returns
    -------
    (DeviceCSR, cupy.ndarray)
        The rank's rows (``meta``: ``n_edges``, ``edge_rows_read``, ``passes``, ``perm`` when relabelled,
        ``pieces`` when split: then ``indices`` is None) and every vertex's deduplicated degree.
    """
    n, me, clock = int(part.n_vertices), int(rank), _Clock()
    if part.code != 0 or part.P != comm.W or comm.widx != me:
        raise DbfsError(f"a shuffled GPU Kernel 1 builds block rank {me} of {part.P} on GPU {comm.widx} of "
                        f"{comm.W}: use one rank a GPU")
    if n > 2**32:
        raise DbfsError(f"GPU Kernel 1 packs vertex ids in 32 bits, {n} vertices do not fit: use CPU workers")
    ent, idt, budget, k = np.dtype(index_dtype(n)), np.dtype(id_dtype(n)), int(memory_budget), _kernels()
    reads, rows, keep, fixed = _span(source, span, n, budget, idt.itemsize if relabel_bounds is not None
                                     else 0, comm)
    counts, bad = _degrees(reads, n, k)
    partial = getattr(source, "partial", None)         # no checksum part: nothing to check it against
    _agree(comm, partial() if partial is not None else 0, bad, getattr(source, "want", None) if partial else None,
           me, n)
    clock.mark("degrees")
    own_ptr = _prefix(counts, n)
    comm.allreduce(counts)
    raw_ptr = _prefix(counts, n)
    del counts
    perm = None
    if relabel_bounds is not None:      # rows and neighbours in the new ids: both row starts and every read mapped
        perm, iperm = degree_order(raw_ptr, idt, relabel_bounds)
        raw_ptr[1:] = cp.cumsum(cp.diff(raw_ptr)[perm])
        own_ptr[1:] = cp.cumsum(cp.diff(own_ptr)[perm])
        reads.renumber(iperm)
        del iperm                       # (held by ``reads`` where the span is mapped each pass)
    clock.mark("relabel" if perm is not None else "plan")
    # planned on the device's row starts (a few scalars a range read back), not a host copy of all N
    idw = ent.itemsize                  # bytes of an adjacency entry
    plans, ents, caps = placed_passes(raw_ptr, part, budget, _ENTRY, fixed, idw, room, budget_name, _ROW)
    split = caps != ents                # the same on every GPU: then every rank places its rows (below)
    first = part.vertex_range(me).start
    bounds = [plans[me][0][0] - first] + [hi - first for _, hi in plans[me]]
    starts = PassStarts(bounds, [int(raw_ptr[first + b] - raw_ptr[first]) for b in bounds], order)
    passes = len(plans[0])
    host_own = cp.asnumpy(own_ptr)
    del own_ptr                         # the passes' cursors come from the host copy
    mine = np.array([[host_own[hi] - host_own[lo] for lo, hi in (p[i] for p in plans)] for i in range(passes)],
                    np.int64)                                       # pass x rank: what this GPU sends
    every = cp.empty(part.P * mine.size, cp.int64)
    comm.allgather(cp.asarray(mine.ravel()), every)
    sent = cp.asnumpy(every).reshape(part.P, passes, part.P)        # GPU g, pass i, rank j
    del every, raw_ptr
    # this rank's rows, and its entries before deduplication: the joined CSR's room, filled pass by pass (made
    # once both raw row starts have left the device); split: the device piece, then one mapped pinned host piece
    sink = Placer(bounds[-1], caps[me], starts, ent, order, cp, mapped_host_empty) if split else \
        _DeviceBlocks(bounds[-1], starts.raw[-1], ent)
    clock.mark("plan")
    say(f"GPU Kernel 1 as one shuffle: rank {me} of {part.P}, {rows:,} edge rows read "
        f"({'kept on the device' if keep else 'read each pass'}), {passes} pass(es)" + (
            f", at most {caps[me] * idw:,} B of its {ents[me] * idw:,} B of entries on the device ({order})"
            if split else ""), quiet)
    # a split's suffix fills from the last rows back: every GPU takes the passes in the same order
    for i in (range(passes) if not split or order == "prefix" else reversed(range(passes))):
        cp.get_default_memory_pool().free_all_blocks()
        ranges = [p[i] for p in plans]
        send, off = _emit(reads, ranges, host_own, k, clock)
        recv = _swap(comm, send, off, sent[:, i, me], me)
        del send
        clock.mark("swap")
        lo, hi = ranges[me]
        ptr, idx = rows_from_keys(recv, hi - lo, ent, dedupe, k)
        del recv
        clock.mark("rows")
        sink(lo - first, hi - first, ptr, idx)
        del ptr, idx
        clock.mark("sink")
        clock.settle()
    meta = {"dedupe": bool(dedupe), "relabel": "none" if perm is None else "degree", "n_edges": int(source.m),
            "edge_rows_read": int(reads.rows_read), "kept": bool(keep),
            "passes": {"count": passes, "ranges": [tuple(int(x) for x in p) for p in plans[me]], "budget": budget}}
    if perm is not None:
        meta["perm"] = perm
    del reads
    csr = _placed(sink, n, meta) if split else sink.csr(n, meta, ent)
    deg = _all_degrees(comm, csr.indptr, part, me, idt)
    cp.get_default_memory_pool().free_all_blocks()
    clock.mark("finish")
    meta["seconds"] = {what: round(t, 3) for what, t in clock.settle().items()}
    return csr, deg

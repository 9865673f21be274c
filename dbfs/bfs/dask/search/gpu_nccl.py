"""One search's level steps over NCCL: a mesh of GPU workers on one host, no TCP round in a level.

Contract
--------
:class:`_NcclSearch` is :class:`dbfs.bfs.dask.search.gpu_search._GpuSearch` (the same
partitions, kernels, directions and counts, level for level) with every
exchange a collective on the mesh's NCCL communicator
(:class:`dbfs.bfs.dask.mesh.nccl._Comm`), issued on the search's CUDA stream
behind the kernels. A level makes one device-to-host read (a
top-down level past :data:`CAPPED_PAIRS`: two, the bucket sizes then the
counts) and no message through the TCP mesh. After a bottom-up level whose
frontier went as ids, the next top-down level's queue is already built. Where every worker holds its
own rank alone (:func:`dbfs.bfs.dask.mesh.nccl.holds_parents`) a search's
parents stay on the device (original ids, the id width, their own
allocation), for the validation over the same communicator
(:mod:`dbfs.bfs.dask.search.validate_nccl`).

Method (per step; bits of distinct workers never share a vertex, so the sum
of bitmap words is their OR):

- start: allreduce(max) of the root's degree, read once (the start barrier);
- top-down, one rank a worker and every worker's frontier at most
  :data:`TINY_EDGES` edges: the claim pass; ``pack_claims`` writes this
  worker's claims as (id, parent) pairs in a -1-filled slot (at least the
  largest worker's frontier edges); one allgather of those slots; ``absorb_pairs``
  of the whole gathered buffer (each worker keeps its own rank's pairs);
  allreduce(sum) of the counts, read once: two collectives and one absorb
  launch, whatever the number of workers. The slots hold :data:`SMALL_SLOTS`
  pairs, or a power of two from 2^16, and the new frontier overwrites the
  queue, so where this worker's frontier fits ``td_expand_small`` those
  calls are ONE replayed CUDA graph (:mod:`dbfs.bfs.dask.search.level_graph`:
  the claim pass sized on the device from the frontier's counts, the
  counters copied to the host inside the graph), captured once per slot
  size and buffers (kept between the searches of a batch);
- top-down, one rank a worker with equal slices and a frontier of at least
  ``DENSE_SHARE * N`` edges: as bits (:mod:`dbfs.bfs.dask.search.gpu_dense`: the
  claim pass sets bits of ``visited_g`` only, each rank's slice goes to its
  owner, who finds the claimed rows' parents bottom-up), two collectives;
- top-down, a level whose claims fit fixed regions (every worker's share
  of the frontier edges is known from the last read; at most
  :data:`CAPPED_PAIRS` slots a worker): the claim pass, then
  ``bucket_regions`` writes each claim into the region of its owner rank
  (rank o held by a peer: min(frontier edges, vertices of o) slots, unused
  slots left at -1); one group of send/recv moves each region whole to its
  owner's worker (sizes known on both sides, no read); ``absorb`` of this
  worker's claims and of the received regions (the -1 slots skipped);
  allreduce(sum) of the counts, read once: ONE device-to-host read a level;
- top-down, a larger level: the claims bucketed by owner rank on the
  device (``bucket_count``/``bucket_scatter`` with the claim count read on
  the device); allgather of every worker's P bucket sizes, read once; one
  group of send/recv moves each exact bucket to its owner's worker;
  ``absorb``; allreduce(sum) of the counts, read once;
- bottom-up, one rank per worker whose slices are equal whole words of at
  least :data:`SPLIT_MIN_BYTES`: ``bu_step``;
  allreduce(sum) of the counts, read once; then, the host knowing every
  worker's new vertices, the new frontier goes either as ids (the largest
  worker's ids within :data:`SPARSE_SHARE` of a slice's bytes: each worker's
  slice to a queue, allgather of the queues, each peer's ids set in the
  zeroed global bitmap and in ``visited_g``) or as bits (the live words of
  the ranks' bitmaps, :mod:`dbfs.bfs.dask.search.gpu_live`, sent in place
  into the global one and OR-ed into ``visited_g``). That
  exchange is issued after the read, so the host issues the next level
  while it runs; its seconds settle with the next level's. Smaller equal
  slices: allgather of the slices in place and allreduce(sum) of the counts
  in one group, read once. Otherwise: this worker's bits into a zeroed
  global bitmap, allreduce(sum) of the bitmap and of the counts in one
  group, read once;
- the top-down -> bottom-up switch: the same bitmap allreduce, no read.

Every worker feeds the same global counts to its own direction policy, as
on the TCP mesh. Level records: ``totals`` holds the global counts once;
this worker's kernel and exchange seconds are CUDA-event spans
(:class:`dbfs.bfs.dask.mesh.nccl._Timeline`), ``rounds`` the collectives and
``sent`` the bytes this worker put on the wire.

Encoding: as :mod:`dbfs.bfs.dask.search.gpu_search` (uint32 bitmap words over all
N, pairs of the id dtype, uint64 counters); the counters are W blocks of R
rows of 4 uint64 (R = 1 + the most ranks a worker holds: the claim row,
then one row per rank), worker j writing only block j, so one allreduce(sum)
gives every worker every block: the totals and each worker's frontier edges
(a top-down level's edges examined are known on the host); a region is 2 cap slots of the id dtype (owner-local
indices, then parents); the exact bucket sizes are a W x P uint64 matrix
(row j: worker j's claims per owner rank). After Bisson,
Bernaschi and Mastrostefano, "Parallel Distributed Breadth First Search on
the Kepler Architecture" (IEEE TPDS 2016), for the all-to-all of claimed
vertices and the frontier bitmap exchanged by collectives.
"""
from __future__ import annotations

import cupy as cp
import cupyx
import numpy as np

from dbfs.bfs.dask.search.gpu_dense import dense, td_dense
from dbfs.bfs.dask.search.gpu_live import or_slices, send_slices, zero_peer_slices
from dbfs.bfs.dask.search.gpu_search import _GpuSearch
from dbfs.bfs.dask.search.level_graph import _Replays, bucket
from dbfs.bfs.dask.mesh.nccl import _Timeline, holds_parents
from dbfs.bfs.gpu import _BLOCK, _TD_ITEMS, _TD_SMALL, _TD_SMALL_BYTES, _grid, _i64, td_small_limit

__all__ = ["_NcclSearch", "CAPPED_PAIRS", "regions"]

#: a level's host read waits for the device by polling with the GIL held (:meth:`_NcclSearch._wait`); False:
#: a blocking synchronize (a benchmark's switch: nccl_level_profile.py --no-spin)
SPIN = True

#: most region slots (pairs) a worker sends in a top-down level of one read; past it the exact buckets
#: (two reads) move fewer bytes than whole regions would
CAPPED_PAIRS = 1 << 22

#: a top-down level whose every worker's frontier has at most this many edges (one rank a worker) moves its
#: claims in one allgather of fixed slots (the level's launches and collectives do not grow with the workers)
TINY_EDGES = 1 << 16

#: small top-down levels (:data:`TINY_EDGES`) whose frontier fits ``td_expand_small`` are one replayed CUDA graph
#: (:mod:`dbfs.bfs.dask.search.level_graph`); False: their calls are issued one by one (a test's switch)
REPLAY = True

#: the slot size (pairs) of a small top-down level whose every worker's frontier has at most this many edges;
#: larger ones take a power of two from 2^16 up: two slot sizes, two graphs, for the levels of a run
SMALL_SLOTS = 1 << 10

#: a bottom-up level's new frontier goes as ids where the most any worker found, at the id width, is at most
#: this share of a rank's bitmap slice in bytes (the ids' allgather, the zeroing and the scatter then cost
#: less than the slices'); else as the bitmap slices
SPARSE_SHARE = 0.25

#: a bottom-up level reads its counts before its frontier's exchange (and may send ids) only where a rank's
#: bitmap slice has at least this many bytes; below, the slices' allgather in the counts' group costs less
#: than the extra round
SPLIT_MIN_BYTES = 1 << 25


def regions(cap_m: int, starts, ranks: list) -> list:
    """The fixed regions of a worker whose frontier has ``cap_m`` edges for the ``ranks`` held by other
    workers, in rank order: ``(rank, first slot, cap)`` with the region ``[first, first + 2 cap)`` (bfs.cu's
    ``bucket_regions``, the same layout)."""
    out, pos = [], 0
    for rk in ranks:
        cap = min(int(cap_m), int(starts[rk + 1] - starts[rk]))
        out.append((rk, pos, cap))
        pos += 2 * cap
    return out


def _small_room(nq: int) -> int:
    """The frontier vertices a replayed small top-down level's claim pass has shared memory for: the usual
    :data:`dbfs.bfs.gpu._TD_SMALL`, or :func:`dbfs.bfs.gpu.td_small_limit` for a larger frontier (two graphs:
    the small levels keep the lighter launch, whose shared memory leaves the SMs as the collectives want them)."""
    return _TD_SMALL if nq <= _TD_SMALL else td_small_limit()


def _room(store: dict, key, n: int, dtype):
    """A device array of at least ``n`` elements kept in ``store`` (grown by half again when short)."""
    a = store.get(key)
    if a is None or a.shape[0] < n or a.dtype != np.dtype(dtype):
        size = max(int(n), 1) if a is None else max(int(n), a.shape[0] + a.shape[0] // 2)
        a = store[key] = cp.empty(size, dtype)
    return a


class _NcclSearch(_GpuSearch):
    """A GPU worker's search whose exchanges are NCCL collectives (see the module docstring)."""

    def __init__(self, mesh, widx, ranks_of, parts, plugin, comm):
        # buckets sized by the level; one rank a worker: the search's arrays kept between searches (the replayed
        # graphs name them)
        hold = holds_parents(ranks_of)
        super().__init__(mesh, widx, ranks_of, parts, plugin, None, pairs=False, keep=hold, hold=hold)
        self.comm = self.mesh = comm                 # the level loop reads seconds, rounds and sent
        self.W = len(ranks_of)
        W, P = self.W, self.P
        R = 1 + max(len(rks) for rks in ranks_of)   # a claim row, then one row per rank a worker holds
        # every worker's counter block (its own written, the others zero until the allreduce), then the bucket
        # sizes of an exact level: one zeroing a level; the blocks are the counts' allreduce, no totals kernel
        self.nb = W * R * 4
        self.dev = plugin.scratch.setdefault("gpu", {})
        # kept between searches (a replayed level graph names them, :mod:`dbfs.bfs.dask.search.level_graph`)
        self.cbuf = _room(self.dev, "counters", self.nb + P, cp.uint64)[:self.nb + P]
        self.cbuf.fill(0)
        self.blocks = self.cbuf[:self.nb]
        self.cnt = self.blocks.reshape(W, R, 4)[widx][:len(self.states) + 1]
        self.hist = self.cbuf[self.nb:]
        hb = self.dev.get("counters_h")
        if hb is None or hb.shape[0] != self.nb:
            hb = self.dev["counters_h"] = cupyx.empty_pinned(self.nb, np.uint64)
        self.hbuf = hb
        self.fetched = False                         # the level's graph copied the counters to hbuf
        self.R = R
        self.allhist = cp.zeros(W * P, cp.uint64)
        self.one = cp.zeros(2, cp.int64)             # the start's allreduce(max): root degree, live words
        self.wm = [0] * W                            # each worker's frontier edges, from the last read
        self.wn = [0] * W                            # each worker's new frontier vertices, from the last read
        self.queued = False                          # the last bottom-up level left this rank's queue built
        worker_of = np.empty(P, np.int32)
        for j, rks in enumerate(ranks_of):
            worker_of[list(rks)] = j
        self.worker_of = cp.asarray(worker_of)
        self.others = {j: sorted(rks) for j, rks in enumerate(ranks_of) if j != widx}
        sh = self.starts_h
        # (worker, rank) -> the rank's vertices where another worker holds it: region caps are min(wm, this)
        self.own_not = [[0 if rk in ranks_of[j] else int(sh[rk + 1] - sh[rk]) for rk in range(P)]
                        for j in range(W)]
        self.tl = _Timeline()
        self.done_ev = cp.cuda.Event(block=False, disable_timing=True)      # _wait's
        self.sp = cp.cuda.get_current_stream().ptr   # the search's stream (its task's thread keeps it)
        # one rank per worker, ranks in mesh order, every slice the same whole number of 64-vertex words
        # (N a multiple of 64 P, as 2^SCALE with P a power of two): the global bitmap is the allgather of
        # the ranks' bitmaps in place, half the bytes of an allreduce and no zeroing
        self.slice = int(sh[1] - sh[0]) // 32
        self.gather = self.hold and all(
            int(sh[rk]) % 64 == 0 and int(sh[rk + 1] - sh[rk]) == 32 * self.slice for rk in range(self.P))
        self.counts_first = self.gather and 4 * self.slice >= SPLIT_MIN_BYTES
        self.replays = None
        if REPLAY and self.hold:                    # small top-down levels replayed as CUDA graphs
            if comm.replays is None:
                comm.replays = _Replays(comm)
            self.replays = comm.replays
        self.live_w = self.slice                     # the words of a slice that can hold a bit (gpu_live)
        if self.gather:     # this rank's bitmaps ARE its slices of the global ones: allgathered in place, no copy
            st, w = self.states[widx], self.slice
            st.fbm, st.nxt = self.front[widx * w:(widx + 1) * w], self.front_next[widx * w:(widx + 1) * w]
        if self.replays is not None:
            self._prepare_graphs()
        cp.cuda.Device().synchronize()

    def _zero_counters(self, sp=None) -> None:
        """Every worker's counter block and the bucket sizes to zero: one memset on stream ``sp`` (None: the
        search's; a level graph's capture passes its own)."""
        cp.cuda.runtime.memsetAsync(self.cbuf.data.ptr, 0, self.cbuf.nbytes, self.sp if sp is None else sp)

    def _wait(self) -> None:
        """Until the search's stream has done all it was given: polled with the GIL held where :data:`SPIN`
        (a blocking synchronize lets the worker's other threads take the GIL, and the level waits for them
        to give it back), else one blocking synchronize."""
        if not SPIN:
            cp.cuda.get_current_stream().synchronize()
            return
        ev = self.done_ev
        ev.record()
        while not ev.done:
            pass

    def _read(self, examined=None):
        """The level's one host read of every worker's counters; returns the global (new frontier, its edges,
        edges examined: ``examined`` where the host knows it) after checking the mesh; keeps each worker's
        frontier edges."""
        if not self.fetched:                         # (a replayed graph copied them as its last node)
            self.blocks.get(out=self.hbuf, blocking=False)
        self.fetched = False
        self._wait()
        self.comm.check()
        v, R = self.hbuf.tolist(), self.R               # a few dozen counters: Python ints, no NumPy calls
        mine = self.widx * R * 4
        for r, st in enumerate(self.states.values(), 1):
            st.nq, st.m = v[mine + 4 * r], v[mine + 4 * r + 1]
        n = ex = 0
        for j in range(self.W):
            blk = v[j * R * 4 + 4:(j + 1) * R * 4]      # worker j's rank rows (its claim row skipped)
            self.wn[j] = sum(blk[0::4])
            n += self.wn[j]
            self.wm[j] = sum(blk[1::4])
            ex += sum(blk[2::4])
        return n, sum(self.wm), ex if examined is None else int(examined)

    def _exchange_bitmap(self, dst, totals=False):
        """This worker's bits of a frontier into the global bitmap ``dst`` on every worker, with the
        level's totals (``totals``) in the same group."""
        comm = self.comm
        if not self.gather:     # (gather: this rank's bitmap is its slice of dst, see __init__: sent in place)
            dst.fill(0)
            self._or_own(dst)
        self.tl.mark("k")
        with comm.group():
            if self.gather:
                send_slices(self, dst)
            else:
                comm.allreduce(dst)
            if totals:
                comm.allreduce(self.blocks)
        self.tl.mark("x")

    def _totals(self, g, kt):
        k, x = self.tl.settle()
        self.comm.seconds += x
        kt += k
        return [(g[0], g[1], g[2], kt)], kt

    # ------------------------------------------------------------- steps
    def start(self, root):
        live = self.states[self.widx].live if self.gather else 0     # gather: this worker holds its own rank
        self.one.set(np.array([self._own_root(root), live], np.int64))
        self.comm.allreduce(self.one, "max")
        deg, lw = (int(x) for x in self.one.get())
        self.comm.check()
        if self.gather:
            self.live_w = lw
        self.wm = [0] * self.W
        self.wm[self._worker_of_rank(self.o_root)] = deg
        return deg

    def _worker_of_rank(self, rk: int) -> int:
        return next(j for j, rks in enumerate(self.ranks_of) if rk in rks)

    def _capped(self) -> bool:
        """Whether every worker's regions fit :data:`CAPPED_PAIRS` (the same answer on every worker: it
        reads only the frontier edges all of them read)."""
        return max(sum(min(m, c) for c in row) for m, row in zip(self.wm, self.own_not)) <= CAPPED_PAIRS

    def td_level(self, level, kt):
        if self.hold and max(self.wm) <= TINY_EDGES:
            return self._td_tiny(kt)
        if dense(self):
            return td_dense(self, kt)
        if not self._capped():
            return self._td_exact(kt)
        own = self.wm[self.widx]
        mine = regions(own, self.starts_h, [rk for rk in range(self.P) if rk not in self.states])
        at = {rk: (first, cap) for rk, first, cap in mine}
        sends = {j: [(rk, *at[rk]) for rk in rks] for j, rks in self.others.items()}
        recvs = {j: regions(self.wm[j], self.starts_h, sorted(self.my_ranks)) for j in self.others}
        tl, comm = self.tl, self.comm
        tl.begin()
        self._zero_counters()
        nsend = sum(2 * c for r in sends.values() for _, _, c in r)
        out = _room(self.dev, "regions", nsend, self.qdt)
        if nsend:           # -1 in every slot (all bits set): the slots no claim fills are skipped
            cp.cuda.runtime.memsetAsync(out.data.ptr, 0xFF, nsend * out.itemsize, cp.cuda.get_current_stream().ptr)
        examined = self._check_claim(own)
        if own:
            self.k["bucket_regions"](_grid(min(own, self.N)), (_BLOCK,),
                                     (self.claims, self.cnt[0], self.starts, np.int32(self.P), self.scratch,
                                      self.worker_of, np.int32(self.widx), _i64(own), self.hist, out))
        tl.mark("k")
        nrecv = sum(2 * c for r in recvs.values() for _, _, c in r)
        rin = _room(self.dev, "regions_in", nrecv, self.qdt)
        remote = {rk: [] for rk in self.states}
        if nsend or nrecv:
            with comm.group():          # per peer, both sides walk its regions in rank order
                base = 0
                for j in self.others:
                    for rk, first, cap in sends[j]:
                        if cap:
                            comm.send(out[first:first + 2 * cap], j)
                    for rk, first, cap in recvs[j]:
                        if cap:
                            seg = rin[base + first:base + first + 2 * cap]
                            comm.recv(seg, j)
                            remote[rk].append((seg[:cap], seg[cap:]))
                    base += sum(2 * c for _, _, c in recvs[j])
            tl.mark("x")
        self._absorb_dev(self.cnt[0], min(examined, self.N), remote)
        tl.mark("k")
        comm.allreduce(self.blocks)
        tl.mark("x")
        return self._totals(self._read(sum(self.wm)), kt)

    def _td_tiny(self, kt):
        """A small top-down level (see the module docstring): every worker's claims in one allgather; where
        this worker's frontier fits ``td_expand_small`` (:func:`dbfs.bfs.gpu.td_small_limit` vertices) the level's
        calls are one replayed CUDA graph (:mod:`dbfs.bfs.dask.search.level_graph`), else issued one by one.
        The slot size is a power of two (every worker computes the same from the edges all of them read)."""
        m, own = max(self.wm), self.wm[self.widx]
        cap = SMALL_SLOTS if m <= SMALL_SLOTS else bucket(m, 1 << 16)
        (rk, st), = self.states.items()
        self.tl.begin()
        rp = self.replays
        if rp is not None and st.nq <= td_small_limit():
            if st.m != own:
                raise RuntimeError(f"worker {self.widx}: {st.m} frontier edges, its peers counted {own}")
            rp.par_h[0], rp.par_h[1] = st.nq, st.m
            rp.run(*self._tiny_graph(cap, rk, st, _small_room(st.nq)), self.tl)
            self.fetched = True
        else:
            self._tiny_calls(self.tl.mark, self.sp, cap, self._tiny_buf(cap), rk, st, None)
        return self._totals(self._read(sum(self.wm)), kt)

    def _tiny_buf(self, cap: int):
        """The small top-down level's slots: this worker's, then every worker's (one size up to 2^16 slots:
        one pointer)."""
        return _room(self.dev, "tiny", (self.W + 1) * 2 * max(cap, 1 << 16), self.qdt)

    def _tiny_graph(self, cap, rk, st, room):
        """The key and the calls of the small top-down level's graph of ``cap`` slots, its claim pass's shared
        memory sized for frontiers of up to ``room`` vertices (:func:`_small_room`)."""
        buf = self._tiny_buf(cap)
        key = ("td_tiny", cap, room, buf.data.ptr, st.queue.data.ptr, st.visited.data.ptr, st.parent.data.ptr,
               self.visited_g.data.ptr, self.cbuf.data.ptr, self.hbuf.ctypes.data, self.claims.data.ptr,
               self.scratch.data.ptr, st.p.indptr.data.ptr)
        return key, lambda mark, sp: self._tiny_calls(mark, sp, cap, buf, rk, st, self.replays, room)

    def _bu_graph(self, st):
        """The key and the calls of the bottom-up level's graph (this parity of the two bitmaps)."""
        key = ("bu", self.counts_first, self.front.data.ptr, self.front_next.data.ptr, st.visited.data.ptr,
               st.parent.data.ptr, self.cbuf.data.ptr, self.hbuf.ctypes.data, st.p.indptr.data.ptr)
        return key, lambda mark, sp: self._bu_calls(mark, sp, st)

    def _prepare_graphs(self) -> None:
        """Capture, before the search's clock, the graphs its levels may replay that are not kept yet: the
        small top-down level at each slot size, the bottom-up level at each parity of the bitmaps (captured,
        not run: nothing changes on the device)."""
        (rk, st), = self.states.items()
        rp = self.replays
        caps = [c for c in (SMALL_SLOTS, 1 << 16) if 0 <= TINY_EDGES and (c == SMALL_SLOTS or TINY_EDGES <= c)]
        for cap in caps:
            for room in sorted({_small_room(1), _small_room(td_small_limit())}):
                rp.prepare(*self._tiny_graph(cap, rk, st, room))
        if self.gather:
            for _ in range(2):
                rp.prepare(*self._bu_graph(st))
                st.fbm, st.nxt = st.nxt, st.fbm
                self.front, self.front_next = self.front_next, self.front

    def _tiny_calls(self, mark, sp, cap, buf, rk, st, rp, room=0):
        """A small top-down level's calls on stream ``sp``; ``rp`` (a capture): the claim pass sized on the
        device from the replayed parameters (shared memory for ``room`` frontier vertices), and the counters
        copied to ``hbuf`` last. The new frontier is written over the queue itself (the claim pass has read it
        by then): one queue, one graph."""
        comm, W, own = self.comm, self.W, self.wm[self.widx]
        rt = cp.cuda.runtime
        self._zero_counters(sp)
        send, recv = buf[:2 * cap], buf[2 * cap:(W + 1) * 2 * cap]
        rt.memsetAsync(send.data.ptr, 0xFF, send.nbytes, sp)              # -1 pairs: skipped
        p = st.p
        if rp is not None:
            nfE = rp.load_params()
            self.k["td_expand_small_at"](_grid(cap, _BLOCK * _TD_ITEMS), (_BLOCK,),
                                         (st.queue, nfE, p.indptr, *p.adj, self.visited_g, self.scratch, self.claims,
                                          self.cnt[0], _i64(p.base), np.int32(0)),
                                         shared_mem=_TD_SMALL_BYTES * room)
        else:
            self._check_claim(own)
        if own or rp is not None:
            self.k["pack_claims"](_grid(cap), (_BLOCK,), (self.claims, self.cnt[0], self.scratch, _i64(cap), send))
        mark("k")
        comm.allgather(send, recv)
        mark("x")
        self.k["absorb_pairs"](_grid(W * cap), (_BLOCK,),
                               (recv, _i64(W * cap), _i64(int(self.starts_h[rk])), _i64(p.nloc - p.pad), _i64(p.pad),
                                _i64(p.base), p.indptr, st.visited, st.parent, self.visited_g, st.queue, self.cnt[1]))
        mark("k")
        comm.allreduce(self.blocks)
        mark("x")
        if rp is not None:
            rt.memcpyAsync(self.hbuf.ctypes.data, self.blocks.data.ptr, self.blocks.nbytes, rt.memcpyDeviceToHost, sp)

    def _check_claim(self, own: int, bits_only: bool = False) -> int:
        """The claim pass (:meth:`_claim`), its frontier edges checked against what the peers counted."""
        examined = self._claim(bits_only)
        if examined != own:
            raise RuntimeError(f"worker {self.widx}: {examined} frontier edges, its peers counted {own}")
        return examined

    def _absorb_dev(self, nc, ub, remote):
        """``absorb`` of this worker's claims (their count ``nc`` on the device, at most ``ub``) and of the
        received regions (-1 slots skipped) into each partition (counts in ``cnt`` rows 1..)."""
        for r, (rk, st) in enumerate(self.states.items(), 1):
            p = st.p
            count = p.nloc - p.pad
            srcs = [(self.claims, self.scratch, ub, int(self.starts_h[rk]), 1, nc)]
            srcs += [(V, U, V.shape[0], 0, 0, None) for V, U in remote[rk]]
            for V, U, m, first, by_v, mp in srcs:
                if m:
                    tail = (_i64(first), _i64(count), np.int32(by_v), _i64(p.pad), _i64(p.base), p.indptr,
                            st.visited, st.parent, self.visited_g, st.queue2, self.cnt[r])
                    if mp is None:
                        self.k["absorb"](_grid(m), (_BLOCK,), (V, U, _i64(m), *tail))
                    else:           # the claim count on the device, ``m`` its bound
                        self.k["absorb_n"](_grid(m), (_BLOCK,), (V, U, _i64(m), mp, *tail))
            st.queue, st.queue2 = st.queue2, st.queue

    def _td_exact(self, kt):
        tl, comm, P = self.tl, self.comm, self.P
        tl.begin()
        self._zero_counters()
        examined = self._claim()
        ub = min(examined, self.N)          # the claims are at most the edges examined
        if ub:
            g = _grid(ub)
            # the buckets' room grown to the level's bound, kept between levels and searches (not N from the start:
            # a SCALE 31 rank split with host memory needs those bytes on the device)
            self.pairL, self.pairU = _room(self.dev, "bucketL", ub, self.qdt), _room(self.dev, "bucketU", ub, self.qdt)
            self.k["bucket_count"](g, (_BLOCK,), (self.claims, self.cnt[0], self.starts, np.int32(P), self.hist))
            self.k["bucket_offsets"]((1,), (1,), (self.hist, np.int32(P), self.cursor))
            self.k["bucket_scatter"](g, (_BLOCK,), (self.claims, self.cnt[0], self.starts, np.int32(P), self.scratch,
                                                    self.cursor, self.pairL, self.pairU))
        tl.mark("k")
        comm.allgather(self.hist, self.allhist)
        tl.mark("x")
        H = self.allhist.get().reshape(self.W, P).astype(np.int64)
        comm.check()
        off = np.zeros(P + 1, np.int64)
        np.cumsum(H[self.widx], out=off[1:])
        nc = int(off[-1])
        recv = [(j, rk, int(H[j, rk])) for j in self.peers for rk in self.my_ranks if H[j, rk]]
        sends = [(j, int(off[rk]), int(off[rk + 1])) for j in self.peers for rk in self.ranks_of[j]
                 if off[rk + 1] > off[rk]]
        remote = {rk: [] for rk in self.states}
        if recv or sends:
            total = sum(n for _, _, n in recv)
            RL, RU = _room(self.dev, "recvL", total, self.qdt), _room(self.dev, "recvU", total, self.qdt)
            with comm.group():          # per peer, both sides walk the owner ranks in order: L then U
                for j, a, b in sends:
                    comm.send(self.pairL[a:b], j)
                    comm.send(self.pairU[a:b], j)
                pos = 0
                for j, rk, n in recv:
                    comm.recv(RL[pos:pos + n], j)
                    comm.recv(RU[pos:pos + n], j)
                    remote[rk].append((RL[pos:pos + n], RU[pos:pos + n]))
                    pos += n
            tl.mark("x")
        ex = sum(self.wm)
        self._absorb(self.claims[:nc], nc, remote)
        tl.mark("k")
        comm.allreduce(self.blocks)
        tl.mark("x")
        return self._totals(self._read(ex), kt)

    def to_bitmaps(self):
        self.tl.begin()
        self._queues_to_bitmaps()
        self._exchange_bitmap(self.front)
        cp.bitwise_or(self.visited_g, self.front, out=self.visited_g)
        return 0.0                          # its device seconds settle with the bottom-up level that follows

    def bu_level(self, kt):
        self.queued = False
        self.tl.begin()
        rp = self.replays if self.gather else None
        if rp is not None:                  # one replayed graph up to the counters' copy (one a bitmap parity)
            (st,) = self.states.values()
            rp.run(*self._bu_graph(st), self.tl)
            self.fetched = True
            st.fbm, st.nxt = st.nxt, st.fbm
        else:
            self._zero_counters()           # the other workers' blocks too: the allreduce sums them
            self._bu_steps(zero=False)
            if not self.counts_first:
                self._exchange_bitmap(self.front_next, totals=True)
        if not self.counts_first:
            g = self._read()
            cp.bitwise_or(self.visited_g, self.front_next, out=self.visited_g)
            self.front, self.front_next = self.front_next, self.front
            return self._totals(g, kt)
        if rp is None:
            self.tl.mark("k")
            self.comm.allreduce(self.blocks)
            self.tl.mark("x")
        out = self._totals(self._read(), kt)
        self.tl.begin()                     # the frontier's exchange: its seconds settle with the next level
        self._send_frontier()
        self.front, self.front_next = self.front_next, self.front
        return out

    def _bu_calls(self, mark, sp, st) -> None:
        """(captured) A bottom-up level of one rank a worker with equal slices: the counters zeroed,
        ``bu_step`` into this rank's slice of ``front_next``, then either the counts' allreduce (counts first)
        or the slices' allgather in place with it in one group; the counters copied to ``hbuf``."""
        rt, comm = cp.cuda.runtime, self.comm
        self._zero_counters(sp)
        self._bu_launch(st, 1)
        mark("k")
        if self.counts_first:
            comm.allreduce(self.blocks)
        else:
            with comm.group():
                comm.allgather(st.nxt, self.front_next)
                comm.allreduce(self.blocks)
        mark("x")
        rt.memcpyAsync(self.hbuf.ctypes.data, self.blocks.data.ptr, self.blocks.nbytes, rt.memcpyDeviceToHost, sp)

    def _send_frontier(self) -> None:
        """The new frontier of a bottom-up level (this rank's bits in its slice of ``front_next``) to every
        worker: into the whole global ``front_next`` and into ``visited_g``, as ids or as bits (see the module
        docstring; every worker takes the same branch: it reads the counts they all read)."""
        tl, comm, w, me = self.tl, self.comm, self.slice, self.widx
        (st,) = self.states.values()
        K = max(self.wn)
        fn, vg = self.front_next, self.visited_g
        if K * self.qdt.itemsize > SPARSE_SHARE * 4 * self.live_w:
            with comm.group():
                send_slices(self, fn)
            tl.mark("x")
            or_slices(self, vg, fn)
            tl.mark("k")
            return
        if self.wn[me]:                      # this rank's bits -> its queue (the next top-down level's)
            nw = st.live
            self.k["bitmap_to_queue"](_grid(nw), (_BLOCK,), (st.fbm, _i64(nw), st.queue, self.cnt[1, 3:]))
        self.queued = True
        tl.mark("k")
        ids = None
        if K:
            ids = _room(self.dev, "frontier_ids", self.W * K, self.qdt)
            comm.allgather(st.queue[:K], ids[:self.W * K])
        tl.mark("x")
        zero_peer_slices(self, fn)
        for j, n in enumerate(self.wn):
            if n:
                src = st.queue if j == me else ids[j * K:(j + 1) * K]
                targets = (vg,) if j == me else (fn, vg)
                for bm in targets:
                    self.k["queue_to_bitmap"](_grid(n), (_BLOCK,), (src, _i64(n), bm[j * w:]))
        tl.mark("k")

    def to_queues(self):
        """Each rank's frontier bits to its queue, no host read: the last bottom-up level's counts (read by
        :meth:`_read`) are its sizes. Its device seconds count in the top-down level that follows."""
        if self.queued:                     # the bottom-up level that sent its frontier as ids built it
            return 0.0
        self.tl.begin()
        self._zero_counters()               # the queues' cursors (each rank's row, column 3)
        for r, st in enumerate(self.states.values(), 1):
            self.k["bitmap_to_queue"](_grid(st.live), (_BLOCK,), (st.fbm, _i64(st.live), st.queue, self.cnt[r, 3:]))
        self.tl.mark("k")
        return 0.0

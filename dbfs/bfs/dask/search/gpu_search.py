"""One search's level steps on a GPU worker's partitions (the device twin of :class:`dbfs.bfs.dask.search.bsp._Search`).

Contract
--------
:class:`_GpuSearch` has :class:`dbfs.bfs.dask.search.bsp._Search`'s steps (``start``,
``visit_root``, ``to_queues``, ``td_level``, ``to_bitmaps``, ``bu_level``,
``parents``) and sends and receives the same messages, so GPU and CPU
workers share one mesh and one level loop (:func:`dbfs.bfs.dask.search.bsp._bsp_levels`
picks the class by the kind of the worker's partitions,
:class:`dbfs.bfs.dask.layout.gpu_part._GpuPart`). The frontier (queues, bitmaps),
the visited bitmaps and the parents stay in device memory between levels;
the host reads one row of counters per partition per level and copies to
the host only what goes to another worker. A search's parents leave as
int64 host copies, except where they are validated on the devices: a mesh of
this worker alone keeps them there (``hold``, as the NCCL mesh does).

Method (the kernels are ``dbfs/bfs/kernels/bfs.cu``'s, the ones ``--backend
gpu`` runs; rows local, neighbour ids global):

- top-down, one partition holding the whole graph (P = 1): ``td_expand``
  exactly as the single-process backend calls it (:func:`dbfs.bfs.gpu.expand`);
- top-down otherwise: ``td_expand``'s claim pass over the worker's GLOBAL
  ``visited_g`` writes the claimed ids and their global parents (a scratch
  over N); ``absorb`` applies them to each of the worker's partitions straight
  from the claim list (first parent wins); when a peer gets pairs the claims
  are bucketed by owner on the device (``bucket_count``/``bucket_scatter``:
  owner by binary search over the block starts, one atomic per owner per
  warp), copied to pinned host memory once and sent (PAIRS); received pairs are
  uploaded and absorbed the same way; when every mesh worker is a GPU worker
  on this host the buckets stay in this worker's exported pair buffers, each
  peer gets only their offsets (PULL) and absorbs them in place
  (:mod:`dbfs.bfs.dask.mesh.ipc`);
- bottom-up: ``bu_step`` over each partition's rows against the GLOBAL
  frontier bitmap on the device; this worker's new slices are OR-ed into the
  next global frontier on the device; peers' slices arrive on the host and
  are uploaded (host staging, pinned on the sending side; COUNTS_FRONT),
  or, all workers GPU workers on this host, are copied device to device
  through the mesh's shared bitmap buffers (:mod:`dbfs.bfs.dask.mesh.ipc`; only
  COUNTS, or SYNC after a top-down level, cross the mesh).

Directions, frontier sizes and edge counts equal the single-process level
for level (the counts are the same sums; the policy is fed the same
totals). Encoding: :mod:`dbfs.bfs.dask.layout.gpu_part` (uint32 device words, sent
as the int64 view of their host copy). After Merrill, Garland and
Grimshaw, "Scalable GPU Graph Traversal" (PPoPP 2012) for the expansion and
Beamer, Buluc, Asanovic and Patterson (IPDPS Workshops 2013) for the
distributed bottom-up levels.
"""
from __future__ import annotations

import time

import cupy as cp
import numpy as np

from dbfs.bfs.dask.search.gpu_live import own_live_words
from dbfs.bfs.dask.search.bsp import _counts_msg, _counts_of, _Search
from dbfs.bfs.dask.mesh.frames import COUNTS, COUNTS_FRONT, FRONT, PAIRS, PULL, SYNC
from dbfs.bfs.dask.mesh.transport import _Timed
from dbfs.bfs.gpu import _BLOCK, _grid, _i64, _sm_count, expand, own_memory
from dbfs.graph import id_dtype

__all__ = ["_GpuSearch"]

#: the null pointer ``td_expand`` takes for "no parent, no claim list" (a claim pass of bits only)
_NULL = np.uint64(0)


class _GpuState:
    """One partition's per-search device arrays (CuPy's pool: no cudaMalloc after the first search; with
    ``store``, the parents, visited bitmap and queues are the same arrays every search, kept there: a replayed
    level graph names them)."""

    def __init__(self, p, qdt, store=None):
        self.p = p
        nw32 = max(2 * p.words, 1)
        n = max(p.nloc, 1)

        def arr(name, size, dtype):
            return cp.empty(size, dtype) if store is None else _shared(store, (name, p.rank), size, dtype)

        self.parent = arr("parent", n, qdt)
        self.parent.fill(-1)
        self.visited = arr("visited", p.base_visited.shape[0], p.base_visited.dtype)
        self.visited[...] = p.base_visited
        self.fbm = cp.zeros(nw32, cp.uint32)        # local frontier bitmap (after a bottom-up level)
        self.live = own_live_words(p, nw32)         # its words up to the last row with an edge: no bit past them
        self.nxt = cp.zeros(nw32, cp.uint32)
        self.queue = arr("queue", n, qdt)           # local rows
        self.queue2 = arr("queue2", n, qdt)
        self.nq = 0                                 # queue length
        self.m = 0                                  # degree sum of the current frontier


def _to_host(a):
    """A device array's host copy in pinned memory (CuPy's pinned pool: the block goes back to the
    pool when the mesh has sent it and dropped it), for what goes to a peer through the host."""
    import cupyx  # deferred: cupyx

    return a.get(out=cupyx.empty_pinned(a.shape, a.dtype))


def _shared(store: dict, key, n: int, dtype):
    """A device array kept in the worker plugin's ``store`` between searches (size and dtype keyed)."""
    arr = store.get(key)
    if arr is None or arr.shape[0] != n or arr.dtype != np.dtype(dtype):
        arr = store[key] = cp.empty(n, dtype)
    return arr


class _GpuSearch(_Search):
    """A GPU worker's search state and steps (see the module docstring)."""

    def __init__(self, mesh, widx, ranks_of, parts, plugin, shm=None, pairs: bool = True, keep: bool = False,
                 hold: bool | None = None):
        self.mesh = _Timed(mesh)
        self.widx, self.ranks_of = widx, ranks_of
        self.peers = [j for j in range(len(ranks_of)) if j != widx]
        parts = sorted(parts, key=lambda p: p.rank)
        p0 = parts[0]
        self.N, self.P, self.code, self.q, self.r = p0.n, p0.P, p0.code, p0.q, p0.r
        self.k = p0.kernels
        self.qdt = np.dtype(id_dtype(self.N))
        self.starts = p0.starts
        self.starts_h = sh = p0.starts_host
        self.bases = [(int(sh[rk]) >> 6) << 6 for rk in range(self.P)]
        self.words = [(int(sh[rk + 1]) - self.bases[rk] + 63) >> 6 for rk in range(self.P)]
        self.listeners = plugin.level_listeners
        gw32 = 2 * ((self.N + 63) >> 6)
        self.direct = self.P == 1                 # one partition = the whole graph: the single-process step
        # the parents kept on the device (DistributedGraph.parents_on_device): ``hold``, by default a mesh of
        # this worker alone
        self.hold = len(ranks_of) == 1 if hold is None else bool(hold)
        self.sh = shm if self.peers else None     # shared device memory (dbfs.bfs.dask.mesh.ipc), else host staging
        if not self.direct:                       # the claim pass's arrays over N (P = 1 needs none)
            dev = plugin.scratch.setdefault("gpu", {})
            self.scratch = _shared(dev, "scratch", max(self.N, 1), self.qdt)     # claims: global parent of v
            self.claims = _shared(dev, "claims", max(self.N, 1), self.qdt)       # claimed global ids of a level
            if self.sh is not None:               # claims bucketed by owner (owner-local index, parent):
                self.pairL, self.pairU = self.sh.L, self.sh.U                    # exported to the peers
            elif pairs:                           # (``pairs`` False: the subclass sizes them by the level)
                self.pairL = _shared(dev, "pairL", max(self.N, 1), self.qdt)
                self.pairU = _shared(dev, "pairU", max(self.N, 1), self.qdt)
        self.hist = cp.zeros(self.P, cp.uint64)
        self.cursor = cp.zeros(self.P, cp.uint64)
        # ``keep``: the visited bitmap and each partition's arrays kept in the plugin between searches
        store = plugin.scratch.setdefault("gpu", {}) if keep else None
        for name in ("visited_g", "front", "front_next"):
            if keep:
                setattr(self, name, _shared(store, name, gw32, cp.uint32))
                getattr(self, name).fill(0)
            else:
                setattr(self, name, cp.zeros(gw32, cp.uint32))
        self.states = {p.rank: _GpuState(p, self.qdt, store) for p in parts}
        self.my_ranks = tuple(self.states)
        self.cnt = cp.zeros((len(self.states) + 1, 4), cp.uint64)
        cp.cuda.Device().synchronize()

    # ------------------------------------------------------------- helpers
    def _deg_of_root(self, st, i):
        ip = st.p.indptr_host               # the device rows' host copy: no device round trip
        return int(ip[i + 1] - ip[i])

    def _or_slices(self, dst, ranks, slices):
        """OR int64 host slices (one per rank, the CPU layout) into the global device bitmap ``dst``."""
        for rk, sl in zip(ranks, slices):
            if sl.shape[0]:
                off = 2 * (self.bases[rk] >> 6)
                d = cp.asarray(sl).view(cp.uint32)
                seg = dst[off:off + d.shape[0]]
                cp.bitwise_or(seg, d, out=seg)

    def _or_own(self, dst):
        for st in self.states.values():
            off = 2 * (st.p.base >> 6)
            seg = dst[off:off + st.fbm.shape[0]]
            cp.bitwise_or(seg, st.fbm, out=seg)

    def _host_slices(self):
        return [_to_host(st.fbm).view(np.int64) for st in self.states.values()]

    def _bucket(self, v, nc):
        """Claims ``v[:nc]`` -> (owner-local index, parent) pairs grouped by owner rank in
        ``pairL``/``pairU``; returns the P + 1 offsets (host)."""
        self.hist.fill(0)
        g = _grid(nc)
        self.k["bucket_count"](g, (_BLOCK,), (v, self.cnt[0], self.starts, np.int32(self.P), self.hist))
        off = np.zeros(self.P + 1, np.int64)
        off[1:] = np.cumsum(self.hist.get())
        self.cursor.set(off[:-1].astype(np.uint64))
        self.k["bucket_scatter"](g, (_BLOCK,), (v, self.cnt[0], self.starts, np.int32(self.P), self.scratch,
                                                self.cursor, self.pairL, self.pairU))
        return off

    # ------------------------------------------------------------- steps
    def visit_root(self, root):
        if self.direct:                         # the whole graph: the single-process start, one launch
            st = self.states[0]
            self.k["start_search"]((1,), (1,), (st.parent, st.visited, st.fbm, st.queue, _i64(root)))
            st.nq, st.m = 1, self._deg_of_root(st, root)
            return
        st, i = next(iter(self.states.values())), -1      # (a worker not holding the root: its bit only)
        if self.o_root in self.states:
            st = self.states[self.o_root]
            i = self.l_root + st.p.pad
            st.nq, st.m = 1, self._deg_of_root(st, i)
        self.k["visit_root_part"]((1,), (1,), (st.parent, st.visited, st.queue, self.visited_g, _i64(i), _i64(root)))

    def to_queues(self):
        t = time.perf_counter()
        self.cnt.fill(0)
        rows = list(self.states.values())
        for r, st in enumerate(rows, 1):
            nw = st.live
            self.k["bitmap_to_queue"](_grid(nw), (_BLOCK,), (st.fbm, _i64(nw), st.queue, self.cnt[r, 3:]))
        h = self.cnt.get()
        for r, st in enumerate(rows, 1):
            st.nq = int(h[r, 3])
        return time.perf_counter() - t

    def td_level(self, level, kt):
        t = time.perf_counter()
        self.cnt.fill(0)
        if self.direct:
            st = self.states[0]
            examined = st.m
            expand(self.k, st.p.indptr, st.p.adj, st.queue, st.nq, st.m, st.visited, st.parent, st.queue2,
                   self.cnt[1], 0, 1)
            st.queue, st.queue2 = st.queue2, st.queue
            h = self.cnt.get()
            st.nq, st.m = int(h[1, 0]), int(h[1, 1])
            kt += time.perf_counter() - t
            return [(st.nq, st.m, examined, kt)], kt
        examined = self._claim()
        nc = int(self.cnt[0, 0].get())
        v = self.claims[:nc]
        if self.sh is not None:
            return self._td_shared(v, nc, examined, kt, t)
        remote = [d for j in self.peers for d in self.ranks_of[j]]
        send = {j: [[]] for j in self.peers}
        if remote and nc:       # bucket by owner (bfs.cu); what goes to a peer is copied to the host once
            off = self._bucket(v, nc)
            lo, hi = min(off[d] for d in remote), max(off[d + 1] for d in remote)
            if hi > lo:
                Lh, Uh = _to_host(self.pairL[lo:hi]), _to_host(self.pairU[lo:hi])
                for j in self.peers:
                    dst, arrs = [], []
                    for d_rk in self.ranks_of[j]:
                        a, b = off[d_rk] - lo, off[d_rk + 1] - lo
                        if b > a:
                            dst.append(d_rk)
                            arrs += [Lh[a:b], Uh[a:b]]
                    send[j] = [dst] + arrs
        kt += time.perf_counter() - t
        got = self._pairs(self.mesh.exchange(PAIRS, send)) if self.peers else []
        t = time.perf_counter()
        remote = {rk: [(cp.asarray(arrs[1 + 2 * k]), cp.asarray(arrs[2 + 2 * k]))
                       for dst, arrs in got for k, d_rk in enumerate(dst) if d_rk == rk] for rk in self.states}
        return self._counts_round(*self._absorb_all(v, nc, remote, examined, kt, t))

    def _claim(self, bits_only: bool = False):
        """The claim pass: every partition's frontier claims into the worker's global ``visited_g``
        (ids in ``claims``, parents in ``scratch``, their count in ``cnt[0, 0]``; ``bits_only``: the bits
        alone, ``td_expand``'s null parent and claim list); returns the frontier edges examined."""
        par, out = (_NULL, _NULL) if bits_only else (self.scratch, self.claims)
        examined = 0
        for st in self.states.values():
            examined += st.m
            expand(self.k, st.p.indptr, st.p.adj, st.queue, st.nq, st.m, self.visited_g, par, out, self.cnt[0],
                   st.p.base, 0)
        return examined

    def _absorb_all(self, v, nc, remote, examined, kt, t):
        """Apply this worker's claims ``v[:nc]`` and the pairs received for each rank
        (``remote``: rank -> [(ids, parents)] device arrays) to the partitions; returns
        (this worker's counts, kernel seconds) once the kernels are done."""
        self._absorb(v, nc, remote)
        h = self.cnt.get()
        new_n = new_m = 0
        for r, st in enumerate(self.states.values(), 1):
            st.nq, st.m = int(h[r, 0]), int(h[r, 1])
            new_n += st.nq
            new_m += st.m
        kt += time.perf_counter() - t
        return (new_n, new_m, examined, kt), kt

    def _absorb(self, v, nc, remote):
        """Launch the absorb kernels of :meth:`_absorb_all` (counts in ``cnt`` rows 1..)."""
        rows = list(self.states.items())
        for r, (rk, st) in enumerate(rows, 1):
            p = st.p
            count = p.nloc - p.pad
            srcs = [(v, self.scratch, nc, int(self.starts_h[rk]), 1)]      # this worker's own claims
            srcs += [(V, U, V.shape[0], 0, 0) for V, U in remote[rk]]
            for V, U, m, first, by_v in srcs:
                if m:
                    self.k["absorb"](_grid(m), (_BLOCK,), (V, U, _i64(m), _i64(first), _i64(count), np.int32(by_v),
                                                           _i64(p.pad), _i64(p.base), p.indptr, st.visited,
                                                           st.parent, self.visited_g, st.queue2, self.cnt[r]))
            st.queue, st.queue2 = st.queue2, st.queue

    def _td_shared(self, v, nc, examined, kt, t):
        """The top-down exchange through shared device memory: claims bucketed into this worker's
        exported pair buffers, each peer told where its pairs lie (PULL), pairs read in place."""
        sh = self.sh
        send = {j: [(), (), ()] for j in self.peers}
        with sh.guard():
            if nc:
                off = self._bucket(v, nc)
                cp.cuda.get_current_stream().synchronize()       # the pairs are whole before a peer reads them
                for j in self.peers:
                    ks = [d for d in self.ranks_of[j] if off[d + 1] > off[d]]
                    send[j] = [ks, [int(off[d]) for d in ks], [int(off[d + 1]) for d in ks]]
        kt += time.perf_counter() - t
        got = self.mesh.exchange(PULL, send)
        t = time.perf_counter()
        remote = {rk: [] for rk in self.states}
        for j, (dst, first, end) in got.items():
            for d_rk, a, b in zip(dst, first, end):
                if d_rk not in self.states:
                    self._bad(j, f"pairs for rank {d_rk}, not held here")
                remote[d_rk].append((j, a, b))
        with sh.guard():                        # the absorb kernels read the peers' buffers in place
            remote = {rk: [sh.peer_pairs(j, a, b) for j, a, b in lst] for rk, lst in remote.items()}
            mine, kt = self._absorb_all(v, nc, remote, examined, kt, t)
        return self._counts_round(mine, kt)

    def _queues_to_bitmaps(self):
        """Each partition's queue -> its local frontier bitmap ``fbm``."""
        for st in self.states.values():
            st.fbm.fill(0)
            if st.nq:
                self.k["queue_to_bitmap"](_grid(st.nq), (_BLOCK,), (st.queue, _i64(st.nq), st.fbm))

    def to_bitmaps(self):
        t = time.perf_counter()
        self._queues_to_bitmaps()
        if self.direct:                         # one partition: its bitmap is the global one
            self.front = self.states[0].fbm
            return time.perf_counter() - t
        self.front.fill(0)
        self._or_own(self.front)
        if self.sh is not None:
            self.sh.publish(self.states)
            kt = time.perf_counter() - t
            self.mesh.exchange(SYNC, {j: [] for j in self.peers})
            self.sh.collect(self.front, self.bases, self.my_ranks)
            cp.bitwise_or(self.visited_g, self.front, out=self.visited_g)
            return kt
        msg = None
        if self.peers:
            msg = [self.my_ranks] + self._host_slices()
        else:
            cp.cuda.Device().synchronize()
        kt = time.perf_counter() - t
        got = self.mesh.exchange(FRONT, {j: msg for j in self.peers}) if self.peers else {}
        for j, arrs in got.items():
            self._or_slices(self.front, self._slices(j, arrs[0], arrs[1:]), arrs[1:])
        if not self.direct:
            cp.bitwise_or(self.visited_g, self.front, out=self.visited_g)
        return kt

    def _bu_steps(self, zero: bool = True):
        """``bu_step`` over every partition's rows against the global frontier (counts in ``cnt`` rows 1..,
        zeroed first unless ``zero`` is False: the caller did); each partition's new local bitmap becomes its
        ``fbm``."""
        if zero:
            self.cnt.fill(0)
        for r, st in enumerate(self.states.values(), 1):
            self._bu_launch(st, r)
            st.fbm, st.nxt = st.nxt, st.fbm

    def _bu_launch(self, st, r, visited=None):
        """``bu_step`` over partition ``st``'s rows against the global frontier into ``st.nxt`` (counts in
        ``cnt`` row ``r``), the rows open in ``visited`` (None: ``st.visited``) searched."""
        p, nw = st.p, st.live                   # past it every row is visited and ``next`` stays zero
        vis = st.visited if visited is None else visited
        self.k["bu_step"]((min(-(-nw * 32 // _BLOCK), 32 * _sm_count()),), (_BLOCK,),
                          (p.indptr, *p.adj, p.hub, self.front, vis, st.nxt, st.parent, _i64(nw), self.cnt[r]))

    def bu_level(self, kt):
        t = time.perf_counter()
        self._bu_steps()
        rows = list(self.states.values())
        if self.direct:                         # one partition: its new bitmap is the next global one
            self.front_next = rows[0].fbm
        else:
            self.front_next.fill(0)
            self._or_own(self.front_next)
        h = self.cnt.get()
        new_n = new_m = examined = 0
        for r, st in enumerate(rows, 1):
            st.nq, st.m = int(h[r, 0]), int(h[r, 1])
            new_n += st.nq
            new_m += st.m
            examined += int(h[r, 2])
        kt += time.perf_counter() - t
        mine = (new_n, new_m, examined, kt)
        totals = [mine]
        if self.sh is not None:
            self.sh.publish(self.states)
            got = self.mesh.exchange(COUNTS, {j: _counts_msg(mine) for j in self.peers})
            totals += [_counts_of(a) for a in got.values()]
            self.sh.collect(self.front_next, self.bases, self.my_ranks)
        elif self.peers:
            msg = _counts_msg(mine) + [self.my_ranks] + self._host_slices()
            got = self.mesh.exchange(COUNTS_FRONT, {j: msg for j in self.peers})
            for j, arrs in got.items():
                totals.append(_counts_of(arrs))
                self._or_slices(self.front_next, self._slices(j, arrs[2], arrs[3:]), arrs[3:])
        if not self.direct:
            cp.bitwise_or(self.visited_g, self.front_next, out=self.visited_g)
        self.front, self.front_next = self.front_next, self.front
        return totals, kt

    def parents(self):
        """Parent slices in original ids (a partition relabelled within itself maps them on the device first):
        device arrays where a partition keeps them there (:mod:`dbfs.bfs.dask.layout.built`) or the search
        holds them (``hold``: the id width, each in its own allocation, for the validation on this worker or
        over the mesh's communicator), else int64 host copies."""
        cp.cuda.Device().synchronize()
        out = {}
        for rk, st in self.states.items():
            sl = st.parent[st.p.pad:st.p.nloc]
            if st.p.keep_parents:
                out[rk] = st.p.original(sl)
            elif self.hold:
                out[rk] = st.p.to_original(sl, own_memory(sl.shape, sl.dtype))
            else:
                out[rk] = st.p.to_original(sl).get().astype(np.int64)
        cp.cuda.get_current_stream().synchronize()
        return out

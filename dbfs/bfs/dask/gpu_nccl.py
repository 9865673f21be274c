"""One search's level steps over NCCL: a mesh of GPU workers on one host, no TCP round in a level.

Contract
--------
:class:`_NcclSearch` is :class:`dbfs.bfs.dask.gpu_search._GpuSearch` (the same
partitions, kernels, directions and counts, level for level) with every
exchange a collective on the mesh's NCCL communicator
(:class:`dbfs.bfs.dask.nccl._Comm`), issued on the search's CUDA stream
behind the kernels. A level makes at most two device-to-host reads
(top-down: the bucket sizes, then the counts; bottom-up: the counts) and no
message through the TCP mesh.

Method (per step; bits of distinct workers never share a vertex, so the sum
of bitmap words is their OR):

- start: allreduce(max) of the root's degree, read once (the start barrier);
- top-down: the claim pass and the bucketing by owner rank on the device
  (:meth:`_GpuSearch._claim`, ``bucket_count``/``bucket_scatter`` with the
  claim count read on the device); allgather of every worker's P bucket
  sizes, read once; one group of send/recv moves each (owner-local index,
  parent) bucket to its owner's worker; ``absorb`` of this worker's claims
  and of the received pairs; allreduce(sum) of the counts (new frontier,
  its edges, edges examined), read once;
- bottom-up: ``bu_step``; this worker's bits of the next frontier into a
  zeroed global bitmap; allreduce(sum) of the bitmap and of the counts in
  one group, read once (one rank per worker, the ranks' slices equal whole
  words: the ranks' bitmaps allgathered in place into the global one);
- the top-down -> bottom-up switch: the same bitmap allreduce, no read.

Every worker feeds the same global counts to its own direction policy, as
on the TCP mesh. Level records: ``totals`` holds the global counts once;
this worker's kernel and exchange seconds are CUDA-event spans
(:class:`dbfs.bfs.dask.nccl._Timeline`), ``rounds`` the collectives and
``sent`` the bytes this worker put on the wire.

Encoding: as :mod:`dbfs.bfs.dask.gpu_search` (uint32 bitmap words over all
N, pairs of the id dtype, uint64 counters); the bucket sizes are a W x P
uint64 matrix (row j: worker j's claims per owner rank). After Bisson,
Bernaschi and Mastrostefano, "Parallel Distributed Breadth First Search on
the Kepler Architecture" (IEEE TPDS 2016), for the all-to-all of claimed
vertices and the frontier bitmap exchanged by collectives.
"""
from __future__ import annotations

import cupy as cp
import numpy as np

from dbfs.bfs.dask.gpu_search import _GpuSearch
from dbfs.bfs.dask.nccl import _Timeline
from dbfs.bfs.gpu import _BLOCK, _grid, _i64

__all__ = ["_NcclSearch"]


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
        super().__init__(mesh, widx, ranks_of, parts, plugin, None)
        self.comm = self.mesh = comm                 # the level loop reads seconds, rounds and sent
        self.W = len(ranks_of)
        rows = self.rows = len(self.states) + 1
        # counters of the claim row and the partitions, the level's totals, the bucket sizes: one zeroing
        self.cbuf = cp.zeros(4 * (rows + 1) + self.P, cp.uint64)
        self.cnt = self.cbuf[:4 * rows].reshape(rows, 4)
        self.gsum = self.cbuf[4 * rows:4 * rows + 4]
        self.hist = self.cbuf[4 * rows + 4:]
        self.allhist = cp.zeros(self.W * self.P, cp.uint64)
        self.one = cp.zeros(1, cp.int64)
        self.tl = _Timeline()
        self.dev = plugin.scratch.setdefault("gpu", {})
        # one rank per worker, ranks in mesh order, every slice the same whole number of 64-vertex words
        # (N a multiple of 64 P, as 2^SCALE with P a power of two): the global bitmap is the allgather of
        # the ranks' bitmaps in place, half the bytes of an allreduce and no zeroing
        sh = self.starts_h
        self.slice = int(sh[1] - sh[0]) // 32
        self.gather = self.P == self.W and self.my_ranks == (widx,) and all(
            int(sh[rk]) % 64 == 0 and int(sh[rk + 1] - sh[rk]) == 32 * self.slice for rk in range(self.P))
        cp.cuda.Device().synchronize()

    def _read(self):
        """The level's one host read of the counters; returns them (after checking the mesh)."""
        h = self.cbuf[:4 * (self.rows + 1)].get().reshape(self.rows + 1, 4)
        self.comm.check()
        for r, st in enumerate(self.states.values(), 1):
            st.nq, st.m = int(h[r, 0]), int(h[r, 1])
        return h[-1]

    def _exchange_bitmap(self, dst, totals=False):
        """This worker's bits of a frontier into the global bitmap ``dst`` on every worker, with the
        level's totals (``totals``) in the same group."""
        comm = self.comm
        if self.gather:
            w = self.slice
            seg = dst[self.widx * w:(self.widx + 1) * w]
            cp.copyto(seg, self.states[self.widx].fbm[:w])
        else:
            dst.fill(0)
            self._or_own(dst)
        if totals:
            self._level_totals()
        self.tl.mark("k")
        with comm.group():
            if self.gather:
                comm.allgather(seg, dst)
            else:
                comm.allreduce(dst)
            if totals:
                comm.allreduce(self.gsum)
        self.tl.mark("x")

    def _level_totals(self, examined=-1):
        self.k["level_totals"]((1,), (32,), (self.cnt, np.int32(self.rows), _i64(examined), self.gsum))

    def _totals(self, g, kt):
        k, x = self.tl.settle()
        self.comm.seconds += x
        kt += k
        return [(int(g[0]), int(g[1]), int(g[2]), kt)], kt

    # ------------------------------------------------------------- steps
    def start(self, root):
        self.one.fill(self._own_root(root))
        self.comm.allreduce(self.one, "max")
        deg = int(self.one.get()[0])
        self.comm.check()
        return deg

    def td_level(self, level, kt):
        tl, comm, P = self.tl, self.comm, self.P
        tl.begin()
        self.cbuf.fill(0)
        examined = self._claim()
        ub = min(examined, self.N)          # the claims are at most the edges examined
        if ub:
            g = _grid(ub)
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
        self._absorb(self.claims[:nc], nc, remote)
        self._level_totals(examined)
        tl.mark("k")
        comm.allreduce(self.gsum)
        tl.mark("x")
        return self._totals(self._read(), kt)

    def to_bitmaps(self):
        self.tl.begin()
        self._queues_to_bitmaps()
        self._exchange_bitmap(self.front)
        cp.bitwise_or(self.visited_g, self.front, out=self.visited_g)
        return 0.0                          # its device seconds settle with the bottom-up level that follows

    def bu_level(self, kt):
        self.tl.begin()
        self._bu_steps()
        self._exchange_bitmap(self.front_next, totals=True)
        g = self._read()
        cp.bitwise_or(self.visited_g, self.front_next, out=self.visited_g)
        self.front, self.front_next = self.front_next, self.front
        return self._totals(g, kt)

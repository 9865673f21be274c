"""What a CPU worker's search checks in the frames it receives, and the coded forms it sends between hosts.

Contract
--------
:class:`_Messages` is the part of :class:`dbfs.bfs.dask.search.bsp._Search`
(it derives from it) that reads and writes the level frames of
:mod:`dbfs.bfs.dask.mesh.frames` beyond their layout: a peer's frontier
slices (its own ranks, one bitmap of its rank's length each), its pairs
(destinations held here, the claim dtype, every owner-local index inside
its rank's rows and every parent a vertex: the absorb kernels index by
them unchecked), and the coded kinds (PAIRS_Z, FRONT_Z, COUNTS_FRONT_Z)
packed and unpacked. A frame that fails a check raises
:class:`dbfs.bfs.dask.mesh.transport._PeerLost` naming the peer and what
it sent: the search treats a malformed peer as a lost one.

Method and encoding: :mod:`dbfs.bfs.dask.mesh.codec` (pairs packed in
per-rank bit widths, frontier slices as the shorter of their words, their
set rows' gaps and their clear rows' gaps); the attributes read are the
search's (``states``, ``ranks_of``, ``words``, ``counts``, ``pads``,
``bases``, ``b1``, ``b2``, ``code``, ``P``, ``N``, ``peers``, ``scratch``,
``codebuf``). Reference: the frontier exchange these frames carry is
Beamer, Buluc, Asanovic and Patterson, "Distributed Memory Breadth-First
Search Revisited: Enabling Bottom-Up Search" (IPDPS Workshops 2013); the
gaps are LEB128 varints (the DWARF standard's encoding).
"""
from __future__ import annotations

from dbfs.bfs.dask.mesh.codec import decode_slice_or, encode_slice, pack_pairs, unpack_pairs
from dbfs.bfs.dask.mesh.transport import _PeerLost

__all__ = ["_Messages"]


class _Messages:
    """Frame checks and the coded forms of a worker's search (module docstring)."""

    def _bad(self, j, what):
        raise _PeerLost(f"worker {j} sent a bad frame: {what}")

    def _slices(self, j, ranks, arrs):
        """Check a peer's frontier slices: its own ranks, one bitmap of the right length each."""
        rks = list(ranks)
        if rks != self.ranks_of[j]:
            self._bad(j, f"slices of ranks {rks} (it holds {self.ranks_of[j]})")
        for rk, sl in zip(rks, arrs):
            if sl.shape[0] != self.words[rk]:
                self._bad(j, f"slice of rank {rk} has {sl.shape[0]} words (not {self.words[rk]})")
        return rks

    def _pairs(self, got):
        """Check received pair frames: destinations are this worker's ranks, pairs of the claim dtype,
        every owner-local index inside its rank's rows and every parent a vertex (the absorb kernels
        index by them unchecked)."""
        out = []
        for j, arrs in got.items():
            dst = arrs[0]
            for k, d_rk in enumerate(dst):
                if d_rk not in self.states:
                    self._bad(j, f"pairs for rank {d_rk}, not held here")
                L, U = arrs[1 + 2 * k], arrs[2 + 2 * k]
                if L.dtype != self.scratch.dtype or U.dtype != self.scratch.dtype:
                    self._bad(j, f"pairs of dtype {L.dtype}")
                if L.shape != U.shape:
                    self._bad(j, f"{L.shape[0]} indices for {U.shape[0]} parents")
                n = self.states[d_rk].p.count
                if L.shape[0] and (int(L.min()) < 0 or int(L.max()) >= n or int(U.min()) < 0
                                   or int(U.max()) >= self.N):
                    self._bad(j, f"pairs outside rank {d_rk}'s {n} rows or the {self.N} vertices")
            out.append((dst, arrs))
        return out

    def _unpacked(self, got):
        """Decode received coded pair frames (PAIRS_Z) into :meth:`_pairs`' form: every destination is
        this worker's, every stream holds 1..n well-formed pairs (index below the rank's n rows, parent
        below N)."""
        out = []
        dt = self.scratch.dtype
        for j, arrs in got.items():
            dst, cnts = arrs[0], arrs[1]
            flat = [dst]
            for k, (d_rk, c) in enumerate(zip(dst, cnts)):
                if d_rk not in self.states:
                    self._bad(j, f"pairs for rank {d_rk}, not held here")
                n = self.counts[d_rk]
                if not 0 < c <= n:
                    self._bad(j, f"{c} pairs for rank {d_rk} of {n} vertices")
                LU = unpack_pairs(arrs[2 + k], c, self.b1[d_rk], self.b2, n, self.N, dt)
                if LU is None:
                    self._bad(j, f"a malformed pair stream for rank {d_rk}")
                flat += LU
            out.append((dst, flat))
        return out

    def _or_coded(self, j, ranks, tags, streams, front) -> int:
        """OR a peer's coded frontier slices (FRONT_Z, COUNTS_FRONT_Z) into ``front``: its own ranks, each
        slice well-formed and inside its rank's rows; returns their frontier vertices."""
        rks = list(ranks)
        if rks != list(self.ranks_of[j]):
            self._bad(j, f"slices of ranks {rks} (it holds {list(self.ranks_of[j])})")
        total = 0
        for rk, tag, sl in zip(rks, tags, streams):
            k = decode_slice_or(sl, tag, front, self.pads[rk], self.counts[rk], self.code, self.P, rk,
                                self.bases[rk])
            if k < 0:
                self._bad(j, f"a malformed frontier slice of rank {rk} (form {tag})")
            total += k
        return total

    def _packed(self, outs):
        """PAIRS_Z frames: per peer, for each of its ranks the pairs of each of this worker's partitions,
        packed (:func:`dbfs.bfs.dask.mesh.codec.pack_pairs`)."""
        send = {}
        for j in self.peers:
            dst, cnts, streams = [], [], []
            for d_rk in self.ranks_of[j]:
                for L, U, cnt in outs.values():
                    a, b = int(cnt[d_rk]), int(cnt[d_rk + 1])
                    if b > a:
                        dst.append(d_rk)
                        cnts.append(b - a)
                        streams.append(pack_pairs(L, U, a, b, self.b1[d_rk], self.b2))
            send[j] = [dst, cnts] + streams
        return send

    def _coded_slices(self):
        """This worker's frontier slices as FRONT_Z arrays: ranks, forms, streams."""
        tags, streams = [], []
        for rk, st in self.states.items():
            tag, sl = encode_slice(st.fbm, self.pads[rk], self.counts[rk], self.codebuf)
            tags.append(tag)
            streams.append(sl)
        return [self.my_ranks, tags] + streams

"""The level loop of a distributed search: one bulk-synchronous superstep per level.

Contract
--------
:func:`_bsp_search` runs as ONE task per mesh worker (pinned) for a batch
of roots, searched one after another (one scheduler round trip a batch,
not a search), serving all of that worker's partitions together on its
Numba threads, and returns per root ``{"parents": {rank: int64 slice,
local order}, "seconds", "records" (mesh worker 0 only), "kernel_total",
"levels", "own" (this worker's (kernel s, exchange s, bytes sent) per
level, and on an NCCL mesh the host seconds issuing the level's device
work)}``, or ``{"lost": why}`` when a peer was lost. ``seconds`` is
Graph500 Kernel 2 time on this worker: from the start barrier, just before
the root is visited, to the last count exchange (every worker then knows
that every partition has written its parents). A failure closes this
worker's end of the mesh first, so its peers stop waiting at once (they
see a lost peer) instead of timing out.

Method (per level; the steps are :mod:`dbfs.bfs.cpu`'s, each ONE call
over all of the worker's partitions (:mod:`dbfs.bfs.cpu.rowtable`: the
partitions' rows end to end in one worker row space, the work split over
the threads by edges or word blocks, not by partition), so a level costs
the same kernel calls however many partitions the worker holds; after
Beamer, Buluc, Asanovic and Patterson, "Distributed Memory Breadth-First
Search Revisited: Enabling Bottom-Up Search", IPDPS Workshops 2013):

- top-down: ``td_rows`` claims the neighbours whose bit is clear in a
  per-WORKER global ``visited`` bitmap (the worker's own discoveries, its
  earlier claims and every bottom-up frontier: a vertex is sent at most
  once per worker) into a claim scratch over global ids; ``split_claims``
  absorbs the claims of the worker's own partitions at once and buckets
  the others' pairs by owner, which are sent to the owning partitions (one
  PAIRS round), which keep the first parent of each unvisited vertex. A
  level dense enough on block partitions takes its vertices from the bits
  it set instead (:mod:`dbfs.bfs.cpu.rowclaims`: ``split_sorted``,
  ``absorb_bits``, ``mark_pairs``), no atomic per claim. With the frontier
  shared on one host, a large level (``takes_shared``: every worker's same
  choice) sends no pairs: the peers read the claims where they were made
  (:mod:`dbfs.bfs.dask.mesh.shm_claims`), after a SYNC round (the barrier);
  a smaller one leaves its pairs in its pairs box there, read in place.
- bottom-up: ``bu_rows`` (``bu_step``'s blocks) over every partition's unvisited rows against the
  GLOBAL frontier bitmap, assembled from every partition's slice of the
  previous level (sent with the counts, or shared through ``/dev/shm``,
  :mod:`dbfs.bfs.dask.mesh.shm`); a top-down -> bottom-up switch adds one round.
  With the frontier shared, the start barrier, the counts and the barriers
  go through the shared file's board (:mod:`dbfs.bfs.dask.mesh.board`), not TCP.
- counts: every worker sends its partitions' counts (new frontier, its
  edges, edges examined, kernel seconds) to every peer, so every worker
  feeds the SAME global counts to its own copy of the direction policy
  (:mod:`dbfs.bfs.policy`) and reaches the same decision without the client.

Directions, frontier sizes and edge counts equal the single-process ``do``
level for level. After each level the plugin's ``level_listeners`` are
called with ``(level, this worker's ranks, record)``: the level's global
counts and this worker's kernel and exchange seconds and the bytes it sent.

Message layouts are :mod:`dbfs.bfs.dask.mesh.frames`'s kinds; what a frame
carries beyond its layout (the ranks it names, the bitmap slice lengths,
the pair dtype) is checked here, and a mismatch is a lost peer.

Encoding between hosts: the start barrier (BEGIN) carries each worker's
codec flag; when every worker of the mesh runs these CPU steps with its
frontier slices going by the mesh (no frontier shared on one host), the
pairs and slices travel coded (:mod:`dbfs.bfs.dask.mesh.codec`: pairs packed in
the bits their values need, each slice the smallest of its bitmap, its
rows' gaps and its clear rows' gaps, so a level's bytes stay within about
twice its information) as PAIRS_Z, FRONT_Z and COUNTS_FRONT_Z; otherwise
(a GPU worker in the mesh, or a shared frontier) as int64 bitmaps and pairs
of the claim dtype, as before. A received stream is decoded with every id
checked against its rank's rows, and a bottom-up peer's slices must hold as
many vertices as its counts say; a malformed one is a lost peer.
"""
from __future__ import annotations

import gc
import sys
import time

import numpy as np

from dbfs.bfs.cpu import _fill_parent, bitmap_to_queue, queue_to_bitmap
from dbfs.bfs.cpu.rowclaims import (absorb_bits, absorb_rows, by_bits, claims_in, mark_pairs, split_claims, split_sorted,
                                    take_bits, words_elsewhere)
from dbfs.bfs.cpu.rowtable import bu_rows, copy_rows, or_rows, row_table, td_rows
from dbfs.bfs.cpu.topdown import reserve_td
from dbfs.bfs.dask.mesh.codec import GAP_SLACK, pair_widths
from dbfs.bfs.dask.layout.exchange import _base_of, _chunks, _or_into, _or_slice
from dbfs.bfs.dask.mesh.frames import BEGIN, COUNTS, COUNTS_FRONT, COUNTS_FRONT_Z, FRONT, FRONT_Z, PAIRS, PAIRS_Z, SYNC
from dbfs.bfs.dask.mesh import board
from dbfs.bfs.dask.mesh.plugin import get_plugin
from dbfs.bfs.dask.mesh.shm import _boundary_words, _shm_collect
from dbfs.bfs.dask.mesh.shm_claims import box_pairs, fill_box, or_claims, take_peers, takes_shared
from dbfs.bfs.dask.mesh.transport import _LocalMesh, _PeerLost, _Timed
from dbfs.bfs.dask.search import profiled
from dbfs.bfs.dask.search.messages import _Messages
from dbfs.bfs.dask.layout.worker import _grown, _scratch, _zeroed
from dbfs.bfs.policy import BU, TD, policy_from
from dbfs.partition import Partitioning, owner_local

__all__ = ["_bsp_search", "_bsp_levels", "SEARCH_SWITCH_S"]

SEARCH_SWITCH_S = 5e-5      # the worker's GIL switch interval during a search (why: docs/DISTRIBUTED.md, GPU workers)

def _bsp_search(mesh_id, widx, ranks_of, parts, roots, algorithm, pol_opts, nnz_total):
    """(task pinned to mesh worker ``widx``) the searches from ``roots`` (internal ids), one after another,
    on this worker's partitions ``parts``; ``pol_opts``: the keyword options of
    :func:`dbfs.bfs.policy.policy_from`.

    Returns one dict a root, in order: {"parents": {rank: parent slice}, "seconds", "records" (widx 0
    only), "kernel_total", "levels", "own"}; or ``{"lost": why}`` when a peer was lost (the client reloads
    and reruns the batch; an expected event, so no failed task and no traceback in the worker's log).
    Any failure closes this worker's end of the mesh first, so the peers
    stop waiting at once (they see a lost peer) instead of timing out.
    """
    plugin = get_plugin()
    if len(ranks_of) == 1:
        mesh = _LocalMesh()
    else:
        mesh = plugin.meshes.get((mesh_id, widx))
        if mesh is None:
            return {"lost": f"no mesh {mesh_id[:8]} on this worker (restarted?)"}
        sh = plugin.shms.get(mesh_id)
        if board.USE and getattr(sh, "board", None) is not None and hasattr(mesh, "socks"):
            mesh = board._BoardMesh(mesh, sh, widx, len(ranks_of))     # the small rounds through /dev/shm
    switch = sys.getswitchinterval()
    # a worker thread holding the GIL (event loop, monitors) yields it soon to the waiting search thread
    sys.setswitchinterval(SEARCH_SWITCH_S)
    collecting = gc.isenabled()
    outs = []
    prof = profiled.profiler()      # the DBFS_PROFILE_SEARCH diagnostic
    try:
        for root in roots:
            # no cyclic collection of the worker's heap inside a timed level (a search allocates little);
            # between two searches it may run, as between two tasks
            gc.disable()
            outs.append(_bsp_levels(mesh, widx, ranks_of, parts, root, algorithm, pol_opts, nnz_total, plugin,
                                    plugin.shms.get(mesh_id)))
            plugin.note_device()    # the most device memory in use (CuPy's pool keeps the search's blocks): the JSON's
            if collecting:
                gc.enable()
        return outs
    except _PeerLost as exc:
        mesh.close()
        plugin.drop_mesh(mesh_id, widx)
        return {"lost": str(exc)}
    except BaseException:
        mesh.close()
        plugin.drop_mesh(mesh_id, widx)
        raise
    finally:
        sys.setswitchinterval(switch)
        if collecting:
            gc.enable()
        profiled.dump(prof, f"search-w{widx}")


def _counts_msg(mine):
    """A level's counts (new frontier, its edges, edges examined, kernel seconds) as a COUNTS frame's arrays."""
    return [(int(mine[0]), int(mine[1]), int(mine[2])), (float(mine[3]),)]


def _counts_of(arrs):
    c, k = arrs[0], arrs[1]
    return int(c[0]), int(c[1]), int(c[2]), float(k[0])


class _Slot:
    """One partition's part of a search's worker arrays (slot ``s`` of its row table): views of the worker
    rows ``[off, off + p.nloc)``, its local ``parent``, ``visited`` and frontier bitmaps (``fbm``: after a
    bottom-up level, or of the queue after a switch; ``nxt``), as :mod:`dbfs.bfs.cpu`'s steps take them."""

    def __init__(self, search, p, s):
        self._search, self.p, self.s = search, p, s
        self.off = search.rows.off[s]
        self.w0, self.nw = self.off >> 6, search.rows.words[s]
        self.parent = search.parent_w[self.off:self.off + p.nloc]
        self.visited = search.visited_w[self.w0:self.w0 + self.nw]

    @property
    def fbm(self):
        return self._search.fbm_w[self.w0:self.w0 + self.nw]

    @property
    def nxt(self):
        return self._search.nxt_w[self.w0:self.w0 + self.nw]

    @property
    def queue(self):
        """Its local rows in the worker's frontier queue (a copy; the search keeps one queue)."""
        q = self._search.queue
        if q is None:               # a bit level's frontier, left in the worker's bitmap
            q = bitmap_to_queue(self._search.fbm_w, 0)
        return q[(q >= self.off) & (q < self.off + (self.nw << 6))] - self.off


class _Search(_Messages):
    """One search's worker-side state (the -1 fills and buffers of the per-search
    setup, outside the timer as in Graph500 3.0.1) and its named steps."""

    claims = None       # the mesh's shared top-down claims on this host (dbfs.bfs.dask.mesh.shm_claims), or None
    shared = False      # every worker has them (the start barrier's flag 2): a large top-down level uses them
    level_edges = 0     # the global frontier's edges of the level about to run (set by the level loop)

    def __init__(self, mesh, widx, ranks_of, parts, plugin, shm):
        self.mesh = _Timed(mesh)
        self.widx, self.ranks_of = widx, ranks_of
        self.peers = [j for j in range(len(ranks_of)) if j != widx]
        parts = sorted(parts, key=lambda p: p.rank)
        p0 = parts[0]
        self.N, self.P, self.code, self.q, self.r = p0.n, p0.P, p0.code, p0.q, p0.r
        part = Partitioning(p0.n, p0.P, p0.kind)
        self.bases = [_base_of(part, rk) for rk in range(self.P)]
        self.pads = [part.vertex_range(rk).start - self.bases[rk] if self.code == 0 else 0 for rk in range(self.P)]
        self.counts = [part.local_count(rk) for rk in range(self.P)]
        self.starts = np.asarray([part.vertex_range(rk).start for rk in range(self.P)] + [self.N], np.int64)
        self.words = [(self.pads[rk] + self.counts[rk] + 63) >> 6 for rk in range(self.P)]
        self.b1 = [pair_widths(c, self.N)[0] for c in self.counts]     # packed pair widths (coded frames)
        self.b2 = pair_widths(1, self.N)[1]
        self.grown = plugin.grown
        self.listeners = plugin.level_listeners
        gwords = (self.N + 63) >> 6
        self.sh = shm if self.code == 0 and self.peers else None   # same-host shared frontier, else slices
        self.claims = cl = getattr(self.sh, "claims", None)    # shared: scratch and claim bits in its mapping
        # every array is written here, so no page is first touched (and zeroed by the kernel) inside the timer
        self.scratch = _scratch(plugin.scratch, self.N) if cl is None else cl.scratch  # td claims (write-before-read)
        self.visited_g = _zeroed(gwords)                     # subset of the visited set, global ids (td filter)
        self.front = _zeroed(gwords) if cl is None else cl.front   # global frontier bitmap (bottom-up); td claim bits
        if cl is not None:
            self.front.fill(0)      # a set bit is a claim of this level or a vertex visited before it (shm_claims)
        self.front_next = _zeroed(gwords) if self.sh is None else None
        self.wordof = _boundary_words(part) if self.sh is not None else None
        # the worker's partitions end to end in one row space (slot s: partition parts[s]): one kernel call
        # per step covers them all
        self.rows = row_table([(p.indptr, p.indices, p.hub, p.multi, p.pad, p.base if self.code == 0 else p.rank,
                                1 if self.code == 0 else self.P) for p in parts])
        R = self.rows.rows
        # the claims' record buffer and seen bitmap, kept by the worker (its searches' tasks land on any of its
        # threads), at their largest before the timer
        reserve_td(self.grown, sum(p.nnz for p in parts), gwords)
        self.parent_w = _fill_parent(R)                      # parents over worker rows
        self.visited_w = np.empty(R >> 6, np.int64)          # visited over worker rows (no-edge rows set)
        self.fbm_w = _zeroed(R >> 6)                         # local frontier bitmap (after a bottom-up level)
        self.nxt_w = _zeroed(R >> 6)
        self.queue = np.empty(0, np.int64)                   # local frontier queue (worker rows; None: in fbm_w)
        self.fbm_queue = False                               # fbm_w holds the frontier's bits (a bit-pass level's)
        self.qbufs = [_grown(self.grown, ("rows", k), max(R, 1)) for k in (0, 1)]   # alternate per level
        self.states = {}
        for s, p in enumerate(parts):
            st = _Slot(self, p, s)
            self.visited_w[st.w0:st.w0 + st.nw] = p.no_edge[:st.nw]
            self.states[p.rank] = st
        self.my_ranks = tuple(self.states)
        self.slot_of = np.full(self.P, -1, np.int64)        # rank -> its slot here (-1: another worker's)
        self.slot_of[list(self.my_ranks)] = np.arange(len(parts))
        self.elsewhere = words_elsewhere(self.starts, self.slot_of)   # the global words of the ranks not held here
        self.pad_ranks = np.asarray([p.rank for p in parts if p.pad], np.int64)   # shared-frontier boundary words
        self.pad_words = np.asarray([st.w0 for st in self.states.values() if st.p.pad], np.int64)
        self.coded = False                                   # set at the start barrier (_codec_flag)
        # the gap forms' work bytes (a slice's bitmap + a varint), pre-faulted and kept across searches
        self.codebuf = None
        if self.sh is None and self.peers:
            nw = max(self.words[rk] for rk in self.my_ranks) + (GAP_SLACK >> 3) + 1
            self.codebuf = _grown(self.grown, "codec", nw).view(np.uint8)

    def _codec_flag(self) -> int:
        """1 when this worker sends and decodes the coded kinds: its level steps are this class's own (a
        subclass with steps of its own, a GPU worker's, speaks the int64 kinds) and its frontier slices
        go by the mesh (no frontier shared on this host)."""
        cls = type(self)
        own = all(getattr(cls, m) is getattr(_Search, m) for m in ("td_level", "to_bitmaps", "bu_level"))
        return int(own and self.sh is None)

    def _own_root(self, root) -> int:
        """Where ``root`` lives (``o_root``, ``l_root``); its degree if this worker holds it, else -1."""
        o_root, l_root = owner_local(np.int64(root), self.code, self.P, self.q, self.r)
        self.o_root, self.l_root = int(o_root), int(l_root)
        if self.o_root not in self.states:
            return -1
        st = self.states[self.o_root]
        return self._deg_of_root(st, self.l_root + st.p.pad)

    def _deg_of_root(self, st, i):
        return int(st.p.indptr[i + 1] - st.p.indptr[i])

    def parents(self):
        """This worker's parent slices (local order, pad rows cut off)."""
        return {rk: st.parent[st.p.pad:] for rk, st in self.states.items()}

    # ------------------------------------------------------------- steps
    def start(self, root):
        """Start barrier (shares the root's degree and the flags: 1 coded kinds, 2 shared claims); returns it."""
        deg_root = self._own_root(root)
        flag = self._codec_flag() | (2 if self.claims is not None else 0)
        got = self.mesh.exchange(BEGIN, {j: [(deg_root, flag)] for j in self.peers})
        for j, arrs in got.items():
            d, f = arrs[0]
            if f not in (0, 1, 2, 3):
                self._bad(j, f"start flags {f}")
            deg_root = max(deg_root, int(d))
            flag &= f
        self.coded = bool(flag & 1 and self.peers)      # every worker speaks the coded kinds: all send them
        self.shared = bool(flag & 2 and self.peers)     # every worker's claims are mapped by its peers
        return deg_root

    def visit_root(self, root):
        if self.o_root in self.states:
            st = self.states[self.o_root]
            x = st.off + self.l_root + st.p.pad
            self.parent_w[x] = root
            self.visited_w[x >> 6] |= np.int64(1) << (x & 63)
            self.queue = np.array([x], np.int64)
        self.visited_g[root >> 6] |= np.int64(1) << (root & 63)

    def to_queues(self):
        """Bottom-up -> top-down: local frontier bitmaps to queues; returns kernel seconds."""
        t = time.perf_counter()
        self.queue = bitmap_to_queue(self.fbm_w, 0)
        return time.perf_counter() - t

    def td_level(self, level, kt):
        """One top-down level: expand, exchange pairs, absorb, exchange counts; ``kt``: the
        level's kernel seconds so far; returns (totals, kt)."""
        code, P, q, r, scratch, peers = self.code, self.P, self.q, self.r, self.scratch, self.peers
        # expand: claim the neighbours of every partition's frontier at once, bucket (vertex, parent) pairs by owner
        t = time.perf_counter()
        if self.queue is None:      # the previous level left its frontier as bits (take_bits)
            self.to_queues()
        # block partitions: a large level's claims stay bits, in `front` (free until to_bitmaps rebuilds it)
        front = self.front if code == 0 else None
        # block partitions: the claims of this worker's own rows write their parents, as td_step does
        direct = code == 0
        newv, examined, ascending = td_rows(self.rows.t, self.queue, scratch, self.visited_g, front,
                                            self.parent_w if direct else None, self.grown)
        if self.shared and takes_shared(self.level_edges, front.shape[0]):
            return self._td_take_shared(newv, examined, kt + time.perf_counter() - t)
        # this worker's own vertices absorbed at once into the next queue (or, a bit level, taken from the bits
        # once the peers' pairs are in); the others' pairs bucketed by owner
        out = self.qbufs[level & 1]
        if newv is None:
            # a large level, left as bits: the held ranks' claims taken from them, the others' read from their words
            newv = claims_in(front, self.elsewhere)
            bits = True
        else:
            bits = by_bits(code == 0, newv.shape[0], self.visited_w.shape[0])
        m = newv.shape[0]
        if bits and ascending and m == 0:      # none for another worker (all of them held here, say)
            L = U = np.empty(0, scratch.dtype)
            cnt = np.zeros(P + 1, np.int64)
        elif bits and ascending:
            L, U, cnt = split_sorted(newv, scratch, self.starts, self.slot_of, _chunks(m))
        else:
            L, U, cnt, w, new_m = split_claims(self.rows.t, newv, scratch, code, P, q, r, self.slot_of,
                                               self.parent_w, self.visited_w, _grown(self.grown, "absorb", max(m, 1)),
                                               out, _chunks(m), bits, direct)
        if bits:
            w = new_m = 0
        self.fbm_queue = bits
        w, new_m = int(w), int(new_m)
        kt += time.perf_counter() - t
        # exchange: one message per peer worker, pairs grouped by destination rank (one host: left in the pairs
        # box where the level fits it, read by the owners after a barrier)
        if self.coded:
            got = self._unpacked(self.mesh.exchange(PAIRS_Z, self._packed({self.widx: (L, U, cnt)})))
        elif self.shared and self.claims.box and self.level_edges < self.claims.cap:
            got = self._pairs(self._boxed(L, U, cnt))
        else:
            send = {}
            for j in peers:
                dst, arrs = [], []
                for d_rk in self.ranks_of[j]:
                    a, b = cnt[d_rk], cnt[d_rk + 1]
                    if b > a:
                        dst.append(d_rk)
                        arrs += [L[a:b], U[a:b]]
                send[j] = [dst] + arrs
            got = self._pairs(self.mesh.exchange(PAIRS, send)) if peers else []
        # absorb: owners keep one parent of each new vertex (this worker's own claim's, or one of the pairs'),
        # extend the next queue; a bit level marks the pairs, then takes all its vertices in one pass over the
        # words into fbm_w, its queue left to the next top-down level (none before a bottom-up one)
        t = time.perf_counter()
        Ls, Us, slots = [], [], []
        for dst, arrs in got:
            for k, d_rk in enumerate(dst):
                Ls.append(arrs[1 + 2 * k])
                Us.append(arrs[2 + 2 * k])
                slots.append(self.states[d_rk].s)
        if Ls:
            n = np.fromiter((x.shape[0] for x in Ls), np.int64, len(Ls))
            lo = np.zeros(len(Ls), np.int64)
            np.cumsum(n[:-1], out=lo[1:])
            L, U, slots = np.concatenate(Ls), np.concatenate(Us), np.asarray(slots, np.int64)
            if bits:
                mark_pairs(self.rows.t, L, U, lo, n, slots, self.parent_w, self.visited_w, self.visited_g,
                           _chunks(int(n.sum())))
            else:
                w, dm = self._absorb(L, U, lo, n, slots, out, w)
                new_m += dm
        if bits:
            w, new_m = take_bits(self.rows.t, self.visited_g, self.visited_w, self.fbm_w)
            self.queue = None
        else:
            self.queue = out[:w]
        kt += time.perf_counter() - t
        return self._counts_round((w, new_m, examined, kt), kt)

    def _counts_round(self, mine, kt):
        """The COUNTS round of this worker's level counts ``mine``: (every worker's counts, ``kt``)."""
        got = self.mesh.exchange(COUNTS, {j: _counts_msg(mine) for j in self.peers}) if self.peers else {}
        return [mine] + [_counts_of(a) for a in got.values()], kt

    def _boxed(self, L, U, cnt):
        """The pairs through the boxes (:func:`dbfs.bfs.dask.mesh.shm_claims.box_pairs`), a barrier between."""
        fill_box(self.claims, L, U, cnt)
        self.mesh.exchange(SYNC, {j: [] for j in self.peers})
        return box_pairs(self.claims, self.my_ranks)

    def _td_take_shared(self, newv, examined, kt):
        """A large top-down level's rest, its claims read by the peers (:mod:`dbfs.bfs.dask.mesh.shm_claims`): a
        list's claims into ``front``, a SYNC round (the barrier), the peers' claims of its rows marked, its new
        vertices taken from the bits (the frontier left as bits), the counts round; returns (totals, kt)."""
        t = time.perf_counter()
        if newv is not None:        # this worker's claims came back as a list: the peers read bits
            or_claims(self.front, newv, _chunks(newv.shape[0]))
        kt += time.perf_counter() - t
        self.mesh.exchange(SYNC, {j: [] for j in self.peers})
        t = time.perf_counter()
        take_peers(self.claims, self.rows.t, self.visited_g, self.visited_w, self.parent_w)
        w, new_m = take_bits(self.rows.t, self.visited_g, self.visited_w, self.fbm_w)
        self.queue, self.fbm_queue = None, True
        kt += time.perf_counter() - t
        # every peer has read this worker's claims once its counts are in: front and scratch are free again
        return self._counts_round((w, new_m, examined, kt), kt)

    def _absorb(self, L, U, lo, n, slots, out, w):
        """Absorb the pairs of segments (``lo``, ``n``, ``slots``) of ``L``/``U`` into the worker rows (a level
        whose own claims went to the queue), the new vertices' rows appended to ``out`` from ``w``; returns
        (new end, their degree sum)."""
        M = int(n.sum())
        if M == 0:
            return w, 0
        if by_bits(self.code == 0, M, self.visited_w.shape[0]):
            mark_pairs(self.rows.t, L, U, lo, n, slots, self.parent_w, self.visited_w, self.visited_g, _chunks(M))
            return absorb_bits(self.rows.t, self.visited_g, self.visited_w, self.parent_w, self.scratch, False, out, w)
        tmp = _grown(self.grown, "absorb", M)
        w, dm = absorb_rows(self.rows.t, L, U, lo, n, slots, self.parent_w, self.visited_w, self.visited_g, tmp,
                            out, w, _chunks(M))
        return int(w), int(dm)

    def _publish(self, sh):
        """This worker's frontier words into the shared frontier's next buffer (a partition's first word,
        shared with a lower rank's rows, into its boundary slot), as :func:`dbfs.bfs.dask.mesh.shm._shm_publish`
        does partition by partition."""
        dst, bnd = sh.bufs[sh.k], sh.bnd[sh.k]
        if self.pad_ranks.shape[0]:
            bnd[self.pad_ranks] = self.fbm_w[self.pad_words]
        copy_rows(dst, self.fbm_w, self.rows.t)

    def to_bitmaps(self):
        """Top-down -> bottom-up: build the global frontier from the local queues; returns kernel seconds."""
        states, sh = self.states, self.sh
        t = time.perf_counter()
        if not self.fbm_queue:
            queue_to_bitmap(self.queue, 0, self.fbm_w)
        if sh is not None:
            self._publish(sh)
            kt = time.perf_counter() - t
            self.mesh.exchange(SYNC, {j: [] for j in self.peers})
            _shm_collect(sh, self.wordof, self.front, self.visited_g)
            return kt
        front = self.front
        front[:] = 0
        or_rows(front, self.fbm_w, self.rows.t)
        kt = time.perf_counter() - t
        if self.coded:
            msg = self._coded_slices()
            for j, arrs in self.mesh.exchange(FRONT_Z, {j: msg for j in self.peers}).items():
                self._or_coded(j, arrs[0], arrs[1], arrs[2:], front)
        else:
            got = self.mesh.exchange(FRONT, {j: [self.my_ranks] + [st.fbm for st in states.values()]
                                             for j in self.peers}) if self.peers else {}
            for j, arrs in got.items():
                for rk, sl in zip(self._slices(j, arrs[0], arrs[1:]), arrs[1:]):
                    _or_slice(front, sl, self.code, self.P, rk, self.bases[rk])
        _or_into(self.visited_g, front)
        return kt

    def bu_level(self, kt):
        """One bottom-up level: bu_rows over every partition at once, publish the new frontier, exchange counts;
        ``kt``: the level's kernel seconds so far; returns (totals, kt)."""
        states, sh, peers = self.states, self.sh, self.peers
        t = time.perf_counter()
        new_n, examined, new_m, _ = bu_rows(self.rows.t, self.front, self.parent_w, self.visited_w, self.nxt_w,
                                            True)
        self.fbm_w, self.nxt_w = self.nxt_w, self.fbm_w
        if sh is not None:
            self._publish(sh)
        else:
            self.front_next[:] = 0
            or_rows(self.front_next, self.fbm_w, self.rows.t)
        kt += time.perf_counter() - t
        mine = (new_n, new_m, examined, kt)
        if sh is not None:
            totals, kt = self._counts_round(mine, kt)
            _shm_collect(sh, self.wordof, self.front, self.visited_g)
            return totals, kt
        totals = [mine]
        if self.coded:
            msg = _counts_msg(mine) + self._coded_slices()
            for j, arrs in self.mesh.exchange(COUNTS_FRONT_Z, {j: msg for j in peers}).items():
                c = _counts_of(arrs)
                totals.append(c)
                k = self._or_coded(j, arrs[2], arrs[3], arrs[4:], self.front_next)
                if k != c[0]:
                    self._bad(j, f"slices of {k} frontier vertices where its counts say {c[0]}")
        else:
            msg = _counts_msg(mine) + [self.my_ranks] + [st.fbm for st in states.values()]
            got = self.mesh.exchange(COUNTS_FRONT, {j: msg for j in peers}) if peers else {}
            for j, arrs in got.items():
                totals.append(_counts_of(arrs))
                for rk, sl in zip(self._slices(j, arrs[2], arrs[3:]), arrs[3:]):
                    _or_slice(self.front_next, sl, self.code, self.P, rk, self.bases[rk])
        _or_into(self.visited_g, self.front_next)
        self.front, self.front_next = self.front_next, self.front
        return totals, kt


def _bsp_levels(mesh, widx, ranks_of, parts, root, algorithm, pol_opts, nnz_total, plugin, shm=None):
    """The level loop of :func:`_bsp_search` (see the module docstring); ``plugin``: this
    worker's :class:`dbfs.bfs.dask.mesh.plugin.MeshPlugin`; ``shm``: its shared frontier of the mesh
    (:class:`dbfs.bfs.dask.mesh.shm._ShmFront`, or :class:`dbfs.bfs.dask.mesh.ipc._DevMesh` on a GPU
    worker, or the mesh's NCCL communicator, :class:`dbfs.bfs.dask.mesh.nccl._Comm`), or None (frontier
    slices go by the mesh)."""
    if getattr(shm, "kind", "") == "nccl":         # GPU workers of one host: the exchanges are NCCL collectives
        from dbfs.bfs.dask.search.gpu_nccl import _NcclSearch  # deferred: cupy

        s = _NcclSearch(mesh, widx, ranks_of, parts, plugin, shm)
    elif getattr(parts[0], "on_device", False):     # a GPU worker: the same steps on the device
        from dbfs.bfs.dask.search.gpu_search import _GpuSearch  # deferred: cupy

        s = _GpuSearch(mesh, widx, ranks_of, parts, plugin, shm)
    else:
        s = _Search(mesh, widx, ranks_of, parts, plugin, shm)
    N = s.N
    ranks = tuple(s.states)
    deg_root = s.start(root)
    t0 = time.perf_counter()
    s.visit_root(root)

    pol = policy_from(**pol_opts)
    pol.start(N)
    n_f, m_f = 1, deg_root
    m_u = nnz_total - deg_root
    have_queue = True
    front_ready = False
    rec = []
    own = []            # this worker's (kernel s, exchange s, array bytes sent) per level
    level = 0
    kernel_total = 0.0
    mesh = s.mesh
    tl = getattr(s, "tl", None)         # an NCCL search's timeline: the host seconds issuing its levels
    while n_f:
        t_lv = time.perf_counter()
        x_t0, x_n0, x_b0 = mesh.seconds, mesh.rounds, mesh.sent
        i_0 = tl.issue if tl is not None else 0.0
        kt = 0.0
        if algorithm == "do":
            d = pol.next(n_f, m_f, m_u)
        else:
            d = TD if algorithm == "td" else BU
        if d == TD:
            if not have_queue:
                kt += s.to_queues()
                have_queue = True
            s.level_edges = m_f         # the global count every worker has: the same shared-claims choice
            totals, kt = s.td_level(level, kt)
            front_ready = False
        else:
            if not front_ready:
                kt += s.to_bitmaps()
                have_queue = False
            totals, kt = s.bu_level(kt)
            front_ready = True
            have_queue = False
        g_new = sum(x[0] for x in totals)
        g_m = sum(x[1] for x in totals)
        g_ex = sum(x[2] for x in totals)
        k_max = max(x[3] for x in totals)
        kernel_total += kt
        t_end = time.perf_counter()
        lt = t_end - t_lv
        x_lv = mesh.seconds - x_t0
        own.append((kt, x_lv, mesh.sent - x_b0) + ((tl.issue - i_0,) if tl is not None else ()))
        if widx == 0:
            rec.append({"level": level, "direction": d, "frontier": int(n_f), "edges": int(g_ex),
                        "discovered": int(g_new), "time": lt, "kernel": k_max, "overhead": max(0.0, lt - k_max),
                        "rounds": mesh.rounds - x_n0, "exchange": x_lv})
        if s.listeners:
            mine = {"level": level, "worker": widx, "direction": d, "frontier": int(n_f), "edges": int(g_ex),
                    "discovered": int(g_new), "time": lt, "kernel": kt, "exchange": x_lv, "sent": own[-1][2]}
            for fn in tuple(s.listeners):
                fn(level, ranks, mine)
        n_f, m_f = g_new, g_m
        m_u -= g_m
        level += 1
    seconds = time.perf_counter() - t0
    parents = s.parents()
    s.states.clear()        # the search's arrays (device memory on a GPU worker) go now, not at a cycle collection
    return {"parents": parents, "seconds": seconds,
            "records": rec, "kernel_total": kernel_total, "levels": level, "own": own}

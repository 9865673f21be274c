"""A large top-down level of an NCCL search exchanged as bits, not as (vertex, parent) pairs.

Contract
--------
:func:`dense` says whether :class:`dbfs.bfs.dask.search.gpu_nccl._NcclSearch` takes a top-down level this
way: one rank a worker with equal slices of the global bitmaps (its ``gather``), and a frontier of at least
``DENSE_SHARE * N`` edges over all workers (every worker decides from the frontier edges all of them read
last level, so all take the same branch). :func:`td_dense` runs the level and returns what ``td_level``
returns. The level discovers exactly the vertices the pairs' paths discover (the unvisited neighbours of
the frontier), with the same counts; a vertex's parent may be another frontier neighbour than theirs
(any one is a valid BFS parent).

Method (a level, on the search's stream; one device-to-host read, the counts'):

1. the frontier's global bitmap: this rank's queue set as bits in its slice of ``front``;
2. the claim pass over this worker's frontier edges into its ``visited_g`` alone: ``td_expand`` with no
   parent and no claim list (a claimed vertex costs one atomicOr, no scattered parent write, no append);
3. one NCCL group: ``front``'s slices allgathered in place, and each peer's slice of ``visited_g`` sent to
   that peer (a rank receives W - 1 slices: every claim of its vertices, as bits); of every slice only its
   live words (:mod:`dbfs.bfs.dask.search.gpu_live`: the rest holds no bit; the received buffer's rest
   is stale, and ``claimed_open`` ignores it: the rank's ``visited`` has those rows set);
4. ``claimed_open``: the rank's visited bitmap OR the complement of the claimed bits (its own and the
   received), so ``bu_step`` searches a parent in ``front`` only for the rows claimed and not yet visited,
   hub first (every such row has a frontier neighbour: it was claimed from one, the CSR is symmetric);
5. ``visit_bits`` marks the rows found in the rank's visited bitmap and in ``visited_g``;
   ``bitmap_to_queue`` makes them the next queue; the counts' allreduce; the read.

A level moves 2 (W - 1) / W slices of N / 8 bytes a worker, where the pairs' paths move 2 ids a claim (each
worker claims against its own ``visited_g``, so a vertex next to several workers' frontiers is claimed by
each), and scatter a parent and append an id a claim, then bucket and absorb them. Below the threshold the
pairs cost less: fewer claims, and the claimed rows' search for a frontier neighbour scans further.

Encoding: uint32 bitmap words (a rank's local words are global words ``widx * slice`` on), the id width for
queues and parents; the received slices in one buffer of (W - 1) slices kept in the plugin's scratch.
After the bottom-up step of Beamer, Asanovic and Patterson, "Direction-Optimizing Breadth-First Search"
(SC 2012), run over the claimed rows only, and the bitmap exchange of Bisson, Bernaschi and
Mastrostefano (IEEE TPDS 2016).
"""
from __future__ import annotations

import cupy as cp
import numpy as np

from dbfs.bfs.dask.search.gpu_live import send_slices
from dbfs.bfs.dask.search.gpu_search import _shared
from dbfs.bfs.gpu import _BLOCK, _grid, _i64

__all__ = ["dense", "td_dense", "DENSE_SHARE"]

#: a top-down level whose frontier has at least DENSE_SHARE * N edges (all workers) goes as bits; below it,
#: where the frontier is a few hundred hubs and half its edges find new vertices, the parents' search over the
#: claimed rows costs more than the pairs (docs/BENCHMARKS.md, 2026-11-28)
DENSE_SHARE = 1 / 12


def dense(s) -> bool:
    """Whether search ``s`` (an ``_NcclSearch``) takes its next top-down level as bits."""
    return bool(s.gather) and sum(s.wm) >= DENSE_SHARE * s.N


def td_dense(s, kt):
    """One top-down level of search ``s`` as bits (module docstring); returns ``td_level``'s result."""
    tl, comm, w, me = s.tl, s.comm, s.slice, s.widx
    (st,) = s.states.values()
    k = s.k
    tl.begin()
    s._zero_counters()
    s._queues_to_bitmaps()                      # st.fbm is this rank's slice of ``front``
    s._check_claim(s.wm[me], bits_only=True)
    vg = s.visited_g
    tl.mark("k")
    peers = s.peers
    got = _shared(s.dev, "claimed_in", max(len(peers) * w, 1), cp.uint32)
    lw = s.live_w                               # past a slice's live words no bit is set (gpu_live)
    with comm.group():
        send_slices(s, s.front)
        for slot, j in enumerate(peers):
            if lw:
                comm.send(vg[j * w:j * w + lw], j)
                comm.recv(got[slot * w:slot * w + lw], j)
    tl.mark("x")
    mine = vg[me * w:(me + 1) * w]
    opened = _shared(s.dev, "claimed_open", w, cp.uint32)
    nw = st.live                                # this rank's live words: no claim past them
    g = _grid(nw)
    k["claimed_open"](g, (_BLOCK,), (st.visited, mine, got, np.int32(len(peers)), _i64(w), _i64(nw), opened))
    s._bu_launch(st, 1, opened)
    k["visit_bits"](g, (_BLOCK,), (st.nxt, _i64(nw), st.visited, mine))
    k["bitmap_to_queue"](g, (_BLOCK,), (st.nxt, _i64(nw), st.queue, s.cnt[1, 3:]))
    tl.mark("k")
    comm.allreduce(s.blocks)
    tl.mark("x")
    return s._totals(s._read(sum(s.wm)), kt)

"""A bottom-up level of an NCCL search whose frontier exchange runs while its rows are still being searched.

Contract
--------
:func:`overlaps` says whether :class:`dbfs.bfs.dask.search.gpu_nccl._NcclSearch` takes its next bottom-up
level this way: one rank a worker with equal slices of the global bitmaps (its ``gather``), and a frontier
that came in as bits (``bits_in``: from a top-down level, or from a bottom-up level that sent its slices
with the counts first, the slices of at least ``gpu_nccl.SPLIT_MIN_BYTES``); every worker decides from
what all of them read, so all take the same branch. :func:`bu_overlap` runs the level and returns what
``bu_level`` returns: the same new frontier, parents, counts and global ``front`` and ``visited_g`` as
the level whose slices are allgathered after its ``bu_step`` (the same kernel over the same rows; only
the order of the launches differs).

Method (a level; ``front_next``'s slices, this rank's own the one ``bu_step`` writes):

1. the rank's words are cut into :data:`CHUNKS` equal ranges (the same cuts on every worker: equal
   slices); ``bu_step`` runs over each range's rows in turn on the search's stream;
2. after each range an event; a high-priority exchange stream waits for it and sends that range of this
   rank's slice to every peer and receives the same range of each peer's slice into its place in
   ``front_next`` (one NCCL group of W - 1 sends and W - 1 receives), while the search's stream
   goes on with the next range;
3. the search's stream waits for the exchange stream's last group, allreduces the counts and reads
   them (the level's one device-to-host read), and ORs ``front_next`` into ``visited_g``.

A level thus costs about max(its search, its exchange) plus one range's exchange, where the level that
sends after its search costs their sum, but it always sends bits and makes CHUNKS + 1 collectives. So it
is taken where the frontier came in as bits and the level's search is long: the first bottom-up level
after a top-down one (its frontier holds the hubs), and, with slices of at least ``SPLIT_MIN_BYTES``, a
level after one whose new frontier was dense (``_NcclSearch.dense_out``). After a sparse frontier the
counts-first level of ``gpu_nccl`` (its ids cost less than any bitmap) is kept until the next top-down
level. The level's record: kernel seconds up to the last range's search, exchange seconds what was left
of the exchange after it with the counts' allreduce; rounds CHUNKS + 1.

Encoding: uint32 bitmap words, a rank's local words global words ``widx * slice`` on, rows 32 a word
(``bu_step``'s row ``32 a + i`` of a range starting at word ``a``: the row pointers, hub table and
parents passed from row ``32 a``, the visited and next words from word ``a``).
After the communication/computation overlap of Bisson, Bernaschi and Mastrostefano, "Parallel
Distributed Breadth First Search on the Kepler Architecture" (IEEE TPDS 2016), and NVIDIA's CUDA
Programming Guide (streams, events and stream priorities).
"""
from __future__ import annotations

import cupy as cp

from dbfs.bfs.gpu import _BLOCK, _i64, _sm_count

__all__ = ["overlaps", "bu_overlap", "CHUNKS"]

#: ranges a rank's rows are searched in, each range's exchange running during the next range's search
CHUNKS = 4

#: None: :func:`overlaps` decides; True / False: every bottom-up level of a gathering search overlapped, or
#: none (a test's switch)
FORCE = None


#: the exchange stream's priority (lower is higher; CUDA clamps it to the device's greatest)
_HIGHEST = -(1 << 20)


def overlaps(s) -> bool:
    """Whether search ``s`` (an ``_NcclSearch``) takes its next bottom-up level with the exchange overlapped."""
    return bool(s.gather) and len(s.peers) > 0 and (s.bits_in if FORCE is None else bool(FORCE))


def _stream(s):
    """The exchange stream, kept in the worker's device scratch (the highest priority the device has, so the
    exchange's blocks go first when ``bu_step``'s free an SM)."""
    x = s.dev.get("exchange_stream")
    if x is None:       # a priority past the device's range is clamped to its greatest
        x = s.dev["exchange_stream"] = cp.cuda.Stream(non_blocking=True, priority=_HIGHEST)
        s.dev["exchange_events"] = [cp.cuda.Event(disable_timing=True) for _ in range(CHUNKS + 1)]
    return x, s.dev["exchange_events"]


def bu_overlap(s, kt):
    """One bottom-up level of search ``s`` with its exchange overlapped (module docstring); returns
    ``bu_level``'s result."""
    tl, comm, w, me, k = s.tl, s.comm, s.slice, s.widx, s.k
    (st,) = s.states.values()
    p = st.p
    fn = s.front_next
    x, evs = _stream(s)
    here = cp.cuda.get_current_stream()
    cuts = sorted({w * c // CHUNKS for c in range(CHUNKS + 1)})
    most = 32 * _sm_count()
    s.queued = False
    tl.begin()
    s._zero_counters()
    for ev, (a, b) in zip(evs, zip(cuts, cuts[1:])):
        r = 32 * a
        k["bu_step"]((min(-(-(b - a) * 32 // _BLOCK), most),), (_BLOCK,),
                     (p.indptr[r:], *p.adj, p.hub[r:], s.front, st.visited[a:], st.nxt[a:], st.parent[r:],
                      _i64(b - a), s.cnt[1]))
        ev.record(here)
        x.wait_event(ev)
        with x, comm.group():
            for j in s.peers:
                comm.send(fn[me * w + a:me * w + b], j)
                comm.recv(fn[j * w + a:j * w + b], j)
    tl.mark("k")
    done = evs[-1]
    done.record(x)
    here.wait_event(done)
    comm.allreduce(s.blocks)
    tl.mark("x")
    g = s._read()
    s.bits_in = bool(s.counts_first) and s.dense_out()
    cp.bitwise_or(s.visited_g, fn, out=s.visited_g)
    st.fbm, st.nxt = st.nxt, st.fbm
    s.front, s.front_next = s.front_next, s.front
    return s._totals(g, kt)

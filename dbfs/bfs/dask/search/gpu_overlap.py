"""A bottom-up level of an NCCL search whose frontier goes to the peers by copy engines while its rows are searched.

Contract
--------
:func:`overlaps` says whether :class:`dbfs.bfs.dask.search.gpu_nccl._NcclSearch` takes its next bottom-up
level this way: one rank a worker with equal slices of the global bitmaps (its ``gather``), every peer's two
global bitmaps mapped into this process (:class:`_PeerFronts`, opened in the search's set-up, where every
worker could open every handle), and a frontier that came in as bits (``bits_in``: the first bottom-up level
after a top-down one, or a level after a bottom-up one whose new frontier was dense). Every worker decides
from what all of them read, so all take the same branch. :func:`bu_overlap` runs the level and returns what
``bu_level`` returns: the same new frontier, parents, counts, global ``front`` and ``visited_g`` as the level
whose slices are exchanged after its ``bu_step`` (the same search of the same rows).

Method (a level; ``front_next``'s slices, this rank's own the one ``bu_step`` writes):

1. ONE ``bu_step_signal`` launch searches the rank's live words (:mod:`dbfs.bfs.dask.search.gpu_live`):
   ``bu_step`` with a grid the device holds at once (a larger grid-stride grid would finish its first
   words only when the blocks launched last run), in rounds of one 32-word group a warp (group
   ``i * nwarps + k`` for warp k in round i), the rounds cut into at most :data:`CHUNKS` ranges; at a
   range's end each block counts itself, and the last block stores the level's tag in the range's
   flag word, after a fence. Ranges searched as launches of their own pay the grid's drain once a
   range, and a signal a warp costs the search more than the copies save (docs/BENCHMARKS.md);
2. one copy stream a peer waits on each flag in turn (``cuStreamWaitValue32``, on the device) and copies
   that range of this rank's slice into the same words of the peer's ``front_next`` (``cudaMemcpyAsync``
   from one device to another: a copy engine over NVLink, no SM), while the kernel goes on with the
   other ranges. An NCCL send needs SMs, which a grid-stride ``bu_step`` holds until its last blocks
   drain, so sends issued beside the search ran after it;
3. the search's stream waits for every copy stream, then allreduces the counts: a worker's allreduce
   completes only once every peer's has started, which is after that peer's copies into this worker's
   bitmap (stream order), so the level's one host read sees the whole frontier. ``visited_g`` then takes
   ``front_next``'s live words.

Why the buffers are free when a peer writes them: a peer copies into this worker's ``front_next`` of level
L only after its allreduce of level L - 1 (or of the switch before it), which completes after this worker's
has started, when this worker's stream is past everything that read the buffer (as ``front``, level L - 1's
search). The copies of level L + 1 land in level L's ``front``, read by level L's search, which ends before its
allreduce. Every worker swaps its two bitmaps at the same levels (they take the same steps), so a peer's
``front_next`` is the same one of its two buffers (by the plugin's keys) as this worker's.

The level's record: kernel seconds to the search's end, exchange seconds what is left of the copies after
it with the counts' allreduce; one round for the copies and one for the counts; ``sent`` the bytes
copied. Security: the IPC handles travel only over the mesh's own NCCL communicator (an allgather of
bytes, never unpickled); a handle opens only on the same host.

Encoding: uint32 bitmap words, a rank's local words at global words ``widx * slice`` on, rows 32 a word;
the range words: :data:`MOST` uint32 counts (zeroed a level: the blocks done with a range), then
:data:`MOST` flags (the tag of the last
level that searched the range; tags grow by one a level, per worker, so a flag is never stale); an IPC handle is
``cudaIpcMemHandle_t``'s 64 bytes, a worker's two in the order of the plugin's keys ``front``,
``front_next``. After the computation/communication overlap of Bisson, Bernaschi and Mastrostefano,
"Parallel Distributed Breadth First Search on the Kepler Architecture" (IEEE TPDS 2016), and the CUDA
Programming Guide (interprocess communication; streams and events; peer-to-peer memory copy).
"""
from __future__ import annotations

import ctypes

import cupy as cp
import numpy as np

from dbfs.bfs.dask.search.gpu_live import or_slices, send_slices
from dbfs.bfs.gpu import _BLOCK, _i64, _sm_count

__all__ = ["overlaps", "bu_overlap", "map_peers", "CHUNKS", "FORCE"]

#: ranges a rank's rows are cut into, each range copied to the peers once searched (by a copy engine, while
#: ``bu_step`` goes on with the others)
CHUNKS = 8

#: False: the flagged search runs, but the slices go by NCCL after it, as the level that is not overlapped
#: (a benchmark's diagnosis: the flagged kernel's own cost)
COPIES = True

#: None; a list: each overlapped level appends its timings (a benchmark's diagnosis: TRACE in
#: benchmarks/nccl_level_profile.py)
TRACE = None

#: the most ranges: the words a level's ``bu_step_signal`` counts the blocks done a range in, and flags the
#: ranges in
MOST = 64

#: None: :func:`overlaps` decides; True / False: every bottom-up level of a mapped gathering search
#: overlapped, or none (a test's and a benchmark's switch)
FORCE = None

#: :func:`overlaps` takes a level after a bottom-up one whose new frontier was dense too; False: only the
#: first bottom-up level after a top-down one (a benchmark's switch)
CHAIN = True

_HANDLE = 64                     # bytes of a cudaIpcMemHandle_t
_GEQ = 0                         # CU_STREAM_WAIT_VALUE_GEQ
_WAIT = None                     # cuStreamWaitValue32, looked up once
_MEMCPY_DEFAULT = 4              # cudaMemcpyDefault: the driver finds where each pointer lives
KEYS = ("front", "front_next")   # the plugin's keys of the two global bitmaps, in handle order


class _PeerFronts:
    """One worker's mappings of its peers' global bitmaps (kept on the communicator while the mesh lives)."""

    def __init__(self):
        self.open = {}                                  # handle bytes -> mapped pointer

    def map(self, comm, own) -> list | None:
        """Swap handles of the arrays ``own`` (this worker's, by :data:`KEYS`) with every worker and open the
        peers'. Returns per worker the pair of pointers (its own: its arrays'), or None where any worker
        failed to open a handle (all return the same)."""
        rt = cp.cuda.runtime
        W, me = comm.W, comm.widx
        mine = b"".join(bytes(rt.ipcGetMemHandle(a.data.ptr)) for a in own)
        got = cp.empty(W * len(mine), cp.uint8)
        comm.allgather(cp.asarray(np.frombuffer(mine, np.uint8)), got)
        h = got.get().tobytes()
        out, keep, failed = [], set(), 0
        for j in range(W):
            row = h[j * len(mine):(j + 1) * len(mine)]
            hs = [row[k * _HANDLE:(k + 1) * _HANDLE] for k in range(len(own))]
            if j == me:
                out.append(tuple(a.data.ptr for a in own))
                continue
            ptrs = []
            for hb in hs:
                keep.add(hb)
                if hb not in self.open:
                    try:
                        self.open[hb] = int(rt.ipcOpenMemHandle(hb, rt.cudaIpcMemLazyEnablePeerAccess))
                    except rt.CUDARuntimeError:
                        failed = 1
                        continue
                ptrs.append(self.open[hb])
            out.append(tuple(ptrs))
        for hb in [hb for hb in self.open if hb not in keep]:      # a peer's old buffers, since freed
            self._close(self.open.pop(hb))
        flag = cp.asarray(np.array([failed], np.int64))
        comm.allreduce(flag, "max")
        return None if int(flag.get()[0]) else out

    @staticmethod
    def _close(ptr) -> None:
        try:
            cp.cuda.runtime.ipcCloseMemHandle(ptr)
        except cp.cuda.runtime.CUDARuntimeError:      # its context already torn down
            pass

    def close(self) -> None:
        for ptr in self.open.values():
            self._close(ptr)
        self.open.clear()


def map_peers(s) -> list | None:
    """Search ``s``'s peers' global bitmaps mapped (see :class:`_PeerFronts`); None where they cannot be."""
    comm = s.comm
    if getattr(comm, "fronts", None) is None:
        comm.fronts = _PeerFronts()
    return comm.fronts.map(comm, [s.dev[k] for k in KEYS])


def overlaps(s) -> bool:
    """Whether search ``s`` (an ``_NcclSearch``) takes its next bottom-up level with the copies overlapped."""
    if not (s.gather and s.peers and s.peer_fronts is not None):
        return False
    return s.bits_in and (CHAIN or s.switched) if FORCE is None else bool(FORCE)


def _wait_value():
    """libcuda's ``cuStreamWaitValue32`` (a stream waits until a device word reaches a value)."""
    global _WAIT
    if _WAIT is None:
        lib = ctypes.CDLL("libcuda.so.1")
        fn = getattr(lib, "cuStreamWaitValue32_v2", None) or lib.cuStreamWaitValue32
        fn.argtypes = (ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint)
        _WAIT = fn
    return _WAIT


def _resident(fn) -> int:
    """Blocks of :data:`dbfs.bfs.gpu._BLOCK` threads of kernel ``fn`` the device holds at once (its SMs times
    the blocks one SM holds): ``bu_step_signal``'s grid, so its rounds run in order."""
    try:
        per_sm = cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(fn.kernel.ptr, _BLOCK, 0)
    except (AttributeError, cp.cuda.driver.CUDADriverError):
        per_sm = 2048 // _BLOCK // 2
    return max(1, int(per_sm)) * _sm_count()


def _copy_state(s):
    """The copy streams (one a worker), the events they end on and the range words (``done`` counts, then
    ``flag``s, :data:`MOST` each), kept in the worker's device scratch with the last tag."""
    d = s.dev
    if len(d.get("copy_streams", ())) < s.W:
        d["copy_streams"] = [cp.cuda.Stream(non_blocking=True) for _ in range(s.W)]
        d["copy_events"] = [cp.cuda.Event(disable_timing=True) for _ in range(s.W)]
    if "copy_sig" not in d:
        d["copy_sig"], d["copy_tag"] = cp.zeros(2 * MOST, cp.uint32), 0
    return d["copy_streams"], d["copy_events"], d["copy_sig"]


def bu_overlap(s, kt):
    """One bottom-up level of search ``s`` with its frontier copied to the peers during the search (module
    docstring); returns ``bu_level``'s result."""
    tl, comm, w, me = s.tl, s.comm, s.slice, s.widx
    (st,) = s.states.values()
    p, nw = st.p, st.live
    fn = s.front_next
    which = KEYS.index(next(key for key in KEYS if s.dev[key] is fn))
    xs, evs, sig = _copy_state(s)
    s.dev["copy_tag"] = tag = (s.dev["copy_tag"] + 1) & 0xFFFFFFFF or 1
    ng = (nw + 31) >> 5                                  # 32-word groups, a warp's unit of bu_step
    fk = s.k["bu_step_signal"]
    grid = s.dev.get(("copy_grid", id(fk))) or s.dev.setdefault(("copy_grid", id(fk)), _resident(fk))
    nwarps = grid * _BLOCK // 32
    rounds = -(-ng // nwarps)                           # round i: the groups i * nwarps on
    per = max(1, -(-rounds // min(CHUNKS, MOST)))       # rounds a range
    nr = -(-rounds // per)
    here, rt, wait = cp.cuda.get_current_stream(), cp.cuda.runtime, _wait_value()
    s.queued = s.switched = False
    tl.begin()
    tr = None if TRACE is None or not COPIES else [cp.cuda.Event() for _ in range(2 + 2 * nr * len(s.peers))]
    if tr:
        tr[0].record(here)
    s._zero_counters()
    rt.memsetAsync(sig.data.ptr, 0, 4 * MOST, here.ptr)            # the ranges' counts of blocks
    s.k["bu_step_signal"]((grid,), (_BLOCK,),
                          (p.indptr, *p.adj, p.hub, s.front, st.visited, st.nxt, st.parent, _i64(nw), s.cnt[1],
                           sig, sig[MOST:], _i64(per), np.uint32(tag)))
    tl.mark("k")
    if tr:
        tr[1].record(here)
    src = fn.data.ptr + 4 * me * w
    if not COPIES:
        with comm.group():
            send_slices(s, fn)
    for q, j in enumerate(s.peers if COPIES else ()):
        x, dst = xs[j], s.peer_fronts[j][which] + 4 * me * w
        for r in range(nr):
            a, b = 32 * r * per * nwarps, min(nw, 32 * (r + 1) * per * nwarps)
            err = wait(x.ptr, sig[MOST + r:].data.ptr, tag, _GEQ)
            if err:
                raise RuntimeError(f"cuStreamWaitValue32 failed: CUresult {err}")
            if tr:
                tr[2 + 2 * (q * nr + r)].record(x)
            rt.memcpyAsync(dst + 4 * a, src + 4 * a, 4 * (b - a), _MEMCPY_DEFAULT, x.ptr)
            if tr:
                tr[3 + 2 * (q * nr + r)].record(x)
        evs[j].record(x)
        here.wait_event(evs[j])
    comm.rounds += 1
    comm.sent += 4 * nw * len(s.peers)
    comm.allreduce(s.blocks)
    tl.mark("x")
    g = s._read()
    if tr:
        TRACE.append([cp.cuda.get_elapsed_time(tr[0], e) for e in tr[1:]])
    s.bits_in = s.dense_out()
    or_slices(s, s.visited_g, fn)
    st.fbm, st.nxt = st.nxt, st.fbm
    s.front, s.front_next = s.front_next, s.front
    return s._totals(g, kt)

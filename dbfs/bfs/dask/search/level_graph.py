"""A level's device work captured once as a CUDA graph and replayed: one launch for a dozen calls.

Contract
--------
:class:`_Replays` keeps one GPU worker's CUDA graphs for the life of its
NCCL communicator (:class:`dbfs.bfs.dask.mesh.nccl._Comm`, whose ``replays``
it is), keyed by everything the captured calls fix: their pointers, sizes
and launch shapes. :meth:`_Replays.run` ``(key, issue, tl)``: on a key's
first use ``issue(mark, stream_ptr)`` runs inside a stream capture (nothing
executes), the graph is instantiated and kept; then, and on every later use
of the key, the graph is launched on the current stream (:meth:`_Replays.prepare`
captures without launching: before a search's clock). ``issue`` must make
only stream-ordered calls on ``stream_ptr`` / the current stream (kernels,
async copies and memsets, NCCL collectives) on memory allocated before the
capture. What a level varies beyond its key (a frontier's size) goes through
:attr:`_Replays.par_h`, pinned host words the graph copies to the device
(:attr:`_Replays.par_d`) as its first node: the host writes them before the
launch, when every earlier level has been read back. ``mark(kind)`` inside
a capture records an event the graph owns as an event-record node
(``cuEventRecordWithFlags``, ``CU_EVENT_RECORD_EXTERNAL``); after each
launch those events join the level's :class:`dbfs.bfs.dask.mesh.nccl._Timeline`
in order, so a replayed level's kernel and exchange seconds are split as an
eager level's are. The collectives' rounds and bytes of one issue are added
to the communicator's counts at each launch (not at the capture). At most
:data:`LIMIT` graphs are kept, the least recently used dropped first.
``hits`` and ``captures`` count the launches of a kept graph and the
captures.

Method: CuPy's stream capture (``Stream.begin_capture``, relaxed mode) on a
non-blocking stream of this worker, ``Stream.end_capture`` and
``Graph.launch``; NCCL collectives are captured as kernels of the graph
(NCCL 2.9 and later; eager and captured collectives may mix on one
communicator). After NVIDIA's CUDA Programming Guide ("CUDA Graphs", stream
capture, events in graphs) and NCCL's user guide ("Using NCCL with CUDA
Graphs").

Encoding: ``par_h``/``par_d``: :data:`PARAMS` int64 words (a level's own
meaning, e.g. a frontier's vertices and edges); a key: a tuple of ints and
strings.
"""
from __future__ import annotations

import ctypes
import time
from collections import OrderedDict

import cupy as cp
import cupyx
import numpy as np

__all__ = ["_Replays", "LIMIT", "PARAMS", "bucket"]

#: graphs kept per communicator (each a few kilobytes of host and device state)
LIMIT = 64

#: int64 words of per-launch parameters a graph copies in first
PARAMS = 4

_EXTERNAL = 1        # CU_EVENT_RECORD_EXTERNAL: an event-record node in a captured graph


def bucket(n: int, least: int = 64) -> int:
    """The power of two at least ``n`` and ``least``: a size that keys a graph, so levels of nearby sizes
    replay one graph."""
    return max(int(least), 1 << max(int(n) - 1, 0).bit_length())


class _Graph:
    """One instantiated graph, its events in order and the collectives' counts of one launch."""

    __slots__ = ("graph", "marks", "rounds", "sent")

    def __init__(self, graph, marks, rounds, sent):
        self.graph, self.marks, self.rounds, self.sent = graph, marks, rounds, sent


class _Replays:
    """A GPU worker's captured level graphs (see the module docstring)."""

    def __init__(self, comm):
        self.comm = comm
        self.kept = OrderedDict()
        self.stream = cp.cuda.Stream(non_blocking=True)      # captures only: nothing runs on it
        self.par_h = cupyx.empty_pinned(PARAMS, np.int64)
        self.par_d = cp.zeros(PARAMS, cp.int64)
        self.hits = self.captures = 0
        self._record = ctypes.CDLL("libcuda.so.1").cuEventRecordWithFlags
        self._record.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint)

    def load_params(self):
        """Issue (inside a capture) the copy of :attr:`par_h` into :attr:`par_d`; returns ``par_d``."""
        rt = cp.cuda.runtime
        rt.memcpyAsync(self.par_d.data.ptr, self.par_h.ctypes.data, self.par_d.nbytes, rt.memcpyHostToDevice,
                       self.stream.ptr)
        return self.par_d

    def _capture(self, issue) -> _Graph:
        comm, s = self.comm, self.stream
        rounds, sent = comm.rounds, comm.sent
        marks = []

        def mark(kind):
            ev = cp.cuda.Event()
            err = self._record(ev.ptr, s.ptr, _EXTERNAL)
            if err:
                raise RuntimeError(f"cuEventRecordWithFlags failed in a capture: CUresult {err}")
            marks.append((ev, kind))

        with s:
            s.begin_capture()
            try:
                issue(mark, s.ptr)
            finally:
                g = s.end_capture()
        out = _Graph(g, marks, comm.rounds - rounds, comm.sent - sent)
        comm.rounds, comm.sent = rounds, sent          # counted at each launch
        self.captures += 1
        return out

    def prepare(self, key, issue) -> _Graph:
        """``key``'s graph, captured from ``issue`` now if it is not kept (nothing runs)."""
        g = self.kept.get(key)
        if g is None:
            g = self.kept[key] = self._capture(issue)
            while len(self.kept) > LIMIT:
                self.kept.popitem(last=False)
        return g

    def run(self, key, issue, tl) -> None:
        """Launch ``key``'s graph on the current stream (captured from ``issue`` first if new); its events
        join ``tl`` (a :class:`dbfs.bfs.dask.mesh.nccl._Timeline` begun for this level)."""
        kept = key in self.kept
        g = self.prepare(key, issue)
        self.kept.move_to_end(key)
        self.hits += kept
        g.graph.launch()
        self.comm.rounds += g.rounds
        self.comm.sent += g.sent
        tl.marks.extend(g.marks)
        tl.t_last = time.perf_counter()

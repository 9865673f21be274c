"""NCCL between the GPU workers of one host: a mesh's communicator, set up through Dask.

Contract
--------
:func:`open_nccl` (client side) gives the mesh of a
:class:`dbfs.bfs.dask.layout.placement.DistributedGraph` whose workers are all GPU
workers on one host, each on its own device, one NCCL communicator, and
returns '' (on) or why not (the levels then go through the TCP mesh and CUDA
IPC, :mod:`dbfs.bfs.dask.mesh.ipc`). Each worker keeps its :class:`_Comm` in the
plugin's ``shms[mesh_id]``; closing the mesh aborts it, so a search blocked
in a collective returns and sees a lost peer.

:class:`_Comm` issues collectives on the worker's current CUDA stream (CuPy's,
the one the search kernels run on): in-place sum/max allreduce,
allgather, grouped send/recv of device arrays. It counts the collectives
(``rounds``) and the bytes this worker put on the wire (``sent``), and
:class:`_Timeline` splits a level's device time into kernel and exchange
seconds with CUDA events (read after the level's one host read).

Method: worker 0 makes the unique id (``ncclGetUniqueId``, :func:`_nccl_uid`
through ``client.run``); the id reaches every worker through Dask's own
channel (the scheduler's, TLS where the cluster is configured for it); one
pinned task per worker joins (:func:`_nccl_join`: ``ncclCommInitRank``
blocks until all W ranks joined, so the tasks run at once, bounded by the
mesh timeout). After NVIDIA's NCCL user guide (communicator creation,
group calls for point-to-point) and the dask-cuda / RAFT comms set-up
cuGraph's multi-GPU algorithms use.

Security: the unique id names worker 0's bootstrap socket. Every rank is on
this host, so NCCL binds its bootstrap to the loopback interface
(``NCCL_SOCKET_IFNAME=lo``): nothing off the host can reach it, and the id
travels only over Dask's channel. NVLink SHARP stays off
(``NCCL_NVLS_ENABLE=0`` unless set). Where the workers span hosts the mesh
keeps its authenticated TCP transport (or Dask's comm on a TLS cluster).

Encoding: device arrays of uint32, uint64, int32 or int64 (NCCL's types of
the same width); counts are elements.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time

import numpy as np

from dbfs.bfs.dask.mesh.plugin import get_plugin
from dbfs.bfs.dask.mesh.transport import _PeerLost
from dbfs.bfs.dask.mesh.waits import gather_watched, run_within

__all__ = ["_Comm", "_Timeline", "open_nccl", "join_nccl", "nccl_switch", "holds_parents"]

#: environment switch: ``DBFS_NCCL=off`` keeps a mesh of GPU workers on the TCP mesh and CUDA IPC
#: (a diagnostic: the two level exchanges side by side in a benchmark)
ENV = "DBFS_NCCL"


def nccl_switch() -> str:
    """Why NCCL is switched off by the environment ('' when it is not)."""
    return f"switched off ({ENV}={os.environ[ENV]})" if os.environ.get(ENV, "").lower() in ("0", "off", "no") \
        else ""


def holds_parents(ranks_of) -> bool:
    """Whether the searches of a mesh whose worker i holds ranks ``ranks_of[i]`` keep their parents on the
    devices (validated over the communicator, :mod:`dbfs.bfs.dask.search.validate_nccl`): each worker holds
    exactly its own rank. The client and every worker ask it of the same ``ranks_of``."""
    return all(list(rks) == [i] for i, rks in enumerate(ranks_of))


def _setenv() -> None:
    os.environ["NCCL_SOCKET_IFNAME"] = "lo"      # every rank on this host: bootstrap on loopback only
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")


class _Comm:
    """One worker's end of a mesh's NCCL communicator (see the module docstring)."""

    kind = "nccl"

    def __init__(self, uid, widx: int, W: int):
        import cupy as cp  # deferred: cupy
        from cupy.cuda import nccl  # deferred: cupy

        _setenv()
        self.cp, self.nccl = cp, nccl
        self.widx, self.W = int(widx), int(W)
        self.comm = nccl.NcclCommunicator(self.W, uid, self.widx)
        self.types = {np.dtype(np.uint8): nccl.NCCL_UINT8, np.dtype(np.uint32): nccl.NCCL_UINT32, np.dtype(np.uint64): nccl.NCCL_UINT64,
                      np.dtype(np.int32): nccl.NCCL_INT32, np.dtype(np.int64): nccl.NCCL_INT64}
        self.ops = {"sum": nccl.NCCL_SUM, "max": nccl.NCCL_MAX}
        self.lock = threading.Lock()
        self.closed = False
        self.seconds = 0.0           # exchange seconds (device events), as the TCP mesh's _Timed counts them
        self.rounds = 0              # collectives (a group of calls counts once)
        self.sent = 0                # bytes this worker put on the wire
        self._grouped = False
        self.kept = {}               # the validation's input rows kept on this device while the mesh lives
        self.replays = None          # the searches' captured level graphs (dbfs.bfs.dask.search.level_graph)

    # ------------------------------------------------------------ calls
    def _stream(self) -> int:
        self.check()
        return self.cp.cuda.get_current_stream().ptr

    def _count(self, nbytes: int) -> None:
        self.sent += int(nbytes)
        if not self._grouped:
            self.rounds += 1

    def _call(self, fn, *args):
        try:
            fn(*args)
        except self.nccl.NcclError as exc:
            raise _PeerLost(f"NCCL: {exc}") from None

    def allreduce(self, a, op: str = "sum") -> None:
        """In place over every worker (``a`` the same shape everywhere)."""
        s = self._stream()
        self._count(a.nbytes * 2 * (self.W - 1) // self.W)
        self._call(self.comm.allReduce, a.data.ptr, a.data.ptr, a.size, self.types[a.dtype], self.ops[op], s)

    def allgather(self, send, recv) -> None:
        """``recv[j * n:(j + 1) * n]`` = worker j's ``send`` (n elements each)."""
        s = self._stream()
        self._count(send.nbytes * (self.W - 1))
        self._call(self.comm.allGather, send.data.ptr, recv.data.ptr, send.size, self.types[send.dtype], s)

    def send(self, a, peer: int) -> None:
        s = self._stream()
        self._count(a.nbytes)
        self._call(self.comm.send, a.data.ptr, a.size, self.types[a.dtype], int(peer), s)

    def recv(self, a, peer: int) -> None:
        s = self._stream()
        self._call(self.comm.recv, a.data.ptr, a.size, self.types[a.dtype], int(peer), s)

    @contextlib.contextmanager
    def group(self):
        """Calls inside are one NCCL group (one round; sends and receives to any peers in any order)."""
        self.nccl.groupStart()
        self._grouped = True
        try:
            yield
        finally:
            self._grouped = False
            self.rounds += 1
            try:
                self.nccl.groupEnd()
            except self.nccl.NcclError as exc:
                raise _PeerLost(f"NCCL: {exc}") from None

    def warm(self) -> None:
        """Connect every path a search uses (NCCL connects peers at their first send and receive, and
        sets up each collective's channels at its first call), so no search pays for it; every rank
        calls it at once."""
        cp = self.cp
        one = cp.zeros(1, cp.uint64)
        many = cp.zeros(self.W, cp.uint64)
        with self.group():
            for j in range(self.W):
                if j != self.widx:
                    self.send(one, j)
                    self.recv(many[j:j + 1], j)
        self.allreduce(one)
        self.allgather(one, many)
        cp.cuda.get_current_stream().synchronize()
        self.rounds = self.sent = 0

    def check(self) -> None:
        """After a host read: a communicator aborted meanwhile means a lost peer."""
        if self.closed:
            raise _PeerLost("the mesh was closed (its NCCL communicator aborted)")

    def close(self) -> None:
        """Abort the communicator (a collective blocked on a lost peer returns)."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
        self.kept = {}
        self.replays = None
        try:
            self.comm.abort()
        except Exception:             # already torn down with its device context
            pass


class _Timeline:
    """Kernel and exchange seconds of a level from CUDA events on the current stream.

    :meth:`begin` once a level starts, :meth:`mark` (``"k"`` after kernels, ``"x"``
    after collectives) as it goes; :meth:`settle` after the level's host read (the
    events are then complete) returns (kernel s, exchange s): each span between two
    events counts for the kind of the later one, host gaps included. ``issue`` is
    then the host seconds from the first mark to the last (the level's launches and
    collectives being issued): near the device span, the device waited on the host."""

    def __init__(self, n: int = 16):
        import cupy as cp  # deferred: cupy

        self.rt = cp.cuda.runtime
        self.events = [cp.cuda.Event() for _ in range(n)]
        self.marks = []
        self.stream = 0
        self.t_first = self.t_last = 0.0
        self.issue = 0.0

    def _record(self, kind) -> None:
        ev = self.events[len(self.marks) % len(self.events)]
        self.rt.eventRecord(ev.ptr, self.stream)        # the runtime call: no stream lookup a mark
        self.t_last = time.perf_counter()
        if not self.marks:
            self.t_first = self.t_last
        self.marks.append((ev, kind))

    def begin(self) -> None:
        if not self.marks:
            if not self.stream:         # the search's stream, looked up once (its task's thread keeps it)
                import cupy as cp  # deferred: cupy

                self.stream = cp.cuda.get_current_stream().ptr
            self._record(None)

    def mark(self, kind: str) -> None:
        self._record(kind)

    def settle(self) -> tuple:
        self.issue += self.t_last - self.t_first
        k = x = 0.0
        for (a, _), (b, kind) in zip(self.marks, self.marks[1:]):
            dt = self.rt.eventElapsedTime(a.ptr, b.ptr) / 1e3
            if kind == "k":
                k += dt
            else:
                x += dt
        self.marks.clear()
        return k, x


# ------------------------------------------------------------ worker side (client.run, tasks)
def _nccl_probe(dask_worker=None) -> dict:
    """(client.run) this worker's device and whether NCCL loads: {"pci", "ok"} or {"why"}."""
    try:
        import cupy as cp  # deferred: cupy
        from cupy.cuda import nccl  # deferred: cupy

        nccl.get_version()
        return {"pci": str(cp.cuda.Device().pci_bus_id)}
    except Exception as exc:            # no cupy, no NCCL library, no device
        return {"why": f"{type(exc).__name__}: {exc}"}


def _nccl_uid(dask_worker=None):
    """(client.run on the mesh's worker 0) a fresh NCCL unique id (its bootstrap bound to loopback)."""
    from cupy.cuda import nccl  # deferred: cupy

    _setenv()
    uid = nccl.get_unique_id()                    # bytes (a tuple of ints in older CuPy): passed on as made
    return uid if isinstance(uid, bytes) else tuple(int(x) for x in uid)


def _nccl_join(mesh_id: str, uid, widx: int, W: int):
    """(task pinned to mesh worker ``widx``) join the communicator; keep it with the mesh."""
    plugin = get_plugin()
    comm = _Comm(uid, widx, W)
    comm.warm()
    with plugin.lock:
        plugin.shms[mesh_id] = comm
    return widx


# ------------------------------------------------------------ client side
def open_nccl(dg, run_timeout: float) -> str:
    """One NCCL communicator over ``dg``'s mesh workers (GPU workers, one host, checked by the
    caller); returns '' or why not (nothing is left behind then)."""
    off = nccl_switch()
    if off:
        return off
    return join_nccl(dg.client, dg.mesh_workers, dg.mesh_id, run_timeout, dg.timeout)


def join_nccl(c, ws, key: str, run_timeout: float, timeout: float) -> str:
    """One NCCL communicator over workers ``ws`` (GPU workers of one host, in rank order), kept in each
    worker plugin's ``shms[key]`` (dropped with :func:`dbfs.bfs.dask.mesh.plugin._shm_drop`); '' or why not."""
    what = "setting up NCCL between the GPU workers"
    probe = run_within(c, _nccl_probe, workers=ws, timeout=run_timeout, what=what)
    bad = [v.get("why") if isinstance(v, dict) else repr(v) for v in probe.values() if not isinstance(v, dict)
           or "why" in v]
    if bad:
        return f"NCCL unavailable: {bad[0]}"
    pcis = [probe[w]["pci"] for w in ws]
    if len(set(pcis)) < len(pcis):
        return "two GPU workers share a device (NCCL needs one device per worker)"
    uid = run_within(c, _nccl_uid, workers=ws[:1], timeout=run_timeout, what=what)[ws[0]]
    if isinstance(uid, BaseException):
        return f"NCCL unavailable: {type(uid).__name__}: {uid}"
    futs = [c.submit(_nccl_join, key, uid, i, len(ws), workers=[w], allow_other_workers=False, pure=False)
            for i, w in enumerate(ws)]
    try:
        gather_watched(c, futs, ws, what, timeout)
    except Exception as exc:
        return f"NCCL set-up failed: {type(exc).__name__}: {exc}"
    return ""

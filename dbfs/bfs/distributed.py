"""Distributed BFS on Dask workers (``--backend dask --partitions P``).

What it is
----------
The graph is a Kernel 1 CSR variant split into P partitions
(``csr/p<P>-<block|cyclic>``, vertex ownership :class:`dbfs.partition.Partitioning`).
:func:`load_distributed` loads each partition from zarr ONCE onto one worker
(a future pinned with ``workers=[w], allow_other_workers=False``; rank ``r``
goes to worker ``r % W`` of the sorted worker list, so P may exceed the
number of workers) and keeps it there for every search. :func:`search` runs a
bulk-synchronous direction-optimizing BFS over those partitions; parents stay
on the workers as one future per partition; :func:`gather_parent` fetches
them (small graphs, tests) and :func:`validate_distributed` validates them as
Dask tasks over edge chunks (:mod:`dbfs.validate_dask`) without bringing any
N-sized array to the client.

Contract: ``search(dgraph, root, algorithm="do") -> (DistributedResult,
seconds, level_stats)``. ``root`` is an ORIGINAL vertex id (relabelled ``-deg``
variants are refused). Each partition's parent slice is int64 in its LOCAL
index order (global vertex ``Partitioning.to_global(rank, i)``), holding
global parent ids, ``parent[root] == root`` and -1 for unreached.
``level_stats`` has the CPU backend's keys (level, direction, frontier,
edges, discovered, time) plus ``kernel`` (seconds of per-partition compute on
the slowest worker: the step kernels and the local bookkeeping around them:
bucketing claims, absorbing pairs, queue/bitmap conversions), ``overhead``
(= time - kernel: message rounds, assembling received frontier slices,
Python glue), ``rounds`` (message rounds in the level) and ``exchange``
(seconds inside them, waiting for slower peers included). ``seconds`` is the
Graph500 Kernel 2 time measured on the workers: from a start barrier, just
before the root is visited, to the moment every worker knows that every
partition has written its parents (the last count exchange), max over
workers; the client round trip around it is ``result.wall``.

Algorithm per level (one BSP superstep; same named steps as the CPU backend,
:mod:`dbfs.bfs.cpu`, called once per partition with its local rows)
------------------------------------------------------------------------
- top-down: ``td_step`` on the partition's frontier claims the neighbours
  whose bit is clear in a per-WORKER global ``visited`` bitmap (a subset of
  the visited set: the worker's own discoveries, its earlier claims, which
  td_step marks, and every bottom-up frontier; so a vertex is sent at most
  once per worker) and writes the claiming row into a per-worker scratch
  over global ids; the claimed (vertex, parent) pairs are bucketed by owner
  (:func:`dbfs.partition.owner_local`) and sent to the owning partitions
  (all-to-all), which keep the first parent of each unvisited vertex
  (``_absorb``, parallel: an atomic OR on the visited bit picks one winner
  among racing pairs) and form the next local frontier queue.
- bottom-up: every partition runs ``bu_step`` over its unvisited rows
  (testing each row's highest-degree neighbour first: ``hub``, built at load
  time from the GLOBAL degrees, so it equals the single-process one)
  against the GLOBAL frontier bitmap, which each partition's slice of the
  previous level builds (all-gather; block slices are word-aligned because
  each partition's rows are padded at the front to a multiple of 64, so a
  local bitmap IS a run of global words; cyclic slices are scattered).
  Shared frontier: when every worker is on one host, the partitions are
  blocks and /dev/shm has room (``dg.shm == ""``; ``shared_memory=False``
  turns it off), the slices are not sent: every partition writes its words
  into a double-buffered global bitmap in a /dev/shm mapping
  (:class:`_ShmFront`) and only the counts cross the mesh.
- counts: after each level every worker sends its partitions' counts
  (new frontier size, its edges, edges examined, kernel seconds) to every
  other worker, so every worker feeds the SAME global counts to its own copy
  of the direction policy (:mod:`dbfs.bfs.policy`, GAP's alpha/beta rule by
  default) and reaches the same decision without the client. A bottom-up
  level sends its frontier slice (unless shared) with its counts (one
  round); a top-down level needs the pair exchange plus the count round; a
  top-down -> bottom-up switch adds one bitmap round.
Directions, frontier sizes and edge counts therefore equal the single-process
``do`` level for level (tests check it).

How levels are driven (the choice, with numbers)
------------------------------------------------
``benchmarks/dask_bfs.py`` (exchange part) drives levels of a tiny all-to-all
plus a count all-gather between W worker processes five ways; median ms per
level, range over 7 runs on the shared 2-core dev VM (docs/DISTRIBUTED.md):

======================================================  ==========  ==========
option                                                  W = 2       W = 4
======================================================  ==========  ==========
client in the loop (submit W pinned tasks, gather)      26-35       52-102
levels chained by task dependencies, submitted ahead    12-29       36-52
persistent loop, distributed comm (``"dask"``)          1.9-5.5     9-16
persistent loop, TCP mesh + reader threads              0.12-0.62   0.9-1.6
persistent loop, TCP mesh + selectors (``"tcp"``)       0.07-0.30   0.7-1.4
======================================================  ==========  ==========

So the client only starts the search and collects counts: one long-running
task per WORKER (it serves all of that worker's partitions, one after the
other, on the worker's Numba threads, so cores are not oversubscribed) runs
the whole level loop and exchanges frontier data directly with its peers.
The default transport ``"tcp"`` is a mesh opened once per graph at load time:
every worker listens on an ephemeral port of its own host (addresses are
exchanged through the scheduler with ``client.run``), lower mesh indices dial
higher ones, and the task thread sends and receives on non-blocking sockets
through one ``selectors`` poll (progress on all peers at once, so large
messages cannot deadlock; no thread hand-off). Messages are a 16-byte header,
a pickled (meta, array shapes) and the raw array buffers. ``"tcp-threads"``
is the same with a reader thread per peer; ``"dask"`` sends the same
messages through distributed's comm layer (one comm per peer, a handler
registered on each worker; any comm distributed speaks, TLS included), at
about ten times the latency. Only small counts, the level records and the
search's start and end go through the scheduler. In the BFS itself (SCALE
18-22 on 2 cores, 24-26 on 16, ``benchmarks/results/dask_bfs-*.json``) the
median per-level overhead with 4 worker processes is 0.4-1.0 ms on 16 cores
(target: <= 5 ms with 4 workers; docs/DISTRIBUTED.md has the tables).

Failure handling
----------------
Every wait has a timeout. A worker that dies during a search closes its
sockets, so its peers fail at once with ``_PeerLost``; the client also polls
the scheduler for vanished workers. :func:`search` then closes the mesh,
reloads every partition whose worker is gone (or whose future was lost) from
zarr onto a live worker, opens a new mesh and reruns the search (at most
``retries`` times); the event is appended to ``dgraph.events`` and
``result.events``. Any other error in a search task closes that worker's
end of the mesh first (so its peers stop waiting at once), and the client
gives the graph a fresh mesh and raises the error unchanged, without retry.
``_kill`` (tests only) makes the worker holding a given rank exit (or raise)
at a given level of the first attempt.

Memory per worker: its partitions' CSR (+63 padding rows each) and hub
array, a parent slice, a queue buffer and 3 bitmaps per partition, plus one
claim scratch over ALL vertices (int32 while N < 2**31: 4 N bytes) and 3
global bitmaps (N / 8 bytes each), and ``td_step``'s reused record buffer
(8 bytes per edge of the widest top-down level the worker ran, at most
32 MiB: wider levels claim in pieces) and ``seen`` bitmap (N / 8 bytes);
at load time, transiently, the global degree array (4 N bytes).
"""
from __future__ import annotations

import asyncio
import os
import pickle
import queue as _queue
import socket
import struct
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import numpy as np
from numba import njit, prange

from dbfs.bfs.cpu import (_fill_parent, _no_edge_bitmap, atomic_or, bitmap_to_queue, bu_step, degree_over_bitmap,
                          hub_by_degree, queue_to_bitmap, reused_int64, td_step, warm_kernels)
from dbfs.bfs.policy import BU, TD, policy_from
from dbfs.errors import DbfsError
from dbfs.partition import Partitioning, owner_local

__all__ = ["DistributedGraph", "DistributedResult", "load_distributed", "search", "gather_parent",
           "validate_distributed", "TRANSPORTS"]

TRANSPORTS = ("tcp", "tcp-threads", "dask")
ALGORITHMS = ("do", "td", "bu")
DEFAULT_TIMEOUT = 300.0          # seconds any single wait may take before the search is declared failed
_SMALL_MESSAGE = 1 << 16         # below this many payload bytes a message is sent as one joined buffer


class _PeerLost(ConnectionError):
    """A peer worker vanished (or the mesh was closed) during a search."""


# =====================================================================
# Worker side: partitions
# =====================================================================
class _Part:
    """One partition as held on its worker.

    Local row ``i`` is global vertex ``base + i`` (block) or ``i * P + rank``
    (cyclic). Block partitions are padded at the front with ``pad = first %
    64`` empty rows so ``base`` is a multiple of 64 and a local bitmap is a
    run of global bitmap words starting at word ``base >> 6``.
    """

    def __init__(self, indptr, indices, meta):
        self.rank = int(meta["rank"])
        self.P = int(meta["P"])
        self.kind = meta["partitioning"]
        self.n = int(meta["n_vertices"])
        part = Partitioning(self.n, self.P, self.kind)
        self.code, self.q, self.r = part.code, part.q, part.r
        rng = meta["vertex_range"]
        self.count = len(rng)
        if self.kind == "block":
            self.first = rng.start
            self.base = self.first & ~63
            self.pad = self.first - self.base
        else:
            self.first = self.rank
            self.base = 0
            self.pad = 0
        indptr = np.asarray(indptr, dtype=np.int64)
        if self.pad:
            indptr = np.concatenate([np.zeros(self.pad, np.int64), indptr])
        self.indptr = np.ascontiguousarray(indptr)
        self.indices = np.ascontiguousarray(indices)
        self.nloc = self.pad + self.count
        self.nnz = int(meta["nnz"])
        self.no_edge = _no_edge_bitmap(self.indptr)
        self.multi = degree_over_bitmap(self.indptr, 1)
        self.hub = None            # set by _prepare_part: needs every partition's degrees
        self.prepare_time = 0.0
        self.load_time = float(meta["load_time"])
        self.meta = {k: meta[k] for k in ("variant", "rank", "P", "partitioning", "n_vertices", "nnz")}

    def info(self):
        return {**self.meta, "load_time": self.load_time, "prepare_time": self.prepare_time, "count": self.count,
                "pid": os.getpid()}


def _load_part(dataset_path, variant, rank):
    from dbfs.kernel1 import load_partition

    t0 = time.perf_counter()
    indptr, indices, meta = load_partition(dataset_path, variant, rank)
    p = _Part(indptr, indices, meta)
    p.load_time = time.perf_counter() - t0
    return p


def _local_degrees(p):
    """Degrees of this partition's vertices, local index order (int32 while N < 2**31)."""
    dt = np.int32 if p.n < (1 << 31) else np.int64
    return np.diff(p.indptr[p.pad:]).astype(dt)


def _global_degrees(part: Partitioning, *degs):
    deg = np.empty(part.n_vertices, degs[0].dtype if degs else np.int64)
    for rk, d in enumerate(degs):
        rg = part.vertex_range(rk)
        deg[rg.start:rg.stop:rg.step] = d
    return deg


def _prepare_part(p, deg):
    """Kernel-1-like data a partition needs from the whole graph: the hub
    neighbours of bu_step (built at load time, outside any search)."""
    t0 = time.perf_counter()
    warm_kernels(p.indptr, p.indices)
    p.hub = hub_by_degree(p.indptr, p.indices, deg)
    p.prepare_time = time.perf_counter() - t0
    return p


def _part_info(p):
    return p.info()


def _pick_parent(out, rank):
    return out["parents"][rank]


# =====================================================================
# Worker side: index mapping and exchange kernels (the steps are cpu's)
# =====================================================================
_PAIR_GRAIN = 8192                 # pairs per chunk of the parallel bucket / absorb loops


def _chunks(m: int) -> int:
    return min(max(m // _PAIR_GRAIN, 1), 256)


@njit(parallel=True, nogil=True, cache=True)
def _bucket_pairs(newv, scratch, code, P, q, r, rank, base, C):
    """Claimed vertices -> (owner-local index, global parent) pairs grouped by
    owner rank (a parallel, stable counting sort over ``C`` chunks: pairs keep
    ``newv``'s order inside a bucket), and ``cnt`` (P + 1 offsets).
    ``scratch[v]`` holds the claiming vertex's LOCAL row (td_step ran on local
    ids); map it to its global id. Pairs have ``scratch``'s dtype (int32
    while N < 2**31: 8 bytes a pair on the wire)."""
    m = newv.shape[0]
    own = np.empty(m, np.int32)
    loc = np.empty(m, scratch.dtype)
    hist = np.zeros((C, P), np.int64)
    for c in prange(C):
        for k in range(c * m // C, (c + 1) * m // C):
            o, l = owner_local(newv[k], code, P, q, r)
            own[k] = o
            loc[k] = l
            hist[c, o] += 1
    cnt = np.zeros(P + 1, np.int64)
    pos = np.empty((C, P), np.int64)
    s = 0
    for o in range(P):
        cnt[o] = s
        for c in range(C):
            pos[c, o] = s
            s += hist[c, o]
    cnt[P] = s
    L = np.empty(m, scratch.dtype)
    U = np.empty(m, scratch.dtype)
    for c in prange(C):
        for k in range(c * m // C, (c + 1) * m // C):
            o = own[k]
            p = pos[c, o]
            L[p] = loc[k]
            u = np.int64(scratch[newv[k]])
            U[p] = u + base if code == 0 else u * P + rank
            pos[c, o] = p + 1
    return L, U, cnt


@njit(parallel=True, nogil=True, cache=True)
def _absorb(L, U, pad, parent, visited, indptr, gvis, code, P, rank, base, tmp, out, w, C):
    """Owner side of a top-down level, one source's pairs (no vertex twice in
    one source), ``C`` chunks in parallel: keep the first parent of each
    unvisited vertex (its visited bit is claimed with an atomic OR, so of
    pairs racing for one vertex exactly one wins), set its bit in the
    worker's global bitmap ``gvis`` too, and append its local row to ``out``
    from position ``w`` (``tmp``: scratch of at least len(L) entries).
    Returns (new write position, sum of the new vertices' degrees)."""
    m = L.shape[0]
    cnt = np.zeros(C, np.int64)
    deg = np.zeros(C, np.int64)
    for c in prange(C):
        k0 = c * m // C
        k = k0
        s = 0
        for j in range(k0, (c + 1) * m // C):
            i = np.int64(L[j]) + pad
            bit = np.int64(1) << (i & 63)
            if visited[i >> 6] & bit:
                continue
            if atomic_or(visited, i >> 6, bit) & bit:
                continue
            parent[i] = U[j]
            v = i + base if code == 0 else i * P + rank
            atomic_or(gvis, v >> 6, np.int64(1) << (v & 63))
            s += indptr[i + 1] - indptr[i]
            tmp[k] = i
            k += 1
        cnt[c] = k - k0
        deg[c] = s
    offs = np.empty(C, np.int64)
    t = w
    for c in range(C):
        offs[c] = t
        t += cnt[c]
    for c in prange(C):
        k0 = c * m // C
        o = offs[c]
        for k in range(cnt[c]):
            out[o + k] = tmp[k0 + k]
    return t, deg.sum()


@njit(nogil=True, cache=True)
def _or_slice(front, sl, code, P, rank, base):
    """OR one partition's local frontier bitmap into the global one."""
    if code == 0:
        w0 = base >> 6
        for w in range(sl.shape[0]):
            front[w0 + w] |= sl[w]
    else:
        for w in range(sl.shape[0]):
            x = sl[w]
            if x == 0:
                continue
            for b in range(64):
                if (x >> b) & 1:
                    v = ((w << 6) + b) * P + rank
                    front[v >> 6] |= np.int64(1) << (v & 63)


@njit(nogil=True, cache=True)
def _or_into(dst, src):
    for w in range(dst.shape[0]):
        dst[w] |= src[w]


# =====================================================================
# Worker side: transports
# =====================================================================
_MESHES: dict = {}      # (mesh_id, widx) -> mesh
_LISTENERS: dict = {}   # (mesh_id, widx) -> listening socket
_REG_LOCK = threading.Lock()


def _recv_exact(sock, view):
    n = 0
    size = len(view)
    while n < size:
        k = sock.recv_into(view[n:], size - n)
        if k == 0:
            raise ConnectionError("peer closed the connection")
        n += k


def _host_of(address: str) -> str:
    u = urlparse(address)
    if u.scheme in ("tcp", "tls", "ws", "wss") and u.hostname:
        return u.hostname
    return "127.0.0.1"


def _shutdown(socks) -> None:
    """Shut down and close sockets; a select or recv in progress wakes up."""
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()


class _ThreadedTcpMesh:
    """Transport 'tcp-threads': all-to-all message rounds over one TCP connection per peer.

    Every round each worker sends exactly one message to every peer and
    receives exactly one from each; per-connection FIFO order keeps rounds
    aligned. One daemon reader thread per peer drains its socket into a queue.
    """

    def __init__(self, mesh_id, widx, W, socks, timeout):
        self.mesh_id, self.widx, self.W, self.timeout = mesh_id, widx, W, timeout
        self.socks = socks
        self.inbox = {j: _queue.Queue() for j in socks}
        self.closed = False
        self.threads = []
        for j, s in socks.items():
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.settimeout(None)
            t = threading.Thread(target=self._reader, args=(j, s), daemon=True,
                                 name=f"dbfs-mesh-{mesh_id[:8]}-{widx}<-{j}")
            t.start()
            self.threads.append(t)

    def _reader(self, j, s):
        hdr = bytearray(16)
        try:
            while True:
                _recv_exact(s, memoryview(hdr))
                plen, _ = struct.unpack("<qq", hdr)
                pbuf = bytearray(plen)
                _recv_exact(s, memoryview(pbuf))
                meta, descr = pickle.loads(pbuf)
                arrays = []
                for dt, shape in descr:
                    a = np.empty(shape, dtype=np.dtype(dt))
                    if a.nbytes:
                        _recv_exact(s, memoryview(a).cast("B"))
                    arrays.append(a)
                self.inbox[j].put((meta, arrays))
        except (OSError, ValueError, EOFError, pickle.UnpicklingError) as exc:
            self.inbox[j].put(_PeerLost(f"connection to worker {j} lost: {exc}"))

    def _send(self, j, meta, arrays):
        arrays = [np.ascontiguousarray(a) for a in arrays]
        payload = pickle.dumps((meta, [(a.dtype.str, a.shape) for a in arrays]), protocol=5)
        nbytes = sum(a.nbytes for a in arrays)
        hdr = struct.pack("<qq", len(payload), nbytes)
        s = self.socks[j]
        try:
            if nbytes <= _SMALL_MESSAGE:
                s.sendall(b"".join([hdr, payload] + [a.tobytes() for a in arrays]))
            else:
                s.sendall(hdr + payload)
                for a in arrays:
                    if a.nbytes:
                        s.sendall(memoryview(a).cast("B"))
        except OSError as exc:
            raise _PeerLost(f"sending to worker {j} failed: {exc}") from None

    def _recv(self, j):
        try:
            msg = self.inbox[j].get(timeout=self.timeout)
        except _queue.Empty:
            raise _PeerLost(f"no message from worker {j} within {self.timeout:.0f} s") from None
        if isinstance(msg, Exception):
            raise msg
        return msg

    def exchange(self, out):
        """Send ``out[j] = (meta, arrays)`` to every peer j; return {j: (meta, arrays)} received."""
        if self.closed:
            raise _PeerLost("mesh closed")
        for j in self.socks:
            self._send(j, *out[j])
        return {j: self._recv(j) for j in self.socks}

    def close(self):
        self.closed = True
        _shutdown(self.socks.values())
        for q in self.inbox.values():
            q.put(_PeerLost("mesh closed"))


class _RecvState:
    """One incoming message: 16-byte header, pickled (meta, array shapes), raw arrays."""

    def __init__(self):
        self.stage = 0                           # 0 header, 1 payload, 2 arrays, 3 done
        self.view = memoryview(bytearray(16))
        self.filled = 0
        self.meta, self.descr, self.arrays = None, (), []

    def advance(self):
        """The current buffer is full: move to the next one."""
        if self.stage == 0:
            plen, _ = struct.unpack("<qq", self.view)
            self.stage, self.view, self.filled = 1, memoryview(bytearray(plen)), 0
            return
        if self.stage == 1:
            self.meta, self.descr = pickle.loads(self.view)
            self.stage = 2
        while len(self.arrays) < len(self.descr):
            dt, shape = self.descr[len(self.arrays)]
            a = np.empty(shape, dtype=np.dtype(dt))
            self.arrays.append(a)
            if a.nbytes:
                self.view, self.filled = memoryview(a).cast("B"), 0
                return
        self.stage = 3


class _SelectMesh:
    """Transport 'tcp' (the default): the same rounds as
    :class:`_ThreadedTcpMesh` without reader threads: the
    task thread itself sends and receives on non-blocking sockets through one
    ``selectors`` poll (progress on every peer at once, so large messages
    cannot deadlock), saving a thread hand-off per message. A socket is
    watched only while its peer owes this round a message or is still being
    sent to, so data of the next round waiting in the kernel never spins the
    poll."""

    def __init__(self, mesh_id, widx, W, socks, timeout):
        import selectors

        self.mesh_id, self.widx, self.W, self.timeout = mesh_id, widx, W, timeout
        self.socks = socks
        self.closed = False
        self.sel = selectors.DefaultSelector()
        self._R, self._W = selectors.EVENT_READ, selectors.EVENT_WRITE
        for s in socks.values():
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.setblocking(False)

    @staticmethod
    def _frames(meta, arrays):
        arrays = [np.ascontiguousarray(a) for a in arrays]
        payload = pickle.dumps((meta, [(a.dtype.str, a.shape) for a in arrays]), protocol=5)
        nbytes = sum(a.nbytes for a in arrays)
        hdr = struct.pack("<qq", len(payload), nbytes)
        if nbytes <= _SMALL_MESSAGE:
            return [memoryview(b"".join([hdr, payload] + [a.tobytes() for a in arrays]))]
        return [memoryview(hdr + payload)] + [memoryview(a).cast("B") for a in arrays if a.nbytes]

    @staticmethod
    def _push(j, s, frames):
        """Send what the socket takes now; True when ``frames`` are all sent."""
        try:
            while frames:
                n = s.send(frames[0])
                if n < len(frames[0]):
                    frames[0] = frames[0][n:]
                    return False
                frames.pop(0)
        except BlockingIOError:
            return False
        except OSError as exc:
            raise _PeerLost(f"sending to worker {j} failed: {exc}") from None
        return True

    def exchange(self, out):
        if self.closed:
            raise _PeerLost("mesh closed")
        sends = {}
        for j, s in self.socks.items():
            frames = self._frames(*out[j])
            if not self._push(j, s, frames):       # most messages leave in one call
                sends[j] = frames
        st = {j: _RecvState() for j in self.socks}
        got = {}
        watched = {}
        for j, s in self.socks.items():
            watched[j] = self._R | (self._W if j in sends else 0)
            self.sel.register(s, watched[j], j)
        try:
            deadline = time.monotonic() + self.timeout
            while watched:
                if self.closed:
                    raise _PeerLost("mesh closed")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise _PeerLost(f"no complete round within {self.timeout:.0f} s")
                try:
                    events = self.sel.select(min(left, 1.0))
                except (OSError, ValueError) as exc:      # sockets closed under us by close()
                    raise _PeerLost(f"mesh closed: {exc}") from None
                for key, mask in events:
                    j, s = key.data, key.fileobj
                    ev = watched[j]
                    if mask & self._W and self._push(j, s, sends[j]):
                        del sends[j]
                        ev &= ~self._W
                    if mask & self._R:
                        self._progress(j, s, st[j], got)
                        if j in got:
                            ev &= ~self._R
                    if ev != watched[j]:
                        if ev:
                            self.sel.modify(s, ev, j)
                            watched[j] = ev
                        else:
                            self.sel.unregister(s)
                            del watched[j]
        finally:
            for j in list(watched):
                try:
                    self.sel.unregister(self.socks[j])
                except (KeyError, ValueError, OSError):
                    pass
        return got

    def _progress(self, j, s, rs, got):
        """Read what is there from peer j into its receive state ``rs``."""
        while rs.stage != 3:
            if rs.filled < len(rs.view):
                try:
                    n = s.recv_into(rs.view[rs.filled:])
                except BlockingIOError:
                    return
                except OSError as exc:
                    raise _PeerLost(f"connection to worker {j} lost: {exc}") from None
                if n == 0:
                    raise _PeerLost(f"connection to worker {j} lost: peer closed the connection")
                rs.filled += n
                if rs.filled < len(rs.view):
                    continue
            rs.advance()
        got[j] = (rs.meta, rs.arrays)

    def close(self):
        """(any thread) shut the sockets down: a select in progress wakes and raises _PeerLost."""
        self.closed = True
        _shutdown(self.socks.values())


class _DaskMesh:
    """The same rounds through distributed's comm layer: one comm per peer,
    opened from this worker's event loop with distributed's ``connect`` (so
    any comm distributed speaks, TLS included), carrying one-way messages
    (``reply=False``) to the ``dbfs_bsp`` handler registered on every worker
    when the mesh opens; round numbers match messages to rounds."""

    def __init__(self, mesh_id, widx, W, addrs, timeout):
        from distributed import get_worker

        self.mesh_id, self.widx, self.W, self.timeout = mesh_id, widx, W, timeout
        self.addrs = addrs
        self.peers = [j for j in range(W) if j != widx]
        self.worker = get_worker()
        self.loop = self.worker.loop.asyncio_loop
        self.cond = threading.Condition()
        self.box = {}              # (src, round) -> (meta, arrays)
        self.round = 0
        self.pending = []
        self.comms = {}
        self.locks = {}
        self.closed = False

    def deliver(self, src, rnd, meta, arrays):
        with self.cond:
            self.box[(src, rnd)] = (meta, arrays)
            self.cond.notify_all()

    async def _send_async(self, j, rnd, meta, arrays):
        from distributed.comm import connect
        from distributed.protocol import to_serialize

        lock = self.locks.get(j)
        if lock is None:
            lock = self.locks[j] = asyncio.Lock()
        async with lock:                       # one writer per comm, rounds in order
            comm = self.comms.get(j)
            if comm is None:
                comm = self.comms[j] = await connect(self.addrs[j], timeout=self.timeout,
                                                     **self.worker.connection_args)
            await comm.write({"op": "dbfs_bsp", "reply": False, "mesh": self.mesh_id, "src": self.widx, "dst": j,
                              "rnd": rnd, "payload": to_serialize((meta, arrays))})

    def _check_sends(self):
        still = []
        for f in self.pending:
            if f.done():
                exc = f.exception()
                if exc is not None:
                    raise _PeerLost(f"sending to a peer failed: {exc}")
            else:
                still.append(f)
        self.pending = still

    def exchange(self, out):
        if self.closed:
            raise _PeerLost("mesh closed")
        rnd = self.round
        self.round += 1
        for j in self.peers:
            meta, arrays = out[j]
            self.pending.append(asyncio.run_coroutine_threadsafe(self._send_async(j, rnd, meta, list(arrays)),
                                                                 self.loop))
        got = {}
        deadline = time.monotonic() + self.timeout
        with self.cond:
            for j in self.peers:
                while (j, rnd) not in self.box:
                    if self.closed:
                        raise _PeerLost("mesh closed")
                    self._check_sends()
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise _PeerLost(f"no message from worker {j} within {self.timeout:.0f} s")
                    self.cond.wait(min(left, 0.05))
                got[j] = self.box.pop((j, rnd))
        self._check_sends()
        return got

    async def _close_comms(self):
        for c in self.comms.values():
            c.abort()

    def close(self):
        self.closed = True
        with self.cond:
            self.cond.notify_all()
        try:
            asyncio.run_coroutine_threadsafe(self._close_comms(), self.loop)
        except RuntimeError:
            pass


async def _dbfs_bsp_handler(mesh=None, src=None, dst=None, rnd=None, payload=None):
    m = _MESHES.get((mesh, dst))
    if m is not None:
        meta, arrays = payload
        m.deliver(src, rnd, meta, arrays)
    return "OK"


def _mesh_listen(mesh_id, widx_of, transport, dask_worker=None):
    """(client.run, on the worker's event loop) open this worker's endpoint."""
    widx = widx_of[dask_worker.address]
    if transport == "dask":
        dask_worker.handlers["dbfs_bsp"] = _dbfs_bsp_handler
        return dask_worker.address
    host = _host_of(dask_worker.address)
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.bind((host, 0))
    s.listen(128)
    with _REG_LOCK:
        _LISTENERS[(mesh_id, widx)] = s
    return (host, s.getsockname()[1])


def _mesh_connect(mesh_id, widx, addrs, transport, timeout):
    """(task pinned to worker ``widx``) connect to every peer; lower indices
    dial, higher ones accept (the listen backlog makes the order irrelevant)."""
    W = len(addrs)
    if transport == "dask":
        mesh = _DaskMesh(mesh_id, widx, W, addrs, timeout)
        with _REG_LOCK:
            _MESHES[(mesh_id, widx)] = mesh
        return widx
    with _REG_LOCK:
        lst = _LISTENERS.pop((mesh_id, widx))
    socks = {}
    try:
        for j in range(widx):
            s = socket.create_connection(tuple(addrs[j]), timeout=timeout)
            s.sendall(struct.pack("<q", widx))
            socks[j] = s
        lst.settimeout(timeout)
        for _ in range(W - 1 - widx):
            c, _ = lst.accept()
            c.settimeout(timeout)
            b = bytearray(8)
            _recv_exact(c, memoryview(b))
            socks[struct.unpack("<q", b)[0]] = c
    except OSError as exc:
        for s in socks.values():
            s.close()
        raise _PeerLost(f"mesh setup failed on worker {widx}: {exc}") from None
    finally:
        lst.close()
    cls = _ThreadedTcpMesh if transport == "tcp-threads" else _SelectMesh
    with _REG_LOCK:
        _MESHES[(mesh_id, widx)] = cls(mesh_id, widx, W, socks, timeout)
    return widx


def _mesh_close(mesh_id):
    """(client.run) close this worker's end of a mesh; unblocks a running search."""
    with _REG_LOCK:
        keys = [k for k in _MESHES if k[0] == mesh_id]
        meshes = [_MESHES.pop(k) for k in keys]
        lkeys = [k for k in _LISTENERS if k[0] == mesh_id]
        lsts = [_LISTENERS.pop(k) for k in lkeys]
    for m in meshes:
        m.close()
    for s in lsts:
        s.close()
    _shm_drop(mesh_id)
    return len(meshes)


class _Timed:
    """Counts a mesh's rounds and the seconds spent in them."""

    def __init__(self, mesh):
        self.mesh, self.rounds, self.seconds = mesh, 0, 0.0

    def exchange(self, out):
        t = time.perf_counter()
        try:
            return self.mesh.exchange(out)
        finally:
            self.seconds += time.perf_counter() - t
            self.rounds += 1


class _LocalMesh:
    """W = 1: nothing to exchange."""

    W = 1
    widx = 0

    def exchange(self, out):
        return {}

    def close(self):
        pass


# =====================================================================
# Worker side: the level loop
# =====================================================================
_SHMS: dict = {}      # mesh_id -> _ShmFront of this worker


class _ShmFront:
    """Two global frontier bitmaps shared by the workers of one host (a file
    mapping in /dev/shm, unlinked once every worker has mapped it, so it
    vanishes with the last process), plus per-rank boundary words.

    Layout (int64): for k in (0, 1): ``gwords`` bitmap words, then ``P``
    boundary words. A bottom-up level's new frontier is published into buffer
    ``k`` (k alternates per publication): every partition writes the words
    it OWNS (word w belongs to the partition holding vertex 64 w: its local
    words 1.., and word 0 when its first row is 64-aligned) whole, and the
    bits of its first word, when another partition owns that word, into its
    boundary word. After the count exchange (a barrier), every worker ORs
    the boundary words into their words (all workers write the same values)
    and copies the bitmap out. A buffer is rewritten only two publications
    later, after every worker has sent the counts that follow its copy.
    """

    def __init__(self, path, gwords, P, create):
        import mmap

        size = 2 * (gwords + P) * 8
        fd = os.open(path, (os.O_CREAT | os.O_EXCL | os.O_RDWR) if create else os.O_RDWR, 0o600)
        try:
            if create:
                os.ftruncate(fd, size)
            self._mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        a = np.frombuffer(self._mm, np.int64)
        if create:
            a.fill(0)                      # allocates the pages now, not inside a search
        else:
            int(a[::512].sum())            # maps them
        st = gwords + P
        self.bufs = [a[k * st:k * st + gwords] for k in (0, 1)]
        self.bnd = [a[k * st + gwords:(k + 1) * st] for k in (0, 1)]
        self.k = 0
        self.path = path


def _shm_path(mesh_id: str, size: int):
    """Where to create the segment: /dev/shm when it has room (twice the size), else None."""
    d = "/dev/shm"
    try:
        stv = os.statvfs(d)
    except OSError:
        return None
    return os.path.join(d, f"dbfs-{mesh_id}") if stv.f_bavail * stv.f_frsize >= 2 * size else None


def _shm_open(mesh_id, path, gwords, P, create):
    """(client.run) create or map the mesh's shared frontier; returns True or the error text."""
    try:
        sh = _ShmFront(path, gwords, P, create)
    except (OSError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    with _REG_LOCK:
        _SHMS[mesh_id] = sh
    return True


def _shm_drop(mesh_id):
    """(client.run) forget the mapping (numpy views keep it alive while in use)."""
    with _REG_LOCK:
        _SHMS.pop(mesh_id, None)
    return True


@njit(parallel=True, nogil=True, cache=True)
def _publish_words(dst, src, w0, first):
    """Copy local bitmap words ``first..`` to global words ``w0 + first..``."""
    for w in prange(first, src.shape[0]):
        dst[w0 + w] = src[w]


@njit(nogil=True, cache=True)
def _fix_boundaries(dst, bnd, wordof):
    """OR each rank's boundary word into global word ``wordof[rank]`` (-1: none);
    one read and one write per word, so racing workers write equal values."""
    P = wordof.shape[0]
    r = 0
    while r < P:
        w = wordof[r]
        if w < 0:
            r += 1
            continue
        acc = dst[w]
        while r < P and wordof[r] == w:
            acc |= bnd[r]
            r += 1
        dst[w] = acc


@njit(parallel=True, nogil=True, cache=True)
def _take_front(front, src, visited):
    """front = src (a private copy of the shared frontier); visited |= src."""
    for w in prange(front.shape[0]):
        x = src[w]
        front[w] = x
        visited[w] |= x


def _shm_publish(sh, states):
    """Publish this worker's partitions' local frontier bitmaps (``fbm``) into the next buffer."""
    dst, bnd = sh.bufs[sh.k], sh.bnd[sh.k]
    for rk, st in states.items():
        p = st.p
        if p.pad:
            bnd[rk] = st.fbm[0]
        _publish_words(dst, st.fbm, p.base >> 6, 1 if p.pad else 0)


def _shm_collect(sh, wordof, front, visited_g):
    """After the barrier: fix the boundary words, copy the frontier to ``front``, OR it into ``visited_g``."""
    dst = sh.bufs[sh.k]
    _fix_boundaries(dst, sh.bnd[sh.k], wordof)
    _take_front(front, dst, visited_g)
    sh.k ^= 1


def _boundary_words(N, P, q, r):
    """Per rank: the global word its first row shares with a lower rank's rows, or -1."""
    out = np.full(P, -1, np.int64)
    for rk in range(P):
        first = rk * q + min(rk, r)
        if first & 63:
            out[rk] = first >> 6
    return out


_SCRATCH: dict = {}   # N -> this worker's td claim array, kept across searches


def _scratch(N: int) -> np.ndarray:
    """The worker's global-id claim array (int32 while N < 2**31), allocated and
    touched once per worker and graph size: it is write-before-read, and a
    fresh N-sized array per search put N/2**19 huge-page faults (zeroing
    256 MB at SCALE 26) into the first top-down level, inside the timer."""
    arr = _SCRATCH.get(N)
    if arr is None:
        _SCRATCH.clear()
        arr = _SCRATCH[N] = np.zeros(N, np.int32 if N < (1 << 31) else np.int64)
        arr.fill(0)
    return arr


_GROWN: dict = {}     # key -> this worker's reusable int64 work array


def _grown(key, n: int) -> np.ndarray:
    """This worker's reusable int64 work array ``key`` (:func:`dbfs.bfs.cpu.reused_int64`)."""
    return reused_int64(_GROWN, key, n)


def _zeroed(nwords: int) -> np.ndarray:
    """A zero bitmap whose pages are already mapped (np.zeros maps them lazily)."""
    a = np.empty(nwords, np.int64)
    a.fill(0)
    return a


class _State:
    """Per-search state of one partition."""

    def __init__(self, p: _Part):
        self.p = p
        nwords = (p.nloc + 63) >> 6
        self.parent = _fill_parent(p.nloc)
        self.visited = p.no_edge.copy()
        self.fbm = _zeroed(nwords)                 # local frontier bitmap (after a bottom-up level)
        self.nxt = _zeroed(nwords)
        self.queue = np.empty(0, np.int64)         # local frontier queue (local rows)
        self.bufs = [_grown(("queue", p.rank, k), max(p.nloc, 1)) for k in (0, 1)]   # alternate per level


def _bsp_search(mesh_id, widx, ranks_of, parts, root, algorithm, pol_opts, nnz_total, kill=None):
    """(task pinned to mesh worker ``widx``) one search on this worker's partitions ``parts``;
    ``pol_opts``: the keyword options of :func:`dbfs.bfs.policy.policy_from`.

    Returns {"parents": {rank: parent slice}, "seconds", "records" (widx 0 only), "kernel_total", "levels"}.
    Any failure closes this worker's end of the mesh first, so the peers
    stop waiting at once (they raise ``_PeerLost``) instead of timing out.
    """
    if len(ranks_of) == 1:
        mesh = _LocalMesh()
    else:
        mesh = _MESHES.get((mesh_id, widx))
        if mesh is None:
            raise _PeerLost(f"no mesh {mesh_id[:8]} on this worker (restarted?)")
    try:
        return _bsp_levels(mesh, widx, ranks_of, parts, root, algorithm, pol_opts, nnz_total, kill,
                           _SHMS.get(mesh_id))
    except BaseException:
        mesh.close()
        with _REG_LOCK:
            _MESHES.pop((mesh_id, widx), None)
        raise


def _bsp_levels(mesh, widx, ranks_of, parts, root, algorithm, pol_opts, nnz_total, kill, shm=None):
    """The level loop of :func:`_bsp_search` (see the module docstring); ``shm``: this
    worker's :class:`_ShmFront` of the mesh, or None (frontier slices go by the mesh)."""
    W = len(ranks_of)
    mesh = _Timed(mesh)
    peers = [j for j in range(W) if j != widx]
    parts = sorted(parts, key=lambda p: p.rank)
    p0 = parts[0]
    N, P, code, q, r = p0.n, p0.P, p0.code, p0.q, p0.r
    gwords = (N + 63) >> 6

    # ---- per-search setup (the -1 fills, outside the timer as in Graph500 3.0.1); every
    # array is written here, so no page is first touched (and zeroed by the kernel) inside it
    scratch = _scratch(N)                         # td claims over global ids (write-before-read)
    visited_g = _zeroed(gwords)                   # subset of the visited set, global ids (td filter)
    front = _zeroed(gwords)                       # global frontier bitmap (bottom-up)
    sh = shm if code == 0 and peers else None     # same-host shared frontier, else slices through the mesh
    front_next = _zeroed(gwords) if sh is None else None
    wordof = _boundary_words(N, P, q, r) if sh is not None else None
    states = {p.rank: _State(p) for p in parts}
    o_root, l_root = owner_local(np.int64(root), code, P, q, r)
    o_root, l_root = int(o_root), int(l_root)
    deg_root = -1
    if o_root in states:
        st = states[o_root]
        i = l_root + st.p.pad
        deg_root = int(st.p.indptr[i + 1] - st.p.indptr[i])

    # ---- start barrier (shares the root's degree)
    got = mesh.exchange({j: ({"deg": deg_root}, []) for j in peers})
    for meta, _ in got.values():
        deg_root = max(deg_root, meta["deg"])
    t0 = time.perf_counter()
    if o_root in states:
        st = states[o_root]
        i = l_root + st.p.pad
        st.parent[i] = root
        st.visited[i >> 6] |= np.int64(1) << (i & 63)
        st.queue = np.array([i], np.int64)
    visited_g[root >> 6] |= np.int64(1) << (root & 63)

    pol = policy_from(**pol_opts)
    pol.start(N)
    n_f, m_f = 1, deg_root
    m_u = nnz_total - deg_root
    have_queue = True
    front_ready = False
    rec = []
    level = 0
    kernel_total = 0.0
    while n_f:
        if kill is not None and level == kill[1] and kill[0] in states:   # test hook
            if len(kill) > 2 and kill[2] == "raise":
                raise RuntimeError(f"injected failure at level {level} on the worker of rank {kill[0]}")
            os._exit(1)                                # this worker dies mid-search
        t_lv = time.perf_counter()
        x_t0, x_n0 = mesh.seconds, mesh.rounds
        kt = 0.0
        if algorithm == "do":
            d = pol.next(n_f, m_f, m_u)
        else:
            d = TD if algorithm == "td" else BU
        if d == TD:
            if not have_queue:
                t = time.perf_counter()
                for st in states.values():
                    st.queue = bitmap_to_queue(st.fbm, 0)
                kt += time.perf_counter() - t
                have_queue = True
            # expand: claim neighbours, bucket (vertex, parent) pairs by owner
            t = time.perf_counter()
            examined = 0
            outs = {}
            for rk, st in states.items():
                p = st.p
                newv, ex = td_step(p.indptr, p.indices, 0, st.queue, scratch, visited_g)
                examined += ex
                outs[rk] = _bucket_pairs(newv, scratch, code, P, q, r, rk, p.base, _chunks(newv.shape[0]))
            kt += time.perf_counter() - t
            # exchange: one message per peer worker, pairs grouped by destination rank
            send = {}
            for j in peers:
                meta, arrs = [], []
                for d_rk in ranks_of[j]:
                    for s_rk, (L, U, cnt) in outs.items():
                        a, b = cnt[d_rk], cnt[d_rk + 1]
                        if b > a:
                            meta.append(d_rk)
                            arrs += [L[a:b], U[a:b]]
                send[j] = (meta, arrs)
            got = mesh.exchange(send) if peers else {}
            # absorb: owners keep the first parent, form the next local queue
            t = time.perf_counter()
            new_n = new_m = 0
            for rk, st in states.items():
                p = st.p
                srcs = [(L[cnt[rk]:cnt[rk + 1]], U[cnt[rk]:cnt[rk + 1]]) for L, U, cnt in outs.values()]
                srcs += [(arrs[2 * k], arrs[2 * k + 1]) for meta, arrs in got.values()
                         for k, d_rk in enumerate(meta) if d_rk == rk]
                out = st.bufs[level & 1]
                w = 0
                for L, U in srcs:
                    if L.shape[0]:
                        tmp = _grown("absorb", L.shape[0])
                        w, dm = _absorb(L, U, p.pad, st.parent, st.visited, p.indptr, visited_g, code, P, rk,
                                        p.base, tmp, out, w, _chunks(L.shape[0]))
                        new_m += int(dm)
                st.queue = out[:w]
                new_n += w
            kt += time.perf_counter() - t
            mine = (new_n, new_m, examined, kt)
            got = mesh.exchange({j: (mine, []) for j in peers}) if peers else {}
            totals = [mine] + [m for m, _ in got.values()]
            front_ready = False
        else:
            if not front_ready:
                # top-down -> bottom-up: build the global frontier from the local queues
                t = time.perf_counter()
                for st in states.values():
                    queue_to_bitmap(st.queue, 0, st.fbm)
                if sh is not None:
                    _shm_publish(sh, states)
                    kt += time.perf_counter() - t
                    mesh.exchange({j: (None, []) for j in peers})
                    _shm_collect(sh, wordof, front, visited_g)
                else:
                    front[:] = 0
                    for rk, st in states.items():
                        _or_slice(front, st.fbm, code, P, rk, st.p.base)
                    kt += time.perf_counter() - t
                    got = mesh.exchange({j: (list(states), [st.fbm for st in states.values()]) for j in peers}) \
                        if peers else {}
                    for meta, arrs in got.values():
                        for rk, sl in zip(meta, arrs):
                            _or_slice(front, sl, code, P, rk, _base_of(rk, code, N, P, q, r))
                    _or_into(visited_g, front)
                have_queue = False
            t = time.perf_counter()
            new_n = new_m = examined = 0
            for rk, st in states.items():
                p = st.p
                aw, ex, adeg, _ = bu_step(p.indptr, p.indices, 0, front, st.parent, st.visited, st.nxt, p.hub,
                                          p.no_edge, p.multi, False, True)
                st.fbm, st.nxt = st.nxt, st.fbm
                new_n += aw
                new_m += adeg
                examined += ex
            if sh is not None:
                _shm_publish(sh, states)
            else:
                front_next[:] = 0
                for rk, st in states.items():
                    _or_slice(front_next, st.fbm, code, P, rk, st.p.base)
            kt += time.perf_counter() - t
            mine = (new_n, new_m, examined, kt)
            if sh is not None:
                got = mesh.exchange({j: ((mine, None), []) for j in peers})
                totals = [mine] + [m for (m, _), _ in got.values()]
                _shm_collect(sh, wordof, front, visited_g)
            else:
                got = mesh.exchange({j: ((mine, list(states)), [st.fbm for st in states.values()])
                                     for j in peers}) if peers else {}
                totals = [mine]
                for (m, rks), arrs in got.values():
                    totals.append(m)
                    for rk, sl in zip(rks, arrs):
                        _or_slice(front_next, sl, code, P, rk, _base_of(rk, code, N, P, q, r))
                _or_into(visited_g, front_next)
                front, front_next = front_next, front
            front_ready = True
            have_queue = False
        g_new = sum(x[0] for x in totals)
        g_m = sum(x[1] for x in totals)
        g_ex = sum(x[2] for x in totals)
        k_max = max(x[3] for x in totals)
        kernel_total += kt
        t_end = time.perf_counter()
        if widx == 0:
            lt = t_end - t_lv
            rec.append({"level": level, "direction": d, "frontier": int(n_f), "edges": int(g_ex),
                        "discovered": int(g_new), "time": lt, "kernel": k_max, "overhead": max(0.0, lt - k_max),
                        "rounds": mesh.rounds - x_n0, "exchange": mesh.seconds - x_t0})
        n_f, m_f = g_new, g_m
        m_u -= g_m
        level += 1
    seconds = time.perf_counter() - t0
    return {"parents": {rk: st.parent[st.p.pad:] for rk, st in states.items()}, "seconds": seconds,
            "records": rec, "kernel_total": kernel_total, "levels": level}


def _base_of(rank, code, N, P, q, r):
    if code != 0:
        return 0
    first = rank * q + min(rank, r)
    return first & ~63


def _search_summary(out):
    return {k: v for k, v in out.items() if k != "parents"}


def _noop():
    return os.getpid()


# =====================================================================
# Client side
# =====================================================================
@dataclass
class DistributedGraph:
    """A partitioned CSR variant pinned on Dask workers (see :func:`load_distributed`)."""

    client: object
    dataset_path: Path
    variant: str
    partitioning: Partitioning
    nnz_total: int
    rank_worker: dict                       # rank -> worker address (stable)
    part_futures: dict                      # rank -> Future of the worker-side partition
    transport: str = "tcp"
    timeout: float = DEFAULT_TIMEOUT
    mesh_id: str = ""
    mesh_workers: list = field(default_factory=list)
    load_time: float = 0.0                  # wall seconds of the whole load (client view)
    part_load_times: dict = field(default_factory=dict)   # rank -> seconds on its worker (read, check, hub)
    mesh_time: float = 0.0
    shared_memory: bool | None = None       # None: shared frontier when possible; False: never
    shm: str = ""                           # why the shared frontier is off ('' = on)
    events: list = field(default_factory=list)
    attrs: dict = field(default_factory=dict)

    @property
    def P(self) -> int:
        return self.partitioning.P

    @property
    def n_vertices(self) -> int:
        return self.partitioning.n_vertices

    def ranks_of(self) -> list:
        """Ranks held by each mesh worker, in mesh order."""
        return [[rk for rk in range(self.P) if self.rank_worker[rk] == w] for w in self.mesh_workers]

    def close(self) -> None:
        """Close the mesh and release the partitions."""
        _close_mesh(self)
        self.part_futures.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


@dataclass
class DistributedResult:
    """One distributed search: parents stay on the workers, one future per partition."""

    root: int
    parents: dict                           # rank -> Future (int64 slice in local index order)
    partitioning: Partitioning
    rank_worker: dict
    seconds: float
    wall: float
    level_stats: list | None
    algorithm: str = "do"
    opts: dict = field(default_factory=dict)
    events: list = field(default_factory=list)
    attempts: int = 1

    def release(self) -> None:
        self.parents.clear()


def _variant_attrs(dataset_path: Path, variant: str) -> dict:
    import json

    f = dataset_path / "csr" / variant / "zarr.json"
    try:
        with open(f) as fh:
            attrs = json.load(fh).get("attributes", {}) or {}
    except (OSError, ValueError):
        attrs = {}
    if not attrs.get("complete"):
        raise DbfsError(f"CSR variant {variant} of {dataset_path.name} is missing or incomplete: build it with "
                        f"`dbfs build {dataset_path.name} --partitions P` (see `dbfs build --help`)")
    return attrs


def _alive(client) -> set:
    return set(client.scheduler_info(n_workers=-1)["workers"])


def _submit_loads(dg: DistributedGraph, ranks) -> None:
    """Load partitions ``ranks`` onto their workers, then give them the
    whole-graph data they need (hub neighbours by global degree: every
    partition's degrees are joined on a worker and copied worker to worker)."""
    client = dg.client
    pin = {"allow_other_workers": False, "pure": False}
    loaded = {}
    for rk in ranks:
        loaded[rk] = client.submit(_load_part, str(dg.dataset_path), dg.variant, rk, workers=[dg.rank_worker[rk]],
                                   key=f"dbfs-part-{uuid.uuid4().hex[:12]}-{rk}", **pin)
    allp = {**dg.part_futures, **loaded}
    degs = [client.submit(_local_degrees, allp[rk], workers=[dg.rank_worker[rk]], **pin) for rk in range(dg.P)]
    deg = client.submit(_global_degrees, dg.partitioning, *degs, pure=False)
    for rk in ranks:
        dg.part_futures[rk] = client.submit(_prepare_part, loaded[rk], deg, workers=[dg.rank_worker[rk]],
                                            key=f"dbfs-prepared-{uuid.uuid4().hex[:12]}-{rk}", **pin)
    infos = client.gather([client.submit(_part_info, dg.part_futures[rk], workers=[dg.rank_worker[rk]], **pin)
                           for rk in ranks])
    del degs, deg, loaded
    for rk, info in zip(ranks, infos):
        dg.part_load_times[rk] = info["load_time"] + info["prepare_time"]


def open_mesh(client, workers: list, transport: str = "tcp", timeout: float = DEFAULT_TIMEOUT) -> str:
    """Open an exchange mesh between ``workers`` (mesh index = list position); returns its id.

    Every worker opens its endpoint (``client.run``, addresses come back
    through the scheduler), then one pinned task per worker connects to its
    peers; all of them must run at once.
    """
    mesh_id = uuid.uuid4().hex
    if len(workers) > 1:
        widx_of = {w: i for i, w in enumerate(workers)}
        eps = client.run(_mesh_listen, mesh_id, widx_of, transport, workers=list(workers))
        addrs = [eps[w] for w in workers]
        futs = [client.submit(_mesh_connect, mesh_id, i, addrs, transport, timeout, workers=[w],
                              allow_other_workers=False, pure=False) for i, w in enumerate(workers)]
        client.gather(futs)
    return mesh_id


def close_mesh(client, mesh_id: str, workers: list) -> None:
    """Close a mesh on those of ``workers`` still alive (unblocks a running search)."""
    if len(workers) < 2:
        return
    alive = _alive(client)
    ws = [w for w in workers if w in alive]
    if ws:
        try:
            client.run(_mesh_close, mesh_id, workers=ws, on_error="return")
        except OSError:
            pass


def _open_mesh(dg: DistributedGraph) -> None:
    t0 = time.perf_counter()
    order = []
    for rk in range(dg.P):
        w = dg.rank_worker[rk]
        if w not in order:
            order.append(w)
    dg.mesh_workers = order
    dg.mesh_id = open_mesh(dg.client, order, dg.transport, dg.timeout)
    dg.shm = _open_shm(dg) if dg.shared_memory is not False else "switched off"
    dg.mesh_time = time.perf_counter() - t0


def _open_shm(dg: DistributedGraph) -> str:
    """Give the mesh a shared frontier when every worker is on one host and
    the partitions are blocks; returns why not ('' when on)."""
    ws = dg.mesh_workers
    if len(ws) < 2:
        return "one worker"
    if dg.partitioning.code != 0:
        return "cyclic partitions"
    if len({_host_of(w) for w in ws}) > 1:
        return "workers on several hosts"
    gwords = (dg.n_vertices + 63) >> 6
    path = _shm_path(dg.mesh_id, 2 * (gwords + dg.P) * 8)
    if path is None:
        return "/dev/shm missing or too small"
    c = dg.client
    why = ""
    try:
        r0 = c.run(_shm_open, dg.mesh_id, path, gwords, dg.P, True, workers=ws[:1])[ws[0]]
        if r0 is not True:
            return f"cannot create {path}: {r0}"
        res = c.run(_shm_open, dg.mesh_id, path, gwords, dg.P, False, workers=ws[1:], on_error="return")
        bad = {w: v for w, v in res.items() if v is not True}
        if bad:
            why = f"a worker cannot map {path}: {next(iter(bad.values()))}"
            c.run(_shm_drop, dg.mesh_id, workers=ws, on_error="return")
    finally:   # every mapping is made: the name can go (the memory lives while mapped)
        c.run(_unlink, path, workers=ws[:1], on_error="return")
    return why


def _unlink(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _close_mesh(dg: DistributedGraph) -> None:
    if dg.mesh_id:
        close_mesh(dg.client, dg.mesh_id, dg.mesh_workers)


def load_distributed(client, dataset_path, variant: str, workers=None, transport: str = "tcp",
                     timeout: float = DEFAULT_TIMEOUT, shared_memory: bool | None = None) -> DistributedGraph:
    """Pin every partition of CSR ``variant`` onto a worker and open the exchange mesh.

    ``workers``: addresses to use (default: all, sorted); rank r goes to
    ``workers[r % len(workers)]``. ``transport``: 'tcp' (default),
    'tcp-threads' or 'dask'. ``shared_memory``: None (default) gives the mesh
    a shared frontier bitmap in /dev/shm when every worker is on one host and
    the partitions are blocks (bottom-up levels then exchange only counts);
    False always sends frontier slices through the mesh. ``dg.shm`` says why
    it is off ('' when on). Records ``load_time`` (wall), per-rank
    ``part_load_times`` (zarr read + checksum on the worker) and ``mesh_time``.
    """
    if client is None:
        raise DbfsError("backend dask needs a Dask client: run with a cluster (drop --scheduler threads)")
    if transport not in TRANSPORTS:
        raise DbfsError(f"unknown transport {transport!r}: use one of {', '.join(TRANSPORTS)}")
    t0 = time.perf_counter()
    dataset_path = Path(dataset_path)
    attrs = _variant_attrs(dataset_path, variant)
    if attrs.get("options", {}).get("relabel", "none") != "none":
        raise DbfsError(f"backend dask does not run relabelled variants ({variant}): build and use a variant "
                        f"without --relabel")
    part = Partitioning(int(attrs["n_vertices"]), int(attrs["P"]), attrs["partitioning"])
    ws = sorted(workers) if workers else sorted(_alive(client))
    if not ws:
        raise DbfsError("the Dask cluster has no workers: start some (dbfs cluster ...) and retry")
    rank_worker = {rk: ws[rk % len(ws)] for rk in range(part.P)}
    dg = DistributedGraph(client=client, dataset_path=dataset_path, variant=variant, partitioning=part,
                          nnz_total=int(attrs["nnz_total"]), rank_worker=rank_worker, part_futures={},
                          transport=transport, timeout=float(timeout), attrs=attrs,
                          shared_memory=False if shared_memory is False else None)
    _submit_loads(dg, list(range(part.P)))
    _open_mesh(dg)
    dg.load_time = time.perf_counter() - t0
    return dg


def _recover(dg: DistributedGraph, error: str, attempt: int) -> dict:
    """Reload lost partitions on live workers and open a new mesh; returns the event record."""
    client = dg.client
    t0 = time.perf_counter()
    _close_mesh(dg)
    # wait (bounded) for the scheduler to notice the dead worker(s)
    deadline = time.monotonic() + 30.0
    while True:
        alive = _alive(client)
        lost_w = [w for w in set(dg.rank_worker.values()) if w not in alive]
        if lost_w or time.monotonic() > deadline:
            break
        # a worker may be dead but not yet removed: ping the mesh workers directly
        res = client.run(_noop, workers=list(set(dg.rank_worker.values())), on_error="return")
        dead = [w for w, v in res.items() if isinstance(v, BaseException)]
        if dead:
            lost_w = dead
            break
        time.sleep(0.2)
    alive = _alive(client) - set(lost_w)
    if not alive:
        # all our workers gone: wait for replacements (a nanny restarts them)
        while not alive and time.monotonic() < deadline + 30.0:
            time.sleep(0.5)
            alive = _alive(client) - set(lost_w)
        if not alive:
            raise DbfsError("every Dask worker died during the search and none came back: restart the cluster")
    lost_ranks = [rk for rk in range(dg.P)
                  if dg.rank_worker[rk] in lost_w or dg.part_futures[rk].status != "finished"]
    load = {w: 0 for w in alive}
    for rk in range(dg.P):
        if rk not in lost_ranks and dg.rank_worker[rk] in load:
            load[dg.rank_worker[rk]] += 1
    moved = {}
    for rk in lost_ranks:
        w = min(sorted(load), key=lambda x: load[x])
        load[w] += 1
        dg.rank_worker[rk] = w
        moved[rk] = w
        dg.part_futures.pop(rk, None)
    _submit_loads(dg, lost_ranks)
    _open_mesh(dg)
    ev = {"event": "worker-lost", "attempt": attempt, "error": error[:300], "workers_lost": sorted(lost_w),
          "ranks_reloaded": sorted(lost_ranks), "moved_to": moved,
          "reload_time": time.perf_counter() - t0}
    dg.events.append(ev)
    return ev


def _is_peer_loss(exc) -> bool:
    return isinstance(exc, (_PeerLost, ConnectionError)) or type(exc).__name__ in ("KilledWorker",
                                                                                    "CommClosedError")


def _run_once(dg: DistributedGraph, root, algorithm, pol, stats, kill):
    from distributed import wait

    client = dg.client
    ranks_of = dg.ranks_of()
    t0 = time.perf_counter()
    futs = []
    for i, w in enumerate(dg.mesh_workers):
        parts = [dg.part_futures[rk] for rk in ranks_of[i]]
        futs.append(client.submit(_bsp_search, dg.mesh_id, i, ranks_of, parts, int(root), algorithm,
                                  pol, dg.nnz_total, kill,
                                  workers=[w], allow_other_workers=False, pure=False))
    watched = set(dg.mesh_workers)
    pending = list(futs)
    while pending:
        try:
            pending = list(wait(pending, timeout=1.0, return_when="FIRST_COMPLETED").not_done)
        except TimeoutError:
            gone = watched - _alive(client)
            if gone:
                for f in futs:
                    f.cancel()
                raise _PeerLost(f"worker(s) {sorted(gone)} left the cluster during the search") from None
            continue
        if any(f.status == "error" for f in futs):
            # let the others finish (a failing worker closes its mesh end, so they stop at once)
            try:
                wait(futs, timeout=2.0)
            except TimeoutError:
                pass
            excs = [f.exception() for f in futs if f.status == "error"]
            for f in futs:
                f.cancel()
            real = [e for e in excs if not _is_peer_loss(e)]
            if real:
                # a genuine error (not a lost worker): no retry; give the graph a fresh mesh, re-raise
                _close_mesh(dg)
                _open_mesh(dg)
                raise real[0]
            raise _PeerLost("; ".join(f"{type(e).__name__}: {e}" for e in excs[:3]))
    wall = time.perf_counter() - t0
    summaries = client.gather([client.submit(_search_summary, f, workers=[w], allow_other_workers=False,
                                             pure=False) for f, w in zip(futs, dg.mesh_workers)])
    parents = {}
    for i, (f, w) in enumerate(zip(futs, dg.mesh_workers)):
        for rk in ranks_of[i]:
            parents[rk] = client.submit(_pick_parent, f, rk, workers=[w], allow_other_workers=False,
                                        pure=False)
    seconds = max(s["seconds"] for s in summaries)
    records = summaries[0]["records"] if stats else None
    return parents, seconds, wall, records


def search(dgraph: DistributedGraph, root: int, algorithm: str = "do", policy: str = "beamer",
           alpha: float | None = None, beta: float | None = None, unexplored: str = "gap", tail: str = "cost",
           stats: bool = True,
           retries: int = 2, _kill=None):
    """One distributed search from ORIGINAL vertex ``root``.

    Returns ``(DistributedResult, seconds, level_stats)``; ``algorithm`` is
    'do' (direction-optimizing, policy as in :mod:`dbfs.bfs.policy`), 'td' or
    'bu'. A worker lost during the search triggers reload + rerun (at most
    ``retries`` times), recorded in ``result.events``; any other error is
    raised as is. ``_kill=(rank, level)`` is a test hook: the worker holding
    ``rank`` exits at ``level`` of the first attempt (``(rank, level,
    "raise")``: raises there instead).
    """
    if algorithm not in ALGORITHMS:
        raise DbfsError(f"unknown algorithm {algorithm!r} for backend dask: use one of {', '.join(ALGORITHMS)}")
    from dbfs.bfs import check_root_id

    n = dgraph.n_vertices
    r = check_root_id(root, n)
    if len(dgraph.part_futures) != dgraph.P:
        raise DbfsError("this DistributedGraph was closed: load it again with load_distributed(...)")
    pol = {"policy": policy, "alpha": alpha, "beta": beta, "unexplored": unexplored, "tail": tail}
    policy_from(**pol)  # check the parameters on the client
    events = []
    attempt = 0
    while True:
        try:
            parents, seconds, wall, rec = _run_once(dgraph, r, algorithm, pol, stats, _kill if attempt == 0 else None)
            break
        except _PeerLost as exc:
            if attempt >= retries:
                raise DbfsError(f"distributed search from root {r} failed {attempt + 1} time(s), last: {exc}; "
                                f"check the workers' logs") from None
            attempt += 1
            events.append(_recover(dgraph, str(exc), attempt))
    res = DistributedResult(root=r, parents=parents, partitioning=dgraph.partitioning,
                            rank_worker=dict(dgraph.rank_worker), seconds=seconds, wall=wall, level_stats=rec,
                            algorithm=algorithm, opts=dict(pol), events=events, attempts=attempt + 1)
    return res, seconds, rec


def gather_parent(result: DistributedResult, client=None) -> np.ndarray:
    """The whole parent array (int64, global ids) on the client: small graphs and tests only."""
    part = result.partitioning
    futs = [result.parents[rk] for rk in range(part.P)]
    if client is None:
        client = futs[0].client
    slices = client.gather(futs)
    parent = np.empty(part.n_vertices, np.int64)
    for rk, s in enumerate(slices):
        rg = part.vertex_range(rk)
        parent[rg.start:rg.stop:rg.step] = s
    return parent


def validate_distributed(client, dataset_path, dgraph: DistributedGraph, result: DistributedResult, root,
                         chunk_edges: int | None = None):
    """Graph500 validation of ``result`` as Dask tasks (:mod:`dbfs.validate_dask`);
    returns a :class:`dbfs.validate.ValidationResult` (levels=None)."""
    from dbfs.validate_dask import validate_partitioned

    return validate_partitioned(client, Path(dataset_path), [result.parents[rk] for rk in range(dgraph.P)],
                                result.partitioning, int(root), workers=[result.rank_worker[rk]
                                                                         for rk in range(dgraph.P)],
                                chunk_edges=chunk_edges)

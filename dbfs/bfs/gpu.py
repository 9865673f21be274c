"""GPU BFS backend (CuPy + CUDA C): one search runs on the device, the host
only steers the levels.

Contract (what :func:`dbfs.bfs.bfs` calls, ``backend="gpu"``):
``fn(graph, root, stats=False, **opts) -> (parent, level_stats)`` with
``root`` an INTERNAL id and ``parent`` an int64 NumPy array over internal ids
(``parent[root] == root``, -1 unreached). The parent array is computed on the
device in the vertex-id width (int32 while N <= 2**31, :func:`dbfs.graph.id_dtype`: half the fill and the
stores of int64), and widened and copied to the host AFTER the search; between levels the host
reads only one row of four counters (vertices discovered, their degree sum,
entries examined, scratch), i.e. a few scalars per level.

Algorithms (``ALGORITHMS``, the kernel table :mod:`dbfs.bfs` reads for backend ``"gpu"``):

- ``harish``: Harish & Narayanan (HiPC 2007), the quadratic vertex-parallel
  wavefront: every level launches one thread per vertex and the vertices of
  the current level scan their whole lists. Baseline only.
- ``td``: linear-work top-down. Frontier queue; the neighbour gathering is
  load-balanced over the frontier's degree prefix sum (``cupy.cumsum``):
  fixed chunks of consecutive frontier edges per block, each thread finds
  its edge's owner by binary search, so a hub's list is spread over many
  blocks (the "LB" strategy of Gunrock / Merrill et al.'s scan-based
  gather); frontiers of at most 2048 vertices do the scan in shared memory
  inside the same launch. Claims use ``atomicOr`` on a visited bitmap; the
  next queue is compacted with one warp-aggregated atomic per warp.
- ``bu``: bottom-up over a frontier bitmap (Beamer et al., SC'12): one warp
  per 32-vertex bitmap word, each lane first tests its vertex's hub (its
  highest-degree neighbour, a device table built with the device graph by
  ``hub_of``, as the CPU backend does), then probes its first ``BU_SERIAL``
  neighbours four at a time (one sector, overlapped latencies), the warp
  then finishes long lists cooperatively with early exit (ballot). No
  atomics: a warp owns its words.
- ``do``: direction-optimizing, TD/BU/TD chosen per level by the CPU
  backend's policy (:mod:`dbfs.bfs.policy`, same parameters: ``policy``,
  ``alpha``, ``beta``, ``unexplored``, ``tail``; alpha defaults to
  ``GPU_BEAMER_ALPHA``), fed with the same counts (frontier
  vertices, frontier edges, unexplored edges).

Every algorithm takes ``device_memory_limit`` (bytes, default None) and
``split_order`` (``"prefix"``, default, or ``"suffix"``): the row offsets
and as much of the adjacency as fits stay on the device (in the limit, or
by default in 90% of the free device memory minus the search's working
set), whole rows from one end of the row order (:mod:`dbfs.split`); the
rest of the adjacency stays in mapped pinned host memory that the same
kernels read zero-copy over the bus (Graph500 "big data" mode; same
results, slower). The kernels read entries through ``ADJ(j)`` (bfs.cu), so
a CSR wholly on the device, wholly in host memory or split between them
runs one code path. The per-vertex arrays (``indptr``, the hub table,
parents, bitmaps, queues: about 30 B per vertex) are always on the device,
so a bottom-up level whose hub test succeeds never crosses the bus.

Device graph cache: ``graph.meta["gpu"]`` holds a :class:`DeviceGraph` (the
CSR where the kernels read it and a bitmap of zero-degree vertices, built
once per graph, like the CSR itself), so repeated searches upload nothing.
A CSR built by :func:`dbfs.kernel1.gpu.build_csr_gpu` leaves its device
arrays in ``graph.meta["gpu_csr"]``, one built in passes straight into a
device/host split (:mod:`dbfs.kernel1.placed_gpu`) its pieces in
``graph.meta["gpu_pieces"]``; both are used without a copy.
Per-search state (parent fill, visited/frontier bitmaps, queues) is set up
inside the search.

Timing: :func:`search_device` (device parent, seconds, level stats) and
:func:`search_timed` (host parent in original ids, seconds, level stats)
synchronise the device before reading the clock; the device-to-host copy of
the parent array happens after the clock stops (Graph500: the timer stops
when the parent array is written).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import cupy as cp
import numpy as np

from dbfs.bfs.timing import collector_paused
from dbfs.bfs.policy import BU, GPU_BEAMER_ALPHA, TD, policy_from
from dbfs.pinned import mapped_host_empty
from dbfs.split import plan_split
from dbfs.errors import DbfsError
from dbfs.graph import CSRGraph, id_dtype

__all__ = ["DeviceGraph", "device_graph", "device_in_use", "search_device", "search_timed", "original_parent",
           "own_memory", "count_nedge", "expand", "small_frontier", "td_small_limit", "ALGORITHMS"]

KERNEL_DIR = Path(__file__).resolve().parent / "kernels"

_BLOCK = 256          # threads per block, every kernel
_TD_ITEMS = 8         # edges per thread per td_expand chunk
_BU_SERIAL = 8        # neighbours a lane scans alone in bu_step
_TD_SMALL = 2048      # frontiers up to this size take the one-launch top-down kernel
_TD_SMALL_MAX = 8192  # ... and up to this size (the device's shared memory permitting, td_small_limit) where
_TD_SMALL_READS = 1 << 23   # its blocks' reads of the frontier (blocks x frontier) stay within this
_TD_SMALL_BYTES = 16  # td_expand_small's dynamic shared memory a frontier vertex (its degree scan, row start)
_COUNTER_ROWS = 4096  # per-level counter rows zeroed at once
#: C type of an id or adjacency-entry dtype (bfs.cu's VID_T and ENT_T)
_VID = {np.dtype(np.int32): "int", np.dtype(np.int64): "long long", np.dtype(np.uint32): "unsigned int"}


def kernel_types(n_vertices: int, entries) -> tuple:
    """(VID_T, ENT_T) of bfs.cu for a graph of ``n_vertices`` whose adjacency entries have dtype ``entries``:
    the id width (:func:`dbfs.graph.id_dtype`) and the entries' own ('' where they are the same)."""
    vid = _VID[np.dtype(id_dtype(n_vertices))]
    idt = np.dtype(entries)
    if idt not in _VID:
        raise DbfsError(f"CSR indices have dtype {idt}: the GPU kernels take int32, uint32 or int64 entries "
                        f"(Kernel 1 output)")
    ent = _VID[idt]
    return vid, "" if ent == vid else ent



# ------------------------------------------------------------------ kernels
@lru_cache(maxsize=None)
def _module(vid: str, ent: str = ""):
    code = "".join((KERNEL_DIR / f).read_text() for f in ("bfs.cu", "partitioned.cu", "dense.cu"))
    return cp.RawModule(code=code, options=_options(vid, ent))


def _options(vid: str, ent: str = "") -> tuple:
    """NVRTC options of bfs.cu for vertex-id type ``vid`` and adjacency-entry type ``ent`` (C type names;
    '': ``vid``)."""
    return (f"-DVID_T={vid}", f"-DENT_T={ent or vid}", f"-DTD_BLOCK={_BLOCK}", f"-DTD_ITEMS={_TD_ITEMS}",
            f"-DBU_SERIAL={_BU_SERIAL}")


_KERNEL_NAMES = ("base_visited", "start_search", "queue_to_bitmap", "bitmap_to_queue", "frontier_degrees",
                 "td_expand", "td_expand_small", "td_expand_small_at", "absorb", "absorb_n", "bucket_count", "bucket_scatter", "bu_step",
                 "harish_step", "harish_start", "count_nedge", "hub_of", "bucket_offsets", "bucket_regions",
                 "visit_root_part", "absorb_pairs", "pack_claims", "claimed_open", "visit_bits")


@lru_cache(maxsize=None)
def _kernels(vid: str, ent: str = "") -> dict:
    """Compiled kernels for one vertex id type and adjacency-entry type ('': the id type; compiled on first
    use: call it before a timed region)."""
    mod = _module(vid, ent)
    k = {name: mod.get_function(name) for name in _KERNEL_NAMES}
    for name in ("td_expand_small", "td_expand_small_at"):      # their frontier's scan in dynamic shared memory
        k[name].max_dynamic_shared_size_bytes = _TD_SMALL_BYTES * td_small_limit()
    return k


@lru_cache(maxsize=None)
def td_small_limit() -> int:
    """The largest frontier ``td_expand_small`` takes on this device: :data:`_TD_SMALL_MAX`, or fewer where the
    device's opt-in shared memory a block (less 4 KiB for the kernel's own) holds fewer."""
    optin = int(cp.cuda.Device().attributes.get("MaxSharedMemoryPerBlockOptin", 48 << 10))
    return max(_TD_SMALL, min(_TD_SMALL_MAX, (optin - (4 << 10)) // _TD_SMALL_BYTES))


@lru_cache(maxsize=None)
def _sm_count() -> int:
    return int(cp.cuda.Device().attributes["MultiProcessorCount"])


def _grid(items: int, per_block: int = _BLOCK) -> tuple:
    """Blocks for a grid-stride loop over ``items``: enough to fill the GPU, no more."""
    blocks = max(1, -(-int(items) // per_block))
    return (min(blocks, 32 * _sm_count()),)


def _i64(x) -> np.int64:
    return np.int64(x)


# ------------------------------------------------------------- device graph
_NO_SPLIT = 1 << 62     # ix_split of a CSR wholly in one piece


@dataclass
class DeviceGraph:
    """The CSR where the kernels read it, plus the zero-degree bitmap and the
    hub table (each vertex's highest-degree neighbour, always in device memory).

    ``indices`` holds adjacency entries ``[0, split)`` and ``indices_b``
    entries ``[split, nnz)`` (None: ``indices`` holds them all). ``mode`` is
    ``"device"``, ``"host"`` (mapped pinned host memory) or ``"split"``
    (:mod:`dbfs.split`; ``placement`` its report); ``indptr_host`` is a
    host copy of ``indptr`` (root degrees for the direction policy);
    ``keep`` holds the owners of host allocations.
    """

    n: int
    nnz: int
    indptr: object
    indices: object
    vid: str
    base_visited: object
    mode: str
    indptr_host: np.ndarray | None = None
    keep: list = field(default_factory=list)
    hub: object = None      # hub[v]: v's highest-degree neighbour (device, vid type), for bu_step
    indices_b: object = None
    split: int = _NO_SPLIT
    placement: dict = field(default_factory=dict)
    key: tuple = ()         # (device_memory_limit, split_order) it was placed for
    ent: str = ""           # the adjacency entries' C type where not ``vid``'s (:func:`kernel_types`)

    @property
    def kernels(self) -> dict:
        """bfs.cu's kernels for this graph's id and entry types."""
        return _kernels(self.vid, self.ent)

    @property
    def nwords(self) -> int:
        return (self.n + 31) >> 5

    @property
    def adj(self) -> tuple:
        """The kernels' ``ADJ_PARAMS`` (bfs.cu): both pieces and the entry where they meet."""
        b = self.indices if self.indices_b is None else self.indices_b
        return self.indices, b, _i64(self.split)

    def degree(self, v: int) -> int:
        if self.indptr_host is not None:
            return int(self.indptr_host[v + 1] - self.indptr_host[v])
        pair = self.indptr[v:v + 2].get()
        return int(pair[1] - pair[0])


def _is_device(a) -> bool:
    return isinstance(a, cp.ndarray)


def whole(indices) -> tuple:
    """``ADJ_PARAMS`` of an adjacency array wholly in one piece."""
    return indices, indices, _i64(_NO_SPLIT)


def _mapped_host_array(arr: np.ndarray, keep: list):
    """A CuPy array over mapped pinned host memory holding a copy of ``arr``."""
    host, dev = mapped_host_empty(arr.shape, arr.dtype, keep)
    host[...] = arr
    return dev


def _free_device_bytes() -> int:
    free, _total = cp.cuda.runtime.memGetInfo()
    return int(free) + int(cp.get_default_memory_pool().free_bytes())


def _working_set(n: int, vid_bytes: int) -> int:
    """Bytes on the device besides the CSR (an upper bound): parent, two queues, the hub table,
    degree scan buffers, bitmaps."""
    return 8 * n + 4 * vid_bytes * n + 16 * n + 4 * 4 * ((n + 31) >> 5) + (1 << 24)


def _plan(graph: CSRGraph, ip_host: np.ndarray, device_memory_limit, order: str):
    """The :class:`~dbfs.split.Split` of ``graph``'s adjacency for this device (module docstring)."""
    ix = graph.indices
    item = ix.dtype.itemsize
    if device_memory_limit is None and (_is_device(ix) or "gpu_csr" in graph.meta):
        budget = int(graph.nnz) * item                       # already on the device
    elif device_memory_limit is not None:
        budget = int(device_memory_limit) - int(ip_host.nbytes)
    else:
        budget = int(0.9 * _free_device_bytes()) - _working_set(graph.n_vertices, item) - int(ip_host.nbytes)
    return plan_split(ip_host, budget // item, order, item)


def _pieces(graph: CSRGraph, sp, keep: list) -> tuple:
    """(indices, indices_b, split) on the device and in mapped host memory per the split ``sp``."""
    pair = graph.meta.get("gpu_csr")
    if sp.mode == "device":
        return (pair[1] if pair is not None else cp.asarray(graph.indices)), None, _NO_SPLIT
    ix = np.ascontiguousarray(cp.asnumpy(graph.indices))
    if sp.mode == "host":
        return _mapped_host_array(ix, keep), None, _NO_SPLIT
    lo, hi = ix[:sp.entry], ix[sp.entry:]
    if sp.order == "prefix":
        return cp.asarray(lo), _mapped_host_array(hi, keep), sp.entry
    return _mapped_host_array(lo, keep), cp.asarray(hi), sp.entry


def device_graph(graph: CSRGraph, device_memory_limit=None, split_order: str = "prefix") -> DeviceGraph:
    """The cached :class:`DeviceGraph` of ``graph`` (built on first use).

    With ``device_memory_limit=None`` a cached one is reused whatever its
    placement (free memory shrinks once the graph is on the device); a CSR
    placed by Kernel 1 (``meta["gpu_pieces"]``) is used as placed."""
    cached = graph.meta.get("gpu")
    placed = graph.meta.get("gpu_pieces")
    key = (device_memory_limit, split_order)
    if isinstance(cached, DeviceGraph) and (device_memory_limit is None or placed is not None or cached.key == key):
        return cached
    n = int(graph.n_vertices)
    vid, ent = kernel_types(n, graph.indices.dtype)
    keep: list = []
    if placed is not None:
        indptr, (ix_a, ix_b, split), sp, keep = placed["indptr"], placed["adj"], placed["split"], placed["keep"]
        ip_host = graph.indptr
    else:
        ip_host = np.ascontiguousarray(cp.asnumpy(graph.indptr), dtype=np.int64)
        sp = _plan(graph, ip_host, device_memory_limit, split_order)
        if isinstance(cached, DeviceGraph) and cached.placement == sp.report():
            cached.key = key
            return cached
        graph.meta.pop("gpu", None)     # another placement was cached: let it go first
        pair = graph.meta.get("gpu_csr")
        indptr = pair[0] if pair is not None else cp.asarray(ip_host)
        ix_a, ix_b, split = _pieces(graph, sp, keep)
    k = _kernels(vid, ent)
    nwords = (n + 31) >> 5
    base = cp.empty(max(nwords, 1), cp.uint32)
    k["base_visited"](_grid(nwords), (_BLOCK,), (indptr, _i64(n), _i64(nwords), base))
    hub = cp.empty(max(n, 1), cp.int32 if vid == "int" else cp.int64)
    dg = DeviceGraph(n=n, nnz=int(graph.nnz), indptr=indptr, indices=ix_a, vid=vid, base_visited=base,
                     mode=sp.mode, indptr_host=ip_host, keep=keep, hub=hub, indices_b=ix_b, split=split,
                     placement=sp.report(), key=key, ent=ent)
    k["hub_of"](_grid(32 * n), (_BLOCK,), (indptr, *dg.adj, _i64(n), hub))
    graph.meta["gpu"] = dg
    return dg


# ------------------------------------------------------------ search state
class _State:
    """Per-search device buffers (from CuPy's pool: no cudaMalloc after the first search)."""

    def __init__(self, dg: DeviceGraph):
        n, nwords = dg.n, max(dg.nwords, 1)
        qdt = cp.int32 if dg.vid == "int" else cp.int64
        self.parent = cp.empty(n, qdt)   # vertex-id width: half the fill and stores of int64
        self.parent.fill(-1)
        self.visited = dg.base_visited.copy()
        self.front = cp.zeros(nwords, cp.uint32)
        self.next = cp.empty(nwords, cp.uint32)
        self.queue = cp.empty(max(n, 1), qdt)
        self.queue2 = cp.empty(max(n, 1), qdt)
        self.counters = cp.zeros((_COUNTER_ROWS, 4), cp.uint64)

    def row(self, level: int):
        r = level % _COUNTER_ROWS
        if r == 0 and level > 0:
            self.counters.fill(0)
        return self.counters[r]


class _Fixed:
    """A policy that always answers one direction (td, bu)."""

    def __init__(self, direction):
        self.direction = direction

    def start(self, n):
        pass

    def next(self, n_f, m_f, m_u):
        return self.direction


def _check_levels(level, n):
    """A BFS has at most n levels: more means the counters are wrong (a bug), not a deep graph."""
    if level > n + 1:
        raise DbfsError(f"GPU BFS ran {level} levels on a graph of {n} vertices: internal error, "
                        f"please report it with the graph and root")


def _record(level, direction, n_f, edges, discovered, t0):
    return {"level": level, "direction": direction, "frontier": int(n_f), "edges": int(edges),
            "discovered": int(discovered), "time": time.perf_counter() - t0}


def small_frontier(n_f: int, m_f: int) -> bool:
    """Whether a top-down frontier of ``n_f`` vertices and ``m_f`` edges takes ``td_expand_small``: up to
    :data:`_TD_SMALL` vertices always; up to :func:`td_small_limit` where every block's own scan of the frontier
    (blocks x ``n_f`` reads) stays within :data:`_TD_SMALL_READS`. Past that, the degree kernel and one global
    scan cost less than the blocks' repeated scans."""
    if n_f <= _TD_SMALL:
        return True
    return n_f <= td_small_limit() and _grid(m_f, _BLOCK * _TD_ITEMS)[0] * int(n_f) <= _TD_SMALL_READS


def expand(k, indptr, adj, queue, n_f, m_f, visited, parent, next_q, row, gadd=0, count_deg=1):
    """One top-down expansion of ``queue[:n_f]`` (``m_f`` frontier edges) into ``next_q``
    (``td_expand``'s contract in bfs.cu: ``gadd``, ``count_deg``).

    Small frontiers (:func:`small_frontier`): one launch that scans the degrees in shared memory; large ones:
    degrees, ``cupy.cumsum``, then the load-balanced expansion."""
    if 0 < m_f and small_frontier(n_f, m_f):
        k["td_expand_small"](_grid(m_f, _BLOCK * _TD_ITEMS), (_BLOCK,),
                             (queue, _i64(n_f), _i64(m_f), indptr, *adj, visited, parent, next_q, row,
                              _i64(gadd), np.int32(count_deg)), shared_mem=_TD_SMALL_BYTES * int(n_f))
    elif m_f > 0:
        deg = cp.empty(n_f, cp.int64)
        k["frontier_degrees"](_grid(n_f), (_BLOCK,), (queue, _i64(n_f), indptr, deg))
        offs = cp.cumsum(deg)
        k["td_expand"](_grid(m_f, _BLOCK * _TD_ITEMS), (_BLOCK,),
                       (queue, _i64(n_f), offs, _i64(m_f), indptr, *adj, visited, parent, next_q, row,
                        _i64(gadd), np.int32(count_deg)))


def _td_step(k, dg, st, n_f, m_f, row):
    """Top-down step from st.queue[:n_f] (m_f frontier edges) into st.queue2 (then swapped)."""
    expand(k, dg.indptr, dg.adj, st.queue, n_f, m_f, st.visited, st.parent, st.queue2, row)
    st.queue, st.queue2 = st.queue2, st.queue


def _bu_step(k, dg, st, row):
    """Bottom-up step from the bitmap st.front into st.next (then swapped)."""
    k["bu_step"]((min(-(-dg.nwords * 32 // _BLOCK), 32 * _sm_count()),), (_BLOCK,),
                 (dg.indptr, *dg.adj, dg.hub, st.front, st.visited, st.next, st.parent, _i64(dg.nwords), row))
    st.front, st.next = st.next, st.front


def _hybrid(dg: DeviceGraph, root: int, stats: bool, pol, st=None):
    """Level loop shared by td, bu and do: the frontier lives in one
    representation at a time (queue for top-down, bitmap for bottom-up);
    ``st``: the search's buffers made (and filled) already, else made here."""
    k = dg.kernels
    st = _State(dg) if st is None else st
    k["start_search"]((1,), (1,), (st.parent, st.visited, st.front, st.queue, _i64(root)))
    have_queue = True
    n_f = 1
    m_f = dg.degree(root)
    m_u = dg.nnz - m_f
    pol.start(dg.n)
    rec = []
    level = 0
    while n_f:
        t0 = time.perf_counter()
        d = pol.next(n_f, m_f, m_u)
        row = st.row(level)
        if d == TD:
            if not have_queue:
                k["bitmap_to_queue"](_grid(dg.nwords), (_BLOCK,), (st.front, _i64(dg.nwords), st.queue, row[3:]))
                have_queue = True
            _td_step(k, dg, st, n_f, m_f, row)
        else:
            if have_queue:
                st.front.fill(0)
                k["queue_to_bitmap"](_grid(n_f), (_BLOCK,), (st.queue, _i64(n_f), st.front))
                have_queue = False
            _bu_step(k, dg, st, row)
        h = row.get()
        new_n, new_m = int(h[0]), int(h[1])
        examined = m_f if d == TD else int(h[2])
        if stats:
            rec.append(_record(level, d, n_f, examined, new_n, t0))
        n_f, m_f = new_n, new_m
        m_u -= new_m
        level += 1
        _check_levels(level, dg.n)
    return st.parent, rec


def _harish(dg: DeviceGraph, root: int, stats: bool):
    k = dg.kernels
    parent = cp.empty(dg.n, cp.int32 if dg.vid == "int" else cp.int64)
    parent.fill(-1)
    lev = cp.empty(dg.n, cp.int32)
    lev.fill(-1)
    counters = cp.zeros((_COUNTER_ROWS, 4), cp.uint64)
    k["harish_start"]((1,), (1,), (lev, parent, _i64(root)))
    rec = []
    n_f, level = 1, 0
    while n_f:
        t0 = time.perf_counter()
        r = level % _COUNTER_ROWS
        if r == 0 and level > 0:
            counters.fill(0)
        row = counters[r]
        k["harish_step"](_grid(dg.n), (_BLOCK,), (dg.indptr, *dg.adj, lev, parent, _i64(dg.n), _i64(level), row))
        h = row.get()
        if stats:
            rec.append(_record(level, TD, n_f, int(h[2]), int(h[0]), t0))
        n_f = int(h[0])
        level += 1
        _check_levels(level, dg.n)
    return parent, rec


def _search(graph: CSRGraph, root: int, algorithm: str, stats: bool = False, device_memory_limit=None,
            split_order: str = "prefix", policy: str = "beamer", alpha=None, beta=None, unexplored: str = "gap",
            tail: str = "cost", state=None):
    """Run one search from INTERNAL ``root``; returns (device parent, level stats); ``state``: a
    :class:`_State` made before the clock (td, bu, do)."""
    dg = device_graph(graph, device_memory_limit, split_order)
    if algorithm == "harish":
        return _harish(dg, root, stats)
    if algorithm == "td":
        return _hybrid(dg, root, stats, _Fixed(TD), state)
    if algorithm == "bu":
        return _hybrid(dg, root, stats, _Fixed(BU), state)
    if algorithm == "do":
        if policy == "beamer" and alpha is None:
            alpha = GPU_BEAMER_ALPHA
        return _hybrid(dg, root, stats, policy_from(policy, alpha, beta, unexplored, tail), state)
    raise DbfsError(f"unknown GPU BFS algorithm {algorithm!r}: use one of {', '.join(ALGORITHMS)}")


# ------------------------------------------------------ registered backends
def harish(graph, root, stats=False, device_memory_limit=None, split_order="prefix"):
    """Quadratic vertex-parallel wavefront (Harish & Narayanan 2007). The
    parent array is copied to the host after the search."""
    parent, rec = _search(graph, root, "harish", stats, device_memory_limit, split_order)
    return host_parent(parent), rec


def top_down(graph, root, stats=False, device_memory_limit=None, split_order="prefix"):
    """Load-balanced top-down BFS (frontier queue, visited bitmap). The
    parent array is copied to the host after the search."""
    parent, rec = _search(graph, root, "td", stats, device_memory_limit, split_order)
    return host_parent(parent), rec


def bottom_up(graph, root, stats=False, device_memory_limit=None, split_order="prefix"):
    """Bottom-up BFS over a frontier bitmap (warp-cooperative early exit).
    The parent array is copied to the host after the search."""
    parent, rec = _search(graph, root, "bu", stats, device_memory_limit, split_order)
    return host_parent(parent), rec


def direction_optimizing(graph, root, stats=False, device_memory_limit=None, split_order="prefix",
                         policy="beamer", alpha=None, beta=None, unexplored="gap", tail="cost"):
    """Direction-optimizing BFS with :mod:`dbfs.bfs.policy`'s rules. The
    parent array is copied to the host after the search. Beamer's alpha
    defaults to ``GPU_BEAMER_ALPHA`` here (see there)."""
    parent, rec = _search(graph, root, "do", stats, device_memory_limit, split_order, policy, alpha, beta,
                          unexplored, tail)
    return host_parent(parent), rec


#: the kernel table :mod:`dbfs.bfs` reads (name -> fn(graph, root_internal, stats=False, **opts))
ALGORITHMS = {"harish": harish, "td": top_down, "bu": bottom_up, "do": direction_optimizing}


# ------------------------------------------------------------------ timing
def _internal_root(graph: CSRGraph, root) -> int:
    n = int(graph.n_vertices)
    r = int(root)
    if not 0 <= r < n:
        raise DbfsError(f"root {r} is out of range for a graph of {n} vertices: pass 0 <= root < {n}")
    return graph.to_internal(r)


def search_device(graph: CSRGraph, root: int, algorithm: str = "do", stats: bool = False, **opts):
    """One timed search from ORIGINAL id ``root``.

    Returns ``(parent, seconds, level_stats)`` with ``parent`` the CuPy
    array over INTERNAL ids (vertex-id width: int32 while N <= 2**31, :func:`dbfs.graph.id_dtype`), left on
    the device (:func:`host_parent` widens and copies it). The device graph is
    built and the kernels compiled before the clock starts, and the search's
    buffers made (the parents' -1 fill, the visited bitmap's copy: outside
    the timer, as GRAPH500.md allows and as the dask workers do); the device is
    synchronised before each clock read.
    """
    if algorithm not in ALGORITHMS:
        raise DbfsError(f"unknown GPU BFS algorithm {algorithm!r}: use one of {', '.join(ALGORITHMS)}")
    r = _internal_root(graph, root)
    dg = device_graph(graph, opts.get("device_memory_limit"), opts.get("split_order", "prefix"))
    dg.kernels                  # compiled (or looked up) before the clock
    dev = cp.cuda.Device()
    with collector_paused():
        state = None if algorithm == "harish" else _State(dg)
        dev.synchronize()
        t0 = time.perf_counter()
        parent, rec = _search(graph, r, algorithm, stats, state=state, **opts)
        dev.synchronize()
        seconds = time.perf_counter() - t0
    return parent, seconds, rec


def device_in_use() -> int:
    """Device bytes in use now, by every allocator (CuPy's pool keeps freed blocks: a high-water mark)."""
    free, total = cp.cuda.runtime.memGetInfo()
    return int(total - free)


def host_parent(parent, out=None) -> np.ndarray:
    """A device parent array (vertex-id width) widened to int64 on the device
    and copied to the host (into ``out``, e.g. a pinned buffer, when given).
    Called after the clock stopped."""
    wide = parent.astype(cp.int64, copy=False)
    return wide.get(out=out) if out is not None else wide.get()


def own_memory(shape, dtype):
    """An uninitialised device array in its own cudaMalloc, not CuPy's pool: an array held across searches
    (parents waiting for their validation) never pins a pool chunk whose free rest could then not go back to
    the driver. The pool's cached blocks go back first when the device is short."""
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    try:
        mem = cp.cuda.Memory(n)
    except cp.cuda.runtime.CUDARuntimeError:
        cp.get_default_memory_pool().free_all_blocks()
        mem = cp.cuda.Memory(n)
    return cp.ndarray(shape, dtype, cp.cuda.MemoryPointer(mem, 0))


_REMAP = None


def original_parent(graph: CSRGraph, parent, out=None):
    """A device parent array over INTERNAL ids as one over ORIGINAL ids, on the device:
    ``out[perm[v]] = perm[parent[v]]`` (-1 stays -1); ``parent`` itself when not relabelled (copied
    into ``out`` when given). The device ``perm`` is Kernel 1's (a placed build) or a copy of
    ``graph.perm`` kept in ``graph.meta``."""
    global _REMAP
    if graph.perm is None:
        if out is None:
            return parent
        out[...] = parent
        return out
    pd = (graph.meta.get("gpu_pieces") or {}).get("perm")
    if pd is None or pd.dtype != parent.dtype:
        pd = graph.meta.get("gpu_perm")
        if pd is None or pd.dtype != parent.dtype:
            pd = graph.meta["gpu_perm"] = cp.asarray(graph.perm.astype(parent.dtype))
    if _REMAP is None:
        _REMAP = cp.ElementwiseKernel("T p, raw T perm", "raw T out", "out[perm[i]] = p >= 0 ? perm[p] : (T)-1",
                                      "dbfs_original_parent")
    out = cp.empty_like(parent) if out is None else out
    _REMAP(parent, pd, out)
    return out


def search_timed(graph: CSRGraph, root: int, algorithm: str = "do", stats: bool = False, **opts):
    """:func:`search_device`, then the parent copied to the host (after the
    clock stopped) and mapped to ORIGINAL ids: ``(parent, seconds, level_stats)``."""
    parent, seconds, rec = search_device(graph, root, algorithm, stats, **opts)
    return graph.to_original(host_parent(parent)), seconds, rec


def count_nedge(edges, parent, rows: int = 1 << 26) -> int:
    """Graph500 3.0.1 nedge on the device: tuples of ``edges`` (the INPUT list: CuPy (M, 2), or
    anything read by row slices into device or host rows, e.g. :class:`dbfs.store.gpu.DeviceRows`)
    that are not self-loops and have both endpoints reached in ``parent`` (CuPy int32 or int64,
    -1 unreached, same ids as edges), ``rows`` tuples at a time."""
    vid = "int" if parent.dtype == cp.int32 else "long long"
    p = cp.ascontiguousarray(parent, dtype=cp.int32 if vid == "int" else cp.int64)
    out = cp.zeros(4, cp.uint64)
    m = int(edges.shape[0])
    for a in range(0, m, rows):
        e = cp.ascontiguousarray(cp.asarray(edges[a:min(a + rows, m)]), dtype=cp.int64)
        k = int(e.shape[0])
        if k:
            _kernels(vid)["count_nedge"](_grid(k), (_BLOCK,), (e, _i64(k), p, out))
        del e
    return int(out[0])

"""Partitions as held on their workers, and a search's per-partition state.

Contract
--------
:func:`_load_part` reads partition ``rank`` of a Kernel 1 CSR variant
(:func:`dbfs.kernel1.load_partition`) into a :class:`_Part` (on a GPU
worker straight into device memory,
:func:`dbfs.bfs.dask.layout.gpu_part.load_device`), or
:func:`_build_part` builds it from the dataset's edges on the worker that
will search it (Kernel 1 over that block of rows only, on the worker's GPU
when it has one: the stored partition's bytes, nothing written);
:func:`_prepare_part` adds what needs the whole graph (the hub neighbours
of ``bu_step``, from the GLOBAL degrees that :func:`_global_degrees`
joins). Both run as tasks pinned to the partition's worker, once per
load. :class:`_State` is one search's arrays of one partition.

Encoding: a partition's local row ``i`` is global vertex ``base + i``
(block) or ``i * P + rank`` (cyclic). Block partitions are padded at the
front with ``pad = first % 64`` empty rows, so ``base`` is a multiple of 64
and a local bitmap is a run of global bitmap words starting at word
``base >> 6``. Parent slices are int64 in local index order (pad rows
cut off when returned), holding global ids, -1 for unreached.

Memory per worker: its partitions' CSR (+63 padding rows each) and hub
array, a parent slice, a queue buffer and 3 bitmaps per partition, plus one
claim scratch over ALL vertices (:func:`dbfs.graph.id_dtype` of N: 4 N bytes
while N <= 2**31) and 3 global bitmaps (N / 8 bytes each), and ``td_step``'s
reused record buffer (8 bytes per edge of the widest top-down level the
worker ran, at most 32 MiB: wider levels claim in pieces) and ``seen``
bitmap (N / 8 bytes); at load time, transiently, the global degree array
(4 N bytes).
"""
from __future__ import annotations

import os
import time

import numpy as np

from dbfs.bfs.cpu import _fill_parent, _no_edge_bitmap, degree_over_bitmap, hub_by_degree, reused_int64, warm_kernels
from dbfs.bfs.dask.layout.exchange import _base_of
from dbfs.bfs.dask.layout.gpu_part import device_hub, from_device_rows, load_device
from dbfs.bfs.dask.layout.warmup import warm_level_kernels
from dbfs.bfs.dask.mesh.plugin import get_plugin
from dbfs.graph import id_dtype
from dbfs.kernel1 import load_partition
from dbfs.kernel1.on_workers import gpu_shuffle_rows, rank_rows, shuffle_rows
from dbfs.partition import Partitioning

__all__ = ["_Part", "_State", "_geometry", "_load_part", "_build_part", "_local_degrees", "_global_degrees",
           "_prepare_part", "_gpu_shuffle_part", "_part_info", "_pick_parent", "_scratch", "_grown", "_zeroed", "_search_summary", "_noop"]


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
        self.first = rng.start if self.kind == "block" else self.rank
        self.base = _base_of(part, self.rank)
        self.pad = self.first - self.base if self.kind == "block" else 0
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

    def new_local(self, local):
        """The local index a search uses for original local index(es) ``local``: the same (a CPU partition is
        never relabelled within itself; :meth:`dbfs.bfs.dask.layout.gpu_part._GpuPart.new_local`)."""
        return local

    def info(self):
        host = self.indptr.nbytes + self.indices.nbytes + (self.hub.nbytes if self.hub is not None else 0)
        return {**self.meta, "load_time": self.load_time, "prepare_time": self.prepare_time, "count": self.count,
                "pid": os.getpid(), "kind": "cpu", "device_bytes": 0, "host_bytes": int(host)}


def _geometry(meta: dict) -> dict:
    """Where a partition's rows sit, from its ``meta`` (:func:`dbfs.kernel1.load_partition`'s): the attributes
    :class:`_Part` sets besides its arrays (rank, P, kind, n, code, q, r, count, first, base, pad, nloc, nnz,
    meta, load_time, prepare_time), for a partition read straight to a GPU (:func:`dbfs.bfs.dask.layout.gpu_part.
    load_device`)."""
    rank, P, kind, n = int(meta["rank"]), int(meta["P"]), meta["partitioning"], int(meta["n_vertices"])
    part = Partitioning(n, P, kind)
    rng = meta["vertex_range"]
    first = rng.start if kind == "block" else rank
    base = _base_of(part, rank)
    pad = first - base if kind == "block" else 0
    return {"rank": rank, "P": P, "kind": kind, "n": n, "code": part.code, "q": part.q, "r": part.r,
            "count": len(rng), "first": first, "base": base, "pad": pad, "nloc": pad + len(rng),
            "nnz": int(meta["nnz"]), "meta": {k: meta[k] for k in ("variant", "rank", "P", "partitioning",
                                                                   "n_vertices", "nnz")},
            "load_time": float(meta["load_time"]), "prepare_time": 0.0}


def _load_part(dataset_path, variant, rank, device: bool = False, worker: str = ""):
    """Partition ``rank`` of a stored variant on this worker: a :class:`_Part` (host arrays,
    :func:`dbfs.kernel1.load_partition`) or with ``device`` a :class:`dbfs.bfs.dask.layout.gpu_part._GpuPart` read
    straight into device memory (:func:`dbfs.bfs.dask.layout.gpu_part.load_device`: no host copy of the adjacency,
    the hub table left to :func:`_prepare_part`). ``worker`` names this worker in an out-of-memory error."""
    if device:
        return load_device(dataset_path, variant, rank, worker)

    t0 = time.perf_counter()
    indptr, indices, meta = load_partition(dataset_path, variant, rank)
    p = _Part(indptr, indices, meta)
    p.load_time = time.perf_counter() - t0
    return p


def _held(indptr, indices, meta: dict, worker: str = ""):
    """The partition a Kernel 1 on this worker built (:mod:`dbfs.kernel1.on_workers`): a :class:`_Part` of host
    rows, or of device rows a :class:`dbfs.bfs.dask.layout.gpu_part._GpuPart` kept in that memory (``worker`` named
    if it runs out), its build's report in ``meta``."""
    report, perm, pieces = meta.pop("report"), meta.pop("perm", None), meta.pop("pieces", None)
    meta.pop("deg", None)
    if isinstance(indptr, np.ndarray):
        p = _Part(indptr, indices, meta)
    else:
        p = from_device_rows(indptr, indices, meta, worker, perm=perm, pieces=pieces)
    p.meta.update(report)
    return p


def _build_part(dataset_path, P: int, rank: int, dedupe: bool = True, device: bool = False, worker: str = "",
                relabel: str = "none"):
    """Partition ``rank`` of the block partitioning in ``P`` of the dataset at ``dataset_path``, built from the whole
    edge list here (:func:`dbfs.kernel1.on_workers.rank_rows`; with ``device`` on this worker's GPU, its rows kept
    there; ``relabel="degree"``: each partition numbered by degree within itself, roots and parents mapped by
    the partition, :meth:`~dbfs.bfs.dask.layout.gpu_part._GpuPart.new_local`)."""
    t0 = time.perf_counter()
    p = _held(*rank_rows(dataset_path, P, rank, dedupe, device, relabel), worker)
    p.load_time = time.perf_counter() - t0
    return p


def _gpu_shuffle_part(dataset_path, P: int, rank: int, dedupe: bool, relabel: str, key: str, budget: int,
                      worker: str = "", room: int | None = None):
    """Partition ``rank`` of the block partitioning in ``P``, built on this GPU worker by Kernel 1 as one shuffle
    over the NCCL communicator in the plugin's ``shms[key]`` (:func:`dbfs.kernel1.on_workers.gpu_shuffle_rows`,
    every rank's task at once), with its hub table from every vertex's degree (no degree join through Dask): a
    prepared :class:`dbfs.bfs.dask.layout.gpu_part._GpuPart`, the bytes of :func:`_build_part`'s. The
    communicator goes when the build ends, failed or not. ``room``: the device bytes a rank's rows may keep (past
    it the rank is split between the device and pinned host memory)."""
    t0 = time.perf_counter()
    plugin = get_plugin()
    try:
        indptr, indices, meta = gpu_shuffle_rows(dataset_path, P, rank, dedupe, relabel, plugin.shms[key], budget,
                                                 room)
        deg = meta["deg"]
        p = _held(indptr, indices, meta, worker)
        p.load_time = time.perf_counter() - t0
        t1 = time.perf_counter()
        p.hub = device_hub(p, deg)
        p.prepare_time = time.perf_counter() - t1
        return p
    finally:
        plugin.shm_drop(key)


def _shuffle_build(dataset_path, P: int, rank: int, dedupe: bool, credit: int, *got):
    """Partition ``rank`` of the block partitioning in ``P`` from what every reader of the CPU shuffle sent it
    (:func:`dbfs.kernel1.on_workers.shuffle_rows`); its load time adds the credited reader's seconds."""
    t0 = time.perf_counter()
    indptr, indices, meta = shuffle_rows(dataset_path, P, rank, dedupe, credit, *got)
    read_s = meta["load_time"]
    p = _held(indptr, indices, meta)
    p.load_time = time.perf_counter() - t0 + read_s
    return p


def _local_degrees(p):
    """Degrees of this partition's vertices, local index order (the vertex-id width of N)."""
    ip = getattr(p, "indptr_host", p.indptr)          # a GPU partition keeps a host copy of its row offsets
    return np.diff(ip[p.pad:]).astype(id_dtype(p.n))


def _global_degrees(part: Partitioning, *degs):
    return part.join(degs, degs[0].dtype if degs else np.int64)


def _prepare_part(p, deg, device: bool = False):
    """Kernel-1-like data a partition needs from the whole graph: the hub
    neighbours of bu_step (built at load time, outside any search); and,
    for a partition a CPU worker searches, every kernel such a search calls,
    loaded now (:func:`dbfs.bfs.cpu.warm_kernels`,
    :func:`dbfs.bfs.dask.layout.warmup.warm_level_kernels`). A partition already in
    device memory gets its hub table built there
    (:func:`dbfs.bfs.dask.layout.gpu_part.device_hub`); one headed to a GPU
    (``device``) skips the Numba warm-up: no CPU search runs on it."""
    t0 = time.perf_counter()
    if getattr(p, "on_device", False):
        p.hub = device_hub(p, deg)
    else:
        if not device:
            warm_kernels(p.indptr, p.indices)
            warm_level_kernels(p, id_dtype(p.n))
        p.hub = hub_by_degree(p.indptr, p.indices, deg)
    p.prepare_time = time.perf_counter() - t0
    return p


def _part_info(p):
    return p.info()


def _pick_parent(outs, k, rank):
    """Rank ``rank``'s parent slice of the ``k``-th search of a batch (:func:`dbfs.bfs.dask.search.bsp._bsp_search`)."""
    return outs[k]["parents"][rank]


def _host_slice(sl):
    """A parent slice as int64 on the host (a device slice kept for the validation over NCCL is copied)."""
    return sl.get().astype(np.int64) if hasattr(sl, "get") else np.asarray(sl, np.int64)


def _search_summary(outs):
    """A batch's results without the parents (they stay on the worker), or its ``{"lost": why}``."""
    if isinstance(outs, dict):
        return outs
    return [{k: v for k, v in out.items() if k != "parents"} for out in outs]


def _noop():
    return os.getpid()


def _scratch(store: dict, N: int) -> np.ndarray:
    """The worker's global-id claim array (the vertex-id width of N), kept in
    ``store`` (the worker plugin's) and touched once per worker and graph size:
    it is write-before-read, and a fresh N-sized array per search would put
    its page faults into the first top-down level, inside the timer."""
    arr = store.get(N)
    if arr is None:
        store.clear()
        arr = store[N] = np.zeros(N, id_dtype(N))
        arr.fill(0)
    return arr


def _grown(store: dict, key, n: int) -> np.ndarray:
    """This worker's reusable int64 work array ``key`` (:func:`dbfs.bfs.cpu.reused_int64`) in ``store``."""
    return reused_int64(store, key, n)


def _zeroed(nwords: int) -> np.ndarray:
    """A zero bitmap whose pages are already mapped (np.zeros maps them lazily)."""
    a = np.empty(nwords, np.int64)
    a.fill(0)
    return a


class _State:
    """Per-search state of one partition (``grown``: the worker's reusable arrays)."""

    def __init__(self, p: _Part, grown: dict):
        self.p = p
        nwords = (p.nloc + 63) >> 6
        self.parent = _fill_parent(p.nloc)
        self.visited = p.no_edge.copy()
        self.fbm = _zeroed(nwords)                 # local frontier bitmap (after a bottom-up level)
        self.nxt = _zeroed(nwords)
        self.queue = np.empty(0, np.int64)         # local frontier queue (local rows)
        self.bufs = [_grown(grown, ("queue", p.rank, k), max(p.nloc, 1)) for k in (0, 1)]   # alternate per level

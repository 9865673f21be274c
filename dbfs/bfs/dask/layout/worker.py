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
from pathlib import Path

import numpy as np

from dbfs.bfs.cpu import _fill_parent, _no_edge_bitmap, degree_over_bitmap, hub_by_degree, reused_int64, warm_kernels
from dbfs.bfs.dask.layout.exchange import _base_of
from dbfs.bfs.dask.layout.gpu_part import device_hub, from_device_rows, load_device
from dbfs.bfs.dask.layout.warmup import warm_level_kernels
from dbfs.bfs.dask.mesh.plugin import get_plugin
from dbfs.errors import DbfsError
from dbfs.graph import id_dtype
from dbfs.kernel1 import load_partition, variant_name
from dbfs.kernel1.passes import build_csr_passes, chunk_cost
from dbfs.kernel1.shuffle import ShufflePlan, build_rank, check_sum, read_buckets, reader_spans
from dbfs.partition import Partitioning
from dbfs.store import open_dataset
from dbfs.store.gpu import _free_device_bytes, device_chunks

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


#: host bytes one pass of a partition built on a CPU worker may hold beyond the degree prefix and a chunk
_BUILD_PASS = 1 << 30


def _build_part(dataset_path, P: int, rank: int, dedupe: bool = True, device: bool = False, worker: str = "",
                relabel: str = "none"):
    """Partition ``rank`` of the block partitioning in ``P`` of the dataset at ``dataset_path``, built from its
    edges here: :func:`dbfs.kernel1.passes.build_csr_passes` over the partition's rows (in passes within
    :data:`_BUILD_PASS`), or with ``device`` :func:`dbfs.kernel1.passes_gpu.build_csr_gpu_passes` within most
    of this worker's free device memory (stored chunks uploaded, a virtual list regenerated on the device), its
    rows kept there: a :class:`dbfs.bfs.dask.layout.gpu_part._GpuPart` (``worker`` named if the device runs out of
    memory). The bytes of partition ``rank`` of variant ``p<P>-block``; nothing is stored. ``relabel="degree"``
    (``device`` only): every partition's vertices renumbered by descending degree WITHIN the partition (each
    keeps its id range, so owners do not change), the same numbering on every rank (the whole degree array is
    counted on each); the partition maps roots and parents (:meth:`~dbfs.bfs.dask.layout.gpu_part._GpuPart.new_local`,
    :meth:`~dbfs.bfs.dask.layout.gpu_part._GpuPart.to_original`)."""
    t0 = time.perf_counter()
    if relabel not in ("none", "degree") or (relabel == "degree" and not device):
        raise DbfsError(f"relabel {relabel!r} of partitions built on workers: use 'none', or 'degree' on GPU workers")
    path = Path(dataset_path)
    ds = open_dataset(path.name, path.parent)
    n = int(ds.n_vertices)
    part = Partitioning(n, int(P), "block")
    rg = part.vertex_range(int(rank))
    meta = {"variant": variant_name(int(P), "block", dedupe, "none"), "rank": int(rank), "P": int(P),
            "partitioning": "block", "n_vertices": n, "vertex_range": rg, "load_time": 0.0, "relabel": relabel}
    if device:      # the rows stay in this device's memory: the partition searched here (no host round trip)
        from dbfs.kernel1.passes_gpu import build_csr_gpu_passes  # deferred: cupy

        bounds = [part.vertex_range(r).start for r in range(part.P)] + [n] if relabel == "degree" else None
        g = build_csr_gpu_passes(device_chunks(ds), n, dedupe=dedupe, memory_budget=int(0.8 * _free_device_bytes()),
                                 rows=(rg.start, rg.stop), on_device=True, relabel_bounds=bounds)
        p = from_device_rows(g.indptr, g.indices, {**meta, "nnz": int(g.indptr[-1])}, worker,
                             perm=g.meta.get("perm"))
    else:
        edges = ds.edges()
        fixed = 8 * (n + 1) + chunk_cost(int(edges.chunks[0]), edges.dtype.itemsize)
        g = build_csr_passes(edges, n, dedupe=dedupe, memory_budget=fixed + _BUILD_PASS, rows=(rg.start, rg.stop))
        p = _Part(g.indptr, g.indices, {**meta, "nnz": int(g.indptr[-1])})
    p.load_time = time.perf_counter() - t0
    p.meta["edge_rows_read"] = int(g.meta["n_edges"]) * (1 + int(g.meta["passes"]["count"]))   # degrees, each pass
    return p


def _gpu_shuffle_part(dataset_path, P: int, rank: int, dedupe: bool, relabel: str, key: str, budget: int,
                      worker: str = ""):
    """Partition ``rank`` of the block partitioning in ``P``, built on this GPU worker by Kernel 1 as one shuffle
    over the NCCL communicator in the plugin's ``shms[key]`` (:func:`dbfs.kernel1.shuffle_gpu.build_shuffled_gpu`,
    every rank's task at once: each reads 1/P of the edge rows once), with its hub table from every vertex's
    degree (no degree join through Dask): a prepared :class:`dbfs.bfs.dask.layout.gpu_part._GpuPart`, the bytes
    of :func:`_build_part`'s. The communicator goes when the build ends, failed or not."""
    from dbfs.kernel1.shuffle_gpu import build_shuffled_gpu  # deferred: cupy

    t0 = time.perf_counter()
    plugin = get_plugin()
    try:
        comm = plugin.shms[key]
        ds = _dataset(dataset_path)
        n = int(ds.n_vertices)
        part = Partitioning(n, int(P), "block")
        source = device_chunks(ds)
        span = reader_spans(source.m, source.step, part.P)[int(rank)]
        bounds = [part.vertex_range(r).start for r in range(part.P)] + [n] if relabel == "degree" else None
        g, deg = build_shuffled_gpu(source, span, part, int(rank), comm, dedupe, int(budget), bounds,
                                    budget_name="the free device memory")
        meta = {"variant": variant_name(int(P), "block", dedupe, "none"), "rank": int(rank), "P": int(P),
                "partitioning": "block", "n_vertices": n, "vertex_range": part.vertex_range(int(rank)),
                "load_time": 0.0, "relabel": relabel, "nnz": int(g.indptr[-1])}
        p = from_device_rows(g.indptr, g.indices, meta, worker, perm=g.meta.get("perm"))
        p.load_time = time.perf_counter() - t0
        t1 = time.perf_counter()
        p.hub = device_hub(p, deg)
        p.prepare_time = time.perf_counter() - t1
        p.meta.update(kernel1="gpu-shuffle", edge_rows_read=int(g.meta["edge_rows_read"]), edge_readers=part.P,
                      build_ranges=int(g.meta["passes"]["count"]))
        return p
    finally:
        plugin.shm_drop(key)


def _dataset(dataset_path):
    path = Path(dataset_path)
    return open_dataset(path.name, path.parent)


def _shuffle_read(dataset_path, P: int, ranks, g: int, G: int):
    """Reader ``g`` of ``G`` of Kernel 1 as one shuffle (:mod:`dbfs.kernel1.shuffle`): its 1/G of the dataset's
    edge chunks (:func:`dbfs.kernel1.shuffle.reader_spans`; a virtual list's regenerated) read once, both
    directions of every tuple bucketed by owner rank of the block partitioning in ``P``, the pieces of ``ranks``
    kept: ``(rank -> piece, read info)`` (:func:`dbfs.kernel1.shuffle.read_buckets`)."""
    ds = _dataset(dataset_path)
    edges = ds.edges()
    r0, r1 = reader_spans(edges.shape[0], edges.chunks[0], G)[g]
    return read_buckets(edges, r0, r1, ShufflePlan.make(ds.n_vertices, P), ranks)


def _shuffle_piece(read, rank):
    """(on a reader's worker) the piece of ``rank`` of a reader's result, with the reader's info: what moves."""
    pieces, info = read
    return pieces[rank], info


def _shuffle_build(dataset_path, P: int, rank: int, dedupe: bool, credit: int, *got):
    """Partition ``rank`` of the block partitioning in ``P`` from ``got``, the ``(piece, read info)`` every reader
    of the shuffle sent it (:func:`_shuffle_piece`): the readers' rows checked against the dataset's
    ``edges_checksum``, the rows built (:func:`dbfs.kernel1.shuffle.build_rank`, in ranges within
    :data:`_BUILD_PASS`): the bytes of partition ``rank`` of variant ``p<P>-block``. The partition's info reports
    the edge rows and seconds of reader ``credit`` (-1: none), so a shuffle's ranks add up to its reads."""
    t0 = time.perf_counter()
    ds = _dataset(dataset_path)
    infos = [info for _, info in got]
    check_sum(ds.edges(), infos)
    plan = ShufflePlan.make(ds.n_vertices, P)
    indptr, indices, built = build_rank([piece for piece, _ in got], plan, rank, dedupe, _BUILD_PASS)
    del got
    meta = {"variant": variant_name(int(P), "block", dedupe, "none"), "rank": int(rank), "P": int(P),
            "partitioning": "block", "n_vertices": plan.n, "nnz": int(indptr[-1]),
            "vertex_range": plan.part.vertex_range(int(rank)), "load_time": 0.0}
    p = _Part(indptr, indices, meta)
    read = infos[credit] if credit >= 0 else {"rows": 0, "seconds": 0.0}
    p.load_time = time.perf_counter() - t0 + float(read["seconds"])
    p.meta.update(edge_rows_read=int(read["rows"]), edge_readers=len(infos), build_ranges=int(built["ranges"]))
    return p


def _local_degrees(p):
    """Degrees of this partition's vertices, local index order (the vertex-id width of N)."""
    ip = getattr(p, "indptr_host", p.indptr)          # a GPU partition keeps a host copy of its row offsets
    return np.diff(ip[p.pad:]).astype(id_dtype(p.n))


def _global_degrees(part: Partitioning, *degs):
    deg = np.empty(part.n_vertices, degs[0].dtype if degs else np.int64)
    for rk, d in enumerate(degs):
        rg = part.vertex_range(rk)
        deg[rg.start:rg.stop:rg.step] = d
    return deg


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


def _pick_parent(out, rank):
    return out["parents"][rank]


def _search_summary(out):
    return {k: v for k, v in out.items() if k != "parents"}


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

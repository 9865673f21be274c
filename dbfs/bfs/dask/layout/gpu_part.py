"""GPU partitions of the distributed BFS: a partition held in device memory.

Contract
--------
:func:`load_device` (what :func:`dbfs.bfs.dask.layout.worker._load_part` runs on a
GPU worker) reads partition ``rank`` of a stored CSR variant straight into
device memory as a :class:`_GpuPart`: its rows, neighbour ids and
zero-degree bitmap on the device, a host copy of its row offsets (root
degrees for the direction policy, the partition's degrees) and nothing else
on the host: the neighbour ids are decoded into two pinned host slabs in
turn (:class:`dbfs.store.chunk_read.ChunkReader`: every chunk's crc32c and
digest checked, then both checksums, as :func:`dbfs.kernel1.load_partition`),
each copied asynchronously while the next decodes and converted to the
vertex-id width on the device; no full-size host copy of them exists.
:func:`device_hub` then builds its hub table on the device from the GLOBAL
degrees (:func:`dbfs.bfs.dask.layout.worker._prepare_part`), bit for bit the host's
:func:`dbfs.bfs.cpu.hub_by_degree`. :func:`from_device_rows` makes the same
:class:`_GpuPart` from rows a GPU Kernel 1 built on this device (a partition
built from the edges on its worker), also from a rank that Kernel 1 split
between a device piece and a mapped pinned host piece (``pieces``: the
kernels read both through ``ADJ_PARAMS``, ``indices`` is then None);
``_GpuPart(p)`` from a prepared host partition (the reference the tests
compare with).
Every kernel a search on it launches is compiled when it is made, outside
any timed search (:func:`warm_device`). A device that runs out of memory is
a one-line :class:`dbfs.errors.DbfsError` naming ``--device-memory-limit``
and the bytes the partition needed.

:func:`device_bytes` is the placement's estimate of what one partition
takes on a GPU worker while searched (CSR, hub table, per-search arrays)
and :func:`worker_bytes` what the worker adds once (claim scratch and
queue over all N vertices, three global bitmaps).

Encoding: as :class:`dbfs.bfs.dask.layout.worker._Part` (local row ``i`` is global
vertex ``base + i``, ``pad`` empty rows in front so ``base`` is a multiple
of 64), with the vertex-id width of N (:func:`dbfs.graph.id_dtype`) for the
neighbour ids, the hub table, the parents and the queues, and bitmaps as
uint32 words: ``2 * words`` uint32 words per local bitmap are bit-identical
to the CPU workers' ``words`` int64 words (little-endian), so frontier
slices cross the mesh in the CPU layout. Block partitions only: the
kernels index a partition's rows by ``global - base``.

Method: a slab is whole chunks of ``indices`` (about :data:`_SLAB_BYTES`,
at least one chunk per reader thread); the copies and the conversions run
in order on one stream, and a slab is decoded again only after the copy out
of it has finished (an event per slab). The hub kernel gives each row a
warp: lanes scan its neighbours in strides of 32 keeping the first highest
degree, then a shuffle reduction keeps the highest degree at the lowest
position, which is the host's first-in-row-order rule.

After the device partitions of Gunrock's multi-GPU frontend (Pan, Wang,
Wu, Yang and Owens, "Multi-GPU Graph Analytics", IPDPS 2017): one CSR
slice per device, neighbour ids kept global.
"""
from __future__ import annotations

import ctypes
import os
import time
from functools import lru_cache

import numpy as np

from dbfs.bfs.dask.layout.exchange import _base_of
from dbfs.errors import DbfsError
from dbfs.graph import id_dtype, index_dtype
from dbfs.kernel1.csr_store import open_partition
from dbfs.partition import Partitioning
from dbfs.store.chunk_read import ChunkReader
from dbfs.units import human

__all__ = ["_GpuPart", "load_device", "from_device_rows", "device_hub", "device_bytes",
           "ranks_device_bytes", "worker_bytes", "mesh_room", "warm_device", "_device_info"]

#: host bytes of one pinned slab of neighbour ids while a partition is read (two are held)
_SLAB_BYTES = 1 << 27

_COPIED = ("rank", "P", "kind", "n", "code", "q", "r", "count", "first", "base", "pad", "nloc", "nnz", "meta",
           "load_time", "prepare_time")


def device_bytes(nloc: int, nnz: int, n: int) -> int:
    """Device bytes of one block partition while searched: CSR (``indptr`` int64, neighbour entries of
    :func:`dbfs.graph.index_dtype`), hub table, parents, two queues (the id width), four local bitmaps."""
    vb = np.dtype(id_dtype(n)).itemsize
    words32 = 2 * ((nloc + 63) >> 6)
    return 8 * (nloc + 1) + np.dtype(index_dtype(n)).itemsize * nnz + vb * nloc * 4 + 4 * words32 * 4


def ranks_device_bytes(part: Partitioning, nnz: list) -> list:
    """:func:`device_bytes` of every rank of a block partitioning (its padded rows from :func:`_base_of`)
    holding ``nnz[rank]`` entries: what placement offers a GPU worker's budget."""
    return [device_bytes(part.vertex_range(rk).stop - _base_of(part, rk), int(nnz[rk]), part.n_vertices)
            for rk in range(part.P)]


def worker_bytes(n: int) -> int:
    """Device bytes a GPU worker adds once per graph: claim scratch and claim queue over
    N, three global bitmaps, pairs of one level (at most N), the bitmap buffers shared
    through CUDA IPC and their private copy (:mod:`dbfs.bfs.dask.mesh.ipc`, at most three
    more bitmaps), and a 16 MiB margin."""
    vb = np.dtype(id_dtype(n)).itemsize
    gw32 = 2 * ((n + 63) >> 6)
    return 2 * vb * n + 6 * 4 * gw32 + 3 * vb * n + 8 * n + (1 << 24)


def mesh_room(free: int, n: int, rows: int, relabel: str) -> int:
    """Device bytes one rank's rows (row starts and entries) may keep on a GPU worker of an NCCL mesh that holds
    that rank alone, of ``free`` bytes: what is left after the searches' arrays (claim ids and parents over N,
    three global bitmaps; per row the parents, two queues and the hub table; a relabelled graph's ``perm`` over
    N), which the validation's arrays reuse once the searches' claim arrays go, and 2 GiB of margin. A rank
    past it is split between the device and pinned host memory (:mod:`dbfs.kernel1.shuffle_gpu`)."""
    vb = np.dtype(id_dtype(n)).itemsize
    reserve = (2 * vb + 1) * n + 4 * vb * rows + (vb * n if relabel == "degree" else 0) + (2 << 30)
    return int(free) - reserve


def _device_info():
    """(client.run on a GPU worker) this worker's device: id, name, total and free bytes."""
    import cupy as cp  # deferred: cupy

    free, total = cp.cuda.runtime.memGetInfo()
    dev = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return {"device": int(dev.id), "name": name, "total": int(total),
            "free": int(free) + int(cp.get_default_memory_pool().free_bytes())}


def warm_device(gp) -> None:
    """Compile every kernel and CuPy routine a GPU search step uses, at the sizes a
    search meets (a claim pass from up to 65536 of the partition's own rows takes the
    multi-block scan path, then the bucketing kernels), so no search pays a compile (cf.
    :mod:`dbfs.bfs.dask.layout.warmup` for the Numba kernels)."""
    import cupy as cp  # deferred: cupy

    from dbfs.bfs.gpu import _BLOCK, _grid, expand  # deferred: cupy

    k = gp.kernels
    dt = cp.int32 if gp.vid == "int" else cp.int64
    N = gp.n
    vis = cp.zeros(max((N + 31) >> 5, 1), cp.uint32)
    scratch = cp.empty(max(N, 1), dt)
    claims = cp.empty(max(N, 1), dt)
    cnt = cp.zeros((2, 4), cp.uint64)
    for n in sorted({1, min(gp.nloc, 1 << 16)}):
        q = cp.arange(n, dtype=dt)
        m = int(gp.indptr_host[n] - gp.indptr_host[0])
        cnt.fill(0)
        vis.fill(0)
        expand(k, gp.indptr, gp.adj, q, n, m, vis, scratch, claims, cnt[0], gp.base, 0)
        nc = int(cnt[0, 0].get())
        if nc:
            hist = cp.zeros(gp.P, cp.uint64)
            k["bucket_count"](_grid(nc), (_BLOCK,), (claims, cnt[0], gp.starts, np.int32(gp.P), hist))
            cursor = cp.asarray(np.concatenate([[0], np.cumsum(hist.get())[:-1]]).astype(np.uint64))
            k["bucket_scatter"](_grid(nc), (_BLOCK,), (claims, cnt[0], gp.starts, np.int32(gp.P), scratch, cursor,
                                                      cp.empty(nc, dt), cp.empty(nc, dt)))
    a = cp.zeros(4, cp.uint32)
    cp.bitwise_or(a, a, out=a)
    a[1] |= np.uint32(1)
    cp.cuda.Device().synchronize()
    del vis, scratch, claims
    cp.get_default_memory_pool().free_all_blocks()


class _GpuPart:
    """One block partition in device memory (see the module docstring)."""

    on_device = True
    #: parents returned by a search stay on the device (the id width, internal ids) instead of an int64
    #: host copy: a partition whose validation runs on its worker (:mod:`dbfs.bfs.dask.layout.built`)
    keep_parents = False
    #: a partition relabelled within itself (:func:`from_device_rows` with ``perm``): the device
    #: ``perm[new] = original`` of all N, and the host map of this block's original local index -> new one
    #: (the id width)
    perm = None
    iperm_loc = None
    #: a rank split between the device and mapped pinned host memory (:func:`from_device_rows`): its
    #: :meth:`dbfs.split.Split.report`, its entries' host bytes and the pinned allocation's owner
    split = None
    host_bytes = 0
    keep = None

    def __init__(self, p):
        import cupy as cp  # deferred: cupy

        from dbfs.bfs.gpu import whole  # deferred: cupy

        if p.code != 0:
            raise DbfsError(f"partition {p.rank} is cyclic: GPU workers hold block partitions only; build the "
                            f"variant with --partitioning block")
        for k in _COPIED:
            setattr(self, k, getattr(p, k))
        vdt = np.dtype(id_dtype(p.n))
        self.indptr_host = p.indptr
        self.device_bytes = device_bytes(p.nloc, p.nnz, p.n)
        self.indptr = cp.asarray(p.indptr)
        self.indices = cp.asarray(np.asarray(p.indices).astype(index_dtype(p.n), copy=False))
        self.adj = whole(self.indices)                  # bfs.cu's ADJ_PARAMS: one device piece
        self.hub = cp.asarray(np.asarray(p.hub).astype(vdt, copy=False))
        self._finish()

    def _finish(self):
        """What every GPU partition derives on the device: its local base bitmap, the block starts, the
        kernels compiled (``rank``, ``P``, ``n``, ``nloc``, ``indptr`` and ``adj`` set)."""
        import cupy as cp  # deferred: cupy

        from dbfs.bfs.gpu import _BLOCK, _grid, _i64, kernel_types  # deferred: cupy

        self.vid, self.ent = kernel_types(self.n, self.adj[0].dtype)
        self.words = (self.nloc + 63) >> 6              # int64 words of a local bitmap (the CPU layout)
        nw32 = 2 * self.words
        self.base_visited = cp.empty(max(nw32, 1), cp.uint32)
        self.kernels["base_visited"](_grid(nw32), (_BLOCK,),
                                     (self.indptr, _i64(self.nloc), _i64(nw32), self.base_visited))
        blocks = Partitioning(self.n, self.P, "block")
        self.starts_host = np.array(blocks.block_starts(), np.int64)
        self.starts = cp.asarray(self.starts_host)
        warm_device(self)

    def new_local(self, local):
        """The local index a search uses for this block's ORIGINAL local index(es) ``local``."""
        return local if self.iperm_loc is None else self.iperm_loc[local]

    @property
    def kernels(self) -> dict:
        """bfs.cu's kernels for this partition's id and entry types (compiled on first use)."""
        from dbfs.bfs.gpu import _kernels  # deferred: cupy

        return _kernels(self.vid, self.ent)

    def to_original(self, parent, out=None):
        """A search's parent slice (device, new local order, new ids) in original local order and ids; into
        ``out`` (a device array of its shape and type) where given, else a new array (the slice itself where
        the partition is not relabelled)."""
        if self.perm is None:
            if out is None:
                return parent
            out[...] = parent
            return out
        import cupy as cp  # deferred: cupy

        first = int(self.starts_host[self.rank])
        if out is None:
            out = cp.full(parent.shape, -1, parent.dtype)
        else:
            out.fill(-1)
        hit = cp.flatnonzero(parent >= 0)
        out[self.perm[first + hit] - first] = self.perm[parent[hit]]
        return out

    def info(self):
        return {**self.meta, "load_time": self.load_time, "prepare_time": self.prepare_time, "count": self.count,
                "pid": os.getpid(), "kind": "gpu", "device_bytes": int(self.device_bytes),
                "host_bytes": int(self.indptr_host.nbytes) + int(self.host_bytes),
                **({"split": self.split} if self.split is not None else {})}


def _oom(worker: str, rank: int, need: int) -> DbfsError:
    return DbfsError(f"GPU worker {worker or '?'} ran out of device memory loading partition {rank} "
                     f"(about {human(need)}): lower --device-memory-limit so the rest goes to CPU "
                     f"workers, or use more GPU workers / partitions")


def _upload(reader, src, vdt, slab_bytes: int):
    """Stored array ``src`` (a CheckedArray) as a new device array of dtype ``vdt``, through two pinned
    host slabs (module docstring); (device array, sum of its values mod 2**64)."""
    import cupy as cp  # deferred: cupy
    import cupyx  # deferred: cupyx

    n, sdt, step = int(src.shape[0]), np.dtype(src.dtype), int(src.chunks[0])
    out = cp.empty(n, vdt)
    per = min(max(slab_bytes // (step * sdt.itemsize), reader.threads, 1) * step, max(n, 1))
    spans = [(lo, min(lo + per, n)) for lo in range(0, n, per)]
    host = [cupyx.empty_pinned(per, sdt) for _ in range(min(2, len(spans)))]
    stage = cp.empty(per, sdt) if sdt != vdt and spans else None
    stream = cp.cuda.Stream(non_blocking=True)
    copied = [None] * len(host)                 # per slab: the event of the last copy out of it
    total = 0
    try:
        for k, (lo, hi) in enumerate(spans):
            b = k % len(host)
            if copied[b] is not None:
                copied[b].synchronize()
            buf = host[b][:hi - lo]
            total += reader.read_into(src, buf, lo, hi)
            dst = out[lo:hi] if stage is None else stage[:hi - lo]
            dst.data.copy_from_host_async(ctypes.c_void_p(buf.ctypes.data), buf.nbytes, stream)
            copied[b] = stream.record()
            if stage is not None:
                with stream:
                    cp.copyto(out[lo:hi], dst, casting="unsafe")    # the id width, on the device
    finally:
        stream.synchronize()
        buf = host = None
        cp.get_default_pinned_memory_pool().free_all_blocks()
    return out, total & ((1 << 64) - 1)


def load_device(dataset_path, variant: str, rank: int, worker: str = "", slab_bytes: int = _SLAB_BYTES,
                threads: int | None = None):
    """(task pinned to a GPU worker) partition ``rank`` of a stored variant read into device memory.

    Parameters
    ----------
    dataset_path : path-like
        The dataset's directory.
    variant : str
        A block variant.
    rank : int
        The partition.
    worker : str
        This worker's address (named when the device runs out of memory).
    slab_bytes : int
        Host bytes of each of the two pinned slabs (rounded to whole chunks).
    threads : int, optional
        Reader threads (:class:`dbfs.store.chunk_read.ChunkReader`).

    Returns
    -------
    _GpuPart
        Its hub table not yet built (:func:`device_hub`).

    Raises
    ------
    DbfsError
        A damaged or missing variant (as :func:`dbfs.kernel1.load_partition`), a cyclic one, or too little
        device memory.
    """
    import cupy as cp  # deferred: cupy

    t0 = time.perf_counter()
    sp = open_partition(dataset_path, variant, rank)
    if sp.meta["partitioning"] != "block":
        raise DbfsError(f"partition {rank} is cyclic: GPU workers hold block partitions only; build the "
                        f"variant with --partitioning block")
    gp = _bare({**sp.meta, "load_time": 0.0})
    try:
        with ChunkReader(threads) as reader:
            ip = np.zeros(gp.pad + gp.count + 1, np.int64)     # the pad rows in front stay empty
            sp.read_indptr(reader, ip[gp.pad:])
            indices, s_ix = _upload(reader, sp.indices, np.dtype(index_dtype(gp.n)), slab_bytes)
        sp.check_sums(s_ix)
        _place(gp, ip, cp.asarray(ip), indices)
    except cp.cuda.memory.OutOfMemoryError:
        raise _oom(worker, gp.rank, gp.device_bytes) from None
    gp.load_time = time.perf_counter() - t0
    return gp


def _bare(meta: dict):
    """A :class:`_GpuPart` with its geometry from ``meta`` (:func:`dbfs.bfs.dask.layout.worker._geometry`), no arrays."""
    from dbfs.bfs.dask.layout.worker import _geometry  # deferred: cycle layout.gpu_part <-> layout.worker

    gp = _GpuPart.__new__(_GpuPart)
    for k, v in _geometry(meta).items():
        setattr(gp, k, v)
    gp.device_bytes = device_bytes(gp.nloc, gp.nnz, gp.n)
    return gp


def _place(gp, indptr_host, indptr, indices, adj=None) -> None:
    """Give ``gp`` its rows (``indptr`` padded in front, on the host and the device) and neighbour ids
    (device, :func:`dbfs.graph.index_dtype`; or, ``adj``, the kernels' ``ADJ_PARAMS`` of a split rank,
    ``indices`` None); its hub table is left to :func:`device_hub`."""
    from dbfs.bfs.gpu import whole  # deferred: cupy

    gp.indptr_host, gp.indptr, gp.indices = indptr_host, indptr, indices
    gp.adj = whole(indices) if adj is None else adj
    gp.hub = None
    gp._finish()


def from_device_rows(indptr, indices, meta: dict, worker: str = "", perm=None, pieces=None):
    """(on a GPU worker) a block partition whose rows a GPU Kernel 1 built in this device's memory
    (``indptr`` int64 from 0, ``indices`` of :func:`dbfs.graph.index_dtype`; ``meta`` as
    :func:`dbfs.kernel1.load_partition`'s) as a :class:`_GpuPart`, without a host copy of the adjacency; its
    hub table is left to
    :func:`device_hub`. ``perm`` (device, all N): the rows and ids are relabelled within each block
    (:func:`dbfs.kernel1.passes_gpu.degree_order` with the block bounds), ``perm[new] = original``.
    ``pieces`` (a split rank, :mod:`dbfs.kernel1.shuffle_gpu`): its ``adj``, ``split``, ``keep`` (the pinned
    allocation's owner, kept with the partition) and ``indptr_host``; ``indices`` is then None."""
    import cupy as cp  # deferred: cupy

    gp = _bare(meta)
    try:
        host = None if pieces is None else np.asarray(pieces["indptr_host"], np.int64)
        if gp.pad:
            indptr = cp.concatenate([cp.zeros(gp.pad, cp.int64), indptr])
            host = None if host is None else np.concatenate([np.zeros(gp.pad, np.int64), host])
        if pieces is None:
            _place(gp, cp.asnumpy(indptr), indptr, indices)
        else:
            sp = pieces["split"]
            gp.keep, gp.split = pieces["keep"], sp.report()
            gp.device_bytes = device_bytes(gp.nloc, sp.device_entries, gp.n)
            gp.host_bytes = int(sp.host_entries) * int(sp.itemsize)
            _place(gp, host, indptr, None, pieces["adj"])
        if perm is not None:
            first, stop = (int(x) for x in gp.starts_host[gp.rank:gp.rank + 2])
            loc = perm[first:stop] - first                  # new local -> original local, on the device
            inv = cp.empty_like(loc)
            inv[loc] = cp.arange(loc.size, dtype=loc.dtype)
            gp.iperm_loc = cp.asnumpy(inv)                  # (the inverse on the host, the id width: one copy)
            del loc, inv
            gp.perm = perm
            gp.device_bytes += perm.nbytes
    except cp.cuda.memory.OutOfMemoryError:
        raise _oom(worker, gp.rank, gp.device_bytes) from None
    return gp


_HUB_SOURCE = r"""
#define ADJ(j) ((VID)((j) < ix_split ? ix_a[(j)] : ix_b[(j) - ix_split]))
extern "C" __global__ void hub_by_degree(const long long* indptr, const ENT* ix_a, const ENT* ix_b,
                                         long long ix_split, const VID* deg, long long n, VID* hub) {
    const int lane = threadIdx.x & 31;
    const long long warp = (blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5;
    const long long nwarps = ((long long)gridDim.x * blockDim.x) >> 5;
    for (long long v = warp; v < n; v += nwarps) {
        const long long s = indptr[v], e = indptr[v + 1];
        long long bd = -1, bj = -1;
        for (long long j = s + lane; j < e; j += 32) {
            const long long d = (long long)deg[ADJ(j)];
            if (d > bd) { bd = d; bj = j; }
        }
        for (int o = 16; o > 0; o >>= 1) {
            const long long od = __shfl_down_sync(0xffffffffu, bd, o);
            const long long oj = __shfl_down_sync(0xffffffffu, bj, o);
            if (od > bd || (od == bd && oj >= 0 && (bj < 0 || oj < bj))) { bd = od; bj = oj; }
        }
        if (lane == 0) hub[v] = bj >= 0 ? ADJ(bj) : (VID)-1;
    }
}
"""


@lru_cache(maxsize=None)
def _hub_kernel(vid: str, ent: str = ""):
    import cupy as cp  # deferred: cupy

    return cp.RawKernel(_HUB_SOURCE.replace("ENT", ent or vid).replace("VID", vid), "hub_by_degree")


def device_hub(gp, deg):
    """Each row's highest-degree neighbour (first in row order on ties, -1 for an empty row), built on the
    device from the GLOBAL degrees ``deg``: :func:`dbfs.bfs.cpu.hub_by_degree` bit for bit, in the id width.

    Parameters
    ----------
    gp : _GpuPart
        Its ``indptr`` (padded rows) on the device and ``adj`` (the kernels' ``ADJ_PARAMS``: one device piece,
        or a split rank's device and mapped host pieces).
    deg : numpy.ndarray or cupy.ndarray
        Degree of every vertex (:func:`dbfs.bfs.dask.layout.worker._global_degrees`, or on the device).

    Returns
    -------
    cupy.ndarray
        (nloc,) of the vertex-id width.
    """
    import cupy as cp  # deferred: cupy

    from dbfs.bfs.gpu import _BLOCK, _grid, _i64  # deferred: cupy

    vdt = np.dtype(id_dtype(gp.n))
    hub = cp.empty(gp.nloc, vdt)
    if gp.nloc:
        d = deg.astype(vdt, copy=False) if isinstance(deg, cp.ndarray) else cp.asarray(np.asarray(deg).astype(vdt))
        _hub_kernel(gp.vid, gp.ent)(_grid(32 * gp.nloc), (_BLOCK,), (gp.indptr, *gp.adj, d, _i64(gp.nloc), hub))
        cp.cuda.Device().synchronize()
        del d
    return hub

"""GPU partitions of the distributed BFS: a partition held in device memory.

Contract
--------
:func:`_to_device` runs as a task pinned to a GPU worker after
:func:`dbfs.bfs.dask.worker._prepare_part` (which read the partition from
zarr and built its hub table from the GLOBAL degrees) and returns a
:class:`_GpuPart`: the partition's rows, neighbour ids, hub table and
zero-degree bitmap in device memory, a host copy of its row offsets (root
degrees for the direction policy) and nothing else on the host: the host
copy of the adjacency is dropped when the task returns. Every kernel a
search on it launches is compiled here, outside any timed search
(:func:`warm_device`). A device that runs out of memory is a one-line
:class:`dbfs.errors.DbfsError` naming ``--device-memory-limit`` and the
bytes the partition needed.

:func:`device_bytes` is the placement's estimate of what one partition
takes on a GPU worker while searched (CSR, hub table, per-search arrays)
and :func:`worker_bytes` what the worker adds once (claim scratch and
queue over all N vertices, three global bitmaps).

Encoding: as :class:`dbfs.bfs.dask.worker._Part` (local row ``i`` is global
vertex ``base + i``, ``pad`` empty rows in front so ``base`` is a multiple
of 64), with the vertex-id width of N (:func:`dbfs.graph.id_dtype`) for the
neighbour ids, the hub table, the parents and the queues, and bitmaps as
uint32 words: ``2 * words`` uint32 words per local bitmap are bit-identical
to the CPU workers' ``words`` int64 words (little-endian), so frontier
slices cross the mesh in the CPU layout. Block partitions only: the
kernels index a partition's rows by ``global - base``.

After the device partitions of Gunrock's multi-GPU frontend (Pan, Wang,
Wu, Yang and Owens, "Multi-GPU Graph Analytics", IPDPS 2017): one CSR
slice per device, neighbour ids kept global.
"""
from __future__ import annotations

import numpy as np

from dbfs.errors import DbfsError
from dbfs.graph import id_dtype
from dbfs.partition import Partitioning
from dbfs.units import human

__all__ = ["_GpuPart", "_to_device", "device_bytes", "ranks_device_bytes", "worker_bytes", "warm_device",
           "_device_info"]

_COPIED = ("rank", "P", "kind", "n", "code", "q", "r", "count", "first", "base", "pad", "nloc", "nnz", "meta",
           "load_time", "prepare_time")


def device_bytes(nloc: int, nnz: int, n: int) -> int:
    """Device bytes of one block partition while searched: CSR (``indptr`` int64,
    neighbour ids), hub table, parents, two queues, four local bitmaps."""
    vb = np.dtype(id_dtype(n)).itemsize
    words32 = 2 * ((nloc + 63) >> 6)
    return 8 * (nloc + 1) + vb * nnz + vb * nloc * 4 + 4 * words32 * 4


def ranks_device_bytes(part: Partitioning, nnz: list) -> list:
    """:func:`device_bytes` of every rank of a block partitioning (its padded rows from :func:`_base_of`)
    holding ``nnz[rank]`` entries: what placement offers a GPU worker's budget."""
    from dbfs.bfs.dask.exchange import _base_of

    return [device_bytes(part.vertex_range(rk).stop - _base_of(part, rk), int(nnz[rk]), part.n_vertices)
            for rk in range(part.P)]


def worker_bytes(n: int) -> int:
    """Device bytes a GPU worker adds once per graph: claim scratch and claim queue over
    N, three global bitmaps, pairs of one level (at most N), the bitmap buffers shared
    through CUDA IPC and their private copy (:mod:`dbfs.bfs.dask.ipc`, at most three
    more bitmaps), and a 16 MiB margin."""
    vb = np.dtype(id_dtype(n)).itemsize
    gw32 = 2 * ((n + 63) >> 6)
    return 2 * vb * n + 6 * 4 * gw32 + 3 * vb * n + 8 * n + (1 << 24)


def _device_info():
    """(client.run on a GPU worker) this worker's device: id, name, total and free bytes."""
    import cupy as cp

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
    :mod:`dbfs.bfs.dask.warmup` for the Numba kernels)."""
    import cupy as cp

    from dbfs.bfs.gpu import _BLOCK, _grid, _i64, _kernels, expand

    k = _kernels(gp.vid)
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
    #: host copy: a partition whose validation runs on its worker (:mod:`dbfs.bfs.dask.built`)
    keep_parents = False

    def __init__(self, p):
        import cupy as cp

        from dbfs.bfs.gpu import whole

        if p.code != 0:
            raise DbfsError(f"partition {p.rank} is cyclic: GPU workers hold block partitions only; build the "
                            f"variant with --partitioning block")
        for k in _COPIED:
            setattr(self, k, getattr(p, k))
        vdt = np.dtype(id_dtype(p.n))
        self.indptr_host = p.indptr
        self.device_bytes = device_bytes(p.nloc, p.nnz, p.n)
        self.indptr = cp.asarray(p.indptr)
        self.indices = cp.asarray(np.asarray(p.indices).astype(vdt, copy=False))
        self.adj = whole(self.indices)                  # bfs.cu's ADJ_PARAMS: one device piece
        self.hub = cp.asarray(np.asarray(p.hub).astype(vdt, copy=False))
        self._finish()

    def _finish(self):
        """What every GPU partition derives on the device: its local base bitmap, the block starts, the
        kernels compiled (``rank``, ``P``, ``n``, ``nloc``, ``indptr`` and ``adj`` set)."""
        import cupy as cp

        from dbfs.bfs.gpu import _BLOCK, _VID, _grid, _i64, _kernels

        self.vid = _VID[np.dtype(id_dtype(self.n))]
        self.words = (self.nloc + 63) >> 6              # int64 words of a local bitmap (the CPU layout)
        nw32 = 2 * self.words
        self.base_visited = cp.empty(max(nw32, 1), cp.uint32)
        _kernels(self.vid)["base_visited"](_grid(nw32), (_BLOCK,),
                                           (self.indptr, _i64(self.nloc), _i64(nw32), self.base_visited))
        blocks = Partitioning(self.n, self.P, "block")
        self.starts_host = np.array([blocks.vertex_range(r).start for r in range(self.P)] + [self.n], np.int64)
        self.starts = cp.asarray(self.starts_host)
        warm_device(self)

    def info(self):
        import os

        return {**self.meta, "load_time": self.load_time, "prepare_time": self.prepare_time, "count": self.count,
                "pid": os.getpid(), "kind": "gpu", "device_bytes": int(self.device_bytes),
                "host_bytes": int(self.indptr_host.nbytes)}


def _to_device(p, worker: str = ""):
    """(task pinned to a GPU worker) the prepared host partition ``p`` as a :class:`_GpuPart`."""
    import cupy as cp

    try:
        return _GpuPart(p)
    except cp.cuda.memory.OutOfMemoryError:
        need = device_bytes(p.nloc, p.nnz, p.n)
        raise DbfsError(f"GPU worker {worker or '?'} ran out of device memory loading partition {p.rank} "
                        f"(about {human(need)}): lower --device-memory-limit so the rest goes to CPU "
                        f"workers, or use more GPU workers / partitions") from None

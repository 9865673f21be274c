"""GPU generation into the dataset store and the edges on the device (``--backend gpu``).

Importing it needs no CuPy: CuPy is imported inside the functions that use
the device.

Contracts (same stored bytes as the CPU paths; only the time differs):

- :func:`write_edges_gpu` fills a dataset's ``edges`` zarr array chunk by
  chunk from :func:`dbfs.generate.gpu.kronecker_edges_gpu`; the chunk
  checksums (:mod:`dbfs.checksum`, splitmix64 per row) are computed on the
  device with the same formula, and each is recorded as its chunk's digest
  (:func:`dbfs.store.integrity.record_digests`). Used by :func:`dbfs.store.write.generate` with
  ``backend="gpu"``; it keeps the whole edge list on the device, in the
  stored dtype, as ``memo["device_edges"]`` when it takes at most a quarter
  of the free device memory (Kernel 1 and validation then skip the read).
  With ``edges_path=None`` (a virtual dataset, :mod:`.virtual`) it only
  makes the chunks and their checksums; nothing is written.
- :func:`device_edges` of a Kronecker dataset, virtual or stored, regenerates
  the rows on the device chunk by chunk (:func:`.virtual.device_rows`, a pure
  function of the row range) and checks them against ``edges_checksum``
  there: no host copy, no read (the generator makes the rows faster than a
  stored list is read and decoded).
- :func:`device_chunks` hands GPU Kernel 1 (:mod:`dbfs.kernel1.build_gpu`,
  :mod:`dbfs.kernel1.passes_gpu`) the edge chunks on the device: stored
  chunks read and uploaded, a virtual Kronecker list's regenerated.

Overlap: device work is serialised on the default stream; host copies are
compressed and written by a thread pool while the device makes the next
chunk (zstd releases the GIL). At most ``2 * threads`` chunks are in flight.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import zarr

from dbfs.checksum import combine, partial_checksum
from dbfs.progress import bar
from dbfs.store.datasets import open_edges
from dbfs.store.integrity import record_digests
from dbfs.store.virtual import device_rows

_MIX = None


def _mix_kernel():
    """Per-row checksum term of :mod:`dbfs.checksum` as a CuPy ElementwiseKernel."""
    global _MIX
    if _MIX is None:
        import cupy as cp  # deferred: cupy

        _MIX = cp.ElementwiseKernel(
            "int64 u, int64 v, uint64 row", "uint64 h",
            """
            unsigned long long z;
            #define SPLITMIX(x) (z = (x) + 0x9E3779B97F4A7C15ULL, \
                z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL, \
                z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL, z ^ (z >> 31))
            unsigned long long a = SPLITMIX(row);
            a = SPLITMIX(a ^ (unsigned long long)u);
            h = SPLITMIX(a ^ ((unsigned long long)v * 0xD6E8FEB86659FD93ULL));
            #undef SPLITMIX
            """, "dbfs_edge_checksum")
    return _MIX


def checksum_gpu(block, start: int) -> int:
    """:func:`dbfs.checksum.partial_checksum` computed on the device.

    Parameters
    ----------
    block : cupy.ndarray, shape (k, 2)
        Rows ``[start, start + k)`` of an edge list.
    start : int
        Row index of the block's first row.

    Returns
    -------
    int
        The block's checksum part (mod 2**64).
    """
    import cupy as cp  # deferred: cupy

    k = int(block.shape[0])
    if k == 0:
        return 0
    rows = cp.arange(start, start + k, dtype=cp.uint64)
    h = _mix_kernel()(block[:, 0].astype(cp.int64), block[:, 1].astype(cp.int64), rows)
    return int(h.sum(dtype=cp.uint64)) & 0xFFFFFFFFFFFFFFFF


def _free_device_bytes() -> int:
    import cupy as cp  # deferred: cupy

    free, _ = cp.cuda.runtime.memGetInfo()
    return int(free + cp.get_default_memory_pool().free_bytes())


def write_edges_gpu(spec, edges_path: str | None, chunk: int, quiet: bool = False, threads: int | None = None):
    """Generate a Kronecker spec on the GPU into an existing zarr edges array.

    Parameters
    ----------
    spec : GraphSpec
        A ``kronecker`` spec.
    edges_path : str or None
        The dataset's (temp) ``edges`` array, already created; None: a
        virtual dataset, only the checksums are made.
    chunk : int
        Rows per zarr chunk.
    quiet : bool
        No progress display.
    threads : int, optional
        Host threads that compress and write chunks (None: one per CPU).

    Returns
    -------
    (list of int, dict)
        The chunk checksum parts, and a memo holding ``device_edges`` when
        the whole list fits a quarter of the free device memory.
    """
    import cupy as cp  # deferred: cupy

    from dbfs.generate.gpu import kronecker_edges_gpu  # deferred: cupy

    m = int(spec.n_edges)
    dtype = np.dtype(spec.stored_dtype)
    keep = m * 2 * dtype.itemsize <= _free_device_bytes() // 4
    full = cp.empty((m, 2), dtype=dtype) if keep else None
    arr = None if edges_path is None else zarr.open_array(edges_path, mode="r+").with_config(
        {"write_empty_chunks": True})
    parts = []
    threads = threads or os.cpu_count() or 1
    starts = list(range(0, m, chunk))
    with ThreadPoolExecutor(max_workers=threads) as pool, \
            bar(len(starts), f"generating {spec.name} on the GPU", quiet) as progress:
        pending = []
        for a in starts:
            b = min(a + chunk, m)
            dev = kronecker_edges_gpu(spec.scale, spec.edgefactor, spec.seed1, spec.seed2, a, b)
            parts.append(checksum_gpu(dev, a))  # = the digest of stored chunk a // chunk (same rule)
            dev = dev.astype(dtype, copy=False)
            if full is not None:
                full[a:b] = dev
            if arr is None:
                progress.update(1)
                continue
            host = cp.asnumpy(dev)

            def put(host=host, a=a, b=b, part=parts[-1]):
                arr[a:b] = host
                record_digests(edges_path, a, b, [part])

            pending.append(pool.submit(put))
            if len(pending) >= 2 * threads:
                pending.pop(0).result()
                progress.update(1)
        for f in pending:
            f.result()
            progress.update(1)
    return parts, ({"device_edges": full} if full is not None else {})


def read_edges(ds, threads: int | None = None) -> np.ndarray:
    """The stored edge list in host memory, chunks read by a thread pool, verified.

    Parameters
    ----------
    ds : Dataset
    threads : int, optional
        Reader threads (None: one per CPU).

    Returns
    -------
    numpy.ndarray
        (M, 2) in the stored dtype.

    Raises
    ------
    DbfsError
        A damaged chunk, or rows that fail ``edges_checksum`` (naming the fix).
    """
    arr = open_edges(ds.path, ds.attrs, verify_sum=False)
    out = np.empty(arr.shape, arr.dtype)
    step = int(arr.chunks[0]) * 4
    spans = [(a, min(a + step, arr.shape[0])) for a in range(0, arr.shape[0], step)]

    def get(span):
        a, b = span
        out[a:b] = arr[a:b]
        return partial_checksum(out[a:b], a)

    with ThreadPoolExecutor(max_workers=threads or os.cpu_count() or 1) as pool:
        parts = list(pool.map(get, spans))
    if ds.attrs.get("edges_checksum") and combine(parts) != ds.attrs["edges_checksum"]:
        raise arr.error(None, "rows differ from the edges_checksum recorded at generation")
    return out


def device_edges(ds):
    """The dataset's edges on the device.

    Parameters
    ----------
    ds : Dataset
        Its ``memo["device_edges"]`` is used when present, else filled by
        regenerating a Kronecker list on the device (:func:`regenerate_device`)
        or reading another kind's zarr store and uploading.

    Returns
    -------
    cupy.ndarray
        (M, 2) in the stored dtype.
    """
    import cupy as cp  # deferred: cupy

    e = ds.memo.get("device_edges")
    if e is None:
        e = ds.memo["device_edges"] = (regenerate_device(ds) if ds.spec.kind == "kronecker"
                                       else cp.asarray(read_edges(ds)))
    return e


def regenerate_device(ds, chunk: int | None = None):
    """A Kronecker dataset's edges made on the device, checked against ``edges_checksum``.

    Parameters
    ----------
    ds : Dataset
        Kind ``kronecker``, virtual or stored (the same bytes either way).
    chunk : int, optional
        Rows made at once (None: the dataset's ``chunk_edges``).

    Returns
    -------
    cupy.ndarray
        (M, 2) in the stored dtype; the same bytes as the CPU's regeneration.
    """
    import cupy as cp  # deferred: cupy

    arr = open_edges(ds.path, ds.attrs, verify_sum=False)  # checks the attributes
    m = int(arr.shape[0])
    step = int(chunk or arr.chunks[0])
    out = cp.empty((m, 2), dtype=arr.dtype)
    parts = []
    for a in range(0, m, step):
        b = min(a + step, m)
        out[a:b] = device_rows(ds.spec, a, b, arr.dtype)
        parts.append(checksum_gpu(out[a:b], a))
    if ds.attrs.get("edges_checksum") and combine(parts) != ds.attrs["edges_checksum"]:
        raise arr.error(None, "regenerated rows differ from the edges_checksum recorded at generation")
    return out


def edges_fit(ds, free: int | None = None) -> bool:
    """Whether a device copy of the edges fits (the rule :func:`write_edges_gpu` keeps it by).

    Parameters
    ----------
    ds : Dataset
    free : int, optional
        Free device bytes (None: asked from the device).

    Returns
    -------
    bool
        True when the copy is in ``ds.memo`` already, or the edges in their
        stored dtype take at most a quarter of ``free``.
    """
    free = _free_device_bytes() if free is None else int(free)
    return "device_edges" in ds.memo or ds.n_edges * 2 * np.dtype(ds.attrs["edge_dtype"]).itemsize <= free // 4


def search_edges(ds):
    """The INPUT edges for root selection and validation on the GPU backend.

    Parameters
    ----------
    ds : Dataset

    Returns
    -------
    cupy.ndarray, DeviceRows or zarr.Array
        The device copy when it is there or fits (:func:`edges_fit`), else a
        Kronecker list's rows regenerated on demand (:class:`DeviceRows`), else
        the stored array; the GPU validator and :func:`dbfs.roots.eligible`
        stream the last two in chunks.
    """
    if edges_fit(ds):
        return device_edges(ds)
    if ds.spec.kind == "kronecker":
        return DeviceRows(ds)
    return ds.edges()


class DeviceRows:
    """A Kronecker dataset's INPUT edges (virtual or stored) as row slices made on the device.

    ``rows[a:b]`` -> CuPy (b - a, 2) in the stored dtype
    (:func:`dbfs.store.virtual.device_rows`, the same bytes as a stored copy;
    the dataset's ``edges_checksum`` was checked on the device by Kernel 1's
    first sweep); ``shape``, ``dtype`` and ``chunks`` as the stored array's.
    What the GPU validator, ``count_nedge`` and root selection read when the
    edge list does not fit the device.
    """

    def __init__(self, ds):
        self.arr, self.spec = open_edges(ds.path, ds.attrs, verify_sum=False), ds.spec
        self.shape, self.dtype, self.chunks = self.arr.shape, self.arr.dtype, self.arr.chunks

    def __getitem__(self, key):
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise TypeError("DeviceRows reads row slices a[lo:hi] only")
        a, b, _ = key.indices(int(self.shape[0]))
        return device_rows(self.spec, a, max(a, b), self.dtype)


class _DeviceChunks:
    """A dataset's edges as device chunks for :func:`dbfs.kernel1.passes_gpu.build_csr_gpu_passes`.

    ``read(a, b)``: rows of the device copy in ``ds.memo`` when there is one,
    a Kronecker dataset's rows regenerated on the device (virtual or stored:
    the generator is a pure function of the row range, the same bytes as the
    stored list, and far faster than decoding it on the host), else the rows
    read (crc32c-checked) and uploaded. The first full sweep's rows are
    summed into :mod:`dbfs.checksum` parts; ``done()`` checks them against
    ``edges_checksum`` (a one-line error marking the dataset corrupt).
    """

    def __init__(self, ds, step: int | None = None):
        self.arr = open_edges(ds.path, ds.attrs, verify_sum=False)
        self.memo = ds.memo.get("device_edges")
        self.regen = self.memo is None and ds.spec.kind == "kronecker"
        self.spec = ds.spec
        self.m = int(self.arr.shape[0])
        self.step = int(step or (1 << 22 if self.memo is not None else self.arr.chunks[0]))
        self.want = ds.attrs.get("edges_checksum")
        self.parts = [] if self.want else None

    def read(self, a: int, b: int):
        import cupy as cp  # deferred: cupy

        if self.memo is not None:
            e = self.memo[a:b]
        elif self.regen:            # the generator's int64 rows, as Kernel 1 reads them (same values)
            e = device_rows(self.spec, a, b, np.int64)
        else:
            e = cp.asarray(self.arr[a:b])
        if self.parts is not None:
            self.parts.append(checksum_gpu(e, a))
        return e

    def partial(self) -> int:
        """The :mod:`dbfs.checksum` part of the rows read so far (a reader of some of the rows: the caller adds
        the readers' parts up); nothing is summed or checked after it."""
        parts, self.parts = self.parts or [], None
        return sum(int(p) for p in parts) & 0xFFFFFFFFFFFFFFFF

    def done(self) -> None:
        if self.parts is not None:
            parts, self.parts = self.parts, None
            if combine(parts) != self.want:
                raise self.arr.error(None, "rows differ from the edges_checksum recorded at generation")


def device_chunks(ds, step: int | None = None) -> _DeviceChunks:
    """The chunk source GPU Kernel 1 in passes reads a dataset through (:class:`_DeviceChunks`).

    Parameters
    ----------
    ds : Dataset
    step : int, optional
        Rows per read (None: the dataset's chunk, or 2**22 rows of a device copy).

    Returns
    -------
    _DeviceChunks
    """
    return _DeviceChunks(ds, step)

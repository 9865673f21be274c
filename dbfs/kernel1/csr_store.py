"""Stored CSR variants: the on-disk layout, writing one atomically, loading it checked.

Contract
--------
Variant ``<dataset>/csr/<variant>/`` (name from :func:`.variants.variant_name`)
is a zarr v3 group::

    zarr.json             attributes; ``complete: true`` written LAST
    part-PPPP/indptr      int64 (local_count + 1,): running row ends, from 0
    part-PPPP/indices     int32|int64 (nnz,): GLOBAL neighbour ids (new ids in
                          ``-deg`` variants), width :func:`dbfs.graph.index_dtype`
    perm                  int64 (N,), ``-deg`` variants only: perm[new] = original

Partition ``PPPP`` holds the rows of the vertices :class:`dbfs.partition.
Partitioning` gives it, in local-index order. Arrays are zstd (level 1) +
crc32c (:func:`dbfs.store.integrity.compressors`), ``indices`` blosc's zstd
(level 1) over byte-shuffled ids + crc32c
(:func:`dbfs.store.integrity.adjacency_compressors`), chunks of at most
``2**21`` entries, and every chunk is written, zeros included, so a missing
chunk means damage. ``checksums[j]`` holds ``nnz``,
``indices_sum`` and ``indptr_sum`` of part ``j``, each the sum of the array's
values mod 2**64 (independent of chunking), and every array records the
position-keyed digest of each of its chunks (``dbfs_digests``,
:mod:`dbfs.store.integrity`), computed as the chunk is written, which the
order-free sums cannot replace: two entries swapped keep both sums.

Writing (:func:`_publish`, :func:`store_csr`): a variant is built in
``csr/.<variant>.tmp-<id>/``, its attributes and then the marker are
written, and it is renamed into place (an old copy is moved aside first), so
``csr/<variant>`` is absent or was complete when it appeared. Builders of
one variant exclude each other and never run while the dataset is
regenerated (:func:`build_lock`); a full disk is one line and the temporary
directory is removed. Loading (:func:`load_partition`, :func:`load_csr`,
:func:`load_perm`; :func:`open_partition` for readers that place the
arrays themselves, e.g. a GPU worker's pinned slabs) decodes the chunks in
threads straight into the result (:mod:`dbfs.store.chunk_read`), each
through its crc32c, checks the marker, shapes, nnz, every chunk's digest
(on the values it decoded, in the same threads) and both checksums (summed
there too) and raises a one-line
:class:`DbfsError` naming the array, the chunk and the rebuild command; the
damage is recorded in the variant's ``corrupt`` attribute, and
:func:`reusable` never hands such a variant to a builder for reuse.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numba
import numpy as np
import zarr

from dbfs import __version__
from dbfs.errors import DbfsError
from dbfs.graph import CSRGraph, index_dtype
from dbfs.kernel1.kernels import _gather_rows, _invert, _numba_threads, _wrapsum
from dbfs.store.chunk_read import ChunkReader
from dbfs.store.variants import _variant_attrs, reusable_variant, variant_name
from dbfs.partition import Partitioning
from dbfs.progress import say
from dbfs.store.integrity import (DECODE_ERRORS, CheckedArray, adjacency_compressors, compressors, mark_corrupt,
                                  seal_digests, write_rows)
from dbfs.store.locks import dataset_lock, variant_lock, writer_lock
from dbfs.store.space import is_no_space, no_space

__all__ = ["load_partition", "open_partition", "StoredPart", "load_perm", "load_csr", "store_csr", "reusable",
           "build_lock"]

_MAX_OUT_CHUNK = 1 << 21       # zarr chunk length of indices / indptr
_MIN_OUT_CHUNK = 1 << 10
_ZSTD_LEVEL = 1


def _writable(z):
    """The array with every chunk written, zeros included: a missing chunk then means damage.

    (``open_array(config=...)`` ignores the setting in zarr 3.1; ``with_config`` applies it.)
    """
    return z.with_config({"write_empty_chunks": True}) if hasattr(z, "with_config") else z


def _fix(hint: str) -> str:
    return f"rebuild it with {hint} (a damaged variant is not reused) or remove the dataset with `dbfs datasets rm`"


def _open_checked(vpath: Path, key: str, label: str, hint: str) -> CheckedArray:
    """Array ``key`` of a variant, opened for checked reads (a one-line DbfsError naming a bad chunk)."""
    return CheckedArray(zarr.open_array(str(vpath / key), mode="r"), vpath, key, label, _fix(hint), unit="entries")


def _read_checked(vpath: Path, key: str, label: str, hint: str) -> np.ndarray:
    """All of array ``key`` of a variant, every chunk checked (:class:`dbfs.store.chunk_read.ChunkReader`)."""
    arr = _open_checked(vpath, key, label, hint)
    with ChunkReader() as reader:
        return reader.read(arr)[0]


def reusable(dataset_path, P: int, partitioning: str, dedupe: bool, relabel: str, quiet: bool = False):
    """:func:`.variants.reusable_variant`, except that a variant recorded as damaged is not reused.

    Parameters
    ----------
    dataset_path : path-like
        The dataset's directory.
    P, partitioning, dedupe, relabel
        The value-affecting options.
    quiet : bool
        No status line when a damaged variant is skipped.

    Returns
    -------
    dict or None
        The reusable variant's attributes (``reused=True``), or None: build it.
    """
    old = reusable_variant(dataset_path, P, partitioning, dedupe, relabel)
    if old is not None and old.get("corrupt"):
        rec = old["corrupt"]
        say(f"CSR variant {old.get('variant')} of {Path(dataset_path).name} is corrupt ({rec.get('array')} chunk "
            f"{rec.get('chunk')}: {rec.get('reason')}); rebuilding it", quiet)
        return None
    return old


@contextlib.contextmanager
def build_lock(dataset_path, variant: str, quiet: bool = False):
    """Hold the dataset's lock shared and the variant's exclusively while building it.

    Parameters
    ----------
    dataset_path : path-like
        The dataset's directory.
    variant : str
        The variant's name.
    quiet : bool
        No status lines while waiting.

    Yields
    ------
    float
        Seconds waited for another writer (then re-check :func:`reusable`).
    """
    p = Path(dataset_path)
    with writer_lock(dataset_lock(p.parent, p.name), f"dataset {p.name}", shared=True, quiet=quiet) as w1, \
            writer_lock(variant_lock(p, variant), f"CSR variant {variant} of {p.name}", quiet=quiet) as w2:
        yield w1 + w2


def _publish(vg, attrs: dict, t_start: float, tmp: Path, final: Path) -> None:
    """Finish a variant built in ``tmp``: ``construction_time`` (from
    ``t_start``), the attributes, the complete marker LAST, then the rename
    into ``final`` (an incomplete or stale one there is moved aside first)."""
    attrs["checksum_rule"] = "indices_sum / indptr_sum: sum of the array's values mod 2**64"
    attrs["dbfs_version"] = __version__
    attrs["construction_time"] = time.perf_counter() - t_start
    vg.attrs.update(attrs)
    vg.attrs["complete"] = True
    attrs["complete"] = True
    if final.exists():
        aside = final.parent / f".{final.name}.old-{uuid.uuid4().hex[:12]}"
        os.rename(final, aside)
        os.rename(tmp, final)
        shutil.rmtree(aside, ignore_errors=True)
    else:
        os.rename(tmp, final)
    attrs["reused"] = False


class StoredPart:
    """One partition of a complete variant, opened for a checked read (:func:`open_partition`).

    ``indptr`` and ``indices`` are the stored arrays (:class:`dbfs.store.integrity.CheckedArray`), ``meta``
    what :func:`load_partition` returns without ``load_time``, ``nnz`` the recorded entry count. Readers
    fill buffers of their own with :meth:`read_indptr` and :class:`dbfs.store.chunk_read.ChunkReader`
    (``indices``, whole or in spans), then pass the sum of every value of ``indices`` to :meth:`check_sums`.
    """

    def __init__(self, dataset_path, variant: str, rank: int):
        vpath, attrs, hint = _variant_attrs(dataset_path, variant)
        self.variant, self.rank, self.vpath, self.hint = variant, int(rank), vpath, hint
        self.dname = Path(dataset_path).name
        label = f"dataset {self.dname}: CSR variant {variant}"
        if attrs.get("corrupt"):
            rec = attrs["corrupt"]
            raise DbfsError(f"{label} is corrupt ({rec.get('array')} chunk {rec.get('chunk')}: {rec.get('reason')}, "
                            f"seen {rec.get('seen_at')}): {_fix(hint)}")
        P = int(attrs["P"])
        if not 0 <= self.rank < P:
            raise DbfsError(f"rank {rank} is out of range for CSR variant {variant} (P={P}): use 0..{P - 1}")
        part = Partitioning(int(attrs["n_vertices"]), P, attrs["partitioning"])
        self.nnz = int(attrs["nnz"][self.rank])
        self.checksums = attrs["checksums"][self.rank]
        self.count = part.local_count(self.rank)
        try:
            self.indptr = _open_checked(vpath, f"part-{self.rank:04d}/indptr", label, hint)
            self.indices = _open_checked(vpath, f"part-{self.rank:04d}/indices", label, hint)
        except (FileNotFoundError, KeyError, ValueError) as exc:
            raise self.bad(f"missing array: {type(exc).__name__}") from None
        if self.indptr.shape != (self.count + 1,):
            raise self.bad(f"indptr has {self.indptr.shape[0]} entries, expected {self.count + 1}")
        self.indptr_sum = None
        self.meta = {
            "variant": variant, "rank": self.rank, "P": P, "partitioning": attrs["partitioning"],
            "n_vertices": int(attrs["n_vertices"]), "vertex_range": part.vertex_range(self.rank), "nnz": self.nnz,
            "options": attrs.get("options", {}),
        }

    def bad(self, what: str) -> DbfsError:
        """Record the partition as corrupt; the one-line error naming ``what`` and the rebuild command."""
        mark_corrupt(self.vpath, f"part-{self.rank:04d}", None, what)
        return DbfsError(f"CSR variant {self.variant} of {self.dname} is corrupt (part {self.rank}: {what}): "
                         f"{_fix(self.hint)}")

    def read_indptr(self, reader, out: np.ndarray | None = None) -> np.ndarray:
        """The row ends, read checked by ``reader`` (into ``out`` when given: int64, local_count + 1 entries),
        matched with the entry count; their sum is kept for :meth:`check_sums`."""
        if out is None:
            out = np.empty(self.indptr.shape, self.indptr.dtype)
        self.indptr_sum = reader.read_into(self.indptr, out)
        if self.indices.shape != (self.nnz,) or int(out[-1]) != self.nnz or int(out[0]) != 0:
            raise self.bad(f"nnz mismatch: indptr[-1]={int(out[-1])}, indices={self.indices.shape[0]}, "
                           f"expected {self.nnz}")
        return out

    def check_sums(self, indices_sum: int) -> None:
        """Both recorded checksums against the sums of the values read (``indptr``'s from :meth:`read_indptr`)."""
        if int(indices_sum) != int(self.checksums["indices_sum"]) or \
                self.indptr_sum is None or int(self.indptr_sum) != int(self.checksums["indptr_sum"]):
            raise self.bad("checksum mismatch")


def open_partition(dataset_path, variant: str, rank: int) -> StoredPart:
    """Partition ``rank`` of a complete variant, opened for a checked read (:class:`StoredPart`).

    Raises
    ------
    DbfsError
        Missing, incomplete or damaged variant, rank out of range, a missing array or a bad ``indptr``
        shape (the message names the rebuild command).
    """
    return StoredPart(dataset_path, variant, rank)


def load_partition(dataset_path, variant: str, rank: int, threads: int | None = None):
    """Load one partition of a complete variant, checked.

    Parameters
    ----------
    dataset_path : path-like
        The dataset's directory.
    variant : str
        The variant's name (:func:`.variants.variant_name`).
    rank : int
        The partition, ``0 <= rank < P``.
    threads : int, optional
        Threads decoding chunks (:class:`dbfs.store.chunk_read.ChunkReader`; None: its default).

    Returns
    -------
    indptr : numpy.ndarray
        int64 (local_count + 1,).
    indices : numpy.ndarray
        Global vertex ids (new ids in relabelled variants).
    meta : dict
        variant, rank, P, partitioning, n_vertices, vertex_range (a
        ``range``), nnz, options, load_time (s).

    Raises
    ------
    DbfsError
        Missing or incomplete variant, bad shapes, nnz or checksums (the
        message names the rebuild command).
    """
    t0 = time.perf_counter()
    sp = open_partition(dataset_path, variant, rank)
    with ChunkReader(threads) as reader:
        indptr = sp.read_indptr(reader)
        indices, s_ix = reader.read(sp.indices)
    sp.check_sums(s_ix)
    return indptr, indices, {**sp.meta, "load_time": time.perf_counter() - t0}


def load_perm(dataset_path, variant: str):
    """The relabelling of a variant.

    Parameters
    ----------
    dataset_path : path-like
        The dataset's directory.
    variant : str
        The variant's name.

    Returns
    -------
    numpy.ndarray or None
        int64 ``perm[new] = original`` of a relabelled variant, None otherwise.
    """
    vpath, attrs, hint = _variant_attrs(dataset_path, variant)
    if attrs.get("options", {}).get("relabel", "none") == "none":
        return None
    try:
        perm = _read_checked(vpath, "perm", f"dataset {Path(dataset_path).name}: CSR variant {variant}", hint)
    except (FileNotFoundError, KeyError, ValueError):
        perm = None
    if perm is None or perm.shape != (int(attrs["n_vertices"]),):
        raise DbfsError(f"CSR variant {variant} of {Path(dataset_path).name} has a bad perm array: "
                        f"rebuild it with {hint}")
    return perm


def load_csr(dataset_path, variant: str) -> CSRGraph:
    """Load a whole variant as one in-memory graph.

    Parameters
    ----------
    dataset_path : path-like
        The dataset's directory.
    variant : str
        The variant's name.

    Returns
    -------
    CSRGraph
        Partitions joined (cyclic rows re-interleaved into global order),
        ``perm``/``iperm`` when relabelled, ``meta`` with variant, dedupe,
        relabel, n_edges, construction_time and load_time.
    """
    t0 = time.perf_counter()
    vpath, attrs, hint = _variant_attrs(dataset_path, variant)
    P = int(attrs["P"])
    N = int(attrs["n_vertices"])
    parts = [load_partition(dataset_path, variant, j) for j in range(P)]
    idt = np.dtype(attrs.get("index_dtype", index_dtype(N).name))
    if P == 1:
        indptr, indices = parts[0][0], parts[0][1]
    else:
        part = Partitioning(N, P, attrs["partitioning"])
        nnz = sum(int(p[0][-1]) for p in parts)
        deg = np.zeros(N, np.int64)
        for j, (ip, _, _) in enumerate(parts):
            deg[part.owned_vertices(j)] = np.diff(ip)
        indptr = np.zeros(N + 1, np.int64)
        np.cumsum(deg, out=indptr[1:])
        indices = np.empty(nnz, idt)
        with _numba_threads():
            for j, (ip, ix, _) in enumerate(parts):
                _gather_rows(indptr, indices, ip, ix, part.owned_vertices(j))
    perm = load_perm(dataset_path, variant)
    iperm = _invert(perm) if perm is not None else None
    opts = attrs.get("options", {})
    meta = {"variant": variant, "dedupe": opts.get("dedupe", True), "relabel": opts.get("relabel", "none"),
            "n_edges": attrs.get("n_edges"), "construction_time": attrs.get("construction_time"),
            "load_time": time.perf_counter() - t0}
    return CSRGraph(indptr, indices, N, perm=perm, iperm=iperm, meta=meta)


def store_csr(dataset_path, indptr: np.ndarray, indices: np.ndarray, n_edges: int, dedupe: bool,
              t_start: float, builder: str, threads: int | None = None) -> dict:
    """Store a whole in-memory CSR as variant ``p1-block[-dup]`` of a dataset.

    Writes the layout, attributes and checksums that
    :func:`dbfs.kernel1.partitioned.build_partitioned` writes: temp dir +
    rename, complete marker last.

    Parameters
    ----------
    dataset_path : path-like
        The dataset's directory.
    indptr, indices : numpy.ndarray
        The CSR in host memory (``indptr`` int64).
    n_edges : int
        Input tuples (recorded).
    dedupe : bool
        Whether duplicates were dropped (selects ``-dup``).
    t_start : float
        ``time.perf_counter()`` when the build began; ``construction_time``
        runs from it to the marker.
    builder : str
        Recorded in ``options.builder`` (e.g. ``"gpu"``).
    threads : int, optional
        Threads that compress and write chunks (zstd releases the GIL);
        None: one per CPU.

    Returns
    -------
    dict
        The variant's attributes (``complete=True``, ``reused=False``).
    """
    dataset_path = Path(dataset_path)
    name = variant_name(1, "block", dedupe, "none")
    csr_root = dataset_path / "csr"
    need = int(indptr.nbytes) + int(indices.nbytes)

    try:
        with build_lock(dataset_path, name):
            zarr.open_group(str(csr_root), mode="a")
            for stale in [*csr_root.glob(f".{name}.tmp-*"), *csr_root.glob(f".{name}.old-*")]:
                shutil.rmtree(stale, ignore_errors=True)  # left by a killed build (we hold the variant's lock)
            return _store_whole(dataset_path, name, indptr, indices, n_edges, dedupe, t_start, builder, threads)
    except OSError as e:
        if is_no_space(e):
            raise no_space(e, csr_root, need, f"CSR variant {name} of {dataset_path.name}") from None
        raise


def _store_whole(dataset_path: Path, name: str, indptr, indices, n_edges, dedupe, t_start, builder, threads) -> dict:
    """The body of :func:`store_csr` (under its lock): temp dir, arrays, attributes, publish."""
    N = int(indptr.shape[0] - 1)
    nnz = int(indptr[-1])
    csr_root = dataset_path / "csr"
    final = csr_root / name
    tmp = csr_root / f".{name}.tmp-{uuid.uuid4().hex[:12]}"
    try:
        vg = zarr.open_group(str(tmp), mode="w")
        pg = zarr.open_group(str(tmp / "part-0000"), mode="w")
        arrays = {"indptr": (indptr, "row", compressors(_ZSTD_LEVEL)),
                  "indices": (indices, "entry", adjacency_compressors(_ZSTD_LEVEL))}
        jobs = []
        for key, (arr, dim, comp) in arrays.items():
            z = _writable(pg.create_array(key, shape=arr.shape, chunks=(_MAX_OUT_CHUNK,), dtype=arr.dtype,
                                          compressors=comp, fill_value=0, dimension_names=[dim]))
            jobs += [(z, key, arr, a, min(a + 4 * _MAX_OUT_CHUNK, arr.shape[0]))
                     for a in range(0, arr.shape[0], 4 * _MAX_OUT_CHUNK)]

        def put(job):
            z, key, arr, a, b = job
            return write_rows(z, tmp / "part-0000" / key, a, arr[a:b])

        with ThreadPoolExecutor(max_workers=threads or os.cpu_count() or 1) as pool:
            list(pool.map(put, jobs))
        for key in arrays:
            seal_digests(tmp / "part-0000" / key)
        with _numba_threads():
            T = numba.get_num_threads()
            checks = [{"nnz": nnz, "indices_sum": int(_wrapsum(indices, T)), "indptr_sum": int(_wrapsum(indptr, T))}]
        deg = np.diff(indptr)
        part = Partitioning(N, 1, "block")
        attrs = {
            "variant": name, "dataset": dataset_path.name, "P": 1, "partitioning": "block",
            "n_vertices": N, "n_edges": int(n_edges), "vertex_ranges": part.to_attrs()["vertex_ranges"],
            "nnz": [nnz], "nnz_total": nnz, "index_dtype": np.dtype(indices.dtype).name,
            "degree": {"min": int(deg.min()) if N else 0, "max": int(deg.max()) if N else 0,
                       "mean": nnz / N if N else 0.0, "isolated": int(np.count_nonzero(deg == 0))},
            "options": {"dedupe": bool(dedupe), "relabel": "none", "builder": builder},
            "chunks": {"indptr": _MAX_OUT_CHUNK, "indices": _MAX_OUT_CHUNK},
            "checksums": checks,
        }
        _publish(vg, attrs, t_start, tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return attrs

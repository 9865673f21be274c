"""Kernel 1 out of core on Dask: a zarr edge list -> a partitioned CSR variant in zarr.

Contract
--------
``build_partitioned(dataset_path, P, partitioning, dedupe, relabel, ...)``
builds variant ``csr/<variant_name(...)>`` of a dataset (layout:
:mod:`dbfs.kernel1.csr_store`) with exactly the bytes of the in-memory
:func:`dbfs.kernel1.inmemory.build_csr` (the same output contract), split
over ``P`` partitions by :class:`dbfs.partition.Partitioning`. A complete
variant with the same value-affecting options is reused. ``memory_budget``,
the client, its workers and the edge chunking change only how the work is
cut, never the result.

Input: a dataset (zarr v3 group) with attributes ``n_vertices``,
``n_edges``, ``complete`` whose edges :func:`dbfs.store.open_edges` reads:
the stored ``edges`` array (M, 2) chunked along rows, or a virtual
dataset's regenerated rows (:mod:`dbfs.store.virtual`, same bytes, chunked
by ``chunk_edges``). The variant is written
to ``csr/.<variant>.tmp-<uuid>/`` and renamed to ``csr/<variant>/`` after its
``complete`` attribute is written (last).

Integrity: every edge chunk is read through its crc32c
(:func:`dbfs.store.open_edges`), and the per-slice :mod:`dbfs.checksum`
parts of phase 1 must add up to the dataset's ``edges_checksum`` before
phase 2 starts; either failure is a one-line :class:`DbfsError` naming the
dataset, the chunk and the fix, and marks the dataset corrupt. A variant
recorded as damaged is rebuilt, not reused. Builders of one variant exclude
each other (:func:`.csr_store.build_lock`); a full disk is one line and the
temporary directory is removed.

Method
------
Phases, each a set of dask tasks with a barrier on the driver; tasks are
keyed ``kernel1-<phase>-<index>-<build id>`` (``kernel1-degree``,
``kernel1-degree-sum``, ``kernel1-bucket``, ``kernel1-rows``,
``kernel1-write``; ``kernel1-iperm`` for the shared relabelling) so the
dashboard's task stream and progress bars name the stage:

R. (``relabel="degree"`` only) per edge slice, raw degree counts (int64, N);
   pairwise tree sum; the driver derives ``perm``/``iperm``.
1. *bucket*: per edge slice (whole zarr chunks, or slices of one chunk), emit
   both directions, drop self-loops, map through ``iperm``, key every entry by
   ``(owner(src), fine block of local(src))`` and counting-sort by key; write
   ``scratch/eNNNNNN.src`` (local source index) and ``.dst`` (global
   neighbour id) as raw little-endian files; return the key counts.
2. the driver sums the key counts and cuts each partition's fine blocks into
   *sub-ranges* of consecutive local rows whose phase-2 cost fits the budget
   (:mod:`.plan`). *rows*: per (partition, sub-range), read that key range
   from every bucket file, build the rows (the in-memory row builder,
   directed, on local rows), write ``scratch/rPPPP-SSSSS.ptr`` (int64 running
   row ends) and ``.idx``.
3. *write*: per (partition, range of whole zarr chunks), assemble ``indptr``
   or ``indices`` chunks from the sub-range files and write them; exactly one
   task writes each zarr chunk. Checksums are summed from what was written,
   and each chunk's position-keyed digest is recorded as it is written
   (:func:`dbfs.store.integrity.write_rows`, sealed into the array's attributes).

The per-task memory model and the budget rule are in :mod:`.plan`. Scratch
files live in the temp dir, or under ``scratch`` (:func:`scratch_bytes`
bounds them); the bucket files are removed once phase 2 is done, so the
disk holds buckets + rows, then rows + CSR, never all three. Workers on
several hosts need the dataset and the scratch on a shared filesystem.
"""
from __future__ import annotations

import os
import shutil
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import dask
import numba
import numpy as np
import zarr

from dbfs.checksum import chunk_digests, combine, partial_checksum
from dbfs.errors import DbfsError
from dbfs.graph import index_dtype, id_dtype
from dbfs.kernel1.csr_store import _ZSTD_LEVEL, _publish, _writable, build_lock, reusable
from dbfs.kernel1.inmemory import _SERIAL_BELOW, _build_rows, degree_permutation, raw_degree
from dbfs.kernel1.kernels import _count_keys, _numba_threads, _scatter_keys, _wrapsum
from dbfs.kernel1.plan import (_default_budget, _edge_slices, _fine_blocks, _row_plan, _total_threads,
                               _write_chunking)
from dbfs.store.datasets import damage_text, edges_fix, open_edges
from dbfs.store.variants import variant_name
from dbfs.partition import Partitioning
from dbfs.progress import compute
from dbfs.store.integrity import (adjacency_compressors, corrupt_message, mark_corrupt, seal_digests, set_digests,
                                  write_rows)
from dbfs.store.integrity import compressors as codecs
from dbfs.store.space import is_no_space, no_space
from dbfs.zattrs import read_attrs

__all__ = ["build_partitioned", "scratch_bytes", "disk_need", "check_scratch"]


def _open_dataset(dataset_path):
    """(edges array, attributes) of a complete dataset, stored or virtual, else a DbfsError naming the fix."""
    path = Path(dataset_path)
    name = path.name
    attrs = read_attrs(path, missing=f"dataset {name} not found at {path}: generate it first with `dbfs generate`",
                       fix="regenerate it with `dbfs generate`")
    if not attrs.get("complete", False):
        raise DbfsError(f"dataset {name} is incomplete (no complete marker): regenerate it with `dbfs generate`")
    if attrs.get("corrupt"):
        raise DbfsError(f"dataset {name} is corrupt ({damage_text(attrs['corrupt'])}): {edges_fix(path, attrs)}")
    for k in ("n_vertices", "n_edges"):
        if k not in attrs:
            raise DbfsError(f"dataset {name} lacks attribute {k}: regenerate it with `dbfs generate`")
    try:
        edges = open_edges(path, attrs, verify_sum=False)
    except (FileNotFoundError, KeyError):
        raise DbfsError(f"dataset {name} has no edges array: regenerate it with `dbfs generate`") from None
    if len(edges.shape) != 2 or edges.shape[1] != 2:
        raise DbfsError(f"dataset {name}: edges has shape {edges.shape}, expected (M, 2): regenerate it")
    if int(attrs["n_edges"]) != edges.shape[0]:
        raise DbfsError(f"dataset {name}: n_edges={attrs['n_edges']} but edges has {edges.shape[0]} rows: "
                        "regenerate it")
    return edges, attrs


def _run(tasks, client, progress: bool, label: str = "Kernel 1"):
    """Compute a list of dask.delayed on the client (distributed) or the threaded scheduler."""
    if not tasks:
        return []
    return list(compute(tasks, client, label, quiet=not progress))


def _share(obj, client, name):
    """One graph key (or one scattered future) for a large array shared by many tasks."""
    if client is not None:
        return client.scatter(obj, broadcast=True, hash=False)
    return dask.delayed(obj, name=f"{name}-{uuid.uuid4().hex}")


def _key(phase: str, i: int, run: str) -> str:
    """The task key ``kernel1-<phase>-<i>-<run>`` (dask's ``key_split`` shows ``kernel1-<phase>``)."""
    return f"kernel1-{phase}-{i:06d}-{run}"


def _read_into(path, dtype, out, offset_entries):
    """Read ``out.size`` entries of ``dtype`` from raw file ``path`` at entry ``offset_entries``."""
    if out.size == 0:
        return
    with open(path, "rb") as f:
        f.seek(int(offset_entries) * dtype.itemsize)
        n = f.readinto(memoryview(out).cast("B"))
    if n != out.nbytes:
        raise DbfsError(f"scratch file {path} is truncated: rebuild the CSR variant")


# ---- phase R: raw degrees --------------------------------------------
def _task_degree(edges_path, r0, r1, n, nt):
    z = _edges(edges_path)
    e = z[r0:r1]
    with _numba_threads(nt):
        try:
            return raw_degree(e, n)
        except DbfsError:
            raise _out_of_range(z, e, r0, n) from None


def _task_add(x, y):
    return x + y


# ---- phase 1: bucket --------------------------------------------------
def _edges(edges_path):
    """The dataset's edges, every chunk read through its crc32c (a damaged one: a one-line DbfsError)."""
    return open_edges(Path(edges_path).parent, verify_sum=False)


def _out_of_range(z, e, r0, n):
    """The error for rows of ``e`` (rows r0.. of ``z``) holding ids outside [0, n)."""
    row = r0 + int(np.flatnonzero((e >= n).any(axis=1))[0])
    chunk = row // int(z.chunks[0])
    return z.error(chunk, f"ids outside [0, {n}) (n_vertices), first at row {row}",
                   (chunk * int(z.chunks[0]), min((chunk + 1) * int(z.chunks[0]), z.shape[0])))


def _task_bucket(edges_path, r0, r1, spec, iperm, out_prefix, nt):
    """Bucket files of edge rows [r0, r1) -> (key counts, the rows' :mod:`dbfs.checksum` part)."""
    z = _edges(edges_path)
    e = z[r0:r1]
    a, b = e[:, 0], e[:, 1]
    ip = np.empty(0, np.int64) if iperm is None else iperm
    K = spec["P"] * spec["nfb"]
    args = (spec["code"], spec["P"], spec["q"], spec["r"], spec["nfb"], spec["fshift"], spec["fbounds"])
    with _numba_threads(1 if a.size < _SERIAL_BELOW else nt):
        T = numba.get_num_threads()
        nchunks = T if a.size >= (1 << 16) else 1
        counts = _count_keys(a, b, True, ip, *args, nchunks, spec["N"])
        if counts[:, -1].any():
            raise _out_of_range(z, e, r0, spec["N"])
        part = partial_checksum(e, r0)
        counts = counts[:, :-1]
        tot = counts.sum(axis=0)
        E = int(tot.sum())
        koff = np.zeros(K, np.int64)
        np.cumsum(tot[:-1], out=koff[1:])
        cursors = koff + np.cumsum(counts, axis=0) - counts
        src = np.empty(E, spec["sdt"])
        dst = np.empty(E, spec["idt"])
        _scatter_keys(a, b, True, ip, *args, np.arange(K, dtype=np.int64), cursors, src, dst)
    del e, a, b
    src.tofile(out_prefix + ".src")
    dst.tofile(out_prefix + ".dst")
    return tot, part


# ---- phase 2: rows ------------------------------------------------------
def _task_rows(pieces, n_entries, l0, n_rows, spec, dedupe, out_prefix, nt):
    """pieces: list of (prefix, entry offset, count) into bucket files; builds local rows l0..l0+n_rows."""
    src = np.empty(n_entries, spec["sdt"])
    dst = np.empty(n_entries, spec["idt"])
    o = 0
    for prefix, off, cnt in pieces:
        _read_into(prefix + ".src", src.dtype, src[o:o + cnt], off)
        _read_into(prefix + ".dst", dst.dtype, dst[o:o + cnt], off)
        o += cnt
    if l0:
        src -= src.dtype.type(l0)
    pairs = [src, dst]
    del src, dst
    with _numba_threads(1 if n_entries < 2 * _SERIAL_BELOW else nt):
        indptr, indices = _build_rows(pairs, n_rows, False, None, spec["idt"], dedupe, spec["N"])
    indptr[1:].tofile(out_prefix + ".ptr")
    indices.tofile(out_prefix + ".idx")
    deg = np.diff(indptr)
    return {
        "nnz": int(indptr[-1]),
        "deg_min": int(deg.min()) if n_rows else None,
        "deg_max": int(deg.max()) if n_rows else None,
        "isolated": int(np.count_nonzero(deg == 0)),
    }


# ---- phase 3: write -----------------------------------------------------
def _task_write(arr_path, a, b, pieces, dtype, lead_zero, nt):
    """Write positions [a, b) of a zarr array from pieces (path, entry offset, count, add)."""
    out = np.empty(b - a, dtype)
    o = 0
    if lead_zero:
        out[0] = 0
        o = 1
    for path, off, cnt, add in pieces:
        _read_into(path, out.dtype, out[o:o + cnt], off)
        if add:
            out[o:o + cnt] += add
        o += cnt
    assert o == out.size, (o, out.size)
    z = _writable(zarr.open_array(arr_path, mode="r+"))
    write_rows(z, arr_path, a, out)  # and its chunks' digests, sealed by _phase_write
    with _numba_threads(nt):
        return int(_wrapsum(out, numba.get_num_threads()))



# ---- the driver ---------------------------------------------------------
def _fresh_tmp(csr_root: Path, name: str, scratch_root: Path | None = None):
    """(temp dir, its scratch dir, its zarr group) for building variant ``name``.

    The scratch dir is ``<temp dir>/scratch``, or ``<scratch_root>/.dbfs-kernel1-<variant>-<id>`` (a faster or
    larger file system, e.g. node-local disk or ``/dev/shm``). Stale temps of this variant are removed first
    (left by a killed build; the caller holds the variant's lock, :func:`.csr_store.build_lock`)."""
    zarr.open_group(str(csr_root), mode="a")
    for stale in [*csr_root.glob(f".{name}.tmp-*"), *csr_root.glob(f".{name}.old-*")]:
        shutil.rmtree(stale, ignore_errors=True)   # left by a killed build (we hold the variant's lock)
    run = uuid.uuid4().hex[:12]
    tmp = csr_root / f".{name}.tmp-{run}"
    scratch = tmp / "scratch" if scratch_root is None else scratch_root / f".dbfs-kernel1-{name}-{run}"
    try:
        vg = zarr.open_group(str(tmp), mode="w")
        scratch.mkdir(parents=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return tmp, scratch, vg


def check_scratch(scratch) -> Path | None:
    """``scratch`` checked: an existing writable directory (one-line error otherwise), or None."""
    if scratch is None:
        return None
    root = Path(scratch)
    if not root.is_dir():
        raise DbfsError(f"scratch directory {root} does not exist: create it or pass an existing directory")
    if not os.access(root, os.W_OK | os.X_OK):
        raise DbfsError(f"scratch directory {root} is not writable: pass a directory you can write to")
    return root


def _phase_degree(edges_path, slices, N, budget, threads, client, progress, run):
    """Phase R: raw degrees summed over all slices -> (perm, iperm, degree in new ids)."""
    if 24 * N > budget:
        raise DbfsError(f"degree relabelling of {N} vertices needs {24 * N} B per task, over the memory "
                        f"budget {budget} B: raise memory_budget or build without relabel")
    nt = max(1, threads // max(1, len(slices)))
    parts = [dask.delayed(_task_degree, pure=False)(edges_path, r0, r1, N, nt,
                                                    dask_key_name=_key("degree", i, run))
             for i, (r0, r1) in enumerate(slices)]
    k = 0
    while len(parts) > 1:
        nxt = []
        for i in range(0, len(parts) - 1, 2):
            nxt.append(dask.delayed(_task_add, pure=False)(parts[i], parts[i + 1],
                                                           dask_key_name=_key("degree-sum", k, run)))
            k += 1
        if len(parts) % 2:
            nxt.append(parts[-1])
        parts = nxt
    deg = _run(parts, client, progress, "Kernel 1: degrees")[0] if parts else np.zeros(N, np.int64)
    perm, iperm = degree_permutation(deg)
    deg_new = deg[perm]
    del deg
    return perm, iperm, deg_new


def _phase_bucket(edges_path, slices, spec, iperm, scratch, threads, client, progress, run):
    """Phase 1: bucket files per edge slice -> (their path prefixes, key counts per slice, checksum parts)."""
    ip = _share(iperm, client, "kernel1-iperm") if iperm is not None else None
    nt = max(1, threads // max(1, len(slices)))
    prefixes = [str(scratch / f"e{i:06d}") for i in range(len(slices))]
    tasks = [dask.delayed(_task_bucket, pure=False)(edges_path, r0, r1, spec, ip, prefixes[i], nt,
                                                    dask_key_name=_key("bucket", i, run))
             for i, (r0, r1) in enumerate(slices)]
    res = _run(tasks, client, progress, "Kernel 1: bucketing edges by owner")
    return prefixes, [r[0] for r in res], [r[1] for r in res]


def _phase_rows(plan, spec, dedupe, scratch, threads, client, progress, run):
    """Phase 2: rows of every (partition, sub-range) unit -> per-unit nnz and degree stats."""
    nt = max(1, threads // max(1, len(plan)))
    tasks = [dask.delayed(_task_rows, pure=False)(pieces, ne, l0, l1 - l0, spec, bool(dedupe),
                                                   str(scratch / f"r{j:04d}-{s:05d}"), nt,
                                                   dask_key_name=_key("rows", i, run))
             for i, (j, s, l0, l1, ne, pieces) in enumerate(plan)]
    return _run(tasks, client, progress, "Kernel 1: sorting rows")


def _phase_write(tmp, scratch, part, plan, row_res, idt, out_chunk, per_task, compressors, client, progress, run):
    """Phase 3: create each partition's arrays and write every chunk once -> (nnz per part, checksums, tasks)."""
    P = part.P
    wtasks, wkeys = [], []
    nnz_parts = []
    for j in range(P):
        mine = [(p, rr) for p, rr in zip(plan, row_res) if p[0] == j]
        nnz_j = sum(rr["nnz"] for _, rr in mine)
        nnz_parts.append(nnz_j)
        n_j = part.local_count(j)
        pg = zarr.open_group(str(tmp / f"part-{j:04d}"), mode="w")
        ip_path, ix_path = str(tmp / f"part-{j:04d}" / "indptr"), str(tmp / f"part-{j:04d}" / "indices")
        pg.create_array("indptr", shape=(n_j + 1,), chunks=(out_chunk,), dtype=np.int64,
                        compressors=compressors, fill_value=0, dimension_names=["row"])
        pg.create_array("indices", shape=(nnz_j,), chunks=(out_chunk,), dtype=idt,
                        compressors=adjacency_compressors(_ZSTD_LEVEL), fill_value=0, dimension_names=["entry"])
        # sub-range extents: rows [l0, l1) and entries [e0, e1)
        ext, e0 = [], 0
        for (jj, s, l0, l1, ne, _), rr in mine:
            prefix = str(scratch / f"r{j:04d}-{s:05d}")
            ext.append((l0, l1, e0, e0 + rr["nnz"], prefix))
            e0 += rr["nnz"]
        for a in range(0, nnz_j, per_task):
            b = min(a + per_task, nnz_j)
            pieces = [(pre + ".idx", max(a, x0) - x0, min(b, x1) - max(a, x0), 0)
                      for _, _, x0, x1, pre in ext if x0 < b and x1 > a]
            wtasks.append(dask.delayed(_task_write, pure=False)(ix_path, a, b, pieces, idt, False, 1,
                                                                dask_key_name=_key("write", len(wtasks), run)))
            wkeys.append((j, "indices"))
        for a in range(0, n_j + 1, per_task):
            b = min(a + per_task, n_j + 1)
            ra, rb = max(a, 1) - 1, b - 1                  # rows whose end lands in [a, b)
            pieces = [(pre + ".ptr", max(ra, l0) - l0, min(rb, l1) - max(ra, l0), x0)
                      for l0, l1, x0, _, pre in ext if l0 < rb and l1 > ra]
            wtasks.append(dask.delayed(_task_write, pure=False)(ip_path, a, b, pieces, np.int64, a == 0, 1,
                                                                dask_key_name=_key("write", len(wtasks), run)))
            wkeys.append((j, "indptr"))
    sums = _run(wtasks, client, progress, "Kernel 1: writing CSR")
    with ThreadPoolExecutor(max_workers=min(8, 2 * P)) as pool:   # the chunk digests the writes left
        list(pool.map(seal_digests, [tmp / f"part-{j:04d}" / key for j in range(P) for key in ("indptr", "indices")]))
    checks = [{"nnz": nnz_parts[j], "indices_sum": 0, "indptr_sum": 0} for j in range(P)]
    for (j, kind), s in zip(wkeys, sums):
        checks[j][f"{kind}_sum"] = (checks[j][f"{kind}_sum"] + s) % (1 << 64)
    return nnz_parts, checks, len(wtasks)


def _record(name, dataset_path, part, partitioning, M, idt, nnz_parts, row_res, dedupe, relabel, budget, n_subs,
            n_slices, n_plan, n_write, out_chunk, checks, phase_times) -> dict:
    """The variant's attributes (``_publish`` adds the rest and the marker)."""
    N, P = part.n_vertices, part.P
    mins = [rr["deg_min"] for rr in row_res if rr["deg_min"] is not None]
    maxs = [rr["deg_max"] for rr in row_res if rr["deg_max"] is not None]
    nnz_total = int(sum(nnz_parts))
    return {
        "variant": name,
        "dataset": dataset_path.name,
        "P": int(P),
        "partitioning": partitioning,
        "n_vertices": N,
        "n_edges": M,
        "vertex_ranges": part.to_attrs()["vertex_ranges"],
        "nnz": [int(x) for x in nnz_parts],
        "nnz_total": nnz_total,
        "index_dtype": idt.name,
        "degree": {
            "min": int(min(mins)) if mins else 0,
            "max": int(max(maxs)) if maxs else 0,
            "mean": nnz_total / N if N else 0.0,
            "isolated": int(sum(rr["isolated"] for rr in row_res)),
        },
        "options": {"dedupe": bool(dedupe), "relabel": relabel, "memory_budget": budget},
        "subranges": n_subs,
        "tasks": {"bucket": n_slices, "rows": n_plan, "write": n_write},
        "chunks": {"indptr": out_chunk, "indices": out_chunk},
        "checksums": checks,
        "phase_times": phase_times,
    }


def build_partitioned(dataset_path, P: int = 1, partitioning: str = "block", dedupe: bool = True,
                      relabel: str = "none", memory_budget: int | None = None, client=None,
                      progress: bool = True, force: bool = False, scratch=None) -> dict:
    """Build (or reuse) CSR variant ``csr/<variant_name(...)>`` of a zarr dataset, out of core on Dask.

    See the module docstring for the phases and :mod:`dbfs.kernel1.plan` for
    the memory model.

    Parameters
    ----------
    dataset_path : path-like
        A complete dataset group with ``edges`` (M, 2) and ``n_vertices``.
    P : int
        Partition count.
    partitioning : {"block", "cyclic"}
        Vertex ownership rule (:mod:`dbfs.partition`).
    dedupe : bool
        Drop duplicate entries.
    relabel : {"none", "degree"}
        Keep the ids, or renumber by descending raw degree.
    memory_budget : int, optional
        Bytes per task; None: 1 GiB, or half a worker thread's share of its
        memory limit. Changes only how the work is cut, never the result.
    client : distributed.Client, optional
        None runs on the threaded scheduler.
    progress : bool
        Show progress (:func:`dbfs.progress.compute`).
    force : bool
        Rebuild the variant even when a complete one is stored.
    scratch : path-like, optional
        An existing directory for the bucket and row scratch files (up to
        :func:`scratch_bytes`, removed when the build ends); None: inside the
        variant's temporary directory. Every worker must see it (node-local
        only for a one-host cluster).

    Returns
    -------
    dict
        The variant's attributes; ``reused=True`` when an existing complete
        variant with the same P, partitioning, dedupe and relabel was reused.
    """
    dataset_path = Path(dataset_path)
    name = variant_name(P, partitioning, dedupe, relabel)
    quiet = not progress
    scratch_root = check_scratch(scratch)
    old = None if force else reusable(dataset_path, P, partitioning, dedupe, relabel, quiet)
    if old is not None:
        return old
    _open_dataset(dataset_path)
    with build_lock(dataset_path, name, quiet) as waited:
        old = reusable(dataset_path, P, partitioning, dedupe, relabel, quiet) if waited else None
        if old is not None:  # the builder we waited for stored it
            return old
        return _build(dataset_path, name, P, partitioning, dedupe, relabel, memory_budget, client, progress,
                      scratch_root)


def scratch_bytes(M: int, N: int, e_s: int, e_d: int) -> tuple:
    """Upper bounds (bucket files, row files) of a build's scratch for M edges, N vertices, e_s/e_d-byte ids.

    Both directions of every edge are bucketed (source and neighbour ids) and then written as rows (neighbours
    and int64 row ends); the bucket files are removed once the rows are built, the row files once the CSR is.
    """
    return 2 * M * (e_s + e_d), 2 * M * e_d + 8 * N


def disk_need(n_vertices: int, n_edges: int, P: int) -> int:
    """Upper bound of the disk a block variant's build holds at once beside its dataset (scratch there)."""
    idt = index_dtype(int(n_vertices))
    sdt = id_dtype(int(Partitioning(int(n_vertices), int(P), "block").counts().max()) if P else 0)
    return _need_bytes(int(n_edges), int(n_vertices), int(P), sdt.itemsize, idt.itemsize)


def _need_bytes(M: int, N: int, P: int, e_s: int, e_d: int, separate: bool = False) -> int:
    """Upper bound of the disk a build holds at once on the variant's file system: bucket and row files, then
    row files and the raw CSR and perm (the CSR alone when the scratch is elsewhere)."""
    buckets, rows = scratch_bytes(M, N, e_s, e_d)
    out = 2 * M * e_d + 8 * (N + P) + 8 * N
    return out if separate else rows + max(buckets, out)


def _check_sum(dataset_path: Path, dattrs: dict, parts: list) -> None:
    """Kernel 1 read every edge: their checksum must be the one recorded at generation."""
    want = dattrs.get("edges_checksum")
    if want and combine(parts) != want:
        why = "rows differ from the edges_checksum recorded at generation"
        mark_corrupt(dataset_path, "edges", None, why)
        raise DbfsError(corrupt_message(f"dataset {dataset_path.name}", "edges", None, None, why,
                                        edges_fix(dataset_path, dattrs)))


def _build(dataset_path: Path, name: str, P, partitioning, dedupe, relabel, memory_budget, client, progress,
           scratch_root: Path | None = None) -> dict:
    """The build of :func:`build_partitioned`, holding the variant's lock."""
    csr_root = dataset_path / "csr"
    final = csr_root / name
    t_start = time.perf_counter()
    edges, dattrs = _open_dataset(dataset_path)
    N = int(dattrs["n_vertices"])
    M = int(edges.shape[0])
    part = Partitioning(N, P, partitioning)
    budget = int(memory_budget) if memory_budget is not None else _default_budget(client)
    threads = _total_threads(client)
    edges_path = str(dataset_path / "edges")
    e_isz = edges.dtype.itemsize
    idt = index_dtype(N)
    sdt = id_dtype(int(part.counts().max()) if P else 0)
    s_isz, d_isz = sdt.itemsize, idt.itemsize

    # ---- where: temp dir next to the final one; stale temps of this variant are removed
    def full(e):
        """The one-line error of a full disk: the scratch's when the failed write was under it."""
        on_scratch = scratch_root is not None and str(e.filename or "").startswith(str(scratch_root))
        where, need = ((scratch_root, sum(scratch_bytes(M, N, s_isz, d_isz))) if on_scratch else
                       (csr_root, _need_bytes(M, N, P, s_isz, d_isz, scratch_root is not None)))
        return no_space(e, where, need, f"CSR variant {name} of {dataset_path.name}",
                        "free space or pass --datasets DIR (or --scratch DIR) on a larger disk")

    try:
        tmp, scratch, vg = _fresh_tmp(csr_root, name, scratch_root)
    except OSError as e:
        if is_no_space(e):
            raise full(e) from None
        raise
    phase_times = {}
    run = tmp.name.rsplit("-", 1)[-1]  # this build's id (its temp directory's), unique per build

    try:
        # ---- budget arithmetic (plan module docstring, memory model)
        iperm_bytes = 8 * N if relabel == "degree" else 0
        slices = _edge_slices(M, int(edges.chunks[0]), budget, e_isz, s_isz, d_isz, iperm_bytes, threads)

        # ---- phase R: degree relabelling
        iperm = perm = deg_new = None
        if relabel == "degree":
            t0 = time.perf_counter()
            perm, iperm, deg_new = _phase_degree(edges_path, slices, N, budget, threads, client, progress, run)
            phase_times["degree"] = time.perf_counter() - t0

        # ---- phase 1: bucket by (owner, fine block)
        t0 = time.perf_counter()
        nfb, fshift, fbounds = _fine_blocks(part, deg_new)
        spec = {"N": N, "code": part.code, "P": part.P, "q": part.q, "r": part.r, "nfb": nfb, "fshift": fshift,
                "fbounds": fbounds, "sdt": sdt, "idt": idt}
        prefixes, Hs, parts = _phase_bucket(edges_path, slices, spec, iperm, scratch, threads, client, progress, run)
        _check_sum(dataset_path, dattrs, parts)
        phase_times["bucket"] = time.perf_counter() - t0

        # ---- phase 2: rows per (partition, sub-range)
        t0 = time.perf_counter()
        plan, n_subs = _row_plan(Hs, prefixes, P, nfb, fbounds, s_isz, d_isz, budget)
        del Hs
        row_res = _phase_rows(plan, spec, dedupe, scratch, threads, client, progress, run)
        for prefix in prefixes:                        # the rows hold every entry now: the buckets go
            for ext in (".src", ".dst"):
                Path(prefix + ext).unlink(missing_ok=True)
        phase_times["rows"] = time.perf_counter() - t0

        # ---- phase 3: write zarr chunks (one writer per chunk)
        t0 = time.perf_counter()
        out_chunk, per_task = _write_chunking(budget, d_isz)
        compressors = codecs(_ZSTD_LEVEL)
        nnz_parts, checks, n_write = _phase_write(tmp, scratch, part, plan, row_res, idt, out_chunk, per_task,
                                                  compressors, client, progress, run)
        if perm is not None:
            zp = vg.create_array("perm", shape=perm.shape, dtype=np.int64, chunks=(out_chunk,),
                                 compressors=compressors, fill_value=0, dimension_names=["new_id"])
            _writable(zp)[:] = perm
            set_digests(tmp / "perm", chunk_digests(perm, 0, out_chunk))
        phase_times["write"] = time.perf_counter() - t0
        shutil.rmtree(scratch, ignore_errors=True)

        # ---- attributes, complete marker last, then rename into place
        attrs = _record(name, dataset_path, part, partitioning, M, idt, nnz_parts, row_res, dedupe, relabel, budget,
                        n_subs, len(slices), len(plan), n_write, out_chunk, checks, phase_times)
        _publish(vg, attrs, t_start, tmp, final)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)
        if is_no_space(e):
            raise full(e) from None
        raise
    return attrs

"""Generating a dataset into the store: edges to zarr, checksummed, published atomically.

Contract
--------
:func:`generate` leaves ``<root>/<name>`` either as it was or complete: the
dataset is written into ``<root>/.<name>.tmp-<id>``, its attributes and then
``complete: true`` are written, and only then is it renamed into place
(``force`` moves the old copy aside only after the new one is complete). A
complete dataset of the same spec whose chunk files pass their crc32c
(:func:`dbfs.store.integrity.crc_scan`) is reused (``scan=False``: without
reading them, for a caller that regenerates the edges); an incomplete,
corrupt or damaged one is rebuilt. The stored bytes depend only on the spec: never
on ``chunk_edges``, the scheduler, the workers or the backend (the
generators are block-seeded, :mod:`dbfs.generate`).

Writers of one dataset exclude each other (:mod:`.locks`): the second one
waits, then reuses what the first completed. Only the lock holder removes
temporaries left by an interrupted generation, so a live writer's temporary
directory is never touched. A full disk is one line (:mod:`.space`) and the
temporary directory is removed.

Stored or virtual (``edges=``): a *virtual* dataset (:mod:`.virtual`) keeps
its spec instead of its edges; generation then makes every chunk once only
to record ``edges_checksum`` (and the generation time) and writes nothing
but the attributes, under the same lock, temporary directory and atomic
publish. ``edges="auto"`` stores the edges when the disk has room with a
margin and makes the dataset virtual otherwise (:func:`.space.choose_edges`;
the virtual choice is said on stderr). Imported graphs are always stored. A complete dataset is
reused whatever its storage when ``auto`` is asked, and rebuilt in the asked
storage when ``stored`` or ``virtual`` differs from it; a damaged or
``force``-rebuilt one keeps its storage under ``auto``.

Method: one Dask task per chunk, keyed ``generate-chunk-<token>-<i>`` (so
the dashboard's task stream and progress pages name the stage), generates
its rows and writes them (:func:`_gen_block`, :func:`_write_block`; a
virtual dataset's task only hashes them), returning that chunk's
:mod:`dbfs.checksum` part; the parts add up to ``edges_checksum``. The
tasks are made lazily and run in a bounded window (four per thread of the
cluster, at least 64 in flight; the next submitted as one finishes, or in
batches of that size on the threaded scheduler) and their parts are summed
as they come, so planning is instant and memory does not grow with the
number of chunks: the progress bar starts with the first chunk at any SCALE.
``backend="gpu"`` uses :func:`dbfs.store.gpu.write_edges_gpu` (imported on
demand). Every chunk is written, zeros included, so a missing chunk means
damage. An id-compacted import also stores ``original_ids`` (int64, N).

Digests: every write leaves the position-keyed digests of the chunks it wrote
beside the array (:func:`dbfs.store.integrity.write_rows`); they are sealed
into the array's ``dbfs_digests`` attribute before the dataset is published,
whatever the cut of the write tasks.
"""
from __future__ import annotations

import itertools
import os
import shutil
import time
import uuid
from datetime import datetime, timezone
from multiprocessing.pool import ThreadPool
from pathlib import Path

import dask
import numpy as np
import zarr
from dask.base import tokenize
from distributed import as_completed, wait

from dbfs import __version__
from dbfs.checksum import chunk_digests, combine, partial_checksum
from dbfs.errors import DbfsError
from dbfs.generate import DEFAULT_CHUNK_EDGES
from dbfs.progress import bar, say
from dbfs.spec import GraphSpec
from dbfs.store.datasets import Dataset, _read_attrs, datasets_root, not_a_dataset, status
from dbfs.store.gpu import write_edges_gpu
from dbfs.store.integrity import compressors, crc_scan, mark_corrupt, seal_digests, set_digests, write_rows
from dbfs.store.locks import dataset_lock, writer_lock
from dbfs.store.space import MARGIN, check_room, choose_edges, is_no_space, no_space
from dbfs.store.virtual import STORED, VIRTUAL, digest, storage_of

__all__ = ["generate", "estimate_bytes", "resolve_edges", "need_bytes", "check_room_for", "EDGES_CHOICES",
           "generation_calls"]

EDGES_CHOICES = ("stored", "virtual", "auto")
_VIRTUAL_BYTES = 1 << 16  # a virtual dataset writes its attributes only
_MIN_WINDOW = 64  # chunk tasks in flight at least (more on a larger cluster: four per thread)
_MASK64 = 0xFFFFFFFFFFFFFFFF  # checksum parts add up mod 2**64 (dbfs.checksum)

_WRITE_CONFIG = {"write_empty_chunks": True}  # every chunk on disk, so a missing one means damage
_check_room = check_room  # the old private name (dbfs.cli)


def estimate_bytes(spec: GraphSpec) -> int:
    """Upper bound of a dataset's stored size: the raw edge bytes (zstd only shrinks it).

    Parameters
    ----------
    spec : GraphSpec

    Returns
    -------
    int
        Bytes (the ``original_ids`` of an id-compacted import included).
    """
    ids = 8 * spec.n_vertices if getattr(spec, "compact_ids", False) else 0
    return spec.n_edges * 2 * spec.stored_dtype.itemsize + ids


def resolve_edges(spec: GraphSpec, root, edges: str = "auto", quiet: bool = False) -> str:
    """The storage a new dataset of ``spec`` gets: ``"stored"`` or ``"virtual"``.

    Parameters
    ----------
    spec : GraphSpec
    root : path-like
        The datasets root (its free space decides ``auto``).
    edges : {"stored", "virtual", "auto"}
        What was asked; ``auto`` keeps the storage of a dataset of ``spec`` already there (being
        rebuilt), else is decided by :func:`.space.choose_edges` (a virtual choice is said on stderr).
    quiet : bool
        No status line.

    Returns
    -------
    str

    Raises
    ------
    DbfsError
        An unknown choice, or ``virtual`` for an imported graph.
    """
    if edges not in EDGES_CHOICES:
        raise DbfsError(f"--edges {edges!r} is unknown: use stored, virtual or auto")
    if spec.kind == "import":
        if edges == VIRTUAL:
            raise DbfsError("--edges virtual does not apply to imported graphs (their edges exist only in the "
                            "input file, so they are always stored): drop --edges virtual")
        return STORED
    if edges != "auto":
        return edges
    kept = _old_storage(datasets_root(root) / spec.name, spec)
    if kept:
        say(f"--edges auto: {kept} edges for {spec.name}, as the copy it replaces", quiet)
        return kept
    mode, why = choose_edges(datasets_root(root), estimate_bytes(spec))
    if mode == VIRTUAL:  # stored is what generate always did: said only when auto departs from it
        say(f"--edges auto: virtual edges for {spec.name} (the spec only; edges regenerated when read): {why}",
            quiet)
    return mode


def need_bytes(spec: GraphSpec, storage: str) -> int:
    """Upper bound of the bytes a new dataset writes: :func:`estimate_bytes`, or 64 KiB when virtual."""
    return _VIRTUAL_BYTES if storage == VIRTUAL else estimate_bytes(spec)


def check_room_for(spec: GraphSpec, root, storage: str) -> None:
    """Refuse, before any write, a new dataset the disk cannot take (:func:`.space.check_room`; a
    virtual one needs only room for its attributes, no margin)."""
    check_room(datasets_root(root), need_bytes(spec, storage), 0 if storage == VIRTUAL else MARGIN)


def _gen_block(spec, edges_path: str | None, start: int, stop: int) -> int:
    """Generate rows [start, stop), store them unless ``edges_path`` is None (virtual), return their
    checksum part."""
    block = spec.edges(start, stop)
    if edges_path is None:
        return partial_checksum(block, start)
    return _write_block(edges_path, block, start)


def _write_block(edges_path: str, block: np.ndarray, start: int) -> int:
    """Store rows [start, start+len), leave their chunk digests beside the array
    (:func:`.integrity.write_rows`; sealed by :func:`_write_tmp`) and return their checksum contribution
    (the digests' sum: one pass over the rows)."""
    arr = zarr.open_array(edges_path, mode="r+").with_config(_WRITE_CONFIG)  # open_array ignores config=
    return int(write_rows(arr, edges_path, start, block).sum(dtype=np.uint64))


def _remove_stale(root: Path, name: str, quiet: bool) -> None:
    """Temporaries of ``name`` left by interrupted writers (call only while holding its lock)."""
    for p in [*root.glob(f".{name}.tmp-*"), *root.glob(f".{name}.old-*")]:
        say(f"removing {p.name}, left by an interrupted earlier generation", quiet)
        shutil.rmtree(p, ignore_errors=True)


def generation_calls(spec, edges_path: str | None, chunk: int):
    """The generation work, one ``(key, function, args)`` per chunk, made lazily (a chunk's call
    exists only while it is submitted, so planning is O(1) whatever the number of chunks); keys
    ``generate-chunk-<token>-<i>``, each call returning the chunk's checksum part (``edges_path``
    None: virtual, nothing written)."""
    m = int(spec.n_edges)
    tok = tokenize(spec.to_dict(), chunk, edges_path)
    if spec.kind == "import":  # parsed in memory already: ship the rows, not the parser
        rows, _ = spec._load_import()
        for i, lo in enumerate(range(0, m, chunk)):
            yield f"generate-chunk-{tok}-{i}", _write_block, (edges_path, rows[lo:lo + chunk], lo)
        return
    for i, lo in enumerate(range(0, m, chunk)):
        yield f"generate-chunk-{tok}-{i}", _gen_block, (spec, edges_path, lo, min(lo + chunk, m))


def _window(client) -> int:
    """How many chunk tasks are in flight at once: four per thread of the cluster (or of this
    machine for the threaded scheduler), at least :data:`_MIN_WINDOW`."""
    if client is None:
        threads = os.cpu_count() or 1
    else:
        threads = sum(client.nthreads().values())
    return max(_MIN_WINDOW, 4 * threads)


def _sum_threaded(calls, window: int, progress) -> int:
    """The calls on dask's threaded scheduler, ``window`` at a time; the sum of their results mod 2**64.
    Every task has finished when this returns or raises (the pool is joined)."""
    acc = 0
    pool = ThreadPool(os.cpu_count() or 1)
    try:
        while batch := list(itertools.islice(calls, window)):
            tasks = [dask.delayed(fn, pure=True)(*args, dask_key_name=key) for key, fn, args in batch]
            acc += sum(int(p) for p in dask.compute(*tasks, scheduler="threads", pool=pool))
            progress.update(len(batch))
    finally:
        pool.close()
        pool.join()
    return acc & _MASK64


def _sum_distributed(calls, client, window: int, progress) -> int:
    """The calls on ``client``, at most ``window`` in flight (refilled in batches as they finish, their
    results gathered in the background); the sum of their results mod 2**64. On a failure the tasks
    in flight are waited for before it is raised, so none still writes when the caller removes its
    temporary directory."""
    inflight = set()

    def submit(batch):
        futs = []
        for key, fn, args in batch:  # an import's rows go as data, not inside the task (no large graph)
            args = [client.scatter(a, hash=False) if isinstance(a, np.ndarray) else a for a in args]
            futs.append(client.submit(fn, *args, key=key, pure=False))
        inflight.update(futs)
        return futs

    acc = 0
    done = as_completed(submit(itertools.islice(calls, window)), with_results=True)
    try:
        for finished in done.batches():
            for fut, part in finished:
                inflight.discard(fut)
                acc += int(part)
            progress.update(len(finished))
            if len(inflight) <= window // 2:
                done.update(submit(itertools.islice(calls, window - len(inflight))))
    except BaseException:
        wait(list(inflight))
        raise
    return acc & _MASK64


def _write_edges_dask(spec, edges_path: str | None, chunk: int, client, quiet: bool):
    """Generate ``spec``'s edges as Dask tasks, one chunk per task, a bounded window of them in flight
    (memory and the scheduler's task count do not grow with the number of chunks; progress shows from
    the first chunk); ``edges_path`` None: virtual, checksums only. Returns (one checksum part, the
    sum of the chunks' parts; an empty memo)."""
    n_chunks = -(-int(spec.n_edges) // chunk)
    what = "hashing (virtual: nothing stored)" if edges_path is None else "generating"
    label = f"{what} {spec.name}: {spec.n_edges:,} edges in {n_chunks:,} chunks"
    calls = generation_calls(spec, edges_path, chunk)
    window = _window(client)
    with bar(n_chunks, label, quiet) as progress:
        if client is None:
            part = _sum_threaded(calls, window, progress)
        else:
            part = _sum_distributed(calls, client, window, progress)
    return [part], {}


def _reusable(final: Path, spec: GraphSpec, strict: bool = True, edges: str = "auto",
              scan: bool = True) -> Dataset | None:
    """The complete dataset at ``final`` when it holds ``spec`` in the storage asked (``auto``: either)
    and its chunk files pass their CRCs (not read when ``scan`` is False) (another spec under the name: a
    DbfsError when ``strict``, else None)."""
    if status(final)[0] != "complete":
        return None
    ds = Dataset(final, _read_attrs(final))
    if ds.attrs.get("spec") != spec.to_dict():
        if not strict:
            return None
        raise DbfsError(f"dataset {spec.name} holds a different spec than requested: remove it with "
                        f"`dbfs datasets rm {spec.name}` and generate it again")
    if edges != "auto" and ds.storage != edges:
        return None
    if ds.storage == VIRTUAL or not scan:
        return ds  # no chunks, or a reader that regenerates them: status() checked the defining attributes
    bad = crc_scan(zarr.open_array(str(final / "edges"), mode="r"))
    if bad:
        i, why = bad[0]
        mark_corrupt(final, "edges", i, f"{why} ({len(bad)} of the chunk files fail their crc32c)")
        return None
    return ds


def _write_tmp(spec, tmp: Path, chunk: int, client, quiet: bool, backend: str, storage: str = STORED):
    """Create the dataset group in ``tmp`` and write its arrays (none when virtual); (attributes, memo)."""
    n_vertices, n_edges = spec.counts()
    group = zarr.open_group(tmp, mode="w")
    dtype = spec.stored_dtype
    edges_path = None
    if storage == STORED:
        edges_path = str(tmp / "edges")
        group.create_array("edges", shape=(n_edges, 2), chunks=(min(chunk, max(n_edges, 1)), 2), dtype=dtype,
                           compressors=compressors(), fill_value=0, config=_WRITE_CONFIG)
    t0 = time.perf_counter()
    if backend == "gpu":
        parts, memo = write_edges_gpu(spec, edges_path, chunk, quiet)
    else:
        parts, memo = _write_edges_dask(spec, edges_path, chunk, client, quiet)
    if edges_path is not None:
        seal_digests(edges_path)  # the chunk digests the writes left, into the array's attributes
    gen_time = time.perf_counter() - t0
    attrs = {"name": spec.name, "spec": spec.to_dict(), "n_vertices": int(n_vertices), "n_edges": int(n_edges),
             "edge_dtype": dtype.name, "chunk_edges": chunk, "generation_time": gen_time, "generated_on": backend,
             "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
             "dbfs_version": __version__, "edges_checksum": combine(parts), "edges_storage": storage}
    if storage == VIRTUAL:
        attrs["virtual_digest"] = digest(attrs)
    ids = spec.original_ids() if spec.kind == "import" else None
    if ids is not None:
        z = group.create_array("original_ids", shape=ids.shape, chunks=(min(1 << 20, max(ids.shape[0], 1)),),
                               dtype=np.int64, compressors=compressors(), fill_value=0, config=_WRITE_CONFIG,
                               dimension_names=["vertex"])
        z[:] = ids
        set_digests(tmp / "original_ids", chunk_digests(ids, 0, int(z.chunks[0])))
        attrs["original_ids"] = True
    group.attrs.update(attrs)
    group.attrs.update({"complete": True})  # last: the dataset is now usable
    return attrs, memo


def _publish(root: Path, name: str, tmp: Path, final: Path) -> None:
    """Rename the complete ``tmp`` into ``final``; an old copy is moved aside first, then removed."""
    old = None
    if final.exists():
        old = root / f".{name}.old-{uuid.uuid4().hex[:8]}"
        os.rename(final, old)
    os.rename(tmp, final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _write_new(spec, root: Path, chunk: int, client, quiet: bool, backend: str, storage: str = STORED):
    """Write ``spec`` into a temporary directory and publish it (call holding the lock); (attrs, memo)."""
    name, final = spec.name, root / spec.name
    _remove_stale(root, name, quiet)
    tmp = root / f".{name}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        attrs, memo = _write_tmp(spec, tmp, chunk, client, quiet, backend, storage)
        _publish(root, name, tmp, final)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if is_no_space(e):
            raise no_space(e, root, need_bytes(spec, storage), f"dataset {name}") from None
        raise
    return attrs, memo


def _old_storage(final: Path, spec: GraphSpec) -> str | None:
    """The storage of a (damaged, half-written or force-rebuilt) dataset of ``spec`` at ``final``, which
    ``--edges auto`` keeps; None when there is none or its attributes are unreadable."""
    try:
        attrs = _read_attrs(final) if final.is_dir() else {}
    except DbfsError:
        return None
    known = attrs.get("spec") == spec.to_dict() and attrs.get("edges_storage") in (STORED, VIRTUAL)
    return attrs["edges_storage"] if known else None


def generate(spec: GraphSpec, root=None, chunk_edges: int | None = None, force: bool = False,
             client=None, quiet: bool = False, backend: str = "cpu", edges: str = "stored",
             scan: bool = True) -> tuple[Dataset, str]:
    """Generate a spec's edge list into the store (see the module docstring).

    Parameters
    ----------
    spec : GraphSpec
        The graph to generate.
    root : path-like, optional
        The datasets root (:func:`dbfs.store.datasets.datasets_root`).
    chunk_edges : int, optional
        Rows per zarr chunk and per task (default
        :data:`dbfs.generate.DEFAULT_CHUNK_EDGES`); never changes the bytes.
    force : bool
        Rebuild a complete dataset too (one that another writer completed
        while this call waited for the lock is reused).
    client : distributed.Client, optional
        None runs on the threaded scheduler.
    quiet : bool
        No status lines.
    backend : {"cpu", "gpu"}
        ``"gpu"`` generates on the GPU (Kronecker only; same bytes) and leaves
        the device copy of the edges in ``dataset.memo["device_edges"]``.
    edges : {"stored", "virtual", "auto"}
        Store the edges, keep only the spec (:mod:`.virtual`), or decide by
        the free space (:func:`resolve_edges`; the CLI's default).
    scan : bool
        Reuse a complete stored dataset only after a CRC scan of its chunk
        files (the default). False: without reading them, for a caller that
        never reads the stored edges (the GPU backend regenerates a Kronecker
        list on the device and checks it against ``edges_checksum``).

    Returns
    -------
    (Dataset, str)
        The dataset and ``'reused'``, ``'generated'`` or ``'rebuilt'``.
    """
    if backend not in ("cpu", "gpu"):
        raise DbfsError(f"generation backend {backend!r} is unknown: use cpu or gpu")
    if backend == "gpu" and spec.kind != "kronecker":
        raise DbfsError(f"GPU generation makes Graph500 Kronecker graphs only, not {spec.kind}: "
                        f"drop --backend gpu for this kind")

    if edges not in EDGES_CHOICES:
        raise DbfsError(f"--edges {edges!r} is unknown: use stored, virtual or auto")
    root = datasets_root(root)
    name = spec.name
    final = root / name
    if spec.kind == "import":
        edges = resolve_edges(spec, root, edges, quiet)  # refuses virtual
    if not force:
        ds = _reusable(final, spec, edges=edges, scan=scan)
        if ds is not None:
            say(f"reusing complete dataset {name} ({ds.n_edges:,} edges) at {final}"
                f"{'' if scan or ds.storage == VIRTUAL else ' (its chunk files not read: regenerated)'}", quiet)
            return ds, "reused"
    if os.path.lexists(final) and not_a_dataset(final) is not None:     # never replace what dbfs did not write
        raise DbfsError(f"{final} exists and is not a dbfs dataset ({not_a_dataset(final)}): generating "
                        f"{name} would replace it; move it away, or pass another --datasets root")
    chunk = int(chunk_edges or DEFAULT_CHUNK_EDGES)
    if chunk < 1:
        raise DbfsError(f"--chunk-edges {chunk} is invalid: use a positive number of edges per chunk")
    old = _read_attrs(final) if final.is_dir() and status(final)[0] == "complete" else {}
    before = old.get("generated_at")
    want = edges
    storage = resolve_edges(spec, root, edges, quiet)
    check_room_for(spec, root, storage)
    with writer_lock(dataset_lock(root, name), f"dataset {name}", quiet=quiet) as waited:
        if waited:  # another writer held it: reuse what it completed
            ds = _reusable(final, spec, strict=not force, edges=want)
            if ds is not None and (not force or ds.attrs.get("generated_at") != before):
                say(f"reusing dataset {name}, completed by the writer this one waited for", quiet)
                return ds, "reused"
        st, why = status(final)
        action = "generated"
        if st in ("incomplete", "corrupt"):
            say(f"dataset {name} is {st} ({why}); rebuilding it", quiet)
            action = "rebuilt"
        elif st == "complete":
            if force:
                why = f"--force: rebuilding {name}; the old copy stays until the new one is complete"
            elif old and storage_of(old) != storage:
                why = f"dataset {name} is {storage_of(old)}; making it {storage} (--edges {storage})"
            else:
                why = f"dataset {name} has chunk files that fail their crc32c; rebuilding it"
            say(why, quiet)
            action = "rebuilt"
        attrs, memo = _write_new(spec, root, chunk, client, quiet, backend, storage)
    ds = Dataset(final, _read_attrs(final), memo)
    gen_time, n_edges = attrs["generation_time"], attrs["n_edges"]
    say(f"{action} {name} ({storage} edges): {n_edges:,} edges, {gen_time:.2f} s ({n_edges / max(gen_time, 1e-9) / 1e6:.1f} M edges/s) "
        f"-> {final}", quiet)
    return ds, action

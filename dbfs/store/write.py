"""Generating a dataset into the store: edges to zarr, checksummed, published atomically.

Contract
--------
:func:`generate` leaves ``<root>/<name>`` either as it was or complete: the
dataset is written into ``<root>/.<name>.tmp-<id>``, its attributes and then
``complete: true`` are written, and only then is it renamed into place
(``force`` moves the old copy aside only after the new one is complete). A
complete dataset of the same spec is reused; an incomplete or corrupt one is
rebuilt. The stored bytes depend only on the spec: never on ``chunk_edges``,
the scheduler, the workers or the backend (the generators are block-seeded,
:mod:`dbfs.generate`).

Method: one Dask task per zarr chunk generates its rows and writes them
(:func:`_write_block`), returning that chunk's :mod:`dbfs.checksum` part; the
parts add up to ``edges_checksum``. ``backend="gpu"`` uses
:func:`dbfs.store.gpu.write_edges_gpu` (imported on demand). Every chunk is
written, zeros included, so a missing chunk means damage.
"""
from __future__ import annotations

import os
import shutil
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from dbfs import __version__
from dbfs.errors import DbfsError
from dbfs.progress import compute, say
from dbfs.spec import GraphSpec
from dbfs.store.datasets import Dataset, _fix_rm, _read_attrs, datasets_root, status

__all__ = ["generate", "estimate_bytes"]

_WRITE_CONFIG = {"write_empty_chunks": True}  # every chunk on disk, so a missing one means damage


def estimate_bytes(spec: GraphSpec) -> int:
    """Upper bound of a dataset's stored size: the raw edge bytes (zstd only shrinks it).

    Parameters
    ----------
    spec : GraphSpec

    Returns
    -------
    int
        Bytes.
    """
    return spec.n_edges * 2 * spec.stored_dtype.itemsize


def _check_room(root: Path, need: int) -> None:
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DbfsError(f"cannot create datasets directory {root} ({e.strerror}): pass --datasets DIR on a writable disk") from None
    if not os.access(root, os.W_OK | os.X_OK):
        raise DbfsError(f"datasets directory {root} is not writable: pass --datasets DIR on a writable disk")
    free = shutil.disk_usage(root).free
    margin = 64 << 20
    if free < need + margin:
        raise DbfsError(f"datasets directory {root} has {free / 2**30:.2f} GiB free but this dataset needs up to "
                        f"{(need + margin) / 2**30:.2f} GiB: free space or pass --datasets DIR on a larger disk")


def _write_block(edges_path: str, block: np.ndarray, start: int) -> int:
    """Store rows [start, start+len) and return their checksum contribution."""
    import zarr

    from dbfs.checksum import partial_checksum

    arr = zarr.open_array(edges_path, mode="r+").with_config(_WRITE_CONFIG)  # open_array ignores config=
    arr[start:start + block.shape[0]] = block.astype(arr.dtype, copy=False)
    return partial_checksum(block, start)


def _remove_stale(root: Path, name: str, quiet: bool) -> None:
    for p in root.glob(f".{name}.tmp-*"):
        say(f"removing {p.name}, left by an interrupted earlier generation", quiet)
        shutil.rmtree(p, ignore_errors=True)


def _write_edges_dask(spec, edges_path: str, chunk: int, client, quiet: bool):
    """Generate ``spec``'s edges as Dask tasks, one zarr chunk per task;
    returns (the per-chunk checksum parts, an empty memo)."""
    import dask

    from dbfs.generate import edges_dask

    edges = edges_dask(spec, chunk)
    offsets = np.concatenate([[0], np.cumsum(edges.chunks[0])[:-1]]).tolist()
    write = dask.delayed(_write_block, pure=True)
    blocks = edges.to_delayed().ravel().tolist()
    tasks = [write(edges_path, b, off) for b, off in zip(blocks, offsets)]
    return compute(tasks, client, f"generating {spec.name}: {spec.n_edges:,} edges in "
                                  f"{len(tasks)} chunks", quiet=quiet), {}


def generate(spec: GraphSpec, root=None, chunk_edges: int | None = None, force: bool = False,
             client=None, quiet: bool = False, backend: str = "cpu") -> tuple[Dataset, str]:
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
        Rebuild a complete dataset too.
    client : distributed.Client, optional
        None runs on the threaded scheduler.
    quiet : bool
        No status lines.
    backend : {"cpu", "gpu"}
        ``"gpu"`` generates on the GPU (Kronecker only; same bytes) and leaves
        the device copy of the edges in ``dataset.memo["device_edges"]``.

    Returns
    -------
    (Dataset, str)
        The dataset and ``'reused'``, ``'generated'`` or ``'rebuilt'``.
    """
    import zarr
    from zarr.codecs import ZstdCodec

    from dbfs.checksum import combine
    from dbfs.generate import DEFAULT_CHUNK_EDGES

    if backend not in ("cpu", "gpu"):
        raise DbfsError(f"generation backend {backend!r} is unknown: use cpu or gpu")
    if backend == "gpu" and spec.kind != "kronecker":
        raise DbfsError(f"GPU generation makes Graph500 Kronecker graphs only, not {spec.kind}: "
                        f"drop --backend gpu for this kind")

    root = datasets_root(root)
    name = spec.name
    final = root / name
    st, why = status(final)
    if st == "complete" and not force:
        ds = Dataset(final, _read_attrs(final))
        if ds.attrs.get("spec") != spec.to_dict():
            raise DbfsError(f"dataset {name} holds a different spec than requested: {_fix_rm(name)}")
        say(f"reusing complete dataset {name} ({ds.n_edges:,} edges) at {final}", quiet)
        return ds, "reused"
    action = "generated"
    if st in ("incomplete", "corrupt"):
        say(f"dataset {name} is {st} ({why}); rebuilding it", quiet)
        action = "rebuilt"
    elif st == "complete":
        say(f"--force: rebuilding {name}; the old copy stays until the new one is complete", quiet)
        action = "rebuilt"

    chunk = int(chunk_edges or DEFAULT_CHUNK_EDGES)
    if chunk < 1:
        raise DbfsError(f"--chunk-edges {chunk} is invalid: use a positive number of edges per chunk")
    n_vertices, n_edges = spec.counts()
    _check_room(root, estimate_bytes(spec))
    _remove_stale(root, name, quiet)

    tmp = root / f".{name}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        group = zarr.open_group(tmp, mode="w")
        dtype = spec.stored_dtype
        group.create_array("edges", shape=(n_edges, 2), chunks=(min(chunk, max(n_edges, 1)), 2), dtype=dtype,
                           compressors=ZstdCodec(level=1), fill_value=0, config=_WRITE_CONFIG)
        t0 = time.perf_counter()
        if backend == "gpu":
            from dbfs.store.gpu import write_edges_gpu

            parts, memo = write_edges_gpu(spec, str(tmp / "edges"), chunk, quiet)
        else:
            parts, memo = _write_edges_dask(spec, str(tmp / "edges"), chunk, client, quiet)
        gen_time = time.perf_counter() - t0
        group.attrs.update({
            "name": name, "spec": spec.to_dict(), "n_vertices": int(n_vertices), "n_edges": int(n_edges),
            "edge_dtype": dtype.name, "chunk_edges": chunk, "generation_time": gen_time, "generated_on": backend,
            "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "dbfs_version": __version__, "edges_checksum": combine(parts),
        })
        group.attrs.update({"complete": True})  # last: the dataset is now usable
        old = None
        if final.exists():
            old = root / f".{name}.old-{uuid.uuid4().hex[:8]}"
            os.rename(final, old)
        os.rename(tmp, final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    ds = Dataset(final, _read_attrs(final), memo)
    say(f"{action} {name}: {n_edges:,} edges, {gen_time:.2f} s ({n_edges / max(gen_time, 1e-9) / 1e6:.1f} M edges/s) "
         f"-> {final}", quiet)
    return ds, action

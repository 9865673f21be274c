"""The dataset store: zarr v3 groups under a datasets root.

Layout of one dataset ``<root>/<name>/`` (a zarr v3 group, ``name`` from its
:class:`~dbfs.spec.GraphSpec`)::

    zarr.json              group attributes (below)
    edges/                 (M, 2) edge tuples in generation order; uint32 while
                           N <= 2**32 (SCALE <= 32), else int64; zstd; chunks of
                           chunk_edges rows (the dask chunks of generation)
    csr/<variant>/...      Kernel 1 output (dbfs.kernel1), each with its own marker

Group attributes: ``spec`` (GraphSpec.to_dict), ``name``, ``n_vertices``,
``n_edges``, ``edge_dtype``, ``chunk_edges``, ``generation_time`` (s),
``generated_at`` (UTC ISO), ``dbfs_version``, ``edges_checksum``
(dbfs.checksum, chunk-independent), and ``complete: true`` written LAST.

Safety: a dataset is generated into ``<root>/.<name>.tmp-<id>`` and renamed
into place only after its marker is written, so ``<root>/<name>`` is either
absent or was complete when it appeared. ``force`` moves the old copy aside
only after the new one is complete. A dataset without the marker, with wrong
counts or missing chunks is never used: it is reported and rebuilt.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from dbfs import __version__
from dbfs.errors import DbfsError
from dbfs.spec import GraphSpec

ENV_ROOT = "DBFS_DATASETS"
_WRITE_CONFIG = {"write_empty_chunks": True}  # every chunk on disk, so a missing one means damage


def datasets_root(path: str | os.PathLike | None = None) -> Path:
    """--datasets DIR, else $DBFS_DATASETS, else ./datasets."""
    return Path(path or os.environ.get(ENV_ROOT) or "datasets").expanduser().resolve()


def _say(msg: str, quiet: bool = False) -> None:
    if not quiet:
        print(f"dbfs: {msg}", file=sys.stderr, flush=True)


def _fix_rm(name: str) -> str:
    return f"remove it with `dbfs datasets rm {name}` and generate it again"


@dataclass
class Dataset:
    """An opened, checked, complete dataset. ``memo``: in-process objects a
    stage hands to the next (e.g. ``"device_edges"``, the GPU copy of the
    edges the GPU generator just wrote); never stored."""

    path: Path
    attrs: dict
    memo: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def spec(self) -> GraphSpec:
        return GraphSpec.from_dict(self.attrs["spec"])

    @property
    def n_vertices(self) -> int:
        return int(self.attrs["n_vertices"])

    @property
    def n_edges(self) -> int:
        return int(self.attrs["n_edges"])

    @property
    def scale(self) -> int:
        return int(self.attrs["spec"]["scale"])

    def edges(self):
        """The stored edge array (zarr, read-only); rows are uint32 or int64."""
        import zarr

        return zarr.open_array(self.path / "edges", mode="r")

    def edges_dask(self):
        """The stored edge list as an int64 dask array, one block per zarr chunk."""
        import dask.array as da

        arr = self.edges()
        return da.from_zarr(arr).astype(np.int64)


def _read_attrs(path: Path) -> dict:
    meta = path / "zarr.json"
    try:
        with open(meta) as f:
            doc = json.load(f)
    except FileNotFoundError:
        raise DbfsError(f"{path} is not a dbfs dataset (no zarr.json): {_fix_rm(path.name)}") from None
    except (OSError, ValueError) as e:
        raise DbfsError(f"dataset {path.name} is corrupt (zarr.json unreadable: {e}): {_fix_rm(path.name)}") from None
    return doc.get("attributes", {}) or {}


def status(path: Path) -> tuple[str, str]:
    """('missing'|'complete'|'incomplete'|'corrupt', reason) for a dataset path."""
    if not path.exists():
        return "missing", "not generated"
    try:
        attrs = _read_attrs(path)
    except DbfsError as e:
        return "corrupt", str(e)
    if attrs.get("complete") is not True:
        return "incomplete", "no complete marker (interrupted or half-written)"
    try:
        import zarr

        arr = zarr.open_array(path / "edges", mode="r")
    except Exception as e:  # noqa: BLE001 - any failure to open means damage
        return "corrupt", f"edges array unreadable ({type(e).__name__}: {e})"
    if arr.shape != (int(attrs["n_edges"]), 2):
        return "corrupt", f"edges shape {arr.shape} != ({attrs['n_edges']}, 2)"
    if np.dtype(arr.dtype).name != attrs.get("edge_dtype"):
        return "corrupt", f"edges dtype {arr.dtype} != {attrs.get('edge_dtype')}"
    if arr.nchunks_initialized != arr.nchunks:
        return "corrupt", f"{arr.nchunks - arr.nchunks_initialized} of {arr.nchunks} edge chunks missing"
    return "complete", "ok"


def stored(spec: GraphSpec, root=None) -> Dataset | None:
    """The complete stored dataset of ``spec``, or None (missing,
    half-written, corrupt, or another spec under the same name)."""
    path = datasets_root(root) / spec.name
    if status(path)[0] != "complete":
        return None
    ds = Dataset(path, _read_attrs(path))
    return ds if ds.attrs.get("spec") == spec.to_dict() else None


def open_dataset(name: str, root=None) -> Dataset:
    """Open a complete dataset or raise DbfsError naming the problem and the fix."""
    root = datasets_root(root)
    path = root / name
    st, why = status(path)
    if st == "missing":
        raise DbfsError(f"dataset {name} not found under {root}: generate it (`dbfs generate ...`) "
                        f"or see `dbfs datasets list --datasets {root}`")
    if st != "complete":
        raise DbfsError(f"dataset {name} is {st} ({why}): {_fix_rm(name)}")
    return Dataset(path, _read_attrs(path))


# ---------------------------------------------------------------------------
# generation


def estimate_bytes(spec: GraphSpec) -> int:
    """Upper bound of the stored size: the raw edge bytes (zstd only shrinks it)."""
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
        _say(f"removing {p.name}, left by an interrupted earlier generation", quiet)
        shutil.rmtree(p, ignore_errors=True)


def _write_edges_dask(spec, edges_path: str, chunk: int, client, quiet: bool):
    """Generate ``spec``'s edges as Dask tasks, one zarr chunk per task;
    returns (the per-chunk checksum parts, an empty memo)."""
    import dask

    from dbfs.cluster import compute_with_progress
    from dbfs.generate import edges_dask

    edges = edges_dask(spec, chunk)
    offsets = np.concatenate([[0], np.cumsum(edges.chunks[0])[:-1]]).tolist()
    write = dask.delayed(_write_block, pure=True)
    blocks = edges.to_delayed().ravel().tolist()
    tasks = [write(edges_path, b, off) for b, off in zip(blocks, offsets)]
    return compute_with_progress(tasks, client, f"generating {spec.name}: {spec.n_edges:,} edges in "
                                                f"{len(tasks)} chunks", quiet=quiet), {}


def generate(spec: GraphSpec, root=None, chunk_edges: int | None = None, force: bool = False,
             client=None, quiet: bool = False, backend: str = "cpu") -> tuple[Dataset, str]:
    """Generate ``spec`` into the store; returns (dataset, 'reused'|'generated'|'rebuilt').

    A complete dataset of the same spec is reused at once unless ``force``.
    ``backend="gpu"`` generates on the GPU (Kronecker only; same bytes,
    :func:`dbfs.gpu_store.write_edges_gpu`) and leaves the device copy of
    the edges in ``dataset.memo["device_edges"]``.
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
        _say(f"reusing complete dataset {name} ({ds.n_edges:,} edges) at {final}", quiet)
        return ds, "reused"
    action = "generated"
    if st in ("incomplete", "corrupt"):
        _say(f"dataset {name} is {st} ({why}); rebuilding it", quiet)
        action = "rebuilt"
    elif st == "complete":
        _say(f"--force: rebuilding {name}; the old copy stays until the new one is complete", quiet)
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
            from dbfs.gpu_store import write_edges_gpu

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
    _say(f"{action} {name}: {n_edges:,} edges, {gen_time:.2f} s ({n_edges / max(gen_time, 1e-9) / 1e6:.1f} M edges/s) "
         f"-> {final}", quiet)
    return ds, action


# ---------------------------------------------------------------------------
# listing, info, removal, export


def _du(path: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(dirpath, f))
            except OSError:
                pass
    return total


def stages(path: Path) -> list[str]:
    """Stages present and complete: 'edges', 'csr:<variant>' ..."""
    out = []
    if status(path)[0] == "complete":
        out.append("edges")
    csr = path / "csr"
    if csr.is_dir():
        for v in sorted(csr.iterdir()):
            if v.name.startswith("."):
                continue
            try:
                if _read_attrs(v).get("complete") is True:
                    out.append(f"csr:{v.name}")
            except DbfsError:
                pass
    return out


def info(name: str, root=None) -> dict:
    """Everything known about a dataset (works for incomplete ones too)."""
    root = datasets_root(root)
    path = root / name
    st, why = status(path)
    if st == "missing":
        raise DbfsError(f"dataset {name} not found under {root}: see `dbfs datasets list --datasets {root}`")
    attrs = {}
    try:
        attrs = _read_attrs(path)
    except DbfsError:
        pass
    spec = attrs.get("spec", {})
    return {"name": name, "path": str(path), "status": st, "reason": why, "kind": spec.get("kind", "?"),
            "scale": spec.get("scale"), "n_vertices": attrs.get("n_vertices"), "n_edges": attrs.get("n_edges"),
            "size_bytes": _du(path), "stages": stages(path), "complete": st == "complete", "attrs": attrs}


def list_datasets(root=None) -> list[dict]:
    root = datasets_root(root)
    if not root.is_dir():
        return []
    return [info(p.name, root) for p in sorted(root.iterdir()) if p.is_dir() and not p.name.startswith(".")]


def remove(name: str, root=None) -> Path:
    root = datasets_root(root)
    path = root / name
    if not path.is_dir() or name.startswith(".") or "/" in name:
        raise DbfsError(f"dataset {name} not found under {root}: see `dbfs datasets list --datasets {root}`")
    trash = root / f".{name}.rm-{uuid.uuid4().hex[:8]}"
    os.rename(path, trash)  # atomic: the name disappears at once
    shutil.rmtree(trash)
    return path


def export(name: str, out, root=None) -> Path:
    """Write the edge list as int64 (M, 2) .npy, verifying the checksum on the way."""
    from dbfs.arrays import iter_rows
    from dbfs.checksum import combine, partial_checksum

    ds = open_dataset(name, root)
    out = Path(out)
    if out.suffix != ".npy":
        raise DbfsError(f"export target {out} must end in .npy: pass --out FILE.npy")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.tmp-{uuid.uuid4().hex[:8]}")
        mm = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.int64, shape=(ds.n_edges, 2))
    except OSError as e:
        raise DbfsError(f"cannot write {out} ({e.strerror}): pass --out in a writable directory") from None
    try:
        parts = []
        for lo, block in iter_rows(ds.edges()):
            mm[lo:lo + block.shape[0]] = block
            parts.append(partial_checksum(block, lo))
        mm.flush()
        del mm
        if combine(parts) != ds.attrs.get("edges_checksum"):
            raise DbfsError(f"dataset {name} fails its checksum (stored data damaged): {_fix_rm(name)}")
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
    return out

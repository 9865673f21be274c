"""Stored datasets: finding, checking, opening, listing, removing and exporting them.

Contract
--------
A dataset ``<root>/<name>/`` is usable only when :func:`status` says
``complete``: its ``complete`` attribute is true, and its ``edges`` array has
the recorded shape and dtype and every chunk on disk. Anything else is
reported (``missing``, ``incomplete``, ``corrupt``) and never used;
:func:`open_dataset` raises a :class:`DbfsError` naming the fix. The root is
``--datasets DIR``, else ``$DBFS_DATASETS``, else ``./datasets``.

Encoding: the layout and attributes are listed in :mod:`dbfs.store`; the
edges checksum is :mod:`dbfs.checksum` (chunk-independent), verified on
:func:`export`. Attributes are read only through
:func:`dbfs.zattrs.read_attrs`.
"""
from __future__ import annotations

import os
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dbfs.errors import DbfsError
from dbfs.spec import GraphSpec
from dbfs.zattrs import read_attrs

__all__ = ["ENV_ROOT", "Dataset", "datasets_root", "status", "stored", "open_dataset", "stages", "info",
           "list_datasets", "remove", "export"]

ENV_ROOT = "DBFS_DATASETS"


def datasets_root(path: str | os.PathLike | None = None) -> Path:
    """The datasets root directory.

    Parameters
    ----------
    path : path-like, optional
        ``--datasets DIR``; None falls back to ``$DBFS_DATASETS``, then ``./datasets``.

    Returns
    -------
    pathlib.Path
        Absolute, user-expanded.
    """
    return Path(path or os.environ.get(ENV_ROOT) or "datasets").expanduser().resolve()


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
    """A dataset's attributes; a DbfsError naming the fix when missing or unreadable."""
    return read_attrs(path, missing=f"{path} is not a dbfs dataset (no zarr.json): {_fix_rm(path.name)}",
                      fix=_fix_rm(path.name))


def status(path: Path) -> tuple[str, str]:
    """Whether a dataset directory is usable.

    Parameters
    ----------
    path : pathlib.Path
        ``<root>/<name>``.

    Returns
    -------
    (str, str)
        ``'missing'``, ``'complete'``, ``'incomplete'`` or ``'corrupt'``, and the reason.
    """
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
    """The complete stored dataset of a spec, if there is one.

    Parameters
    ----------
    spec : GraphSpec
        What should be stored (under ``spec.name``).
    root : path-like, optional
        The datasets root (:func:`datasets_root`).

    Returns
    -------
    Dataset or None
        None when missing, half-written, corrupt, or another spec under the same name.
    """
    path = datasets_root(root) / spec.name
    if status(path)[0] != "complete":
        return None
    ds = Dataset(path, _read_attrs(path))
    return ds if ds.attrs.get("spec") == spec.to_dict() else None


def open_dataset(name: str, root=None) -> Dataset:
    """Open a complete dataset.

    Parameters
    ----------
    name : str
        The dataset's name.
    root : path-like, optional
        The datasets root (:func:`datasets_root`).

    Returns
    -------
    Dataset

    Raises
    ------
    DbfsError
        Naming the problem (missing, incomplete, corrupt) and the fix.
    """
    root = datasets_root(root)
    path = root / name
    st, why = status(path)
    if st == "missing":
        raise DbfsError(f"dataset {name} not found under {root}: generate it (`dbfs generate ...`) "
                        f"or see `dbfs datasets list --datasets {root}`")
    if st != "complete":
        raise DbfsError(f"dataset {name} is {st} ({why}): {_fix_rm(name)}")
    return Dataset(path, _read_attrs(path))


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
    """The stages of a dataset that are present and complete.

    Parameters
    ----------
    path : pathlib.Path
        The dataset's directory.

    Returns
    -------
    list of str
        ``'edges'`` and ``'csr:<variant>'`` entries.
    """
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
    """Everything known about a dataset (works for incomplete ones too).

    Parameters
    ----------
    name : str
        The dataset's name.
    root : path-like, optional
        The datasets root (:func:`datasets_root`).

    Returns
    -------
    dict
        name, path, status, reason, kind, scale, n_vertices, n_edges,
        size_bytes, stages, complete and the raw attrs.
    """
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
    """:func:`info` of every dataset under the root, by name.

    Parameters
    ----------
    root : path-like, optional
        The datasets root (:func:`datasets_root`).

    Returns
    -------
    list of dict
    """
    root = datasets_root(root)
    if not root.is_dir():
        return []
    return [info(p.name, root) for p in sorted(root.iterdir()) if p.is_dir() and not p.name.startswith(".")]


def remove(name: str, root=None) -> Path:
    """Remove a dataset (renamed away first, so its name disappears at once).

    Parameters
    ----------
    name : str
        The dataset's name.
    root : path-like, optional
        The datasets root (:func:`datasets_root`).

    Returns
    -------
    pathlib.Path
        The path that was removed.
    """
    root = datasets_root(root)
    path = root / name
    if not path.is_dir() or name.startswith(".") or "/" in name:
        raise DbfsError(f"dataset {name} not found under {root}: see `dbfs datasets list --datasets {root}`")
    trash = root / f".{name}.rm-{uuid.uuid4().hex[:8]}"
    os.rename(path, trash)  # atomic: the name disappears at once
    shutil.rmtree(trash)
    return path


def export(name: str, out, root=None) -> Path:
    """Write a dataset's edge list as an int64 (M, 2) ``.npy``, verifying the checksum on the way.

    Parameters
    ----------
    name : str
        The dataset's name.
    out : path-like
        Target file, ending in ``.npy`` (written to a temp name, then renamed).
    root : path-like, optional
        The datasets root (:func:`datasets_root`).

    Returns
    -------
    pathlib.Path
        ``out``.
    """
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

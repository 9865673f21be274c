"""Stored datasets: finding, checking, opening, listing and removing them.

Contract
--------
A dataset ``<root>/<name>/`` is usable only when :func:`status` says
``complete``: its ``complete`` attribute is true, no ``corrupt`` attribute
was recorded (:mod:`.integrity`), and its ``edges`` array (and
``original_ids`` of an id-compacted import) has the recorded shape and
dtype and every chunk on disk (a *virtual* dataset, :mod:`.virtual`, has
no ``edges`` array: its defining attributes must pass
:func:`.virtual.virtual_problem` instead). Anything else is reported (``missing``,
``incomplete``, ``corrupt``) and never used; :func:`open_dataset` raises a
:class:`DbfsError` naming the fix. The root is ``--datasets DIR``, else
``$DBFS_DATASETS``, else ``./datasets``. A dataset name is one path
component: not empty, no ``/``, not ``.`` or ``..``, no leading dot.

Removal (:func:`remove`) deletes only what dbfs wrote: a folder that
:func:`not_a_dataset` accepts (its ``zarr.json`` carries dbfs's attributes,
or it holds nothing but a dataset's layout). Any other folder under the root
(the root may be ``$HOME``), a file or a symbolic link is refused in one line
and left untouched; links are never followed. Listings show datasets only.

Encoding: the layout and attributes are listed in :mod:`dbfs.store`. Edges
are read through :func:`open_edges` (the one interface, stored or virtual):
a :class:`.integrity.CheckedArray` for stored edges (every chunk's crc32c
is checked by zarr, a damaged chunk is a one-line error naming the chunk
and the fix) or a :class:`.virtual.VirtualEdges` that regenerates the rows
with the same read API and bytes; a whole read of either verifies the
``edges_checksum`` (:mod:`dbfs.checksum`). Attributes are read only
through :func:`dbfs.zattrs.read_attrs`.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import dask.array as da
import numpy as np
import zarr

from dbfs.errors import DbfsError
from dbfs.spec import GraphSpec
from dbfs.store.integrity import CheckedArray
from dbfs.store.locks import dataset_lock, writer_lock
from dbfs.store.virtual import VIRTUAL, VirtualEdges, storage_of, virtual_problem
from dbfs.zattrs import read_attrs

__all__ = ["ENV_ROOT", "Dataset", "datasets_root", "check_name", "status", "stored", "open_dataset", "open_edges",
           "stages", "info", "list_datasets", "remove", "not_a_dataset", "generate_command", "edges_fix",
           "damage_text"]

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


#: what a dataset folder may hold (:mod:`dbfs.store`): its group, its arrays and its CSR variants
_LAYOUT = frozenset({"zarr.json", "edges", "original_ids", "csr"})
#: attributes only a dataset dbfs wrote has (any one marks it; ``complete`` may be missing)
_MARKS = ("spec", "dbfs_version", "edges_checksum", "edges_storage", "n_edges")


def _node(path: Path):
    """The parsed ``zarr.json`` of ``path`` (never through a link): a dict, None when missing, False when unreadable."""
    f = path / "zarr.json"
    try:
        if f.is_symlink():
            return False
        with open(f) as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return False
    return doc if isinstance(doc, dict) else False


def _is_node(path: Path, kind: str) -> bool:
    """``path`` is a real folder (not a link) holding a zarr node of ``kind`` (``array`` or ``group``)."""
    if path.is_symlink() or not path.is_dir():
        return False
    doc = _node(path)
    return bool(doc) and doc.get("node_type") == kind


def _has_variant(csr: Path) -> bool:
    """``csr`` holds a CSR variant dbfs built (a group with a variant's attributes)."""
    if csr.is_symlink() or not csr.is_dir():
        return False
    for v in csr.iterdir():
        doc = _node(v) if not v.is_symlink() and v.is_dir() else None
        a = doc.get("attributes") if doc else None
        if isinstance(a, dict) and "variant" in a and "checksums" in a:
            return True
    return False


def not_a_dataset(path: Path, follow: bool = False) -> str | None:
    """Why the folder at ``path`` is not a dataset dbfs wrote; None when it is one (complete or not).

    A dataset is a real folder whose ``zarr.json`` is a group with dbfs's attributes (any of
    ``spec``, ``dbfs_version``, ``edges_checksum``, ``edges_storage``, ``n_edges``: an incomplete or
    damaged dataset has them too), or, when that ``zarr.json`` is missing or unreadable, a folder holding
    nothing but dbfs's layout (``zarr.json``, ``edges``, ``original_ids``, ``csr``) with a zarr
    ``edges`` array or a CSR variant dbfs built. A symbolic link is never one (``follow``: judge its
    target instead, for listings).

    Parameters
    ----------
    path : pathlib.Path
        ``<root>/<name>``.
    follow : bool
        Judge a link's target (reading); removal never does.

    Returns
    -------
    str or None
        The reason (``"a symbolic link (to ...)"``, ``"no zarr.json, ..."``, ...), or None.
    """
    if path.is_symlink():
        if not follow:
            try:
                to = os.readlink(path)
            except OSError:
                to = "?"
            return f"a symbolic link (to {to})"
        path = path.resolve()
    if not path.is_dir():
        return "not a folder" if os.path.lexists(path) else "nothing there"
    doc = _node(path)
    if doc:
        a = doc.get("attributes")
        if doc.get("node_type") == "group" and isinstance(a, dict) and any(k in a for k in _MARKS):
            return None
    try:
        entries = list(os.scandir(path))
    except OSError as e:
        return f"a folder that cannot be listed ({e.strerror})"
    layout = (not doc and entries and all(e.name in _LAYOUT and not e.is_symlink() for e in entries)
              and (_is_node(path / "edges", "array") or _has_variant(path / "csr")))
    if layout:
        return None  # dbfs's layout, its marker missing or damaged
    if doc is None:
        return "no zarr.json, the marker of a dataset dbfs wrote"
    if doc is False:
        return "an unreadable zarr.json beside things a dataset does not hold"
    return "its zarr.json has none of the attributes dbfs writes"


def _not_dataset_fix(root: Path) -> str:
    return (f"`dbfs datasets rm` removes only datasets dbfs wrote: check the name and the datasets root "
            f"(`dbfs datasets list --datasets {root}`), or remove the folder yourself if you mean to")


def _fix_for(path: Path) -> str:
    """The fix for a node whose attributes cannot be read: rm when it is a dataset dbfs wrote, a rebuild
    when it is a CSR variant of one."""
    if not_a_dataset(path) is None:
        return _fix_rm(path.name)
    if path.parent.name == "csr" and not_a_dataset(path.parent.parent) is None:
        return f"rebuild it with `dbfs build {path.parent.parent.name} --force` and the variant's options"
    return _not_dataset_fix(path.parent)


def check_name(name: str, root: Path) -> None:
    """Refuse a dataset name that is not one plain path component (a DbfsError naming it)."""
    if not name or name in (".", "..") or "/" in name or "\\" in name or name.startswith(".") or "\0" in name:
        raise DbfsError(f"{name!r} is not a dataset name (empty, a path, or a hidden name): pass a name "
                        f"from `dbfs datasets list --datasets {root}`")


_DEFAULTS = {"scale": 16, "edgefactor": 16, "seed1": 2, "seed2": 3}


def generate_command(spec: dict, path=None, virtual: bool = False) -> str:
    """The ``dbfs generate`` command line that (re)makes a stored spec, ``--force`` included.

    Parameters
    ----------
    spec : dict
        ``GraphSpec.to_dict()`` as stored in the dataset's attributes.
    path : path-like, optional
        The dataset's directory; its root is named with ``--datasets`` when
        it is not the default one.
    virtual : bool
        Add ``--edges virtual`` (the dataset stores its spec, not its edges).

    Returns
    -------
    str
    """
    kind = spec.get("kind", "kronecker")
    if kind == "import":
        args = ["--kind import", f"--input {shlex.quote(str(spec.get('input')))}"]
        if spec.get("compact_ids"):
            args.append("--compact-ids")
    else:
        args = [] if kind == "kronecker" else [f"--kind {kind}"]
        args.append(f"--scale {spec.get('scale')}")
        if kind in ("kronecker", "rmat", "uniform"):
            args += [f"--{k} {spec[k]}" for k in ("edgefactor", "seed1", "seed2")
                     if k in spec and spec[k] != _DEFAULTS[k]]
        if kind == "rmat" and spec.get("initiator"):
            args += [f"--{k} {v / 10000:g}" for k, v in zip("abc", spec["initiator"])]
    if virtual:
        args.append("--edges virtual")
    if path is not None and Path(path).parent != datasets_root():
        args.append(f"--datasets {shlex.quote(str(Path(path).parent))}")
    return "dbfs generate " + " ".join(args + ["--force"])


def edges_fix(path, attrs: dict) -> str:
    """The fix for damaged edges of the dataset at ``path``: its generate command, or rm."""
    name = Path(path).name
    spec = attrs.get("spec")
    if isinstance(spec, dict) and spec.get("kind"):
        cmd = generate_command(spec, path, storage_of(attrs) == VIRTUAL)
        return f"regenerate it with `{cmd}` or remove it with `dbfs datasets rm {name}`"
    return _fix_rm(name)


def open_edges(path, attrs: dict | None = None, verify_sum: bool = True) -> CheckedArray | VirtualEdges:
    """The edge array of the dataset at ``path``, stored or virtual, read-only and checked.

    Parameters
    ----------
    path : path-like
        The dataset's directory.
    attrs : dict, optional
        Its attributes (read when not given).
    verify_sum : bool
        Verify ``edges_checksum`` when all rows are read at once (callers
        that add up the parts of slices themselves pass False).

    Returns
    -------
    CheckedArray or VirtualEdges
        (M, 2) uint32 or int64 rows; a damaged chunk raises a one-line
        DbfsError naming it and marks the dataset corrupt; a whole read
        verifies ``edges_checksum``. A virtual dataset's rows are
        regenerated (:mod:`.virtual`); its attributes are checked first.
    """
    path = Path(path)
    if attrs is None:
        attrs = _read_attrs(path)
    if storage_of(attrs) == VIRTUAL:
        why = virtual_problem(attrs)
        if why:
            raise DbfsError(f"dataset {path.name} is corrupt ({why}): {edges_fix(path, attrs)}")
        return VirtualEdges(path, attrs, f"dataset {path.name}", edges_fix(path, attrs),
                            checksum=attrs.get("edges_checksum") if verify_sum else None)
    arr = zarr.open_array(str(path / "edges"), mode="r")
    return CheckedArray(arr, path, "edges", f"dataset {path.name}", edges_fix(path, attrs),
                        checksum=attrs.get("edges_checksum") if verify_sum else None)


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

    @property
    def storage(self) -> str:
        """``"stored"`` (edges in zarr) or ``"virtual"`` (regenerated from the spec, :mod:`.virtual`)."""
        return storage_of(self.attrs)

    def edges(self) -> CheckedArray | VirtualEdges:
        """The edge array, stored or virtual, read-only and checked (:func:`open_edges`); rows are
        uint32 or int64."""
        return open_edges(self.path, self.attrs)

    def edges_dask(self):
        """The edge list as an int64 dask array, one block per (stored or virtual) chunk, checked reads."""
        arr = self.edges()
        return da.from_array(arr, chunks=arr.chunks, asarray=False, lock=False,
                             name=f"dbfs-edges-{self.path}").astype(np.int64)

    def original_ids(self) -> np.ndarray | None:
        """int64 ``original_ids[v]``: the input file's id of vertex ``v`` (id-compacted imports), else None."""
        if not self.attrs.get("original_ids"):
            return None
        arr = zarr.open_array(str(self.path / "original_ids"), mode="r")
        return CheckedArray(arr, self.path, "original_ids", f"dataset {self.name}", edges_fix(self.path, self.attrs))[:]


def _read_attrs(path: Path) -> dict:
    """A dataset's attributes; a DbfsError naming the fix when missing or unreadable."""
    try:
        return read_attrs(path, missing=f"{path} is not a dbfs dataset (no zarr.json)")
    except DbfsError as e:
        raise DbfsError(f"{e}: {_fix_for(path)}") from None


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
    if attrs.get("corrupt"):
        return "corrupt", damage_text(attrs["corrupt"])
    if storage_of(attrs) == VIRTUAL:
        why = virtual_problem(attrs)
        return ("corrupt", why) if why else ("complete", "ok")
    want = {"edges": ((int(attrs["n_edges"]), 2), attrs.get("edge_dtype"))}
    if attrs.get("original_ids"):
        want["original_ids"] = ((int(attrs["n_vertices"]),), "int64")
    for key, (shape, dtype) in want.items():
        why = _array_problem(path / key, key, shape, dtype)
        if why:
            return "corrupt", why
    return "complete", "ok"


def damage_text(rec) -> str:
    """A recorded ``corrupt`` attribute as text."""
    if not isinstance(rec, dict):
        return "damage recorded"
    where = rec.get("array", "?") + (f" chunk {rec['chunk']}" if rec.get("chunk") is not None else "")
    return f"{where}: {rec.get('reason', '?')}, seen {rec.get('seen_at', '?')}"


def _array_problem(path: Path, key: str, shape: tuple, dtype) -> str | None:
    """What is wrong with a stored array's metadata and chunk count, or None."""
    try:
        arr = zarr.open_array(str(path), mode="r")
    except Exception as e:  # noqa: BLE001 - any failure to open means damage
        return f"{key} array unreadable ({type(e).__name__}: {e})"
    if tuple(arr.shape) != tuple(shape):
        return f"{key} shape {tuple(arr.shape)} != {tuple(shape)}"
    if np.dtype(arr.dtype).name != dtype:
        return f"{key} dtype {arr.dtype} != {dtype}"
    if arr.nchunks_initialized != arr.nchunks:
        return f"{arr.nchunks - arr.nchunks_initialized} of {arr.nchunks} {key} chunks missing"
    return None


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
    check_name(name, root)
    path = root / name
    st, why = status(path)
    if st == "missing":
        raise DbfsError(f"dataset {name} not found under {root}: generate it (`dbfs generate ...`) "
                        f"or see `dbfs datasets list --datasets {root}`")
    if st != "complete":
        fix = _fix_for(path)
        if st == "corrupt":
            try:
                fix = edges_fix(path, _read_attrs(path))
            except DbfsError:
                pass
        raise DbfsError(f"dataset {name} is {st} ({why}): {fix}")
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
        ``'edges'`` (``'edges(virtual)'`` for a virtual dataset) and ``'csr:<variant>'`` entries.
    """
    out = []
    if status(path)[0] == "complete":
        out.append("edges(virtual)" if storage_of(_read_attrs(path)) == VIRTUAL else "edges")
    csr = path / "csr"
    if csr.is_dir():
        for v in sorted(csr.iterdir()):
            if v.name.startswith("."):
                continue
            try:
                a = _read_attrs(v)
            except DbfsError:
                continue
            if a.get("complete") is True:
                out.append(f"csr:{v.name}" + ("(corrupt)" if a.get("corrupt") else ""))
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
        edges (``"stored"`` or ``"virtual"``), size_bytes, stages (``csr:<variant>(corrupt)`` for a damaged
        variant), complete and the raw attrs.
    """
    root = datasets_root(root)
    check_name(name, root)
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
            "edges": storage_of(attrs), "size_bytes": _du(path), "stages": stages(path), "complete": st == "complete", "attrs": attrs}


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
    return [info(p.name, root) for p in sorted(root.iterdir())
            if not p.name.startswith(".") and not_a_dataset(p, follow=True) is None]


def _refuse_rm(path: Path, root: Path, why: str) -> DbfsError:
    if why.startswith("a symbolic link"):
        return DbfsError(f"{path} is {why}, not a dataset dbfs wrote: nothing was removed (`dbfs datasets rm` never "
                         f"follows links); remove the link itself with `rm {shlex.quote(str(path))}` (its target "
                         f"stays) if you mean to")
    return DbfsError(f"{path} is not a dbfs dataset ({why}): nothing was removed; {_not_dataset_fix(root)}")


def remove(name: str, root=None) -> Path:
    """Remove a dataset dbfs wrote (renamed away first, so its name disappears at once).

    Only a folder :func:`not_a_dataset` accepts is removed (complete, incomplete or damaged);
    anything else (a user's folder, a file, a symbolic link, whatever it points to) is refused in
    one line and left untouched. Links are never followed: the folder renamed away is the one
    checked (same device and inode), and :func:`shutil.rmtree` removes links inside it, not their
    targets. Refused while a writer holds the dataset's lock (:mod:`.locks`).

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

    Raises
    ------
    DbfsError
        A bad name, nothing there, not a dataset dbfs wrote, or a writer at work.
    """
    root = datasets_root(root)
    check_name(name, root)
    path = root / name
    if not os.path.lexists(path):
        raise DbfsError(f"dataset {name} not found under {root}: see `dbfs datasets list --datasets {root}`")
    why = not_a_dataset(path)
    if why:
        raise _refuse_rm(path, root, why)
    with writer_lock(dataset_lock(root, name), f"dataset {name}", wait=False):
        before = os.lstat(path)
        why = not_a_dataset(path)  # again, under the lock
        if why:
            raise _refuse_rm(path, root, why)
        trash = root / f".{name}.rm-{uuid.uuid4().hex[:8]}"
        os.rename(path, trash)  # atomic: the name disappears at once
        after = os.lstat(trash)
        if stat.S_ISLNK(after.st_mode) or (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino):
            os.rename(trash, path)  # replaced between the check and the rename: put it back, untouched
            raise DbfsError(f"{path} changed while it was being removed: nothing was removed; run "
                            f"`dbfs datasets rm {name}` again once nothing else writes there")
    shutil.rmtree(trash)
    return path

"""Exporting a stored edge list to a ``.npy`` file, verified on the way.

Contract
--------
:func:`export` writes dataset ``name``'s edges as an int64 ``(M, 2)``
``.npy`` (NumPy format 1.0), in stored row order, or leaves no file: it
writes ``.<out>.tmp-<id>`` and renames it to ``out`` only after every chunk
decoded (crc32c, :mod:`.integrity`) and the rows matched the dataset's
``edges_checksum`` (:mod:`dbfs.checksum`). An id-compacted import
(``original_ids`` stored) is exported in the input file's ids. A full disk
is one line naming the file, the bytes needed and free (:mod:`.space`).

Method: rows are streamed chunk by chunk (:func:`dbfs.arrays.iter_rows`)
through ordinary file writes (not a memory map, whose write to a full disk
is a SIGBUS instead of an error).
"""
from __future__ import annotations

import os
import uuid
from pathlib import Path

import numpy as np

from dbfs.arrays import iter_rows
from dbfs.checksum import combine, partial_checksum
from dbfs.errors import DbfsError
from dbfs.store.datasets import edges_fix, open_dataset
from dbfs.store.integrity import mark_corrupt
from dbfs.store.space import is_no_space, no_space

__all__ = ["export"]


def _header(fh, n_rows: int) -> None:
    np.lib.format.write_array_header_1_0(fh, {"descr": np.lib.format.dtype_to_descr(np.dtype(np.int64)),
                                              "fortran_order": False, "shape": (int(n_rows), 2)})


def _stream(ds, fh, ids) -> str:
    """Write every row (mapped through ``ids`` when given); returns their checksum."""
    parts = []
    for lo, block in iter_rows(ds.edges()):
        parts.append(partial_checksum(block, lo))
        fh.write(np.ascontiguousarray(ids[block] if ids is not None else block, dtype=np.int64).tobytes())
    return combine(parts)


def export(name: str, out, root=None) -> Path:
    """Write a dataset's edge list as an int64 (M, 2) ``.npy``, verifying every chunk and the checksum.

    Parameters
    ----------
    name : str
        The dataset's name.
    out : path-like
        Target file, ending in ``.npy`` (written to a temp name, then renamed).
    root : path-like, optional
        The datasets root (:func:`dbfs.store.datasets.datasets_root`).

    Returns
    -------
    pathlib.Path
        ``out``.

    Raises
    ------
    DbfsError
        Damaged chunk or checksum (naming the fix), unwritable target, full disk.
    """
    ds = open_dataset(name, root)
    out = Path(out)
    if out.suffix != ".npy":
        raise DbfsError(f"export target {out} must end in .npy: pass --out FILE.npy")
    ids = ds.original_ids()
    tmp = out.with_name(f".{out.name}.tmp-{uuid.uuid4().hex[:8]}")
    need = 128 + 16 * ds.n_edges
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fh = open(tmp, "wb")
    except OSError as e:
        if is_no_space(e):
            raise no_space(e, out, need, f"the export of {name}", "free space or pass --out on a larger disk") from None
        raise DbfsError(f"cannot write {out} ({e.strerror}): pass --out in a writable directory") from None
    try:
        try:
            with fh:
                _header(fh, ds.n_edges)
                got = _stream(ds, fh, ids)
        except OSError as e:
            if is_no_space(e):
                tmp.unlink(missing_ok=True)
                raise no_space(e, out, need, f"the export of {name}",
                               "free space or pass --out on a larger disk") from None
            raise
        if got != ds.attrs.get("edges_checksum"):
            mark_corrupt(ds.path, "edges", None, "rows differ from the edges_checksum recorded at generation")
            raise DbfsError(f"dataset {name} fails its checksum (stored data damaged): {edges_fix(ds.path, ds.attrs)}")
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
    return out

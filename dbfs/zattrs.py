"""Attributes of a zarr v3 group or array, read from its ``zarr.json``.

Contract: :func:`read_attrs` returns the ``attributes`` object of
``path/zarr.json`` as a dict; a missing node is ``None`` (or a DbfsError
naming ``missing`` when given) and an unreadable or undecodable file is a
DbfsError naming the node as corrupt and the fix. Reading the JSON directly
(zarr v3 keeps a node's attributes there, https://zarr-specs.readthedocs.io/
en/latest/v3/core/index.html#metadata) avoids opening a zarr store for what is
a marker check. The one owner of attribute reads in dbfs.
"""
from __future__ import annotations

import json
from pathlib import Path

from dbfs.errors import DbfsError

__all__ = ["read_attrs"]


def read_attrs(path, missing: str | None = None, fix: str = "remove it and build it again") -> dict | None:
    """The attributes of the zarr node at ``path``.

    Parameters
    ----------
    path : path-like
        The node's directory (holding ``zarr.json``).
    missing : str, optional
        When given, a missing node raises ``DbfsError(missing)``; otherwise it returns None.
    fix : str
        What the user should do about a corrupt node (appended to the error).
    """
    f = Path(path) / "zarr.json"
    try:
        with open(f) as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        if missing is not None:
            raise DbfsError(missing) from None
        return None
    except (OSError, ValueError) as e:
        raise DbfsError(f"{Path(path).name} is corrupt (zarr.json unreadable: {e}): {fix}") from None
    if not isinstance(doc, dict):
        raise DbfsError(f"{Path(path).name} is corrupt (zarr.json is not an object): {fix}")
    return dict(doc.get("attributes") or {})

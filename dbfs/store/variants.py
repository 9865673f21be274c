"""CSR variants of a dataset: naming, listing, reuse and the loaders' checks.

Contract
--------
A dataset's Kernel 1 outputs live in ``<dataset>/csr/<variant>/``, one zarr
group per set of value-affecting options. The name encodes all of them:
``p{P}-{block|cyclic}`` + ``-dup`` (``dedupe=False``) + ``-deg``
(``relabel="degree"``); :func:`variant_name` and :func:`parse_variant` are
inverses. A variant is usable only when its ``complete`` attribute is true
(written last by :mod:`.csr_store`); :func:`reusable_variant` returns such a
variant's attributes when P, partitioning, dedupe and relabel all match, and
anything else (missing, incomplete, unreadable) means "build it". Errors name
the ``dbfs build`` command that rebuilds the variant.

Attributes are read only through :func:`dbfs.zattrs.read_attrs`.
"""
from __future__ import annotations

import re
from pathlib import Path

from dbfs.errors import DbfsError
from dbfs.zattrs import read_attrs

__all__ = ["variant_name", "parse_variant", "list_variants", "reusable_variant"]

_VARIANT_RE = re.compile(r"^p(\d+)-(block|cyclic)(-dup)?(-deg)?$")


def variant_name(P: int = 1, partitioning: str = "block", dedupe: bool = True, relabel: str = "none") -> str:
    """The name of the CSR variant built with these options.

    Parameters
    ----------
    P : int
        Partition count.
    partitioning : {"block", "cyclic"}
        Vertex ownership rule (:mod:`dbfs.partition`).
    dedupe : bool
        False adds ``-dup``.
    relabel : {"none", "degree"}
        ``"degree"`` adds ``-deg``.

    Returns
    -------
    str
        ``p{P}-{partitioning}[-dup][-deg]``, e.g. ``p4-block``.
    """
    if partitioning not in ("block", "cyclic"):
        raise DbfsError(f"unknown partitioning {partitioning!r}: use 'block' or 'cyclic'")
    if relabel not in ("none", "degree"):
        raise DbfsError(f"unknown relabel {relabel!r}: use 'none' or 'degree'")
    return f"p{int(P)}-{partitioning}" + ("" if dedupe else "-dup") + ("-deg" if relabel == "degree" else "")


def parse_variant(name: str) -> dict:
    """Inverse of :func:`variant_name`.

    Parameters
    ----------
    name : str
        A variant name such as ``p4-cyclic-dup``.

    Returns
    -------
    dict
        Keys ``P``, ``partitioning``, ``dedupe``, ``relabel``; a malformed
        name raises :class:`DbfsError`.
    """
    m = _VARIANT_RE.match(name)
    if not m:
        raise DbfsError(f"{name!r} is not a CSR variant name: use p<P>-<block|cyclic>[-dup][-deg], e.g. p4-block")
    return {"P": int(m.group(1)), "partitioning": m.group(2), "dedupe": m.group(3) is None,
            "relabel": "degree" if m.group(4) else "none"}


def _rebuild_hint(dataset_path, variant: str) -> str:
    name = Path(dataset_path).name
    try:
        o = parse_variant(variant)
    except DbfsError:
        return f"`dbfs build {name}`"
    cmd = f"dbfs build {name} --partitions {o['P']}"
    if o["partitioning"] != "block":
        cmd += f" --partitioning {o['partitioning']}"
    if not o["dedupe"]:
        cmd += " --keep-duplicates"
    if o["relabel"] != "none":
        cmd += f" --relabel {o['relabel']}"
    return f"`{cmd}`"


def _attrs_or_none(path: Path) -> dict | None:
    """A variant's attributes; None when missing or unreadable (the caller rebuilds or skips it)."""
    try:
        return read_attrs(path)
    except DbfsError:
        return None


def list_variants(dataset_path) -> list[dict]:
    """The CSR variants stored under ``dataset_path/csr``, by name.

    Parameters
    ----------
    dataset_path : path-like
        The dataset's directory.

    Returns
    -------
    list of dict
        ``name``, ``complete`` and, where recorded, ``P``, ``partitioning``,
        ``options``, ``nnz_total``, ``construction_time``, ``n_vertices``.
        An unreadable variant is listed as incomplete.
    """
    root = Path(dataset_path) / "csr"
    out = []
    if not root.is_dir():
        return out
    for d in sorted(root.iterdir()):
        if not d.is_dir() or d.name.startswith(".") or not _VARIANT_RE.match(d.name):
            continue
        attrs = _attrs_or_none(d) or {}
        rec = {"name": d.name, "complete": bool(attrs.get("complete", False))}
        for k in ("P", "partitioning", "options", "nnz_total", "construction_time", "n_vertices"):
            if k in attrs:
                rec[k] = attrs[k]
        out.append(rec)
    return out


def reusable_variant(dataset_path, P: int = 1, partitioning: str = "block", dedupe: bool = True,
                     relabel: str = "none") -> dict | None:
    """The stored variant built with these options, if it can be reused.

    Parameters
    ----------
    dataset_path : path-like
        The dataset's directory.
    P, partitioning, dedupe, relabel
        The value-affecting options (as for :func:`variant_name`).

    Returns
    -------
    dict or None
        The complete variant's attributes with ``reused=True`` added, or None
        when it is missing, incomplete, unreadable or was built otherwise.
    """
    old = _attrs_or_none(Path(dataset_path) / "csr" / variant_name(P, partitioning, dedupe, relabel))
    if old and old.get("complete") and old.get("P") == P and old.get("partitioning") == partitioning \
            and old.get("options", {}).get("dedupe") == bool(dedupe) \
            and old.get("options", {}).get("relabel") == relabel:
        old["reused"] = True
        return old
    return None


def _variant_attrs(dataset_path, variant):
    """(variant path, attributes, rebuild hint) of a complete variant, else a DbfsError naming the fix."""
    dataset_path = Path(dataset_path)
    vpath = dataset_path / "csr" / variant
    hint = _rebuild_hint(dataset_path, variant)
    attrs = read_attrs(vpath, fix=f"rebuild it with {hint}")
    if attrs is None:
        raise DbfsError(f"CSR variant {variant} of {dataset_path.name} does not exist: build it with {hint}")
    if not attrs.get("complete", False):
        raise DbfsError(f"CSR variant {variant} of {dataset_path.name} is incomplete: rebuild it with {hint}")
    return vpath, attrs, hint

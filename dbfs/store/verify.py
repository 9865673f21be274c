"""``dbfs datasets verify``: every chunk of a dataset and of each of its CSR variants, checked.

Contract
--------
:func:`verify` decodes every chunk of ``edges``, ``original_ids`` and of
every complete CSR variant (``part-*/indptr``, ``part-*/indices``,
``perm``) and returns one line per damaged chunk, plus one per array whose
chunk-independent checksum or shape disagrees with its attributes: the
edges' ``edges_checksum`` and id range ``[0, N)``, each CSR part's ``nnz``,
``indices_sum`` and ``indptr_sum`` (sum of the values mod 2**64). Each
decoded chunk is also compared with the position-keyed digest recorded for
it when it was written (:mod:`dbfs.store.integrity`, ``dbfs_digests``), so a
chunk reordered, swapped or edited through zarr (fresh CRC, even with the
order-free sums or ``edges_checksum`` made to match) is a line naming the
array and the chunk. Arrays written before digests are checked as before and
the ``ok`` line says ``no digests for ...``. Damage is
recorded on the node (:func:`dbfs.store.integrity.mark_corrupt`); a node
that passes every check has a stale ``corrupt`` record removed. A missing
dataset or a bad name is a :class:`~dbfs.errors.DbfsError` (bad input).

A *virtual* dataset (:mod:`.virtual`) has no edge chunks: its defining
attributes are checked (:func:`.virtual.virtual_problem`: spec, counts,
dtype, ``virtual_digest``), then every chunk is regenerated and checked for
ids in ``[0, N)`` and, all together, against ``edges_checksum``; the ``ok``
line says so.

Method: chunks are read by a thread pool (zstd and crc32c release the
GIL); a read that fails is classified by :func:`.integrity.chunk_problem`.
A chunk's digest is hashed from the values already decoded (for ``edges``
it is also the chunk's ``edges_checksum`` part): no second read.
Arrays written before the crc32c codec are checked for decodability and
checksums only (noted in the result).
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import zarr

from dbfs.checksum import chunk_digests, combine, partial_checksum
from dbfs.errors import DbfsError
from dbfs.partition import Partitioning
from dbfs.progress import bar
from dbfs.store.datasets import _read_attrs, check_name, datasets_root, edges_fix, generate_command, open_edges
from dbfs.store.integrity import (DECODE_ERRORS, DIGEST_MISMATCH, chunk_file, decode_reason, has_crc, mark_corrupt,
                                  read_digests)
from dbfs.store.variants import _rebuild_hint
from dbfs.store.virtual import VIRTUAL, storage_of, virtual_problem

__all__ = ["verify", "Verification"]


@dataclass
class Verification:
    """What :func:`verify` found.

    Attributes
    ----------
    name : str
        The dataset.
    problems : list of str
        One line per damaged chunk or failed array check (empty: intact).
    notes : list of str
        Remarks that are not damage (arrays without crc32c, incomplete variants).
    fixes : list of str
        What to do, one line per damaged node (dataset or variant).
    chunks : int
        Chunks read.
    checked : list of str
        What was checked beyond reading chunks (said on the ``ok`` line).
    digested, undigested : list of str
        The arrays whose chunks were checked against their recorded position-keyed digests, and
        those that have none (written before digests).
    """

    name: str
    problems: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    fixes: list = field(default_factory=list)
    chunks: int = 0
    checked: list = field(default_factory=list)
    digested: list = field(default_factory=list)
    undigested: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def lines(self) -> tuple[list, list]:
        """(stdout lines: one per problem, or one ``ok`` line; stderr lines: notes and fixes)."""
        err = [f"dbfs: note: {n}" for n in self.notes] + [f"dbfs: {self.name}: {f}" for f in self.fixes]
        what = "".join(f"; {c}" for c in self.checked + self._digest_lines())
        out = [f"corrupt: {p}" for p in self.problems] or [f"ok: {self.name}: {self.chunks} chunks verified{what}"]
        return out, err

    def _digest_lines(self) -> list:
        out = []
        if self.digested:
            out.append(f"position-keyed chunk digests match ({len(self.digested)} arrays)")
        if self.undigested:
            out.append(f"no digests for {', '.join(self.undigested)} (written before chunk digests: a reorder "
                       f"with fresh CRCs is caught only by the whole-array checksums; regenerate or rebuild to "
                       f"add them)")
        return out


def _open(path: Path):
    return zarr.open_array(str(path), mode="r")


def _scan(arr, label: str, unit: str, visit, quiet: bool, res: Verification) -> tuple[list, int]:
    """Decode every row-chunk of ``arr``, check its position-keyed digest (when the array has digests) and
    call ``visit(i, lo, block, digest)`` on each good one (it returns a reason or None; ``digest`` is the
    chunk's :func:`dbfs.checksum.chunk_digests` entry, for an edge list its checksum part); (problems as
    (array, chunk, line), chunks read). The array's name goes to ``res.digested`` or ``res.undigested``."""
    step = int(arr.chunks[0])
    n = int(arr.nchunks)
    try:
        want = read_digests(arr)
    except ValueError as e:
        return [(label, None, f"{label}: chunk digests unusable ({e})")], 0
    (res.undigested if want is None else res.digested).append(label)

    def one(i):
        lo, hi = i * step, min((i + 1) * step, int(arr.shape[0]))
        f = chunk_file(arr, i)
        why = None
        if f is not None and not f.exists():
            why = "missing"
        else:
            try:
                block = arr[lo:hi]
            except DECODE_ERRORS as e:
                why = decode_reason(e)
            else:
                d = int(chunk_digests(block, lo, step)[0]) if hi > lo else 0
                why = DIGEST_MISMATCH if want is not None and d != int(want[i]) else visit(i, lo, block, d)
        return None if why is None else (label, i, f"{label} chunk {i} ({unit} {lo}..{hi - 1}): {why}")

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool, bar(n, f"verifying {label}", quiet) as prog:
        found = []
        for r in pool.map(one, range(n)):
            prog.update(1)
            if r:
                found.append(r)
    return found, n


def _check_virtual(path: Path, attrs: dict, res: Verification, quiet: bool) -> list:
    """Problems of virtual edges: defining attributes, then every chunk regenerated (id range, checksum)."""
    why = virtual_problem(attrs)
    if why:
        return [("edges", None, f"edges: {why}")]
    arr = open_edges(path, attrs, verify_sum=False)
    n, step, m = int(attrs["n_vertices"]), int(arr.chunks[0]), int(arr.shape[0])
    parts, found = [], []
    with bar(arr.nchunks, "regenerating virtual edges", quiet) as prog:
        for i, lo in enumerate(range(0, m, step)):
            block = arr[lo:lo + step]
            parts.append(partial_checksum(block, lo))
            if block.size and int(block.max()) >= n:
                found.append(("edges", i, f"virtual edges chunk {i} (rows {lo}..{lo + len(block) - 1}): "
                                          f"ids outside [0, {n})"))
            prog.update(1)
    res.chunks += arr.nchunks
    if combine(parts) != attrs["edges_checksum"]:
        found.append(("edges", None, "edges: regenerated rows differ from the edges_checksum recorded at "
                                     "generation (the generator changed since)"))
    res.checked.append(f"virtual edges: spec attributes and virtual_digest intact, {arr.nchunks} chunks "
                       f"regenerated, ids in [0, {n}), edges_checksum matches")
    return found


def _check_edges(path: Path, attrs: dict, res: Verification, quiet: bool) -> list:
    """Problems of ``edges``: chunks, shape, id range, ``edges_checksum``."""
    if storage_of(attrs) == VIRTUAL:
        return _check_virtual(path, attrs, res, quiet)
    arr = _open(path / "edges")
    n, m = int(attrs["n_vertices"]), int(attrs["n_edges"])
    if tuple(arr.shape) != (m, 2):
        return [("edges", None, f"edges: shape {tuple(arr.shape)} != ({m}, 2)")]
    if not has_crc(arr):
        res.notes.append(f"{path.name}: edges were written before per-chunk crc32c: chunks checked for decoding only; "
                         f"`{generate_command(attrs.get('spec', {}), path)}` adds the CRCs")
    parts = {}

    def visit(i, lo, block, d):
        parts[i] = d  # the chunk's digest is its edges_checksum part (same row hash)
        if block.size and int(block.max()) >= n:
            return f"ids outside [0, {n})"
        return None

    found, k = _scan(arr, "edges", "rows", visit, quiet, res)
    res.chunks += k
    if not found and attrs.get("edges_checksum") and combine(parts.values()) != attrs["edges_checksum"]:
        found.append(("edges", None, "edges: rows differ from the edges_checksum recorded at generation "
                                     "(a chunk was rewritten with a fresh crc)"))
    return found


def _wrap(block) -> int:
    return int(np.asarray(block).astype(np.uint64).sum(dtype=np.uint64))


def _check_part(vpath: Path, j: int, attrs: dict, res: Verification, quiet: bool) -> list:
    """Problems of one CSR partition: chunks, nnz, both value sums."""
    pre = f"csr/{vpath.name}/part-{j:04d}"
    found = []
    sums = {}
    for key, unit in (("indptr", "rows"), ("indices", "entries")):
        try:
            arr = _open(vpath / f"part-{j:04d}" / key)
        except (FileNotFoundError, KeyError, ValueError) as e:
            found.append((f"{pre}/{key}", None, f"{pre}/{key}: missing ({type(e).__name__})"))
            continue
        acc = {}
        bad, k = _scan(arr, f"{pre}/{key}", unit, lambda i, lo, b, d: acc.__setitem__(i, _wrap(b)), quiet, res)
        res.chunks += k
        found += bad
        sums[key] = (sum(acc.values()) % (1 << 64), int(arr.shape[0]), not bad)
    part = Partitioning(int(attrs["n_vertices"]), int(attrs["P"]), attrs["partitioning"])
    ck = attrs.get("checksums", [{}] * (j + 1))[j]
    if "indptr" in sums and sums["indptr"][1] != part.local_count(j) + 1:
        found.append((f"{pre}/indptr", None,
                      f"{pre}/indptr: {sums['indptr'][1]} entries, expected {part.local_count(j) + 1}"))
    if "indices" in sums and sums["indices"][1] != int(attrs["nnz"][j]):
        found.append((f"{pre}/indices", None,
                      f"{pre}/indices: {sums['indices'][1]} entries, expected nnz {int(attrs['nnz'][j])}"))
    for key in ("indptr", "indices"):
        if key in sums and sums[key][2] and f"{key}_sum" in ck and sums[key][0] != int(ck[f"{key}_sum"]):
            found.append((f"{pre}/{key}", None, f"{pre}/{key}: values differ from the {key}_sum recorded at build"))
    return found


def _check_variant(vpath: Path, res: Verification, quiet: bool) -> list:
    """Problems of one complete CSR variant (every part, and ``perm`` of a relabelled one)."""
    attrs = _read_attrs(vpath)
    found = []
    for j in range(int(attrs["P"])):
        found += _check_part(vpath, j, attrs, res, quiet)
    if attrs.get("options", {}).get("relabel", "none") != "none":
        bad, k = _scan(_open(vpath / "perm"), f"csr/{vpath.name}/perm", "ids", lambda *a: None, quiet, res)
        res.chunks += k
        found += bad
    return found


def _record(node: Path, found: list, attrs: dict) -> None:
    """Mark a damaged node, or drop a stale mark from an intact one."""
    if found:
        array, chunk, line = found[0]
        mark_corrupt(node, array.split("/", 2)[-1] if array.startswith("csr/") else array, chunk,
                     line.split(": ", 1)[-1])
    elif attrs.get("corrupt"):
        try:
            del zarr.open_group(str(node), mode="r+").attrs["corrupt"]
        except Exception:  # noqa: BLE001 - read-only store: the stale mark stays
            pass


def _variants(path: Path, res: Verification, quiet: bool) -> None:
    csr = path / "csr"
    for v in sorted(csr.iterdir()) if csr.is_dir() else []:
        if v.name.startswith(".") or not v.is_dir():
            continue
        try:
            vattrs = _read_attrs(v)
        except DbfsError as e:
            res.problems.append(f"{path.name}: csr/{v.name}: {e}")
            res.fixes.append(f"csr/{v.name}: rebuild it with {_rebuild_hint(path, v.name)}")
            continue
        if vattrs.get("complete") is not True:
            res.notes.append(f"{path.name}: csr/{v.name} is incomplete (an interrupted build; the next build replaces it)")
            continue
        found = _check_variant(v, res, quiet)
        _record(v, found, vattrs)
        res.problems += [f"{path.name}: {line}" for _, _, line in found]
        if found:
            res.fixes.append(f"csr/{v.name}: rebuild it with {_rebuild_hint(path, v.name)}")


def verify(name: str, root=None, quiet: bool = False) -> Verification:
    """Check every chunk of dataset ``name`` and of its CSR variants (see the module docstring).

    Parameters
    ----------
    name : str
        The dataset's name.
    root : path-like, optional
        The datasets root (:func:`dbfs.store.datasets.datasets_root`).
    quiet : bool
        No progress lines.

    Returns
    -------
    Verification

    Raises
    ------
    DbfsError
        A bad name or a dataset that does not exist.
    """
    root = datasets_root(root)
    check_name(name, root)
    path = root / name
    if not path.is_dir():
        raise DbfsError(f"dataset {name} not found under {root}: see `dbfs datasets list --datasets {root}`")
    res = Verification(name)
    try:
        attrs = _read_attrs(path)
    except DbfsError as e:
        res.problems.append(f"{name}: {e}")
        res.fixes.append(f"remove it with `dbfs datasets rm {name}` and generate it again")
        return res
    if attrs.get("complete") is not True:
        res.problems.append(f"{name}: no complete marker (an interrupted generation)")
        res.fixes.append(edges_fix(path, attrs))
        return res
    try:
        found = _check_edges(path, attrs, res, quiet)
        if attrs.get("original_ids"):
            bad, k = _scan(_open(path / "original_ids"), "original_ids", "vertices", lambda *a: None, quiet, res)
            res.chunks += k
            found += bad
    except (FileNotFoundError, KeyError, ValueError) as e:
        found = [("edges", None, f"edges: array unreadable ({type(e).__name__}: {e})")]
    _record(path, found, attrs)
    res.problems += [f"{name}: {line}" for _, _, line in found]
    if found:
        res.fixes.append(edges_fix(path, attrs))
    _variants(path, res, quiet)
    return res

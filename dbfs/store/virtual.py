"""Virtual edge lists: a dataset that stores its spec instead of its edges.

Contract
--------
A dataset whose attribute ``edges_storage`` is ``"virtual"`` has no
``edges`` array: :class:`VirtualEdges` regenerates any row range on demand
from the spec (every generator is a pure, block-seeded function of the row
range, :mod:`dbfs.generate`), in the stored dtype, so every reader
(:func:`dbfs.store.open_edges`: Kernel 1, validation, export, root
selection) gets exactly the bytes a stored copy would hold. Its read API is
:class:`dbfs.store.integrity.CheckedArray`'s (``shape``, ``dtype``,
``chunks``, ``nchunks``, ``a[lo:hi]``, ``a[:]``, ``error``); a whole read
verifies ``edges_checksum`` (computed when the dataset was made, by
generating every chunk once), which catches a generator that changed since.
Imported graphs are never virtual (their edges exist only in the file).

Integrity: there are no chunks to damage, but the attributes that define
the edges are checked on every open (:func:`virtual_problem`): the spec
parses and is not an import, ``n_vertices``/``n_edges`` are the spec's
counts, ``edge_dtype`` is its stored dtype, ``chunk_edges`` is positive and
``virtual_digest`` (SHA-256 of those attributes and ``edges_checksum``,
canonical JSON) matches, so a half-written or edited virtual dataset is a
one-line error (``status`` corrupt) naming the fix.

Encoding: group attributes as for a stored dataset (:mod:`dbfs.store`) plus
``edges_storage: "virtual"`` and ``virtual_digest`` (64 hex digits); a stored
dataset has ``edges_storage: "stored"`` (absent in datasets written before
virtual ones existed, which are stored).

Method: ``a[lo:hi]`` calls ``spec.edges(lo, hi)`` (Numba, all threads) and
casts to the stored dtype; :func:`device_rows` makes Kronecker rows on the GPU
(:func:`dbfs.generate.gpu.kronecker_edges_gpu`, same bytes). Why a range
can be made alone: Graph500 3.0.1 draws edge ``ei`` from its own stream
``skip(0, ei, 0)`` (GRAPH500.md section 3); validation must still see the
INPUT edges (section 8), which regeneration reproduces bit for bit.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from dbfs.checksum import combine, partial_checksum
from dbfs.errors import DbfsError
from dbfs.spec import GraphSpec
from dbfs.store.integrity import RowArray, corrupt_message, mark_corrupt

__all__ = ["STORED", "VIRTUAL", "storage_of", "digest", "virtual_problem", "VirtualEdges", "device_rows"]

STORED, VIRTUAL = "stored", "virtual"
_DIGEST_KEYS = ("spec", "n_vertices", "n_edges", "edge_dtype", "chunk_edges", "edges_checksum", "edges_storage")


def storage_of(attrs: dict) -> str:
    """``"virtual"`` or ``"stored"`` (datasets from before virtual ones: stored)."""
    return VIRTUAL if attrs.get("edges_storage") == VIRTUAL else STORED


def digest(attrs: dict) -> str:
    """SHA-256 (hex) of the attributes that define a virtual dataset's edges, canonical JSON."""
    blob = json.dumps({k: attrs.get(k) for k in _DIGEST_KEYS}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def virtual_problem(attrs: dict) -> str | None:
    """What is wrong with a virtual dataset's defining attributes, or None.

    Parameters
    ----------
    attrs : dict
        The dataset's group attributes (``edges_storage == "virtual"``).

    Returns
    -------
    str or None
        E.g. ``"virtual dataset attributes were edited (virtual_digest mismatch)"``.
    """
    try:
        spec = GraphSpec.from_dict(attrs["spec"])
    except (KeyError, TypeError, ValueError) as e:
        return f"virtual dataset has no readable spec ({type(e).__name__}: {e})"
    if spec.kind == "import":
        return "an imported graph cannot be virtual (its edges exist only in the file)"
    try:
        n, m = spec.counts()
        if (attrs.get("n_vertices"), attrs.get("n_edges")) != (n, m):
            return (f"virtual dataset counts n_vertices={attrs.get('n_vertices')} n_edges={attrs.get('n_edges')} "
                    f"are not its spec's ({n}, {m})")
        if attrs.get("edge_dtype") != spec.stored_dtype.name:
            return f"virtual dataset edge_dtype {attrs.get('edge_dtype')!r} is not {spec.stored_dtype.name!r}"
    except DbfsError as e:
        return f"virtual dataset spec is invalid ({e})"
    ce = attrs.get("chunk_edges")
    if not isinstance(ce, int) or isinstance(ce, bool) or ce < 1:
        return f"virtual dataset chunk_edges {ce!r} is not a positive integer"
    if not isinstance(attrs.get("edges_checksum"), str):
        return "virtual dataset has no edges_checksum"
    if attrs.get("virtual_digest") != digest(attrs):
        return "virtual dataset attributes were edited (virtual_digest mismatch)"
    return None


def _rows(key, n: int):
    """(row slice, rest of the key, squeeze) for a basic numpy-style key."""
    rest = ()
    if isinstance(key, tuple):
        key, rest = (key[0], key[1:]) if key else (slice(None), ())
    if isinstance(key, (int, np.integer)):
        k = int(key)
        if not -n <= k < n:
            raise IndexError(f"row {k} is out of bounds for {n} rows")
        k %= n
        return slice(k, k + 1, 1), rest, True
    if key is Ellipsis:
        return slice(0, n, 1), rest, False
    if isinstance(key, slice):
        return slice(*key.indices(n)), rest, False
    raise TypeError(f"virtual edges take row slices or integers, not {type(key).__name__}")


class VirtualEdges(RowArray):
    """The regenerated edge array of a virtual dataset, read like a :class:`~.integrity.CheckedArray`.

    Parameters
    ----------
    node_path : path-like
        The dataset's directory.
    attrs : dict
        Its attributes (checked by the caller, :func:`virtual_problem`).
    label : str
        E.g. ``"dataset kron-s10-ef16-s2-3"``.
    fix : str
        What the user should do (ends every error).
    checksum : str, optional
        ``edges_checksum``, verified when all rows are read at once.
    """

    array = "edges"
    unit = "rows"
    raw = None
    virtual = True

    def __init__(self, node_path, attrs: dict, label: str, fix: str, checksum: str | None = None):
        self.node_path, self.label, self.fix, self.checksum = Path(node_path), label, fix, checksum
        self.spec = GraphSpec.from_dict(attrs["spec"])
        m = int(attrs["n_edges"])
        self.shape = (m, 2)
        self.dtype = np.dtype(attrs["edge_dtype"])
        self.chunks = (min(int(attrs["chunk_edges"]), max(m, 1)), 2)
        self.ndim = 2

    @property
    def nchunks(self) -> int:
        return -(-self.shape[0] // self.chunks[0]) if self.shape[0] else 0

    def __dask_tokenize__(self):
        return ("dbfs-virtual", str(self.node_path), self.spec.to_dict(), self.shape, str(self.dtype))

    def error(self, chunk, reason: str, rows=None) -> DbfsError:
        """Mark the dataset corrupt and return the one-line error (same as a stored array's)."""
        mark_corrupt(self.node_path, self.array, chunk, reason)
        return DbfsError(corrupt_message(self.label, "virtual edges", chunk, rows, reason, self.fix, self.unit))

    def __getitem__(self, key):
        n = self.shape[0]
        rows, rest, squeeze = _rows(key, n)
        lo, hi, step = rows.start, rows.stop, rows.step
        if step < 0:
            lo, hi = hi + 1, lo + 1
        lo, hi = max(lo, 0), min(max(hi, lo), n)
        block = self.spec.edges(lo, hi).astype(self.dtype, copy=False)
        whole = (lo, hi) == (0, n) and n > 0
        if whole and self.checksum is not None:
            if combine([partial_checksum(block, 0)]) != self.checksum:
                raise self.error(None, "regenerated rows differ from the edges_checksum recorded at generation "
                                       "(the generator changed since)")
        block = block[::step] if step != 1 else block
        if squeeze:
            return block[0][rest] if rest else block[0]
        return block[(slice(None),) + tuple(rest)] if rest else block


def device_rows(spec, start: int, stop: int, dtype):
    """Rows ``[start, stop)`` of a virtual Kronecker dataset made on the GPU (CuPy, ``dtype``).

    Parameters
    ----------
    spec : GraphSpec
        A ``kronecker`` spec (other kinds: a DbfsError).
    start, stop : int
    dtype : numpy dtype
        The stored dtype.

    Returns
    -------
    cupy.ndarray
        Same bytes as ``VirtualEdges(...)[start:stop]``.
    """
    if spec.kind != "kronecker":
        raise DbfsError(f"GPU regeneration makes Graph500 Kronecker graphs only, not {spec.kind}: "
                        f"read these virtual edges on the CPU")
    from dbfs.generate.gpu import kronecker_edges_gpu  # deferred: cupy

    return kronecker_edges_gpu(spec.scale, spec.edgefactor, spec.seed1, spec.seed2, start, stop).astype(dtype,
                                                                                                     copy=False)

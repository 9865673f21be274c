"""Per-chunk integrity of stored arrays: the codec chain, checked reads, corruption markers.

Contract
--------
Every array dbfs writes (``edges``, ``original_ids``, the CSR ``indptr``,
``indices`` and ``perm``) is encoded ``bytes -> zstd -> crc32c``
(:func:`compressors`): each chunk file ends in the CRC-32C of its
compressed bytes, and zarr checks it on every read. A read through
:class:`CheckedArray` that fails to decode (CRC mismatch, ``Zstd
decompression error``, a chunk of the wrong size, an I/O error) raises a one-line :class:`~dbfs.errors.DbfsError` naming the
dataset, the array, the chunk index, its rows and the fix, and records the
damage in the node's attributes (:func:`mark_corrupt`: ``corrupt`` =
``{"array", "chunk", "reason", "seen_at"}``), so listings show it until the
node is rebuilt. A full read of an array that carries a chunk-independent
checksum (the ``edges_checksum`` of :mod:`dbfs.checksum`) also verifies it,
which catches rows rewritten consistently (with a fresh CRC).

Position-keyed chunk digests: a CRC is only as good as the bytes it was
computed over, so a chunk rewritten through zarr (values swapped, rows
shuffled) carries a fresh, valid one. Every array dbfs writes therefore also
records, in its own attributes (``dbfs_digests``: ``rule``, ``chunk``,
``count``, ``hex``: 16 hex digits per stored chunk), the digest of each
chunk's contents at its positions (:func:`dbfs.checksum.chunk_digests`:
a sum of splitmix64 mixes of (position, value), so any reorder, swap or edit
changes it). Writers compute the digests of the rows they write as they
write them (:func:`write_rows`; tasks leave them in a hidden ``.<array>.digests``
folder beside the array, whose parts add up per chunk whatever the writes'
cut) and the driver seals them into the attribute before the node is
published (:func:`seal_digests`). A read through :class:`CheckedArray`
checks the digest of every whole chunk it returns, on the values it decoded
anyway: a mismatch is the same one-line error and ``corrupt`` record as a
bad CRC, naming the chunk. Arrays without ``dbfs_digests`` (written before
them) are read as before (:func:`read_digests` returns None).

Arrays written before the CRC codec (no ``crc32c`` in their codec chain)
are read as before: a decode failure is still reported per chunk, but a
changed chunk that still decodes is caught only by the dataset checksums.

Method: the CRC is zarr's ``crc32c`` codec (zarr v3 core specification,
https://zarr-specs.readthedocs.io/en/latest/v3/codecs/crc32c/index.html;
CRC-32C, Castagnoli polynomial, RFC 3720 appendix B.4), computed off the
GIL by :mod:`.crc`. :func:`crc_scan` checks the CRC of every chunk file
without decompressing (a cheap check before a dataset is reused);
:func:`chunk_problem` decodes one chunk.
Chunk files are found by the array's chunk key encoding under a local
store (the only store dbfs writes).
"""
from __future__ import annotations

import os
import shutil
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import zarr
from zarr.codecs import BloscCodec, ZstdCodec

from dbfs.checksum import DIGEST_RULE, chunk_digests, combine, partial_checksum
from dbfs.errors import DbfsError
from dbfs.store.crc import Crc32cCodec, crc32c

__all__ = ["compressors", "has_crc", "CheckedArray", "chunk_problem", "chunk_file", "decode_reason", "crc_scan",
           "mark_corrupt", "corrupt_message", "DECODE_ERRORS", "DIGESTS", "DIGEST_MISMATCH", "read_digests",
           "write_rows", "record_digests", "seal_digests", "set_digests"]

#: what a read of a damaged chunk raises inside zarr and its codecs (CRC
#: mismatch and wrong chunk size: ValueError; zstd: RuntimeError)
DECODE_ERRORS = (ValueError, RuntimeError, TypeError, IndexError, OSError)

_ZSTD_LEVEL = 1

#: the attribute of a stored array that holds its position-keyed chunk digests
DIGESTS = "dbfs_digests"
#: the reason a chunk whose contents fail their digest is corrupt
DIGEST_MISMATCH = ("contents differ from the position-keyed checksum (digest) recorded when written: reordered or "
                   "edited outside dbfs")


def compressors(level: int = _ZSTD_LEVEL) -> list:
    """The bytes-to-bytes codecs of every array dbfs writes: zstd, then crc32c.

    Parameters
    ----------
    level : int
        zstd level.

    Returns
    -------
    list
        ``[ZstdCodec(level), Crc32cCodec()]`` (pass as ``compressors=``).
    """
    return [ZstdCodec(level=level), Crc32cCodec()]


def adjacency_compressors(level: int = _ZSTD_LEVEL) -> list:
    """The bytes-to-bytes codecs of a CSR's ``indices`` (ids ascending within each row):
    blosc's zstd over byte-shuffled ids, then crc32c; the measured choice among the
    encodings of sorted adjacency (docs/BENCHMARKS.md, "Compressed encodings")."""
    return [BloscCodec(cname="zstd", clevel=level, shuffle="shuffle"), Crc32cCodec()]


def has_crc(arr) -> bool:
    """Whether a zarr array's chunks end in a crc32c (written by this dbfs, not an older one)."""
    try:
        return any(c.to_dict().get("name") == "crc32c" for c in arr.metadata.codecs)
    except AttributeError:
        return False


def decode_reason(exc: BaseException) -> str:
    """A short name for a decode failure."""
    msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if "checksum do not match" in msg:
        return "crc32c mismatch"
    if "ecompression error" in msg or "decompress" in msg.lower():
        return f"undecodable ({msg[:60]})"
    if "reshape" in msg or "size" in msg:
        return f"wrong chunk size ({msg[:60]})"
    return f"{type(exc).__name__}: {msg[:80]}"


def _rows_of(arr, i: int) -> tuple[int, int]:
    step = int(arr.chunks[0])
    return i * step, min((i + 1) * step, int(arr.shape[0]))


def chunk_file(arr, i: int) -> Path | None:
    """The file of row-chunk ``i`` of a local zarr array (None for another store)."""
    root = getattr(getattr(arr.store_path, "store", None), "root", None)
    if root is None:
        return None
    key = arr.metadata.encode_chunk_key((i,) + (0,) * (len(arr.shape) - 1))
    path = arr.store_path.path
    return Path(root) / path / key if path else Path(root) / key


def chunk_problem(arr, i: int) -> str | None:
    """What is wrong with row-chunk ``i`` of a zarr array, or None.

    Parameters
    ----------
    arr : zarr.Array
        Chunked along rows only (every dbfs array is).
    i : int
        The chunk index.

    Returns
    -------
    str or None
        ``"missing"``, ``"crc32c mismatch"``, ``"undecodable (...)"``,
        ``"wrong chunk size (...)"``, ... ; None when it decodes.
    """
    f = chunk_file(arr, i)
    if f is not None and not f.exists():
        return "missing"
    lo, hi = _rows_of(arr, i)
    try:
        arr[lo:hi]
    except DECODE_ERRORS as e:
        return decode_reason(e)
    return None


def _locate(arr, lo: int, hi: int):
    """The first bad chunk among those holding rows [lo, hi): (index, reason) or None."""
    step = int(arr.chunks[0]) or 1
    for i in range(lo // step, (max(hi, lo + 1) - 1) // step + 1):
        why = chunk_problem(arr, i)
        if why is not None:
            return i, why
    return None


def _row_span(key, n: int) -> tuple[int, int]:
    """Rows [lo, hi) a numpy-style key selects (the whole array when unsure)."""
    first = key[0] if isinstance(key, tuple) and key else key
    if isinstance(first, slice):
        lo, hi, _ = first.indices(n)
        return lo, max(lo, hi)
    if isinstance(first, (int, np.integer)):
        k = int(first) % max(n, 1)
        return k, k + 1
    return 0, n


def mark_corrupt(node_path, array: str, chunk, reason: str) -> None:
    """Record damage in a zarr group's attributes (``corrupt``); best effort.

    Parameters
    ----------
    node_path : path-like
        The dataset or CSR variant group.
    array : str
        The array, relative to the group (``edges``, ``part-0000/indices``).
    chunk : int or None
        The chunk index (None: the whole array, e.g. a checksum mismatch).
    reason : str
        What was seen.
    """
    rec = {"array": array, "chunk": chunk, "reason": reason,
           "seen_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    try:
        g = zarr.open_group(str(node_path), mode="r+")
        if not g.attrs.get("corrupt"):
            g.attrs["corrupt"] = rec
    except Exception:  # noqa: BLE001 - a read-only or vanished store keeps the error itself
        pass


# ---- position-keyed chunk digests ------------------------------------------------------------------
def read_digests(arr) -> np.ndarray | None:
    """The chunk digests recorded in a zarr array's attributes.

    Parameters
    ----------
    arr : zarr.Array
        Chunked along rows only.

    Returns
    -------
    numpy.ndarray of uint64 or None
        One digest per stored chunk; None when the array has none (written
        before digests).

    Raises
    ------
    ValueError
        A record that does not fit the array (its chunking or chunk count), naming what differs.
    """
    rec = arr.attrs.get(DIGESTS)
    if rec is None:
        return None
    n = int(arr.nchunks)
    if not isinstance(rec, dict) or not isinstance(rec.get("hex"), str):
        raise ValueError(f"the {DIGESTS} attribute is malformed")
    if rec.get("chunk") != int(arr.chunks[0]):
        raise ValueError(f"digests recorded for chunks of {rec.get('chunk')}, the array's are {int(arr.chunks[0])}")
    if len(rec["hex"]) != 16 * n:
        raise ValueError(f"{len(rec['hex']) // 16} digests recorded for {n} chunks")
    try:
        return np.frombuffer(bytes.fromhex(rec["hex"]), ">u8").astype(np.uint64)
    except ValueError:
        raise ValueError(f"the {DIGESTS} attribute is not hex") from None


def set_digests(arr_path, digests) -> None:
    """Record one digest per stored chunk in the attributes of the array at ``arr_path``
    (its writer computed them with :func:`dbfs.checksum.chunk_digests`)."""
    z = zarr.open_array(str(arr_path), mode="r+")
    d = np.asarray(digests, np.uint64)
    if d.shape != (int(z.nchunks),):
        raise ValueError(f"{d.shape[0]} digests for the {int(z.nchunks)} chunks of {arr_path}")
    z.attrs[DIGESTS] = {"rule": DIGEST_RULE, "chunk": int(z.chunks[0]), "count": int(z.nchunks),
                        "hex": d.astype(">u8").tobytes().hex()}


def _sidecar(arr_path) -> Path:
    p = Path(arr_path)
    return p.parent / f".{p.name}.digests"


def record_digests(arr_path, lo: int, hi: int, sums) -> None:
    """Leave the digest parts of positions [lo, hi) of a (temporary) array beside it for :func:`seal_digests`.

    Parameters
    ----------
    arr_path : path-like
        The array being written.
    lo, hi : int
        The positions written.
    sums : array_like of uint64
        :func:`dbfs.checksum.chunk_digests` of those positions (one per chunk they touch).
    """
    d = _sidecar(arr_path)
    d.mkdir(exist_ok=True)
    tmp = d / f".{lo}-{hi}.{uuid.uuid4().hex[:8]}"
    np.asarray(sums, "<u8").tofile(tmp)
    os.replace(tmp, d / f"{lo}-{hi}")  # a retried write replaces its own record


def write_rows(z, arr_path, lo: int, values) -> np.ndarray:
    """Store ``values`` at positions [lo, lo + len) of zarr array ``z`` and record their digests.

    Parameters
    ----------
    z : zarr.Array
        The (temporary) array, opened writable, chunked along rows.
    arr_path : path-like
        Its path (the digests are left beside it until :func:`seal_digests`).
    lo : int
        The first position.
    values : numpy.ndarray
        Rows or values, converted to the array's dtype.

    Returns
    -------
    numpy.ndarray of uint64
        The digest parts per chunk touched (for an edge list their sum is the rows'
        :func:`dbfs.checksum.partial_checksum`).
    """
    values = np.asarray(values).astype(z.dtype, copy=False)
    hi = lo + values.shape[0]
    z[lo:hi] = values
    sums = chunk_digests(values, lo, int(z.chunks[0]))
    if hi > lo:
        record_digests(arr_path, lo, hi, sums)
    return sums


def seal_digests(arr_path) -> int:
    """Gather the digest parts writers left beside the array (:func:`record_digests`) into its
    attributes (:func:`set_digests`) and remove them.

    A chunk whose positions the records do not cover exactly once (written some other way) gets
    the digest of its stored contents instead.

    Parameters
    ----------
    arr_path : path-like
        The array, fully written, not yet published.

    Returns
    -------
    int
        Chunks whose digest was computed from the stored contents (0 when every write recorded).
    """
    z = zarr.open_array(str(arr_path), mode="r")
    step, n, nch = int(z.chunks[0]), int(z.shape[0]), int(z.nchunks)
    got = np.zeros(nch, np.uint64)
    rows = np.zeros(nch, np.int64)
    side = _sidecar(arr_path)
    for f in sorted(side.iterdir()) if side.is_dir() else []:
        if f.name.startswith("."):
            continue  # a record being written when its writer died
        try:
            lo, hi = (int(x) for x in f.name.split("-"))
            sums = np.fromfile(f, "<u8").astype(np.uint64)
        except (ValueError, OSError):
            continue  # not a record: its chunks get the digest of their stored contents
        c0 = lo // step
        if lo < 0 or hi <= lo or hi > n or c0 + sums.shape[0] != (hi - 1) // step + 1:
            continue
        got[c0:c0 + sums.shape[0]] += sums
        cover = np.full(sums.shape[0], step, np.int64)
        cover[0] -= lo - c0 * step
        cover[-1] -= (c0 + sums.shape[0]) * step - hi
        rows[c0:c0 + sums.shape[0]] += cover
    want = np.full(nch, step, np.int64)
    if nch:
        want[-1] = n - (nch - 1) * step
    redo = np.flatnonzero(rows != want)
    for c in redo:
        a, b = int(c) * step, min((int(c) + 1) * step, n)
        got[c] = chunk_digests(z[a:b], a, step)[0]
    set_digests(arr_path, got)
    shutil.rmtree(side, ignore_errors=True)
    return int(redo.shape[0])


def _whole_rows(key, n: int, ndim: int) -> tuple[int, int] | None:
    """Rows [lo, hi) of a key that selects whole contiguous rows (every column), else None."""
    rest = ()
    if isinstance(key, tuple):
        if not key:
            return 0, n
        key, rest = key[0], key[1:]
    if key is Ellipsis and not rest:
        return 0, n
    if not isinstance(key, slice) or key.step not in (None, 1):
        return None
    if any(not (r is Ellipsis or (isinstance(r, slice) and r == slice(None))) for r in rest) or len(rest) >= ndim:
        return None
    lo, hi, _ = key.indices(n)
    return lo, max(lo, hi)


def corrupt_message(label: str, array: str, chunk, rows, reason: str, fix: str, unit: str = "rows") -> str:
    """The one-line error for a damaged chunk (or a whole array when ``chunk`` is None)."""
    where = f"{array} chunk {chunk}" if chunk is not None else f"{array} array"
    if rows is not None:
        where += f" ({unit} {rows[0]}..{rows[1] - 1})"
    return f"{label}: {where} is corrupt ({reason}): {fix}"


class RowArray:
    """What the edge readers share (:class:`CheckedArray`, :class:`dbfs.store.virtual.VirtualEdges`):
    ``len`` and ``numpy.asarray`` in terms of the reader's ``shape`` and ``[:]``."""

    def __len__(self) -> int:
        return self.shape[0]

    def __array__(self, dtype=None, copy=None):
        out = self[:]
        return out if dtype is None else out.astype(dtype, copy=False)


class CheckedArray(RowArray):
    """A read-only zarr array whose failed reads become one-line errors.

    Parameters
    ----------
    arr : zarr.Array
        The array, chunked along rows.
    node_path : path-like
        The group holding it (dataset or CSR variant), marked corrupt on damage.
    array : str
        Its name relative to ``node_path`` (used in messages and markers).
    label : str
        What the group is, e.g. ``"dataset kron-s10-ef16-s2-3"``.
    fix : str
        What the user should do (ends every error).
    checksum : str, optional
        A :mod:`dbfs.checksum` value to verify whenever all rows are read at once.
    unit : str
        What a row is called in messages (``rows``, ``entries``).

    Notes
    -----
    Sliced like the array (``a[lo:hi]``, ``a[:]``); exposes ``shape``,
    ``dtype``, ``chunks``, ``ndim``, ``nchunks`` and ``raw`` (the zarr array).
    """

    def __init__(self, arr, node_path, array: str, label: str, fix: str, checksum: str | None = None,
                 unit: str = "rows"):
        self.raw, self.node_path, self.array = arr, Path(node_path), array
        self.label, self.fix, self.checksum, self.unit = label, fix, checksum, unit
        self.shape, self.dtype, self.chunks = tuple(arr.shape), np.dtype(arr.dtype), tuple(arr.chunks)
        self.ndim = len(self.shape)
        self._digests = ...  # read on first use

    @property
    def nchunks(self) -> int:
        return int(self.raw.nchunks)

    def digests(self) -> np.ndarray | None:
        """The array's recorded chunk digests (None: written before digests); a record that does not
        fit the array is a one-line error."""
        if self._digests is ...:
            try:
                self._digests = read_digests(self.raw)
            except ValueError as e:
                raise self.error(None, str(e)) from None
        return self._digests

    def check_digests(self, lo: int, out):
        """Check the digest of every whole chunk among positions [lo, lo + len(out)) that ``out`` holds; returns
        the digests computed when they cover all of ``out`` (rows hash as :func:`dbfs.checksum.partial_checksum`,
        so they add up to its part: a whole read's checksum needs no second pass), else None."""
        dig = self.digests()
        hi, n, step = lo + int(out.shape[0]), self.shape[0], int(self.chunks[0])
        if dig is None or hi <= lo or not step:
            return None
        c0 = -(-lo // step)
        c1 = self.nchunks if hi >= n else hi // step
        if c1 <= c0:
            return None
        a, b = c0 * step, min(c1 * step, n)
        got = chunk_digests(out[a - lo:b - lo], a, step)
        bad = np.flatnonzero(got != dig[c0:c1])
        if bad.size:
            c = c0 + int(bad[0])
            raise self.error(c, DIGEST_MISMATCH, _rows_of(self.raw, c))
        return got if (a, b) == (lo, hi) else None

    def __dask_tokenize__(self):
        return ("dbfs-checked", str(self.node_path), self.array, self.shape, str(self.dtype))

    def error(self, chunk, reason: str, rows=None) -> DbfsError:
        """Mark the group corrupt and return the one-line error for ``chunk``."""
        mark_corrupt(self.node_path, self.array, chunk, reason)
        return DbfsError(corrupt_message(self.label, self.array, chunk, rows, reason, self.fix, self.unit))

    def __getitem__(self, key):
        n = self.shape[0]
        try:
            out = self.raw[key]
        except DECODE_ERRORS as e:
            lo, hi = _row_span(key, n)
            hit = _locate(self.raw, lo, hi)
            if hit is None:
                raise self.error(None, decode_reason(e)) from None
            raise self.error(hit[0], hit[1], _rows_of(self.raw, hit[0])) from None
        span = _whole_rows(key, n, self.ndim)
        got = self.check_digests(span[0], out) if span is not None else None
        if self.checksum is not None and n and _row_span(key, n) == (0, n) and np.ndim(out) == 2:
            # one hash pass: the digests just checked add up to the rows' checksum part
            if combine(got if got is not None else [partial_checksum(out, 0)]) != self.checksum:
                raise self.error(None, "rows differ from the edges_checksum recorded at generation")
        return out


def _crc_ok(path: Path) -> str | None:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return "missing"
    except OSError as e:
        return f"unreadable ({e.strerror})"
    if len(data) < 4:
        return "truncated"
    if np.uint32(crc32c(data[:-4])).astype("<u4").tobytes() != data[-4:]:
        return "crc32c mismatch"
    return None


def crc_scan(arr, threads: int | None = None) -> list[tuple[int, str]]:
    """The chunks of a local zarr array whose file fails its stored CRC, without decompressing.

    Parameters
    ----------
    arr : zarr.Array
        Chunked along rows, written with :func:`compressors`.
    threads : int, optional
        Reader threads (None: one per CPU).

    Returns
    -------
    list of (int, str)
        (chunk index, reason), ascending; empty when every chunk is intact or
        the array has no crc32c codec (nothing to check without decoding).
    """
    if not has_crc(arr) or chunk_file(arr, 0) is None:
        return []
    n = int(arr.nchunks)
    with ThreadPoolExecutor(max_workers=threads or os.cpu_count() or 1) as pool:
        found = list(pool.map(lambda i: _crc_ok(chunk_file(arr, i)), range(n)))
    return [(i, why) for i, why in enumerate(found) if why is not None]

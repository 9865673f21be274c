"""Threaded reads of a stored array's chunks into a caller's buffer, checked as they decode.

Contract
--------
:meth:`ChunkReader.read_into` ``(checked, out, lo, hi)`` fills ``out`` with
positions ``[lo, hi)`` of a 1-D array opened as a
:class:`dbfs.store.integrity.CheckedArray` (``out``: any writable,
C-contiguous NumPy array of the array's dtype and ``hi - lo`` entries, e.g. a
view of pinned host memory) and returns the sum of the values read mod
2**64 (the order-free checksum of :mod:`dbfs.kernel1.csr_store`). Its checks
are those of a :class:`CheckedArray` read, never fewer: every chunk's
crc32c (when the codec chain has one), its decoded size, and the
position-keyed digest (``dbfs_digests``) of EVERY chunk the span touches (a
chunk cut by ``lo`` or ``hi`` is decoded whole and checked, then its part
copied). A failure is the same one-line :class:`~dbfs.errors.DbfsError`
naming the array, the chunk and its entries, recorded in the node's
``corrupt`` attribute (:meth:`CheckedArray.error`); of several damaged
chunks the lowest is named. A missing chunk file reads as the fill value,
as in zarr; where digests are recorded it then fails its digest and is
reported ``missing``. :meth:`ChunkReader.read` allocates ``out``.

Method: a pool of ``threads`` (default ``min(8, os.cpu_count())``) takes one
chunk at a time: it reads the chunk file, checks its CRC-32C
(:func:`dbfs.store.crc.crc32c`), decompresses it with numcodecs straight
into its place in ``out`` (blosc: the header's sizes checked first; zstd:
decoded, size checked, copied), then hashes and sums it in one nogil Numba
pass (the rule of :func:`dbfs.checksum.chunk_digests`). File reads, zstd,
blosc (one internal thread per call off the main thread) and the Numba
passes release the GIL, so chunks decode in parallel. At most ``threads``
chunks are in flight: beyond ``out``, memory is one compressed chunk (and,
for a chunk cut by the span or the array's end, one decoded chunk) per
thread. A chunk that fails this path, and every chunk of an array whose
codec chain is not ``bytes`` (little-endian) + zstd / blosc + crc32c on a
local store, is read through zarr (``arr[a:b]``) in the same thread; a chunk
zarr cannot read either is corrupt for zarr's own reason
(:func:`dbfs.store.integrity.decode_reason`), as in a :class:`CheckedArray`
read.

Encoding: zarr stores the last chunk of a regular grid at full chunk length,
padded with the fill value (zarr v3 core specification, "Regular chunk
grid"); only its first ``n - c * step`` entries are positions.
"""
from __future__ import annotations

import os
import struct
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from numba import njit
from numcodecs import blosc, zstd

from dbfs.checksum import _value_term
from dbfs.store.crc import crc32c
from dbfs.store.integrity import DECODE_ERRORS, DIGEST_MISMATCH, chunk_file, decode_reason

__all__ = ["ChunkReader", "default_threads"]

_MASK = (1 << 64) - 1
_U = np.uint64
_HASHED = (np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.uint32), np.dtype(np.uint64))
_FAST = ("zstd", "blosc", "crc32c")


def default_threads() -> int:
    """Reader threads when none are asked for: one per CPU, at most 8."""
    return max(1, min(8, os.cpu_count() or 1))


@njit(nogil=True, cache=True)
def _digest_sum(x, start, a, b):
    """(digest of positions ``start + k`` of ``x``, sum mod 2**64 of ``x[a:b]``) in one pass."""
    d = _U(0)
    s = _U(0)
    for k in range(x.shape[0]):
        v = x[k]
        d += _value_term(start + k, v)
        if k >= a and k < b:
            s += _U(v)
    return d, s


def _fast_chain(raw) -> list | None:
    """The bytes-to-bytes codecs to undo, in decode order, when the fast path can read ``raw``; else None."""
    try:
        codecs = [c.to_dict() for c in raw.metadata.codecs]
        local = chunk_file(raw, 0) is not None
    except (AttributeError, TypeError, ValueError):
        return None
    if not codecs or len(raw.shape) != 1 or not local or sys.byteorder != "little":
        return None
    first, rest = codecs[0], [c.get("name") for c in codecs[1:]]
    if first.get("name") != "bytes" or (first.get("configuration") or {}).get("endian", "little") != "little":
        return None
    if any(name not in _FAST for name in rest) or "crc32c" in rest[:-1]:
        return None
    return rest[::-1]


def _undo(chain: list, data: bytes, dest: np.ndarray) -> None:
    """Decode one chunk file's bytes through ``chain`` into ``dest`` (uint8, the chunk's full size);
    ValueError for any mismatch (the caller then asks zarr)."""
    buf = memoryview(data)
    for k, name in enumerate(chain):
        if name == "crc32c":
            if len(buf) < 4 or struct.pack("<I", crc32c(buf[:-4])) != bytes(buf[-4:]):
                raise ValueError("crc32c mismatch")
            buf = buf[:-4]
        elif name == "blosc":
            if len(buf) < 16:
                raise ValueError("short blosc frame")
            nbytes, _, cbytes = struct.unpack_from("<III", buf, 4)
            if k == len(chain) - 1:                 # the last step: straight into dest
                if nbytes != dest.nbytes or cbytes != len(buf):
                    raise ValueError("blosc frame of the wrong size")
                blosc.decompress(buf, dest)
                return
            buf = memoryview(blosc.decompress(buf))
        else:
            buf = memoryview(zstd.decompress(buf))
    if len(buf) != dest.nbytes:
        raise ValueError("decoded chunk of the wrong size")
    dest[:] = np.frombuffer(buf, np.uint8)


class ChunkReader:
    """A pool of reader threads (module docstring); a context manager (the pool ends with it).

    Parameters
    ----------
    threads : int, optional
        Decoding threads; None: :func:`default_threads`.
    """

    def __init__(self, threads: int | None = None):
        self.threads = max(1, int(threads or default_threads()))
        self._pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="dbfs-chunk-read")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def read(self, checked, lo: int = 0, hi: int | None = None) -> tuple[np.ndarray, int]:
        """Positions ``[lo, hi)`` (all by default) in a new array: (values, their sum mod 2**64)."""
        hi = checked.shape[0] if hi is None else int(hi)
        out = np.empty(max(0, hi - int(lo)), checked.dtype)
        return out, self.read_into(checked, out, lo, hi)

    def read_into(self, checked, out: np.ndarray, lo: int = 0, hi: int | None = None) -> int:
        """Fill ``out`` with positions ``[lo, hi)`` of ``checked``, every chunk touched checked.

        Parameters
        ----------
        checked : dbfs.store.integrity.CheckedArray
            A 1-D stored array (its ``raw`` zarr array, digests and error messages).
        out : numpy.ndarray
            Writable, C-contiguous, ``checked``'s dtype, ``hi - lo`` entries.
        lo, hi : int
            The span (``hi`` None: to the end).

        Returns
        -------
        int
            The sum of the values read mod 2**64.

        Raises
        ------
        DbfsError
            The lowest damaged chunk of the span (one line, recorded as ``corrupt``).
        """
        n = checked.shape[0]
        lo, hi = int(lo), n if hi is None else int(hi)
        if not (0 <= lo <= hi <= n) or len(checked.shape) != 1:
            raise ValueError(f"span [{lo}, {hi}) is not inside the 1-D array of {n} entries")
        if out.shape != (hi - lo,) or out.dtype != checked.dtype or not out.flags.c_contiguous \
                or not out.flags.writeable:
            raise ValueError(f"out must be a writable contiguous {checked.dtype} array of {hi - lo} entries")
        if hi == lo:
            return 0
        job = _Span(checked, out, lo, hi)
        step = job.step
        sums = list(self._pool.map(job.chunk, range(lo // step, (hi - 1) // step + 1)))
        if job.bad is not None:
            c, reason = job.bad
            raise checked.error(c, reason, job.rows(c))
        return sum(int(s) for s in sums) & _MASK


class _Span:
    """One :meth:`ChunkReader.read_into` call: what its threads share."""

    def __init__(self, checked, out, lo, hi):
        self.checked, self.raw, self.out, self.lo, self.hi = checked, checked.raw, out, lo, hi
        self.n, self.step, self.dtype = checked.shape[0], int(checked.chunks[0]), np.dtype(checked.dtype)
        self.digests = checked.digests()               # a malformed record: the one-line error, here
        self.chain = _fast_chain(self.raw)
        self.bad = None                                # (chunk, reason) of the lowest damaged chunk seen
        self._lock = threading.Lock()

    def rows(self, c: int) -> tuple[int, int]:
        return c * self.step, min((c + 1) * self.step, self.n)

    def _fail(self, c: int, reason: str) -> int:
        with self._lock:
            if self.bad is None or c < self.bad[0]:
                self.bad = (c, reason)
        return 0

    def _decode(self, c: int, a: int, b: int, into: np.ndarray | None):
        """Chunk ``c`` (positions [a, b)) decoded: into ``into`` when given (its b - a entries), else a new
        array; (values, reason): values None when it cannot be read, reason "missing" for a missing file."""
        vals = into if into is not None else np.empty(self.step, self.dtype)
        if self.chain is not None:
            f = chunk_file(self.raw, c)
            try:
                data = Path(f).read_bytes()
            except FileNotFoundError:
                vals[:b - a] = self.raw.fill_value
                return vals[:b - a], "missing"
            except OSError:
                data = None
            if data is not None:
                try:
                    _undo(self.chain, data, vals.view(np.uint8))
                    return vals[:b - a], None
                except DECODE_ERRORS:
                    pass
        try:                                           # through zarr: its own reason if it fails too
            got = self.raw[a:b]
        except DECODE_ERRORS as e:
            return None, decode_reason(e)
        vals[:b - a] = got
        f = chunk_file(self.raw, c)
        return vals[:b - a], ("missing" if f is not None and not f.exists() else None)

    def chunk(self, c: int) -> int:
        """Read, check and place chunk ``c``; the sum of its values inside the span (0 once failed)."""
        if self.bad is not None and self.bad[0] < c:
            return 0
        a, b = self.rows(c)
        lo, hi = max(a, self.lo), min(b, self.hi)
        direct = lo == a and hi == b and b - a == self.step
        try:
            vals, missing = self._decode(c, a, b, self.out[a - self.lo:b - self.lo] if direct else None)
        except OSError as e:
            return self._fail(c, decode_reason(e))
        if vals is None:
            return self._fail(c, missing)
        x = vals if self.dtype in _HASHED else vals.astype(np.int64)
        d, s = _digest_sum(x, a, lo - a, hi - a)
        if self.digests is not None and int(d) != int(self.digests[c]):
            return self._fail(c, "missing" if missing else DIGEST_MISMATCH)
        if not direct:
            self.out[lo - self.lo:hi - self.lo] = vals[lo - a:hi - a]
        return int(s)

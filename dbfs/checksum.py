"""A chunk-independent checksum of an edge list.

``edges_checksum = sum over rows i of mix(i, u_i, v_i)  (mod 2**64)`` where
``mix`` is splitmix64-based. A sum of per-row hashes that include the row
index is order-sensitive, detects any changed, swapped or zero-filled row
with overwhelming probability, and can be computed per chunk in parallel and
added up, so it does not depend on chunking or workers. Stored as a 16-digit
hex string (the dataset attribute ``edges_checksum``).

Reference: splitmix64, G. L. Steele, D. Lea, C. H. Flood, "Fast splittable
pseudorandom number generators", OOPSLA 2014.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

_U = np.uint64
_G = _U(0x9E3779B97F4A7C15)
_C1 = _U(0xBF58476D1CE4E5B9)
_C2 = _U(0x94D049BB133111EB)
_K1 = _U(0xD6E8FEB86659FD93)
_NATIVE = (np.dtype(np.uint32), np.dtype(np.int64))


@njit(inline="always")
def splitmix64(x):
    z = x + _G
    z = (z ^ (z >> _U(30))) * _C1
    z = (z ^ (z >> _U(27))) * _C2
    return z ^ (z >> _U(31))


@njit(parallel=True, nogil=True, cache=True)
def _partial(block, start):
    n = block.shape[0]
    acc = np.zeros(n, np.uint64)
    for i in prange(n):
        h = splitmix64(_U(start + i))
        h = splitmix64(h ^ _U(block[i, 0]))
        h = splitmix64(h ^ (_U(block[i, 1]) * _K1))
        acc[i] = h
    return acc.sum()


def partial_checksum(block: np.ndarray, start: int) -> int:
    """Checksum contribution of one block of rows.

    Parameters
    ----------
    block : array_like, shape (k, 2)
        Rows ``[start, start + k)`` of an edge list (non-negative integer
        ids; the value, not the dtype, enters the hash).
    start : int
        Index of the block's first row.

    Returns
    -------
    int
        The block's part, mod 2**64 (parts of disjoint blocks add up).
    """
    block = np.asarray(block)
    if block.shape[0] == 0:
        return 0
    if block.dtype not in _NATIVE:  # uint32 and int64 rows (the stored dtypes) are hashed in place
        block = block.astype(np.int64)
    return int(_partial(block, int(start))) & 0xFFFFFFFFFFFFFFFF


def combine(parts) -> str:
    """The checksum of a whole edge list from its blocks' parts.

    Parameters
    ----------
    parts : iterable of int
        :func:`partial_checksum` of blocks covering every row exactly once.

    Returns
    -------
    str
        Their sum mod 2**64 as 16 hex digits.
    """
    return f"{sum(int(p) for p in parts) & 0xFFFFFFFFFFFFFFFF:016x}"


# ---- position-keyed digests of stored chunks ----------------------------------------------------
#: what a stored chunk's digest is (recorded beside the digests, in each array's attributes)
DIGEST_RULE = ("per stored chunk: sum over its positions p of splitmix64 mixes of (p, value) mod 2**64; rows "
               "(u, v) mixed as edges_checksum, values x as splitmix64(splitmix64(p) ^ x)")
_PIECE = 1 << 15  # positions one thread hashes at a time


@njit(inline="always")
def _row_term(p, u, v):
    h = splitmix64(_U(p))
    h = splitmix64(h ^ _U(u))
    return splitmix64(h ^ (_U(v) * _K1))


@njit(inline="always")
def _value_term(p, x):
    return splitmix64(splitmix64(_U(p)) ^ _U(x))


@njit(parallel=True, nogil=True, cache=True)
def _chunk_sums(block, start, step, rows):
    """Per stored chunk the sum of the terms of ``block``'s positions (``rows``: (k, 2) edge rows,
    :func:`_row_term`; else a (k, 1) view of values, :func:`_value_term`), each thread a piece of a chunk."""
    n = block.shape[0]
    c0 = start // step
    nch = (start + n - 1) // step - c0 + 1
    per = (step + _PIECE - 1) // _PIECE
    acc = np.zeros(nch * per, np.uint64)
    for k in prange(nch * per):
        c = c0 + k // per
        lo = c * step + (k % per) * _PIECE
        hi = min(min(lo + _PIECE, (c + 1) * step), start + n)
        lo = max(lo, start)
        t = _U(0)
        if rows:
            for p in range(lo, hi):
                t += _row_term(p, block[p - start, 0], block[p - start, 1])
        else:
            for p in range(lo, hi):
                t += _value_term(p, block[p - start, 0])
        acc[k] = t
    out = np.zeros(nch, np.uint64)
    for k in range(nch * per):
        out[k // per] += acc[k]
    return out


_VALUE_NATIVE = (np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.uint32), np.dtype(np.uint64))


def chunk_digests(block, start: int, step: int) -> np.ndarray:
    """Position-keyed digest parts of the stored chunks that positions ``[start, start + len(block))`` touch.

    Parameters
    ----------
    block : array_like, shape (k,) or (k, 2)
        Values (1-D arrays) or rows (edge lists) at positions ``start..start+k-1`` of an array stored in
        chunks of ``step`` positions (chunk ``c`` holds ``[c * step, (c + 1) * step)``).
    start : int
        Position of ``block[0]``.
    step : int
        The array's chunk length (positions per stored chunk).

    Returns
    -------
    numpy.ndarray of uint64
        One entry per chunk ``start // step .. (start + k - 1) // step``: the sum, mod 2**64, of the
        terms of the positions of ``block`` in that chunk (:data:`DIGEST_RULE`; the value, not the
        dtype, enters). A chunk the block covers whole gets its digest; parts of one chunk from
        several blocks add up to it. Rows hash as :func:`partial_checksum`, so the entries of an edge
        list add up to its checksum part. Independent of how the writes were cut.
    """
    block = np.asarray(block)
    if block.shape[0] == 0:
        return np.zeros(0, np.uint64)
    start, step = int(start), int(step)
    if block.ndim == 2:
        if block.dtype not in _NATIVE:
            block = block.astype(np.int64)
        return _chunk_sums(np.ascontiguousarray(block), start, step, True)
    if block.dtype not in _VALUE_NATIVE:
        block = block.astype(np.int64)
    return _chunk_sums(np.ascontiguousarray(block).reshape(-1, 1), start, step, False)

"""Uniform random graphs G(n, M), as GAP's ``-u`` generator.

n = 2**scale vertices and M = edgefactor * n edge tuples; every endpoint is
uniform on [0, n), independently of every other. Self-loops and duplicate
edges are kept (as Graph500 keeps them in its edge list); Kernel 1 decides
what to drop.

Encoding and contract: ``uniform_edges`` returns int64 rows ``(u, v)`` for
edge indices ``[start, stop)``. Row ``ei`` is a pure function of
``(scale, seed1, seed2, ei)``, so any range computed alone equals the same
range of the whole array, whatever the chunking or thread count.

The hash is splitmix64 (Steele, Lea, Flood, "Fast splittable pseudorandom
number generators", OOPSLA 2014) used counter-based:

    mix64(z):  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
               z = (z ^ (z >> 27)) * 0x94D049BB133111EB
               return z ^ (z >> 31)                      (all mod 2**64)
    key      = mix64(mix64(seed1 ^ SEED_SALT) ^ seed2)
    u(ei)    = mix64(key + (2*ei + 1) * GAMMA) & (n - 1)
    v(ei)    = mix64(key + (2*ei + 2) * GAMMA) & (n - 1)

with GAMMA = 0x9E3779B97F4A7C15, i.e. draws 2*ei and 2*ei + 1 of the
splitmix64 stream started at ``key``. n is a power of two, so the mask is
unbiased. Seeds are unsigned 64-bit integers.
"""
from __future__ import annotations

import operator

import numpy as np
from numba import njit, prange

from dbfs.errors import DbfsError

GAMMA = 0x9E3779B97F4A7C15
MIX_A = 0xBF58476D1CE4E5B9
MIX_B = 0x94D049BB133111EB
SEED_SALT = 0x5DEECE66D2B7E151
MASK64 = (1 << 64) - 1
MAX_SCALE = 62

_GAMMA = np.uint64(GAMMA)
_MIX_A = np.uint64(MIX_A)
_MIX_B = np.uint64(MIX_B)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_ONE = np.uint64(1)
_TWO = np.uint64(2)


def mix64_py(z: int) -> int:
    """The splitmix64 finaliser on Python ints (setup and test reference)."""
    z &= MASK64
    z = ((z ^ (z >> 30)) * MIX_A) & MASK64
    z = ((z ^ (z >> 27)) * MIX_B) & MASK64
    return z ^ (z >> 31)


def stream_key(seed1: int, seed2: int) -> int:
    """The splitmix64 stream start for a seed pair (a Python int < 2**64)."""
    return mix64_py(mix64_py(seed1 ^ SEED_SALT) ^ seed2)


@njit(inline="always", nogil=True, cache=True)
def _mix64(z):
    z = (z ^ (z >> _S30)) * _MIX_A
    z = (z ^ (z >> _S27)) * _MIX_B
    return z ^ (z >> _S31)


@njit(parallel=True, nogil=True, cache=True)
def _uniform_block(key, mask, start, out):
    """Fill out[i] with the endpoints of edge start + i (see module doc)."""
    for i in prange(out.shape[0]):
        c = np.uint64(start + i) * _TWO
        u = _mix64(key + (c + _ONE) * _GAMMA) & mask
        v = _mix64(key + (c + _TWO) * _GAMMA) & mask
        out[i, 0] = np.int64(u)
        out[i, 1] = np.int64(v)


def _as_int(value, name: str) -> int:
    if isinstance(value, bool):
        raise DbfsError(f"{name} must be an integer, got {value!r}; pass a whole number")
    try:
        return operator.index(value)
    except TypeError:
        raise DbfsError(f"{name} must be an integer, got {value!r}; pass a whole number") from None


def uniform_counts(scale: int, edgefactor: int = 16) -> tuple[int, int]:
    """(n_vertices, n_edges) = (2**scale, edgefactor * 2**scale)."""
    scale = _as_int(scale, "scale")
    edgefactor = _as_int(edgefactor, "edgefactor")
    if not 1 <= scale <= MAX_SCALE:
        raise DbfsError(f"uniform scale {scale} is out of range; use 1 <= scale <= {MAX_SCALE}")
    if edgefactor < 1:
        raise DbfsError(f"uniform edgefactor {edgefactor} must be positive; use e.g. 16")
    n = 1 << scale
    m = edgefactor * n
    if m >= 1 << 63:
        raise DbfsError(
            f"uniform graph with scale {scale} and edgefactor {edgefactor} has more than "
            "2**63 edges; lower scale or edgefactor"
        )
    return n, m


def _check_range(start, stop, m: int, what: str) -> tuple[int, int]:
    start = _as_int(start, "start")
    stop = m if stop is None else _as_int(stop, "stop")
    if not 0 <= start <= stop <= m:
        raise DbfsError(
            f"edge range [{start}, {stop}) is outside the {m} edges of this {what} graph; "
            f"use 0 <= start <= stop <= {m}"
        )
    return start, stop


def uniform_edges(
    scale: int,
    edgefactor: int = 16,
    seed1: int = 2,
    seed2: int = 3,
    start: int = 0,
    stop: int | None = None,
) -> np.ndarray:
    """Edges [start, stop) of the uniform random graph: int64, shape (stop - start, 2)."""
    n, m = uniform_counts(scale, edgefactor)
    seed1 = _as_int(seed1, "seed1")
    seed2 = _as_int(seed2, "seed2")
    for name, s in (("seed1", seed1), ("seed2", seed2)):
        if not 0 <= s <= MASK64:
            raise DbfsError(f"{name} {s} is not an unsigned 64-bit integer; use 0 <= {name} < 2**64")
    start, stop = _check_range(start, stop, m, "uniform")
    out = np.empty((stop - start, 2), dtype=np.int64)
    if stop > start:
        _uniform_block(np.uint64(stream_key(seed1, seed2)), np.uint64(n - 1), np.int64(start), out)
    return out

"""The Graph500 PRNG: L'Ecuyer's order-5 multiple recursive generator.

State ``z = (z1, z2, z3, z4, z5)`` with each ``zi`` in ``[0, m)``, ``m = 2**31 - 1``,
stored as an int64 array of length 5 (``z[0]`` is z1, the newest value).
One step is ``z' = A z (mod m)`` with

    A = [[107374182, 0, 0, 0, 104480],
         [1, 0, 0, 0, 0], [0, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 0, 1, 0]]

and the draw (the reference's ``mrg_get_uint_orig``) is the new ``z1``.
``skip(hi, mid, lo)`` jumps the stream by ``hi*2**128 + mid*2**64 + lo`` steps,
``z <- A**e z``: any exact modular matrix power reproduces the reference's
byte-table skip, so here it is plain binary exponentiation.

Seeding from two 64-bit user seeds follows ``make_mrg_seed`` of Graph500 3.0.1
(GRAPH500.md section 2): (2, 3) gives (3, 1, 4, 1, 1).

All arithmetic on int64 stays below 2**62 (products of two values < 2**31),
so no step can overflow. Python-level helpers (``seed_state``, ``matpow``,
``skip``) use Python ints and are for setup; ``step``/``matvec`` are Numba.
"""
from __future__ import annotations

import numpy as np
from numba import njit

M31 = (1 << 31) - 1
A_MATRIX = (
    (107374182, 0, 0, 0, 104480),
    (1, 0, 0, 0, 0),
    (0, 1, 0, 0, 0),
    (0, 0, 1, 0, 0),
    (0, 0, 0, 1, 0),
)
UINT64_MAX = (1 << 64) - 1


def seed_state(seed1: int, seed2: int) -> list[int]:
    """The reference's ``make_mrg_seed``: user seeds -> state (z1..z5)."""
    return [
        (seed1 & 0x3FFFFFFF) + 1,
        ((seed1 >> 30) & 0x3FFFFFFF) + 1,
        (seed2 & 0x3FFFFFFF) + 1,
        ((seed2 >> 30) & 0x3FFFFFFF) + 1,
        ((seed2 >> 60) << 4) + (seed1 >> 60) + 1,
    ]


def _matmul_py(a, b):
    return tuple(
        tuple(sum(a[i][k] * b[k][j] for k in range(5)) % M31 for j in range(5))
        for i in range(5)
    )


def matpow(exponent: int, base=A_MATRIX):
    """``base ** exponent (mod m)`` as a tuple of tuples of Python ints."""
    result = tuple(tuple(int(i == j) for j in range(5)) for i in range(5))
    sq = base
    e = exponent
    while e:
        if e & 1:
            result = _matmul_py(sq, result)
        sq = _matmul_py(sq, sq)
        e >>= 1
    return result


def apply(mat, z):
    """``mat @ z (mod m)`` for a Python matrix and state list."""
    return [sum(mat[i][k] * z[k] for k in range(5)) % M31 for i in range(5)]


def skip(z, hi: int, mid: int, lo: int):
    """The reference's ``mrg_skip``: advance state z by hi*2^128 + mid*2^64 + lo."""
    return apply(matpow((hi << 128) + (mid << 64) + lo), z)


class PyStream:
    """A sequential Python stream over a state (setup-time draws only)."""

    def __init__(self, z):
        self.z = list(z)

    def uint(self) -> int:
        z = self.z
        new = (107374182 * z[0] + 104480 * z[4]) % M31
        self.z = [new, z[0], z[1], z[2], z[3]]
        return new

    def double(self) -> float:
        # u1 is the FIRST draw (GRAPH500.md section 2)
        u1 = self.uint()
        u2 = self.uint()
        return u1 * 4.65661287524579692e-10 + u2 * 2.168404346990492787e-19


def as_array(mat) -> np.ndarray:
    return np.array(mat, dtype=np.int64)


def power_table(base, bits: int = 64) -> np.ndarray:
    """``table[k] = base ** (2**k)`` for k < bits, int64 (bits, 5, 5)."""
    out = np.empty((bits, 5, 5), dtype=np.int64)
    cur = base
    for k in range(bits):
        out[k] = as_array(cur)
        cur = _matmul_py(cur, cur)
    return out


@njit(inline="always")
def modm(x):
    """x mod (2^31-1) for 0 <= x < 2^62."""
    x = (x & 0x7FFFFFFF) + (x >> 31)
    x = (x & 0x7FFFFFFF) + (x >> 31)
    if x >= 0x7FFFFFFF:
        x -= 0x7FFFFFFF
    return x


@njit(inline="always")
def matvec(mat, z, out):
    """out = mat @ z (mod m); mat int64 (5, 5), z and out int64 (5,), distinct."""
    for i in range(5):
        acc = 0
        for k in range(5):
            acc += modm(mat[i, k] * z[k])
        out[i] = modm(acc)


@njit(inline="always")
def jump(table, e, z, tmp):
    """z <- base**e z using ``table[k] = base**(2**k)``; tmp is scratch (5,)."""
    k = 0
    while e:
        if e & 1:
            matvec(table[k], z, tmp)
            for i in range(5):
                z[i] = tmp[i]
        e >>= 1
        k += 1

"""Graph500 Kronecker edge generator, bit-exact with reference 3.0.1.

Contract: ``kronecker_edges(scale, edgefactor, seed1, seed2, start, stop)``
returns int64 ``(stop - start, 2)``: rows ``start..stop-1`` of the reference's
edge list (GRAPH500.md sections 1-5), in index order, self-loops and
duplicates kept. Edge ``ei`` is drawn from its own stream ``A**(ei*2**64) S0``
(``skip(0, ei, 0)``), so any range is computed alone and the output never
depends on chunking, threads, workers or device.

Implementation: the range is cut into fixed blocks; each block jumps to its
first edge with ``B**e0`` (``B = A**(2**64)``, from a table of ``B**(2**k)``)
and then advances one edge at a time with a single ``B`` matrix-vector
product (exact modular arithmetic, so identical to a fresh skip per edge).
Each edge then takes SCALE 4-way Bernoulli draws (rejection below
``(2**31-1) % 10000``), clip-and-flip on the diagonal, and the two vertex ids
go through the reference's ``scramble`` bijection.

The same core serves R-MAT with another initiator (``dbfs.generate.rmat``):
the initiator enters only as integer numerators out of 10000 compared in the
reference's order (B, C, A, else D).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import njit, prange

from dbfs.errors import DbfsError
from dbfs.generate import mrg

INITIATOR_DENOMINATOR = 10000
GRAPH500_INITIATOR = (5700, 1900, 1900)  # A, B, C numerators; D = rest
MAX_SCALE = 42
_BLOCK = 2048

_U = np.uint64
_M1 = _U(0x5555555555555555)
_M2 = _U(0x3333333333333333)
_M4 = _U(0x0F0F0F0F0F0F0F0F)
_M8 = _U(0x00FF00FF00FF00FF)
_M16 = _U(0x0000FFFF0000FFFF)
_S1, _S2, _S4, _S8, _S16, _S32 = (_U(1), _U(2), _U(4), _U(8), _U(16), _U(32))
_SCR0 = _U(0x4519840211493211)
_SCR1 = _U(0x3050852102C843A5)


def check_params(scale, edgefactor, seed1, seed2, max_scale=MAX_SCALE):
    """Raise DbfsError naming the bad parameter and the valid range."""
    if not isinstance(scale, (int, np.integer)) or not 1 <= scale <= max_scale:
        raise DbfsError(f"SCALE {scale} is out of range: use an integer 1..{max_scale}")
    if not isinstance(edgefactor, (int, np.integer)) or edgefactor < 1:
        raise DbfsError(f"edgefactor {edgefactor} is invalid: use an integer >= 1 (Graph500 uses 16)")
    for name, s in (("seed1", seed1), ("seed2", seed2)):
        if not isinstance(s, (int, np.integer)) or not 0 <= int(s) <= mrg.UINT64_MAX:
            raise DbfsError(f"{name} {s} is out of range: use an integer 0..2^64-1")


@njit(inline="always")
def bitreverse64(x):
    x = ((x >> _S1) & _M1) | ((x & _M1) << _S1)
    x = ((x >> _S2) & _M2) | ((x & _M2) << _S2)
    x = ((x >> _S4) & _M4) | ((x & _M4) << _S4)
    x = ((x >> _S8) & _M8) | ((x & _M8) << _S8)
    x = ((x >> _S16) & _M16) | ((x & _M16) << _S16)
    return (x >> _S32) | (x << _S32)


@njit(inline="always")
def scramble(v0, shift, val0, val1):
    """The reference's vertex scramble; shift = 64 - SCALE (uint64)."""
    v = _U(v0)
    v += val0 + val1
    v *= val0 | _SCR0
    v = bitreverse64(v) >> shift
    v *= val1 | _SCR1
    v = bitreverse64(v) >> shift
    return np.int64(v)


@njit(inline="always")
def _fold(x):
    return (x & 0x7FFFFFFF) + (x >> 31)


@njit(inline="always")
def _block_states(btab, s0, e0, count):
    """States of edges e0..e0+count-1: one jump, then one B product per edge."""
    st = s0.copy()
    tmp = np.empty(5, np.int64)
    mrg.jump(btab, e0, st, tmp)
    B = btab[0]
    states = np.empty((count, 5), np.int64)
    z1, z2, z3, z4, z5 = st[0], st[1], st[2], st[3], st[4]
    for j in range(count):
        states[j, 0] = z1
        states[j, 1] = z2
        states[j, 2] = z3
        states[j, 3] = z4
        states[j, 4] = z5
        # each folded product is < 2**32, so five of them sum without overflow
        n1 = _fold(B[0, 0] * z1) + _fold(B[0, 1] * z2) + _fold(B[0, 2] * z3) + _fold(B[0, 3] * z4) + _fold(B[0, 4] * z5)
        n2 = _fold(B[1, 0] * z1) + _fold(B[1, 1] * z2) + _fold(B[1, 2] * z3) + _fold(B[1, 3] * z4) + _fold(B[1, 4] * z5)
        n3 = _fold(B[2, 0] * z1) + _fold(B[2, 1] * z2) + _fold(B[2, 2] * z3) + _fold(B[2, 3] * z4) + _fold(B[2, 4] * z5)
        n4 = _fold(B[3, 0] * z1) + _fold(B[3, 1] * z2) + _fold(B[3, 2] * z3) + _fold(B[3, 3] * z4) + _fold(B[3, 4] * z5)
        n5 = _fold(B[4, 0] * z1) + _fold(B[4, 1] * z2) + _fold(B[4, 2] * z3) + _fold(B[4, 3] * z4) + _fold(B[4, 4] * z5)
        z1 = mrg.modm(n1)
        z2 = mrg.modm(n2)
        z3 = mrg.modm(n3)
        z4 = mrg.modm(n4)
        z5 = mrg.modm(n5)
    return states


_LANES = 256  # edges advanced in lock-step so the draw loops vectorise


@njit(inline="always")
def _quadrant_bits(r, t1, t2, t3):
    """(src bit, tgt bit) for r = draw % 10000, branchless (the outcome is random).

    k = number of thresholds <= r: 0 -> B (0,1), 1 -> C (1,0), 2 -> A (0,0), 3 -> D (1,1).
    """
    k = np.int64(r >= t1) + np.int64(r >= t2) + np.int64(r >= t3)
    return (0b1010 >> k) & 1, (0b1001 >> k) & 1


@njit(nogil=True, cache=True)
def one_edge(z1, z2, z3, z4, z5, scale, t1, t2, t3):
    """The reference's make_one_edge before scrambling, from state (z1..z5).

    Scalar and literal (rejection loop included): the executable spec, and the
    path for the rare edges whose draws hit the rejection region.
    """
    limit = 0x7FFFFFFF % 10000
    src = np.int64(0)
    tgt = np.int64(0)
    for lev in range(scale):
        v = mrg.modm(107374182 * z1 + 104480 * z5)
        z5, z4, z3, z2, z1 = z4, z3, z2, z1, v
        while v < limit:
            v = mrg.modm(107374182 * z1 + 104480 * z5)
            z5, z4, z3, z2, z1 = z4, z3, z2, z1, v
        so, to = _quadrant_bits(np.uint32(v) % np.uint32(10000), t1, t2, t3)
        if src == tgt and so > to:  # clip-and-flip: src <= tgt on the diagonal
            so, to = to, so
        bit = scale - 1 - lev
        src |= so << bit
        tgt |= to << bit
    return src, tgt


@njit(parallel=True, nogil=True, cache=True, error_model="numpy")
def _kron_range(start, stop, scale, s0, btab, t1, t2, t3, val0, val1, do_scramble, out):
    """Fill out[i] with edge start+i. btab[k] = B**(2**k); t1<t2<t3 uint32 thresholds.

    Per lane group: D[5 + k, l] is the k-th draw of edge l (rows 0..4 hold its
    state z5..z1, so the recurrence reads D[k+4] and D[k]); assuming no draw is
    rejected, the draws are exactly these, and any edge with a draw below the
    rejection limit is recomputed by ``one_edge``.
    """
    n = stop - start
    nblocks = (n + _BLOCK - 1) // _BLOCK
    shift = _U(64 - scale)
    limit = 0x7FFFFFFF % 10000
    for b in prange(nblocks):
        e0 = start + b * _BLOCK
        cnt = min(e0 + _BLOCK, stop) - e0
        states = _block_states(btab, s0, e0, cnt)
        D = np.empty((scale + 5, _LANES), np.int64)
        S = np.empty(_LANES, np.int64)
        T = np.empty(_LANES, np.int64)
        low = np.empty(_LANES, np.int64)
        for l0 in range(0, cnt, _LANES):
            nl = min(_LANES, cnt - l0)
            for l in range(nl):
                for q in range(5):
                    D[4 - q, l] = states[l0 + l, q]
                S[l] = 0
                T[l] = 0
                low[l] = 0
            for k in range(scale):
                a = D[k + 4]
                c = D[k]
                d = D[k + 5]
                for l in range(nl):
                    v = _fold(107374182 * a[l] + 104480 * c[l])
                    v = v - 0x7FFFFFFF if v >= 0x7FFFFFFF else v
                    d[l] = v
                    low[l] |= np.int64(v < limit)
            for lev in range(scale):
                d = D[lev + 5]
                bit = scale - 1 - lev
                for l in range(nl):
                    so, to = _quadrant_bits(np.uint32(d[l]) % np.uint32(10000), t1, t2, t3)
                    flip = np.int64(S[l] == T[l]) & np.int64(so > to)  # clip-and-flip
                    S[l] |= (so - flip) << bit
                    T[l] |= (to + flip) << bit
            for l in range(nl):
                if low[l]:
                    st = states[l0 + l]
                    S[l], T[l] = one_edge(st[0], st[1], st[2], st[3], st[4], scale, t1, t2, t3)
                i = e0 + l0 + l - start
                if do_scramble:
                    out[i, 0] = scramble(S[l], shift, val0, val1)
                    out[i, 1] = scramble(T[l], shift, val0, val1)
                else:
                    out[i, 0] = S[l]
                    out[i, 1] = T[l]


@lru_cache(maxsize=None)
def _edge_table() -> np.ndarray:
    """B**(2**k) for B = A**(2**64), k < 64 (edge indices < 2**64)."""
    return mrg.power_table(mrg.matpow(1 << 64), bits=64)


@lru_cache(maxsize=64)
def scramble_values(seed1: int, seed2: int) -> tuple[int, int]:
    """(val0, val1) of the reference: 4 draws after skip(50, 7, 0)."""
    st = mrg.PyStream(mrg.skip(mrg.seed_state(seed1, seed2), 50, 7, 0))
    val0 = (st.uint() * 0xFFFFFFFF + st.uint()) & mrg.UINT64_MAX
    val1 = (st.uint() * 0xFFFFFFFF + st.uint()) & mrg.UINT64_MAX
    return val0, val1


def kron_core(scale, n_edges, seed1, seed2, start, stop, initiator, do_scramble=True):
    """Rows [start, stop) of a Kronecker/R-MAT edge list with integer initiator
    numerators (a, b, c) out of 10000 (d is the rest). int64 (k, 2)."""
    stop = n_edges if stop is None else stop
    if not 0 <= start <= stop <= n_edges:
        raise DbfsError(f"edge range [{start}, {stop}) is outside [0, {n_edges}): pass 0 <= start <= stop <= M")
    a, b, c = initiator
    out = np.empty((stop - start, 2), dtype=np.int64)
    if stop == start:
        return out
    s0 = np.array(mrg.seed_state(seed1, seed2), dtype=np.int64)
    val0, val1 = scramble_values(seed1, seed2)
    u32 = np.uint32
    _kron_range(start, stop, scale, s0, _edge_table(), u32(b), u32(b + c), u32(b + c + a),
                np.uint64(val0), np.uint64(val1), do_scramble, out)
    return out


def kronecker_edges(scale, edgefactor=16, seed1=2, seed2=3, start=0, stop=None):
    """Graph500 3.0.1 edge tuples ``[start, stop)`` as int64 (k, 2).

    ``scale`` 1..42, ``edgefactor`` >= 1, seeds 0..2**64-1; M = edgefactor * 2**scale.
    """
    check_params(scale, edgefactor, seed1, seed2)
    return kron_core(int(scale), int(edgefactor) << int(scale), int(seed1), int(seed2),
                     int(start), stop if stop is None else int(stop), GRAPH500_INITIATOR)

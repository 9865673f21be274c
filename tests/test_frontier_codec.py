"""The level exchange's codecs (``dbfs.bfs.dask.mesh.codec``): exact round trips, and bytes within 2x of the information.

Rules checked:

- a frontier slice (k of a rank's n rows, any pad, block or cyclic) decodes
  to exactly the bits it was encoded from, ORed into the global bitmap at
  the rank's place, and the decoder returns k;
- the encoded slice costs at most twice log2 C(n, k) bits for every
  1 <= k < n, over densities 1e-6..0.9 and n = 2^10..2^24 (random sets and
  the worst structured ones: every gap 7, 2^7 or 2^14);
- packed claim pairs decode to the same pairs in the same order (int32 and
  int64), chunk boundaries included, within 2x of log2 n + log2 N bits a pair.

Malformed streams are ``tests/test_mesh_security.py``'s.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from dbfs.bfs.dask.mesh import codec as C


def _info_bits(n: int, k: int) -> float:
    """log2 C(n, k): the information in a set of k among n."""
    return (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)) / math.log(2)


def _bitmap(rows, pad: int, n: int) -> np.ndarray:
    """The slice's int64 words (rows are offsets in [0, n), stored at pad + row)."""
    nw = (pad + n + 63) >> 6
    bits = np.zeros(64 * nw, bool)
    bits[pad + np.asarray(rows, np.int64)] = True
    return np.packbits(bits, bitorder="little").view(np.int64)


def _encode(rows, pad, n):
    bm = _bitmap(rows, pad, n)
    tag, s = C.encode_slice(bm, pad, n, np.empty(8 * bm.shape[0] + C.GAP_SLACK, np.uint8))
    return bm, tag, np.ascontiguousarray(s).copy()


@pytest.mark.parametrize("code", [0, 1])
@pytest.mark.parametrize("pad", [0, 1, 37, 63])
@pytest.mark.parametrize("n", [1, 63, 64, 65, 1000, 70001])
def test_slices_round_trip(code, pad, n):
    """Every density (empty and full included) decodes exactly into the global bitmap at the rank's place."""
    if code == 1:
        pad = 0                                          # cyclic ranks have no pad
    rng = np.random.default_rng(n + pad)
    P, rank = 3, 2
    base = 128 if code == 0 else 0
    N = base + pad + n if code == 0 else n * P + rank + 1
    tags = set()
    for d in (0.0, 1e-4, 0.003, 0.05, 0.125, 0.5, 0.9, 0.97, 0.999, 1.0):
        rows = np.flatnonzero(rng.random(n) < d)
        bm, tag, s = _encode(rows, pad, n)
        tags.add(tag)
        front = np.zeros((N + 63 >> 6) + 1, np.int64)
        k = C.decode_slice_or(s, tag, front, pad, n, code, P, rank, base)
        assert k == rows.size
        want = np.zeros(64 * front.shape[0], bool)
        want[(base + pad + rows) if code == 0 else (rows * P + rank)] = True
        assert np.array_equal(front, np.packbits(want, bitorder="little").view(np.int64)), (d, tag)
    if n >= 1000:
        assert tags == {C.BITMAP, C.SET, C.CLEAR}


@pytest.mark.parametrize("n", [5, 5000])
def test_empty_and_full_slices_send_nothing(n):
    for rows, tag in ((np.array([], np.int64), C.SET), (np.arange(n), C.CLEAR)):
        _, t, s = _encode(rows, 7, n)
        assert t == tag and s.size == 0


def test_read_only_streams_decode():
    """A stream a transport hands over read-only (or strided) decodes as any other."""
    for rows, n in ((np.array([3, 900]), 1000), (np.arange(0, 1000, 3), 1000), (np.arange(999), 1000)):
        bm, tag, s = _encode(rows, 0, n)
        ro = s.copy()
        ro.setflags(write=False)
        for stream in (ro, np.repeat(s, 2)[::2]):
            front = np.zeros(bm.shape[0], np.int64)
            assert C.decode_slice_or(stream, tag, front, 0, n, 0, 1, 0, 0) == rows.size
            assert np.array_equal(front, bm)
        L = np.arange(5, dtype=np.int32)
        p = C.pack_pairs(L, L, 0, 5, 10, 10)
        p.setflags(write=False)
        assert np.array_equal(C.unpack_pairs(p, 5, 10, 10, 1000, 1000, np.int32)[1], L)


def test_stray_bits_are_never_sent():
    """Bits outside the rank's rows (pad rows, the last word's tail) stay home."""
    n, pad = 600, 5
    bm = _bitmap(np.arange(0, n, 2), pad, n)
    bm[0] |= 0b11                                        # two pad rows
    bm[-1] |= np.int64(1) << 62                          # past the last row
    tag, s = C.encode_slice(bm, pad, n, np.empty(8 * bm.shape[0] + C.GAP_SLACK, np.uint8))
    front = np.zeros(bm.shape[0], np.int64)
    assert tag == C.BITMAP and C.decode_slice_or(s.copy(), tag, front, pad, n, 0, 1, 0, 0) == n // 2
    assert np.array_equal(front, _bitmap(np.arange(0, n, 2), pad, n))


def _sets(n, rng):
    """Random sets over densities 1e-6..0.9, and the structured worst cases (k >= 1)."""
    for d in (1e-6, 1e-5, 1e-4, 1e-3, 3e-3, 0.01, 0.03, 0.06, 0.1, 0.125, 0.15, 0.2, 0.3, 0.5, 0.7, 0.8,
              0.875, 0.9):
        k = max(1, round(d * n))
        if k < n:
            yield f"random {d}", np.sort(rng.choice(n, k, replace=False))
    for gap in (7, 128, 1 << 14):                        # every gap at the bitmap's or a varint length's edge
        if n > 4 * gap:
            yield f"gaps of {gap}", np.arange(gap, n, gap + 1)


def test_slices_stay_within_twice_the_information():
    """bytes <= 2 log2 C(n, k) / 8 over densities 1e-6..0.9 and n = 2^10..2^24; the worst ratio is reported."""
    rng = np.random.default_rng(1)
    worst = (0.0, None)
    for lg in range(10, 25, 2):
        n = 1 << lg
        for name, rows in _sets(n, rng):
            _, _, s = _encode(rows, 0, n)
            r = 8 * s.size / _info_bits(n, rows.size)
            worst = max(worst, (r, f"n=2^{lg} {name}: k={rows.size}, {s.size} bytes"))
    print(f"worst bytes / information: {worst[0]:.3f} ({worst[1]})")
    assert worst[0] < 2.0, worst


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("m", [0, 1, 7, 8, 9, 8191, 8193, 3 * 8192 + 5])
def test_pairs_round_trip(dtype, m):
    rng = np.random.default_rng(m)
    n_owner, N = 40000, 150001
    b1, b2 = C.pair_widths(n_owner, N)
    assert (b1, b2) == (16, 18)
    L = rng.integers(0, n_owner, m + 10).astype(dtype)
    U = rng.integers(0, N, m + 10).astype(dtype)
    L[:2], U[:2] = n_owner - 1, N - 1                     # the largest values fit
    s = C.pack_pairs(L, U, 3, 3 + m, b1, b2)
    assert s.dtype == np.uint8 and s.size == C.pairs_nbytes(m, b1, b2) == (m * 34 + 7) // 8
    L2, U2 = C.unpack_pairs(s, m, b1, b2, n_owner, N, dtype)
    assert L2.dtype == dtype and np.array_equal(L2, L[3:3 + m]) and np.array_equal(U2, U[3:3 + m])
    if m:
        assert 8 * s.size <= 2 * m * (math.log2(n_owner) + math.log2(N))


@pytest.mark.parametrize("n_owner,N", [(2, 1024), (4096, 16384), (32768, 65536), (1 << 19, 1 << 20), (3, 1 << 40)])
def test_pair_widths_within_twice_the_information(n_owner, N):
    b1, b2 = C.pair_widths(n_owner, N)
    assert (1 << b1) >= n_owner and (1 << b2) >= N
    bits = math.log2(n_owner) + math.log2(N)
    for m in (1, 3, 1000):
        assert 8 * C.pairs_nbytes(m, b1, b2) <= 2 * m * bits

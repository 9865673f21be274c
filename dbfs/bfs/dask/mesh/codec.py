"""Frontier and claim-pair codecs of a level's exchange through the mesh (Numba, per worker).

Contract
--------
What a worker hands the mesh (:mod:`dbfs.bfs.dask.mesh.frames`' coded kinds) is
encoded here so that a level's bytes stay within about twice the
information in it:

- a rank's frontier slice (k of its n rows): :func:`encode_slice` sends the
  smallest of three forms, tagged :data:`BITMAP` (the slice's int64 words),
  :data:`SET` (the rows in the frontier as gaps in LEB128 varints) and
  :data:`CLEAR` (the rows NOT in it, the same way); :func:`decode_slice_or`
  ORs a received slice into a global frontier bitmap and returns k;
- top-down claims, (owner-local index, global parent) pairs:
  :func:`pack_pairs` writes each pair in ``b1 + b2`` bits (:func:`pair_widths`:
  the bit lengths of the owner's row count and of N), in claim order, so
  the owner's absorb sees the pairs it saw before; :func:`unpack_pairs`
  reads them back.

A decoder trusts nothing it reads: every id is checked to lie among the
rank's rows (every parent below N) before it is written, and a
truncated varint, a non-minimal one (a last byte 0 after others), one of
more than 9 bytes, a gap past the rank's last row, a set bit outside the
rows, a stream of the wrong length or with set padding bits make it return
-1 (slices) or None (pairs): the caller treats the sender as a lost peer.

Method
------
A set of k among n rows carries log2 C(n, k) ~ n H(k/n) bits. The bitmap
costs n bits, within 2x of that while k/n is between 0.11 and 0.89; a gap
costs one byte below 2^7, two below 2^14, ... (about log2(n/k) + 2 bits
rounded up to 7-bit groups), within 2x where the set (or its complement)
is sparse. The smaller of the three is within 2x at every density
(``tests/test_frontier_codec.py`` measures it over densities 1e-6..0.9 and
n = 2^10..2^24). A pair carries log2(n) + log2(N) bits; its packed width is
their ceilings. Kernels run ``nogil``; the pair kernels work on int64
words (a packer fills each word through one register, an unpacker reads a
field from at most two words) and split the pairs into chunks of whole
64-pair blocks (each starts on a word boundary), run in parallel.
Every kernel is compiled for its argument types when this module is
imported (explicit signatures, from Numba's on-disk cache after the
first time), so no search compiles or loads one.

Encoding
--------
SET / CLEAR stream: the sorted row offsets x (row - pad, in [0, n)) as
varints of ``x_0, x_1 - x_0 - 1, x_2 - x_1 - 1, ...``: 7 bits a byte,
low group first, high bit set on every byte but the last. Pair stream: pair
j at bit ``j (b1 + b2)``, the index's b1 bits then the parent's b2 bits,
low bits first, bit 0 the lowest bit of byte 0; the last byte's unused bits
are 0. Gap coding of sorted ids: Witten, Moffat and Bell, "Managing
Gigabytes" (2nd ed., 1999), ch. 3; LEB128: the DWARF Debugging Information
Format, version 2 (1993), section 7.6.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange, types

from dbfs.bfs.cpu.primitives import _cttz, _popcount

__all__ = ["BITMAP", "SET", "CLEAR", "TAGS", "GAP_SLACK", "encode_slice", "decode_slice_or", "pair_widths",
           "pack_pairs", "unpack_pairs", "pairs_nbytes"]

BITMAP, SET, CLEAR = 0, 1, 2          # frontier slice forms (the tag a frame carries per slice)
TAGS = (BITMAP, SET, CLEAR)
_MAX_VARINT = 9                      # bytes of the longest varint (63 bits: any id below 2^63)
GAP_SLACK = 64 * _MAX_VARINT + 64     # bytes a gap encoder may write past its limit (a word's varints)
_PAIR_CHUNK = 8192                   # pairs per chunk of the parallel pair kernels (a multiple of 64)

_i64, _u8 = types.int64, types.uint8
_A64 = types.Array(_i64, 1, "C")
_AU8 = types.Array(_u8, 1, "C")
_AI32 = types.Array(types.int32, 1, "C")


# ------------------------------------------------------------ frontier slices
@njit(_i64(_i64, _i64, _i64), nogil=True, cache=True)
def _word_mask(w, pad, n):
    """The bits of word ``w`` that are rows in [pad, pad + n)."""
    lo = max(pad - 64 * w, 0)
    hi = min(pad + n - 64 * w, 64)
    if lo >= hi:
        return 0
    m = np.int64(-1) if hi == 64 else (np.int64(1) << hi) - 1
    return m & ~((np.int64(1) << lo) - 1)


@njit(types.UniTuple(_i64, 2)(_A64, _i64, _i64), nogil=True, cache=True)
def _slice_stats(bm, pad, n):
    """(set bits among the rows [pad, pad + n), set bits outside them) of a slice's words."""
    k = 0
    stray = 0
    for w in range(bm.shape[0]):
        x = bm[w]
        if x == 0:
            continue
        m = _word_mask(w, pad, n)
        k += _popcount(x & m)
        stray += _popcount(x & ~m)
    return k, stray


@njit(_i64(_A64, _i64, _i64, _i64, _AU8, _i64), nogil=True, cache=True)
def _encode_gaps(bm, pad, n, invert, out, limit):
    """The set (``invert`` 0) or clear (1) rows of [pad, pad + n) as varint gaps into ``out`` (at least
    ``limit`` + :data:`GAP_SLACK` bytes: the limit is checked once a word); returns the bytes written, or
    -1 once they pass ``limit``."""
    pos = 0
    prev = pad - 1                          # gaps between padded rows: the first is its row - pad
    last = (pad + n - 1) >> 6
    flip = np.int64(-1) if invert else np.int64(0)
    for w in range(min(bm.shape[0], last + 1)):
        x = bm[w] ^ flip
        if w == 0 or w == last:             # only the first and the last word hold rows of others
            x &= _word_mask(w, pad, n)
        while x != 0:
            i = 64 * w + _cttz(x)
            x &= x - 1
            g = i - prev - 1
            prev = i
            if g < 128:
                out[pos] = g
                pos += 1
                continue
            while g >= 128:
                out[pos] = (g & 127) | 128
                g >>= 7
                pos += 1
            out[pos] = g
            pos += 1
        if pos > limit:
            return -1
    return pos


@njit(nogil=True, cache=True)
def _set_row(front, code, P, rank, base, i):
    v = base + i if code == 0 else i * P + rank
    front[v >> 6] |= np.int64(1) << (v & 63)


@njit(nogil=True, cache=True)
def _set_rows(front, code, P, rank, base, i0, i1):
    """Set the bits of local rows [i0, i1) in the global bitmap ``front``."""
    if i0 >= i1:
        return
    if code != 0:
        for i in range(i0, i1):
            _set_row(front, code, P, rank, base, i)
        return
    v0, v1 = base + i0, base + i1
    w0, w1 = v0 >> 6, (v1 - 1) >> 6
    lo = np.int64(-1) << (v0 & 63)
    hi = np.int64(-1) if (v1 & 63) == 0 else (np.int64(1) << (v1 & 63)) - 1
    if w0 == w1:
        front[w0] |= lo & hi
        return
    front[w0] |= lo
    for w in range(w0 + 1, w1):
        front[w] = -1
    front[w1] |= hi


@njit(_i64(_A64, _A64, _i64, _i64, _i64, _i64, _i64, _i64), nogil=True, cache=True)
def _or_words(s64, front, pad, n, code, P, rank, base):
    """OR a BITMAP slice (its words, as many as the rank's) into ``front``; its frontier rows, or -1 at
    the first word with a bit outside the rows [pad, pad + n) (earlier words are the rank's own)."""
    k = 0
    last = s64.shape[0] - 1
    for w in range(s64.shape[0]):
        x = s64[w]
        if x == 0:
            continue
        if (w == 0 or w == last) and x & ~_word_mask(w, pad, n):    # only these hold rows of others
            return -1
        k += _popcount(x)
        if code == 0:
            front[(base >> 6) + w] |= x
        else:
            while x != 0:
                _set_row(front, code, P, rank, base, 64 * w + _cttz(x))
                x &= x - 1
    return k


@njit(_i64(_AU8, _i64, _A64, _i64, _i64, _i64, _i64, _i64, _i64), nogil=True, cache=True)
def _decode_gaps(stream, tag, front, pad, n, code, P, rank, base):
    """OR a SET or CLEAR slice of rank ``rank`` (rows [pad, pad + n)) into ``front``; its frontier rows,
    or -1 at the first malformed varint (every row is checked before its bit is written, so nothing
    outside the rank's rows is ever written)."""
    m = stream.shape[0]
    pos = 0
    prev = -1
    cnt = 0
    while pos < m:
        b = np.int64(stream[pos])
        pos += 1
        g = b
        if b >= 128:                        # a gap of more than one byte
            g = b & 127
            sh = 7
            while True:
                if pos >= m or sh == 7 * _MAX_VARINT:
                    return -1               # truncated, or longer than any id needs
                b = np.int64(stream[pos])
                pos += 1
                g |= (b & 127) << sh
                sh += 7
                if b < 128:
                    break
            if b == 0:
                return -1                   # non-minimal (overlong): a last byte of 0
        if g > n - prev - 2:
            return -1                       # the gap runs past the rank's last row
        x = prev + g + 1
        if tag == SET:
            _set_row(front, code, P, rank, base, pad + x)
        else:
            _set_rows(front, code, P, rank, base, pad + prev + 1, pad + x)
        prev = x
        cnt += 1
    if tag == CLEAR:
        _set_rows(front, code, P, rank, base, pad + prev + 1, pad + n)
        return n - cnt
    return cnt


def encode_slice(bm: np.ndarray, pad: int, n: int, scratch: np.ndarray) -> tuple:
    """(tag, uint8 array) of a rank's frontier slice ``bm`` (int64 words over its padded rows, the
    frontier among rows [pad, pad + n)): the smallest of the bitmap, the set's gaps and the clear
    rows' gaps. ``scratch``: a uint8 work array of at least ``8 len(bm) +`` :data:`GAP_SLACK` bytes; a gap form is
    returned as a copy of its bytes, the bitmap as a view of ``bm`` (masked copy if stray bits)."""
    B = 8 * bm.shape[0]
    k, stray = _slice_stats(bm, pad, n)
    best = None
    for tag, c in ((SET, k), (CLEAR, n - k)):
        limit = B - 1 if best is None else best[1].shape[0] - 1
        if c <= limit:                  # a gap costs at least one byte: only then can it beat the others
            m = _encode_gaps(bm, pad, n, tag == CLEAR, scratch, limit)
            if m >= 0:
                best = tag, scratch[:m].copy()
    if best is not None:
        return best
    if stray:                           # never sent: bits outside the rank's rows
        rows = np.arange(B * 8)
        bm = bm & np.packbits((rows >= pad) & (rows < pad + n), bitorder="little").view(np.int64)
    return BITMAP, bm.view(np.uint8)


def decode_slice_or(stream: np.ndarray, tag: int, front: np.ndarray, pad: int, n: int, code: int, P: int,
                    rank: int, base: int) -> int:
    """OR a received slice of rank ``rank`` (rows [pad, pad + n) of its padded rows, local row ``i``
    global vertex ``base + i`` (``code`` 0, block) or ``i P + rank`` (cyclic)) into the global bitmap
    ``front``; its frontier count, or -1 (malformed: the caller drops the sender; a malformed slice may
    have set some of its own rank's bits, never another's)."""
    if stream.dtype != np.uint8 or tag not in TAGS:
        return -1
    if tag != BITMAP:
        if not (stream.flags.c_contiguous and stream.flags.writeable):    # the kernel's one array type
            stream = stream.copy()
        return int(_decode_gaps(stream, tag, front, pad, n, code, P, rank, base))
    nw = (pad + n + 63) >> 6
    if stream.shape[0] != 8 * nw:
        return -1
    s64 = stream.view(np.int64) if stream.flags.c_contiguous else None
    if s64 is None or not (s64.flags.aligned and s64.flags.writeable):
        s64 = np.empty(nw, np.int64)              # aligned words (a stream may start anywhere in its frame)
        s64.view(np.uint8)[:] = stream
    return int(_or_words(s64, front, pad, n, code, P, rank, base))


# ------------------------------------------------------------- claim pairs
def pair_widths(n_owner: int, N: int) -> tuple:
    """(b1, b2): the bits of an owner-local index below ``n_owner`` and of a parent below ``N``."""
    return max(int(n_owner) - 1, 1).bit_length(), max(int(N) - 1, 1).bit_length()


def pairs_nbytes(cnt: int, b1: int, b2: int) -> int:
    """Bytes of a stream of ``cnt`` packed pairs."""
    return (int(cnt) * (b1 + b2) + 7) >> 3


@njit(nogil=True, cache=True)
def _field(s64, o, w):
    """The ``w`` (< 64) bits at bit ``o`` of the int64 words ``s64`` (low bits first; the word after the
    field's first is read whatever ``o``: one word past the stream must exist). Branch-free, unsigned."""
    i = o >> 6
    sh = np.uint64(o & 63)
    lo = np.uint64(s64[i]) >> sh
    hi = (np.uint64(s64[i + 1]) << (np.uint64(63) - sh)) << np.uint64(1)
    return np.int64((lo | hi) & ((np.uint64(1) << np.uint64(w)) - np.uint64(1)))


def _chunks_of(m):
    return max(1, min(256, (m + _PAIR_CHUNK - 1) // _PAIR_CHUNK))


_PACK_SIGS = [types.void(A, A, _i64, _i64, _i64, _i64, _A64, _i64) for A in (_AI32, _A64)]
_UNPACK_SIGS = [_i64(_A64, _i64, _i64, _i64, _i64, _i64, A, A, _i64) for A in (_AI32, _A64)]


@njit(_PACK_SIGS, parallel=True, nogil=True, cache=True)
def _pack(L, U, a, b, b1, b2, out, C):
    """Pairs L[a:b], U[a:b] into the zeroed int64 words ``out``; ``C`` chunks of whole 64-pair blocks (each
    starts on a word: 64 pairs are b1 + b2 words), each filling its words through one register."""
    m = b - a
    nblk = (m + 63) >> 6
    w = b1 + b2
    for c in prange(C):
        j0 = 64 * (c * nblk // C)
        j1 = min(64 * ((c + 1) * nblk // C), m)
        wi = (j0 * w) >> 6
        acc = np.int64(0)
        nb = 0
        for j in range(j0, j1):
            for f in range(2):
                v = np.int64(L[a + j]) if f == 0 else np.int64(U[a + j])
                k = b1 if f == 0 else b2
                acc |= v << nb
                nb += k
                if nb >= 64:
                    out[wi] = acc
                    wi += 1
                    nb -= 64
                    acc = v >> (k - nb) if nb else np.int64(0)
        if nb:
            out[wi] = acc


@njit(_UNPACK_SIGS, parallel=True, nogil=True, cache=True)
def _unpack(s64, cnt, b1, b2, n, N, L, U, C):
    """Pairs of the int64 words ``s64`` (one word past the stream) into L, U; 1, or 0 when an index is not
    below ``n`` or a parent not below ``N``."""
    bad = np.zeros(C, np.int64)
    w = b1 + b2
    for c in prange(C):
        for j in range(c * cnt // C, (c + 1) * cnt // C):
            o = j * w
            x = _field(s64, o, b1)
            u = _field(s64, o + b1, b2)
            if x >= n or u >= N:
                bad[c] = 1
                break
            L[j] = x
            U[j] = u
    return 0 if bad.sum() else 1


def pack_pairs(L: np.ndarray, U: np.ndarray, a: int, b: int, b1: int, b2: int) -> np.ndarray:
    """Pairs ``L[a:b]``, ``U[a:b]`` (non-negative, below ``2**b1`` and ``2**b2``) as one uint8 stream."""
    nbytes = pairs_nbytes(b - a, b1, b2)
    out = np.zeros((nbytes + 7) >> 3, np.int64)
    _pack(L, U, a, b, b1, b2, out, _chunks_of(b - a))
    return out.view(np.uint8)[:nbytes]


def unpack_pairs(s: np.ndarray, cnt: int, b1: int, b2: int, n: int, N: int, dtype):
    """(L, U) of ``dtype`` from a stream of ``cnt`` pairs whose indices are below ``n`` and parents
    below ``N``, or None when the stream is malformed (wrong length, set padding bits, a value out of
    range)."""
    cnt = int(cnt)
    if s.dtype != np.uint8 or cnt < 0 or s.shape[0] != pairs_nbytes(cnt, b1, b2):
        return None
    used = cnt * (b1 + b2) & 7
    if used and int(s[-1]) >> used:
        return None
    L = np.empty(cnt, dtype)
    U = np.empty(cnt, dtype)
    if cnt:
        s64 = np.zeros((s.shape[0] >> 3) + 2, np.int64)      # aligned words, one past the end
        s64.view(np.uint8)[:s.shape[0]] = s
        if not _unpack(s64, cnt, b1, b2, n, N, L, U, _chunks_of(cnt)):
            return None
    return L, U

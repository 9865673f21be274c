"""The CUDA kernels' arithmetic checked on the CPU: each ``.cu`` file built as C (the CUDA qualifiers defined
away, one thread at a time) and called through ctypes, against the CPU code it must equal.

Why: a session without device time can still change a kernel (the generator's 32-bit state arithmetic, Kernel
1's every-rank emit); this catches an arithmetic or indexing slip before any GPU runs it. What it cannot
catch: races, launch shapes past one thread's loop, occupancy; the GPU tests (``-m gpu``) run the kernels
themselves. Needs a C compiler (``cc``); skipped, saying so, without one.

- ``dbfs/generate/kronecker.cu``: ``kron_edges`` over blocks and threads in order (any edges a thread) equals
  :func:`dbfs.generate.graph500.kronecker_edges` on slices at SCALE 10, 31, 32 and 40 (ids of 10 to 40 bits).
- ``dbfs/kernel1/kernel1.cu``: ``k1_emit_ranges_i32`` / ``_i64`` (every rank's range in one pass, ids mapped by
  ``iperm`` or not) write, row by row, the keys a NumPy counting sort writes.
- ``dbfs/bfs/kernels/dense.cu``: ``claimed_open`` and ``visit_bits`` (a dense NCCL top-down level) equal their
  NumPy word operations, over several blocks and a grid that strides.
"""
from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent

_PRELUDE = r"""
#define __global__
#define __device__
#define __forceinline__ static inline
#define __restrict__
typedef struct { long long x; } dbfs_dim;
static dbfs_dim blockIdx, threadIdx, blockDim, gridDim;
static unsigned long long __brevll(unsigned long long v) {
    unsigned long long r = 0;
    for (int i = 0; i < 64; ++i) { r = (r << 1) | (v & 1ULL); v >>= 1; }
    return r;
}
static unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
    unsigned long long o = *p; *p += v; return o;
}
"""

_KRON_DRIVER = r"""
void drive_kron(long long start, long long count, long long scale, const long long* s0, const long long* btab,
                const long long* cstep, long long ept, unsigned long long val0, unsigned long long val1,
                long long t1, long long t2, long long t3, long long* out) {
    blockDim.x = 256;
    gridDim.x = (count + 256 * ept - 1) / (256 * ept);
    for (long long b = 0; b < gridDim.x; ++b)
        for (int t = 0; t < 256; ++t) {
            blockIdx.x = b;
            threadIdx.x = t;
            kron_edges(start, count, scale, s0, btab, cstep, ept, val0, val1, t1, t2, t3, 1, out);
        }
}
"""

_EMIT_DRIVER = r"""
#define DRIVE(NAME, IT)                                                                                     \
void drive_##NAME(const long long* e, long long m, const IT* iperm, int P, const long long* lo,             \
                  const long long* hi, const long long* cb, unsigned long long* cur, unsigned long long* keys) { \
    blockIdx.x = 0; threadIdx.x = 0; blockDim.x = 1; gridDim.x = 1;                                          \
    NAME(e, m, iperm, P, lo, hi, cb, cur, keys);                                                             \
}
DRIVE(k1_emit_ranges_i32, int)
DRIVE(k1_emit_ranges_i64, long long)
"""


def _library(tmp_path, cu: str, driver: str, name: str, head: str = ""):
    """``cu`` built as C after the prelude and ``head`` (typedefs a file takes from another), ``driver`` last."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler (cc) on this machine: the kernels' C build is not checked here")
    src = (ROOT / cu).read_text().replace('extern "C" ', "")
    c = tmp_path / f"{name}.c"
    c.write_text(_PRELUDE + head + src + driver)
    so = tmp_path / f"{name}.so"
    subprocess.run([cc, "-O1", "-shared", "-fPIC", "-x", "c", str(c), "-o", str(so)], check=True,
                   capture_output=True, text=True)
    return ctypes.CDLL(str(so))


def _ptr(a: np.ndarray):
    return a.ctypes.data_as(ctypes.c_void_p)


@pytest.fixture(scope="module")
def kron(tmp_path_factory):
    return _library(tmp_path_factory.mktemp("kron"), "dbfs/generate/kronecker.cu", _KRON_DRIVER, "kron")


@pytest.mark.parametrize("scale,ept", [(10, 4), (31, 64), (32, 7), (40, 16)])
def test_the_generator_kernel_equals_the_cpu_generator(kron, scale, ept):
    from dbfs.generate import graph500, mrg

    m = 16 << scale
    start = m // 3 + 11 if scale > 10 else 0
    count = min(20_000, m - start)
    s0 = np.array(mrg.seed_state(2, 3), np.int64)
    btab = np.ascontiguousarray(graph500._edge_table(), dtype=np.int64)
    cstep = np.ascontiguousarray(mrg.as_array(mrg.matpow(256 << 64)), dtype=np.int64)
    val0, val1 = graph500.scramble_values(2, 3)
    a, b, c = graph500.GRAPH500_INITIATOR
    out = np.full((count, 2), -7, np.int64)
    L = ctypes.c_longlong
    kron.drive_kron(L(start), L(count), L(scale), _ptr(s0), _ptr(btab), _ptr(cstep), L(ept), ctypes.c_ulonglong(val0),
                    ctypes.c_ulonglong(val1), L(b), L(b + c), L(b + c + a), _ptr(out))
    want = graph500.kronecker_edges(scale, 16, 2, 3, start, start + count)
    assert np.array_equal(out, want)


@pytest.fixture(scope="module")
def emit(tmp_path_factory):
    return _library(tmp_path_factory.mktemp("k1"), "dbfs/kernel1/kernel1.cu", _EMIT_DRIVER, "k1")


@pytest.mark.parametrize("width", ["i32", "i64", "none"])
def test_the_every_rank_emit_writes_each_ranges_keys(emit, width):
    """Three ranks' pass ranges (one empty), self-loops skipped, ids mapped by ``iperm`` (or read as they are):
    each row's keys (row - lo) << 32 | neighbour at the row's cursor, every slot written once."""
    rng = np.random.default_rng(5)
    n, m = 300, 4000
    e = rng.integers(0, n, (m, 2)).astype(np.int64)
    e[:50, 1] = e[:50, 0]                                   # self-loops
    iperm = rng.permutation(n).astype(np.int32 if width == "i32" else np.int64)
    mapped = iperm[e] if width != "none" else e
    ranges = [(10, 60), (100, 100), (180, 260)]
    keep = mapped[:, 0] != mapped[:, 1]
    src = np.concatenate([mapped[keep, 0], mapped[keep, 1]])
    dst = np.concatenate([mapped[keep, 1], mapped[keep, 0]])
    lens = [hi - lo for lo, hi in ranges]
    cbase = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    want, counts = {}, np.zeros(int(cbase[-1]), np.int64)
    for j, (lo, hi) in enumerate(ranges):
        for x in range(lo, hi):
            got = np.sort(dst[src == x])
            want[(j, x)] = got
            counts[cbase[j] + x - lo] = got.size
    cur = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.uint64)
    start = cur.copy()
    keys = np.full(int(counts.sum()), np.uint64(2**64 - 1), np.uint64)
    lo_a = np.array([r[0] for r in ranges], np.int64)
    hi_a = np.array([r[1] for r in ranges], np.int64)
    fn = emit.drive_k1_emit_ranges_i64 if width == "i64" else emit.drive_k1_emit_ranges_i32
    ip = ctypes.c_void_p(None) if width == "none" else _ptr(iperm)
    fn(_ptr(e), ctypes.c_longlong(m), ip, ctypes.c_int(len(ranges)), _ptr(lo_a), _ptr(hi_a), _ptr(cbase), _ptr(cur),
       _ptr(keys))
    assert np.array_equal(cur, start + counts.astype(np.uint64))        # every cursor moved by its row's count
    for (j, x), nb in want.items():
        a = int(start[cbase[j] + x - ranges[j][0]])
        seg = keys[a:a + nb.size]
        assert np.array_equal(seg >> np.uint64(32), np.full(nb.size, x - ranges[j][0], np.uint64))
        assert np.array_equal(np.sort(seg & np.uint64(0xFFFFFFFF)).astype(np.int64), nb)


_DENSE_DRIVER = r"""
static void grid(long long blocks) { blockDim.x = 4; gridDim.x = blocks; }
#define EACH(CALL) for (long long b = 0; b < gridDim.x; ++b) for (int t = 0; t < blockDim.x; ++t) { \
    blockIdx.x = b; threadIdx.x = t; CALL; }
void drive_open(const u32* vis, const u32* mine, const u32* cl, int k, long long stride, long long nw, u32* out) {
    grid(3);
    EACH(claimed_open(vis, mine, cl, k, stride, nw, out))
}
void drive_visit(const u32* next, long long nw, u32* vis, u32* vg) {
    grid(2);
    EACH(visit_bits(next, nw, vis, vg))
}
"""


@pytest.fixture(scope="module")
def dense(tmp_path_factory):
    return _library(tmp_path_factory.mktemp("dense"), "dbfs/bfs/kernels/dense.cu", _DENSE_DRIVER, "dense",
                    head="typedef unsigned int u32;\ntypedef long long i64;\n")


@pytest.mark.parametrize("k", [0, 1, 3])
def test_the_dense_level_kernels_equal_their_word_operations(dense, k):
    """``claimed_open``: visited OR NOT (own claims OR each peer's slice), ``k`` peers' slices ``stride`` words
    apart; ``visit_bits``: the found bits OR-ed into the rank's visited words and into its global slice, the
    words with none left as they were. 37 words over 3 blocks of 4 threads: the grid strides."""
    rng = np.random.default_rng(k)
    nw, stride = 37, 41
    u32 = np.uint32
    words = lambda n: rng.integers(0, 2**32, n, dtype=np.uint64).astype(u32)     # noqa: E731
    vis, mine, cl = words(nw), words(nw), words(max(k, 1) * stride)
    out = np.full(nw, 7, u32)
    L = ctypes.c_longlong
    dense.drive_open(_ptr(vis), _ptr(mine), _ptr(cl), ctypes.c_int(k), L(stride), L(nw), _ptr(out))
    claimed = mine.copy()
    for s in range(k):
        claimed |= cl[s * stride:s * stride + nw]
    assert np.array_equal(out, vis | ~claimed)
    nxt = words(nw)
    nxt[::3] = 0
    vg = words(nw)
    want_vis, want_vg = vis | nxt, vg | nxt
    dense.drive_visit(_ptr(nxt), L(nw), _ptr(vis), _ptr(vg))
    assert np.array_equal(vis, want_vis) and np.array_equal(vg, want_vg)

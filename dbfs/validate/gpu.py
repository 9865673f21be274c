"""Graph500 validation on an array module (CuPy on a GPU, or NumPy).

Contract
--------
``validate_gpu(edges, root, parent, n_vertices=None, xp=None, chunk_edges=2**26,
levels=True) -> ValidationResult(ok, nedge, failures, levels)``, and
``validate_many_gpu(edges, [(root, parent), ...], ...)`` (the same for several
searches over one read of the edge list: a regenerated list is made once per
batch): the same as
:func:`dbfs.validate.validate`, rule by rule, and the same result type
(``Failure``, ``ValidationResult`` and ``RULES`` come from
:mod:`dbfs.validate.cpu`): same ``ok``, ``nedge``, failed rules (in ``RULES``
order), ``count`` and message per failure, and the same ``levels``. Like the
CPU validator it is independent of what it checks: nothing from
:mod:`dbfs.bfs`, no CSR, only the INPUT edge list, read in row chunks of
``chunk_edges`` tuples (a CuPy or NumPy (M, 2) int array, or anything
sliceable by rows, e.g. zarr; host chunks are copied to the device one at a
time). CuPy is imported only when an argument is a CuPy array.

Encodings: ``parent`` int, one entry per vertex, ``parent[root] == root``,
-1 unreached; ``n_vertices`` defaults to ``len(parent)``. ``levels`` comes
back as a NumPy int64 array: -1 unreached, -2 for a reached vertex whose
parent chain does not reach the root (it ends in a cycle or at an unreached
vertex); those are reported by ``cycle`` / ``parent-unreached`` and left out
of the edge rules. ``Failure.vertices`` is a NumPy int64 array holding the
same examples as the CPU validator: the smallest offending ids for vertex
rules, the endpoints of the first offending tuples (input order) for edge
rules. ``xp=None`` picks CuPy when ``parent`` or ``edges`` is a CuPy array
(imported only then), else NumPy.

Method (Graph500 specification, section 8 "Validation"), all O(n) or O(M)
vector ops, no Python loop over vertices/edges:

- levels, on CuPy, by sweeps over the vertices where every reached chain
  reaches the root (``lev[v] = lev[parent[v]] + 1`` once the parent's is
  known, in place: about one sweep a BFS level); a sweep that settles
  nothing (a broken chain) or a tree deeper than ``SWEEPS_MOST`` sweeps
  goes to pointer jumping, which also names the failures.
- levels by pointer jumping: ``anc`` = parent for reached non-root vertices,
  self for the root and unreached vertices (the chain ends); ``dist`` = 1 per
  step from a reached non-root vertex. Repeat ``dist += dist[anc]; anc =
  anc[anc]`` until ``anc`` is idempotent or 2**r >= n (at most
  ceil(log2 n)+1 rounds). Then ``anc[v] == root`` gives level ``dist[v]``;
  otherwise a reached vertex is broken (-2).
- ``cycle`` counts the vertices ON a cycle (as the CPU walk marks them, not
  their descendants): after >= n steps every broken chain that does not end
  at an unreached vertex sits on its cycle and every cycle vertex is such an
  end, so the cycle set is the scatter ``on[anc[v]] = True`` over those v.
- ``parent-unreached`` counts reached v whose parent is unreached (the CPU
  walk's last vertex before an unreached one).
- edges, a batch of K searches at once: a (level, parent) table with the K
  searches of a vertex side by side (one row of 2K ids), so a tuple costs
  two random row reads for the whole batch, not four reads per search. On
  CuPy one fused kernel per chunk counts the four edge quantities of every
  search and sets the tree-edge flags (a group of lanes a tuple, one lane a
  search, so a row's pairs are read together); only a search whose counts show a
  failure is redone on that chunk with the array ops below, which also
  collect its examples (so examples and counts are those of the array
  path). On NumPy, and for that redo: per chunk, masks give edge-range,
  edge-span, level-diff and nedge; tree edges are a scatter of True flags,
  ``found[v] = True`` where ``parent[v] == u`` (and symmetrically),
  race-free on a GPU; every vertex of level > 0 must be found.
  (A random read costs its 32-byte sector whatever it uses of it: the
  table turns 4K scattered reads a tuple into two rows of 2K ids.)
"""
from __future__ import annotations

import numpy as np

from dbfs.graph import id_dtype
from dbfs.validate.cpu import MAX_EXAMPLES, RULES, Failure, ValidationResult, edge_failures

__all__ = ["validate_gpu", "validate_many_gpu", "validate_batch", "batch_size", "keep_budget", "mesh_plan",
           "KeptRows", "DEVICE_EDGE_ROWS", "VALIDATE_MOST"]

#: input edge rows one device pass of the validation reads at a time (validate.gpus too)
DEVICE_EDGE_ROWS = 1 << 26
_KERNELS: dict = {}             # the CUDA kernels compiled, by name and types
#: most searches one batch validates over one read of the edges (their parents wait on the device till then)
VALIDATE_MOST = 16
#: device bytes per vertex as (a, b) for a * id width + b: the validation's own arrays (pointer jumping:
#: reached, ids, ancestors, distances, their temporaries; the edge checks), then each search of a batch (its
#: parents as handed in, its (level, parent) row in the batch table, its found flag). The first is measured
#: (docs/DISTRIBUTED.md: a validation's peak with 1 and with 2 searches per batch).
_MODEL = ((5, 2), (3, 1))
#: device bytes kept free besides the model: the edge chunks and the kernels' counters
_MARGIN = 4 << 30


def batch_size(free: int, n: int, most: int = VALIDATE_MOST, held: int = 0) -> int:
    """Searches one batch validates when ``free`` device bytes are left for it on a graph of ``n`` vertices:
    at most ``most``, at least 1 (:data:`_MODEL`: K * each + the pointer jumping, per vertex; ``held``: device
    bytes each search of the batch holds besides, e.g. its parent slice kept on a GPU worker)."""
    vb = np.dtype(_width(n)).itemsize
    jump, each = (a * vb + b for a, b in _MODEL)
    return int(max(1, min(int(most), (int(free) - _MARGIN - jump * n) // max(1, each * n + int(held)))))


def keep_budget(free: int, n: int, k: int, held: int = 0, tables: int | None = None) -> int:
    """Device bytes the input rows may keep between batches (:class:`KeptRows`) when ``free`` bytes are left
    after the load and batches of ``k`` searches validate on a graph of ``n`` vertices (``held``: as for
    :func:`batch_size`; ``tables``: how many of the ``k`` this device validates itself, default all): what
    the batch model leaves, less three margins (the searches' own arrays and the pool's fragments)."""
    vb = np.dtype(_width(n)).itemsize
    jump, each = (a * vb + b for a, b in _MODEL)
    t = int(k) if tables is None else int(tables)
    return max(0, int(free) - 3 * _MARGIN - jump * n - t * each * n - int(k) * int(held))


def mesh_plan(free: int, n: int, K: int, held: int, W: int, rows_bytes: int) -> tuple:
    """How W GPU workers of an NCCL mesh validate batches of ``K`` searches when each has ``free`` device bytes
    left (``held``: each search's parent slice kept there; ``rows_bytes``: the whole input list on a device):
    ``("search", keep)`` where every worker keeps every row beside its ``ceil(K / W)`` tables and the batch has
    a search for each worker (each validates whole searches), else ``("edges", keep)`` (each its 1/W of the
    rows for every search); ``keep`` the bytes the rows may keep (:func:`keep_budget`)."""
    if K >= W > 1:
        whole = keep_budget(free, n, K, held, tables=-(-K // W))
        if whole >= rows_bytes:
            return "search", whole
    return "edges", keep_budget(free, n, K, held)


class KeptRows:
    """An (M, 2) edge source (``source[a:b]``: rows made on the device, regenerated or uploaded) whose chunks,
    once made, stay in ``store`` (keyed by ``key`` and the row range) while their bytes stay within
    ``budget``: a later batch reads them instead of making them again. The store is the caller's and lives as
    long as the graph it validates (a run, or a mesh of GPU workers)."""

    def __init__(self, xp, source, store: dict, budget: int, key=()):
        self.xp, self.source, self.store, self.budget, self.key = xp, source, store, int(budget), tuple(key)
        self.shape = tuple(source.shape)
        self.dtype = getattr(source, "dtype", None)

    def kept_bytes(self) -> int:
        return sum(int(v.nbytes) for v in self.store.values())

    def __getitem__(self, key):
        lo, hi, _ = key.indices(self.shape[0])
        k = (*self.key, lo, hi)
        got = self.store.get(k)
        if got is None:
            got = self.xp.asarray(self.source[lo:hi])
            if self.kept_bytes() + int(got.nbytes) <= self.budget:
                self.store[k] = got
        return got


def _is_cupy(a) -> bool:
    return type(a).__module__.startswith("cupy")


def _host(a) -> np.ndarray:
    """Any array (CuPy or NumPy) as a host int64 array."""
    return np.asarray(a.get() if _is_cupy(a) else a, dtype=np.int64).ravel()


def _fail(rule, message, vertices, count):
    return Failure(rule, message, _host(vertices[:MAX_EXAMPLES]), int(count))


def _first(xp, mask):
    """The smallest indices where ``mask`` holds, at most MAX_EXAMPLES."""
    return xp.flatnonzero(mask)[:MAX_EXAMPLES]


# ------------------------------------------------------------ vertex rules
def _check_prefix(xp, parent, root, n):
    """length, range, root: each stops validation (returns a Failure)."""
    if parent.shape[0] != n:
        return _fail("length", f"parent has {parent.shape[0]} entries, graph has {n} vertices", [], 1)
    bad = parent < -1
    if n - 1 < np.iinfo(parent.dtype).max:      # else every id of the width is below n (no out-of-range scalar)
        bad |= parent > n - 1
    nbad = int(bad.sum())
    if nbad:
        return _fail("range", f"{nbad} parent value(s) are neither -1 nor a vertex id in [0, {n})",
                     _first(xp, bad), nbad)
    if not 0 <= root < n:
        return _fail("root", f"root {root} is not a vertex id in [0, {n})", [], 1)
    pr = int(parent[root])
    if pr != root:
        return _fail("root", f"parent[root] is {pr}, not the root {root}", [root], 1)
    return None


_SWEEP_KERNEL = r"""
extern "C" __global__ void dbfs_levels_sweep(const VT* __restrict__ parent, VT* lev, long long n,
                                             unsigned long long* cnt) {
    // lev: -1 unreached, -3 reached with no level yet; cnt: (levels set, vertices still without one)
    unsigned long long set = 0, left = 0;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long v = (long long)blockIdx.x * blockDim.x + threadIdx.x; v < n; v += stride) {
        if (lev[v] != -3) continue;
        VT lp = lev[parent[v]];
        if (lp >= 0) { lev[v] = lp + 1; set++; } else left++;
    }
    for (int off = 16; off > 0; off >>= 1) {
        set += __shfl_down_sync(0xffffffffu, set, off);
        left += __shfl_down_sync(0xffffffffu, left, off);
    }
    if ((threadIdx.x & 31) == 0) {
        if (set) atomicAdd(&cnt[0], set);
        if (left) atomicAdd(&cnt[1], left);
    }
}
"""
#: sweeps :func:`_levels_by_sweeps` makes before it leaves a deep tree to pointer jumping
SWEEPS_MOST = 64


def _levels_by_sweeps(parent, root, n):
    """(CuPy) the levels of a search whose every reached vertex's chain reaches the root, by sweeps over the
    vertices (``lev[v] = lev[parent[v]] + 1`` where the parent's is known, in place, so a sweep can settle
    several levels); None where a chain is broken or the tree is deeper than :data:`SWEEPS_MOST` sweeps
    settle (pointer jumping then, which also names the failures)."""
    import cupy as cp  # deferred: cupy

    vt = "int" if parent.dtype == cp.int32 else "long long"
    fn = _KERNELS.get(("sweep", vt))
    if fn is None:
        fn = _KERNELS[("sweep", vt)] = cp.RawKernel(f"typedef {vt} VT;\n" + _SWEEP_KERNEL, "dbfs_levels_sweep")
    lev = cp.where(parent >= 0, parent.dtype.type(-3), parent.dtype.type(-1))
    lev[root] = 0
    cnt = cp.zeros(2, cp.uint64)
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    grid = (max(1, min(-(-n // 256), 32 * sms)),)
    for _ in range(SWEEPS_MOST):
        cnt.fill(0)
        fn(grid, (256,), (parent, lev, np.int64(n), cnt))
        got, left = (int(x) for x in cnt.get())
        if not left:
            return lev
        if not got:
            return None             # a broken chain: nothing more settles
    return None


def _levels(xp, parent, root, n):
    """Levels by sweeps where every chain reaches the root (CuPy), else pointer jumping. Returns (levels with
    -1/-2, chain failures)."""
    if xp is not np:
        lev = _levels_by_sweeps(parent, root, n)
        if lev is not None:
            return lev, []
    reached = parent >= 0
    ids = xp.arange(n, dtype=parent.dtype)
    anc = xp.where(reached, parent, ids)          # root and unreached point to themselves
    dist = reached.astype(parent.dtype)
    dist[root] = 0
    for _ in range(max(1, n.bit_length())):       # 2**rounds > n
        a2 = anc[anc]
        if bool((a2 == anc).all()):
            break
        dist = dist + dist[anc]
        anc = a2
    to_root = anc == root
    del ids, a2
    minus = parent.dtype.type
    lev = xp.where(reached, xp.where(to_root, dist, minus(-2)), minus(-1))
    failures = []
    # broken chains whose end is reached sit on a cycle after >= n steps
    ends = anc[~to_root & reached & (parent[anc] >= 0)]
    on = xp.zeros(n, dtype=bool)
    on[ends] = True
    ncyc = int(on.sum())
    if ncyc:
        failures.append(_fail("cycle", f"{ncyc} vertex(es) lie on a parent cycle that misses the root",
                              _first(xp, on), ncyc))
    pun = reached & (parent[xp.where(reached, parent, 0)] < 0)
    npun = int(pun.sum())
    if npun:
        failures.append(_fail("parent-unreached",
                              f"{npun} reached vertex(es) have an unreached parent (-1)",
                              _first(xp, pun), npun))
    return lev, failures


# -------------------------------------------------------------- edge rules
def _examples(xp, u, v, mask, have):
    """Endpoints (u0, v0, u1, v1, ...) of the first offending tuples, topping up ``have``."""
    need = MAX_EXAMPLES - have.size
    if need <= 0:
        return have
    k = xp.flatnonzero(mask)[:(need + 1) // 2]
    pairs = _host(xp.stack([u[k], v[k]], axis=1))
    return np.concatenate([have, pairs])[:MAX_EXAMPLES]


_BATCH_KERNEL = r"""
// A group of G lanes (G: the power of two >= K, at most a warp) takes one tuple; lane s of the group checks
// searches s, s + G, ... so the group reads a row's K (level, parent) pairs side by side: one coalesced read
// of each endpoint's row for the whole batch.
#define J ((K + G - 1) / G)
extern "C" __global__ void dbfs_validate_batch(const ET* __restrict__ e, long long m, long long n, long long w,
                                               const VT* __restrict__ lp, bool* found,
                                               unsigned long long* cnt) {
    // lp: n rows of w (level, parent) pairs, the first K used; found: K rows of n flags;
    // cnt: K rows of (bad, span, diff, nedge)
    const int lane = threadIdx.x & 31, s0 = lane & (G - 1);
    unsigned long long bad = 0, span[J], diff[J], ne[J];
#pragma unroll
    for (int j = 0; j < J; ++j) { span[j] = 0; diff[j] = 0; ne[j] = 0; }
    long long groups = (long long)gridDim.x * (blockDim.x / G);
    for (long long i = (long long)blockIdx.x * (blockDim.x / G) + threadIdx.x / G; i < m; i += groups) {
        long long u = (long long)e[2 * i], v = (long long)e[2 * i + 1];
        if (u < 0 || v < 0 || u >= n || v >= n) { bad += (s0 == 0); continue; }
        const VT* ru = lp + 2 * w * u;
        const VT* rv = lp + 2 * w * v;
#pragma unroll
        for (int j = 0; j < J; ++j) {
            int s = s0 + j * G;
            if (s >= K) break;
            long long lu = ru[2 * s], lv = rv[2 * s];
            if (lu == -2 || lv == -2) continue;
            bool a = lu >= 0, b = lv >= 0;
            if (a != b) { span[j]++; continue; }
            if (!a) continue;
            long long d = lu - lv;
            if (d > 1 || d < -1) diff[j]++;
            if (u != v) {
                ne[j]++;
                if ((long long)rv[2 * s + 1] == u) found[s * n + v] = true;
                if ((long long)ru[2 * s + 1] == v) found[s * n + u] = true;
            }
        }
    }
    // sums over the lanes holding the same searches (lane ^ G, ^ 2G, ...): lanes 0..G-1 end with the warp's
    for (int off = G; off < 32; off <<= 1) bad += __shfl_xor_sync(0xffffffffu, bad, off);
    if (lane == 0 && bad)
        for (int s = 0; s < K; ++s) atomicAdd(&cnt[4 * s], bad);
#pragma unroll
    for (int j = 0; j < J; ++j) {
        unsigned long long c1 = span[j], c2 = diff[j], c3 = ne[j];
        for (int off = G; off < 32; off <<= 1) {
            c1 += __shfl_xor_sync(0xffffffffu, c1, off);
            c2 += __shfl_xor_sync(0xffffffffu, c2, off);
            c3 += __shfl_xor_sync(0xffffffffu, c3, off);
        }
        int s = s0 + j * G;
        if (lane < G && s < K) {
            if (c1) atomicAdd(&cnt[4 * s + 1], c1);
            if (c2) atomicAdd(&cnt[4 * s + 2], c2);
            if (c3) atomicAdd(&cnt[4 * s + 3], c3);
        }
    }
}
"""
_EDGE_TYPES = {np.dtype(np.uint32): "unsigned int", np.dtype(np.int64): "long long", np.dtype(np.int32): "int",
               np.dtype(np.uint64): "unsigned long long"}


def _batch_counts(chunk, batch) -> list | None:
    """(bad, span, diff, nedge) of every search of ``batch`` over a CuPy (k, 2) chunk in one kernel launch,
    setting the tree-edge flags as the array path does (one pass, no temporaries); None for an edge type
    the kernel does not take."""
    import cupy as cp  # deferred: cupy

    et = _EDGE_TYPES.get(np.dtype(chunk.dtype))
    if et is None:
        return None
    vt = "int" if batch.table.dtype == cp.int32 else "long long"
    K = batch.k
    G = min(32, 1 << (K - 1).bit_length())      # lanes a tuple: the batch's searches side by side
    fn = _KERNELS.get((et, vt, K))
    if fn is None:
        src = f"typedef {et} ET;\ntypedef {vt} VT;\n#define K {K}\n#define G {G}\n" + _BATCH_KERNEL
        fn = _KERNELS[(et, vt, K)] = cp.RawKernel(src, "dbfs_validate_batch")
    chunk = cp.ascontiguousarray(chunk)
    k = int(chunk.shape[0])
    cnt = cp.zeros(4 * K, cp.uint64)
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    fn((max(1, min(-(-k * G // 256), 32 * sms)),), (256,),
       (chunk, np.int64(k), np.int64(batch.n), np.int64(batch.w), batch.table, batch.found, cnt))
    return [int(x) for x in cnt.get()]


class _Batch:
    """The edge rules of up to ``K`` searches over one read of the edges.

    ``table`` is (n, K, 2) of the id width: a vertex's (level, parent) for every search of the batch side by
    side, so an edge costs two random row reads for the whole batch (not four reads a search); ``found`` is
    (K, n) tree-edge flags; per search the counts, examples and nedge."""

    def __init__(self, xp, n: int, K: int, dtype):
        self.xp, self.n, self.w, self.k = xp, int(n), max(1, int(K)), 0
        self.table = xp.empty((self.n, self.w, 2), dtype)
        self.found = xp.zeros((self.w, self.n), dtype=bool)
        self.totals, self.examples, self.nedge = [], [], []

    def add(self, parent, lev) -> int:
        """Fold a search's parents and levels in; returns its slot (the caller may drop both arrays)."""
        s, self.k = self.k, self.k + 1
        self.table[:, s, 0] = lev
        self.table[:, s, 1] = parent
        self.totals.append([0, 0, 0])
        self.examples.append([np.empty(0, np.int64) for _ in range(3)])
        self.nedge.append(0)
        return s

    def lev(self, s: int):
        return self.table[:, s, 0]

    def parent(self, s: int):
        return self.table[:, s, 1]

    def chunk(self, chunk):
        """Every search's edge rules over one chunk: the fused kernel on CuPy, the array ops on NumPy and for a
        search whose counts show a failure (redone for its examples, so they are the array path's)."""
        redo = range(self.k)
        if self.xp is not np and self.k:
            c = _batch_counts(chunk, self)
            if c is not None:
                redo = [s for s in range(self.k) if c[4 * s] or c[4 * s + 1] or c[4 * s + 2]]
                for s in range(self.k):
                    if s not in redo:
                        self.nedge[s] += c[4 * s + 3]
        if redo:
            xp, n = self.xp, self.n
            u = chunk[:, 0].astype(np.int64)
            v = chunk[:, 1].astype(np.int64)
            bad = (u < 0) | (v < 0) | (u >= n) | (v >= n)
            uu, vv = xp.where(bad, 0, u), xp.where(bad, 0, v)
            for s in redo:
                self._arrays(s, u, v, uu, vv, bad)

    def _arrays(self, s, u, v, uu, vv, bad):
        xp, lev, parent, found = self.xp, self.lev(s), self.parent(s), self.found[s]
        lu = lev[uu]
        lv = lev[vv]
        ok = ~bad & (lu != -2) & (lv != -2)
        both = ok & (lu >= 0) & (lv >= 0)
        span = ok & ((lu >= 0) != (lv >= 0))
        diff = both & (xp.abs(lu - lv) > 1)
        tree = both & (uu != vv)
        self.nedge[s] += int(tree.sum())
        found[vv[tree & (parent[vv] == uu)]] = True
        found[uu[tree & (parent[uu] == vv)]] = True
        for kind, mask in enumerate((bad, span, diff)):
            c = int(mask.sum())
            if c:
                self.totals[s][kind] += c
                self.examples[s][kind] = _examples(xp, u, v, mask, self.examples[s][kind])

    def failures(self, s: int) -> list:
        return edge_failures(self.totals[s], self.examples[s], self.n)


def _fold(xp, batch, root, parent, n):
    """One search into ``batch``: its stopping Failure (length, range, root), or ``(slot, chain failures)``."""
    f = parent if isinstance(parent, Failure) else _check_prefix(xp, parent, int(root), n)
    if f:
        return f
    parent = parent.astype(_width(n), copy=False)
    lev, chain = _levels(xp, parent, int(root), n)
    return batch.add(parent, lev), chain


def _sweep(xp, edges, batch, chunk_edges):
    """Read the edge list once, chunk by chunk, and feed every chunk to the batch's checks."""
    m = int(edges.shape[0])
    step = max(1, int(chunk_edges))
    for s in range(0, m, step):
        chunk = edges[s:min(s + step, m)]
        if _is_cupy(chunk) and xp is np:
            chunk = chunk.get()
        elif not _is_cupy(chunk):
            chunk = np.asarray(chunk)
        chunk = xp.asarray(chunk)
        if chunk.ndim != 2 or chunk.shape[1] != 2:
            raise ValueError(f"edges must have shape (M, 2); got a chunk of shape {chunk.shape}")
        batch.chunk(chunk)
        del chunk


# ----------------------------------------------------------------- driver
def _width(n: int):
    """The id width of the per-vertex arrays: int32 while ids fit (``N <= 2**31``: ids 0 .. 2**31 - 1, levels
    and the sentinels -1, -2, -3 too; half the memory, so a graph that fills most of the device still
    validates beside its CSR), else int64 (:func:`dbfs.graph.id_dtype`, the one owner of the rule)."""
    return id_dtype(n).type


def _pick_xp(xp, parent, edges):
    if xp is not None:
        return xp
    if _is_cupy(parent) or _is_cupy(edges):
        import cupy  # deferred: cupy

        return cupy
    return np


def validate_gpu(edges, root, parent, n_vertices=None, xp=None,
                 chunk_edges=DEVICE_EDGE_ROWS, levels: bool = True) -> ValidationResult:
    """Check one search on ``xp`` (rules and method in the module docstring).

    Parameters
    ----------
    edges : array-like
        int (M, 2) input tuples: CuPy, NumPy, or anything sliceable by rows.
    root : int
        The search key.
    parent : array-like
        int parent per vertex (CuPy or NumPy), ``parent[root] == root``, -1 unreached.
    n_vertices : int, optional
        Number of vertices; defaults to ``len(parent)``.
    xp : module, optional
        ``cupy`` or ``numpy``; None picks CuPy when ``parent`` or ``edges`` is a CuPy array.
    chunk_edges : int
        Input rows per chunk.
    levels : bool
        False leaves ``levels`` None (no N-sized copy to the host: what a
        benchmark run validating every search wants).

    Returns
    -------
    ValidationResult
        Equal to :func:`dbfs.validate.validate`'s on the same input.
    """
    return validate_many_gpu(edges, [(root, parent)], n_vertices, xp, chunk_edges, levels)[0]


def validate_many_gpu(edges, searches, n_vertices=None, xp=None, chunk_edges=DEVICE_EDGE_ROWS,
                      levels: bool = True) -> list:
    """:func:`validate_gpu` of several searches over ONE read of the edge list.

    ``searches`` is a list of ``(root, parent)``; each search's levels are
    computed first (its vertex rules), then every edge chunk is read once and checked
    against every search (:class:`_Batch`): what a regenerated (virtual) edge
    list costs once per batch instead of once per search. ``n_vertices``
    None: the first parent's length. Memory: the batch's (level, parent)
    table (two id widths) and a ``found`` flag per vertex per search. Returns
    one :class:`ValidationResult` per search, in order.
    """
    if not searches:
        return []
    xp = _pick_xp(xp, searches[0][1], edges)
    n = int(n_vertices) if n_vertices is not None else int(np.shape(searches[0][1])[0])

    def pairs():
        for root, parent in searches:
            if _is_cupy(parent) and xp is np:
                parent = parent.get()
            yield root, xp.asarray(parent)      # in the given width: a value past int32 is a range failure

    return validate_batch(xp, edges, n, len(searches), pairs(), chunk_edges, levels)


def validate_batch(xp, edges, n: int, K: int, pairs, chunk_edges=DEVICE_EDGE_ROWS, levels: bool = False) -> list:
    """:func:`validate_many_gpu`'s work on ``xp`` arrays: the ``K`` searches ``pairs`` yields as ``(root,
    parent)`` (a parent array of ``xp``, or the Failure that stops its search; each is dropped once folded
    into the batch table, so a generator that hands them over holds one at a time), then one read of
    ``edges`` for them all; one ValidationResult per search, in order."""
    batch = _Batch(xp, n, K, _width(n))
    out = [_fold(xp, batch, root, parent, n) for root, parent in pairs]
    if batch.k:
        _sweep(xp, edges, batch, chunk_edges)
    results = []
    for item in out:
        if isinstance(item, Failure):
            results.append(ValidationResult(False, 0, [item]))
            continue
        s, failures = item
        failures += batch.failures(s)
        missing = (batch.lev(s) > 0) & ~batch.found[s]
        cnt = int(missing.sum())
        if cnt:
            failures.append(_fail("tree-edge",
                                  f"{cnt} reached vertex(es) have a parent that is not an input neighbour",
                                  _first(xp, missing), cnt))
        failures.sort(key=lambda x: RULES.index(x.rule))
        results.append(ValidationResult(not failures, int(batch.nedge[s]), failures,
                                        _host(batch.lev(s)) if levels else None))
    return results

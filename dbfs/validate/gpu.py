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
- edges: on CuPy one fused kernel per chunk counts the four edge quantities
  and sets the tree-edge flags; only a chunk with a failure is redone with
  the array ops below, which also collect its examples (so examples and
  counts are those of the array path). On NumPy, and for that redo: per
  chunk, masks give edge-range, edge-span, level-diff and nedge;
  tree edges are a scatter of True flags, ``found[v] = True`` where
  ``parent[v] == u`` (and symmetrically), race-free on a GPU; every vertex
  of level > 0 must be found.
"""
from __future__ import annotations

import numpy as np

from dbfs.validate.cpu import _EDGE_RULES, MAX_EXAMPLES, RULES, Failure, ValidationResult

__all__ = ["validate_gpu", "validate_many_gpu", "DEVICE_EDGE_ROWS"]

#: input edge rows one device pass of the validation reads at a time (validate.gpus too)
DEVICE_EDGE_ROWS = 1 << 26

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
    bad = (parent < -1) | (parent >= n)
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


def _levels(xp, parent, root, n):
    """Pointer jumping. Returns (levels with -1/-2, chain failures)."""
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


_EDGE_KERNEL = r"""
extern "C" __global__ void dbfs_validate_edges(const ET* e, long long k, long long n, const VT* lev,
                                               const VT* parent, bool* found, unsigned long long* cnt) {
    unsigned long long c_bad = 0, c_span = 0, c_diff = 0, c_nedge = 0;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < k; i += stride) {
        long long u = (long long)e[2 * i], v = (long long)e[2 * i + 1];
        if (u < 0 || v < 0 || u >= n || v >= n) { c_bad++; continue; }
        long long lu = lev[u], lv = lev[v];
        if (lu == -2 || lv == -2) continue;
        bool ru = lu >= 0, rv = lv >= 0;
        if (ru != rv) { c_span++; continue; }
        if (!ru) continue;
        long long d = lu - lv;
        if (d > 1 || d < -1) c_diff++;
        if (u != v) {
            c_nedge++;
            if (parent[v] == u) found[v] = true;
            if (parent[u] == v) found[u] = true;
        }
    }
    for (int off = 16; off > 0; off >>= 1) {
        c_bad += __shfl_down_sync(0xffffffffu, c_bad, off);
        c_span += __shfl_down_sync(0xffffffffu, c_span, off);
        c_diff += __shfl_down_sync(0xffffffffu, c_diff, off);
        c_nedge += __shfl_down_sync(0xffffffffu, c_nedge, off);
    }
    if ((threadIdx.x & 31) == 0) {
        atomicAdd(&cnt[0], c_bad); atomicAdd(&cnt[1], c_span);
        atomicAdd(&cnt[2], c_diff); atomicAdd(&cnt[3], c_nedge);
    }
}
"""
_KERNELS: dict = {}


def _fused_counts(chunk, parent, lev, n, found):
    """(bad, span, diff, nedge) of a CuPy (k, 2) chunk in one kernel launch,
    setting ``found`` as the array path does (one pass, no temporaries)."""
    import cupy as cp  # deferred: cupy

    et = {np.dtype(np.uint32): "unsigned int", np.dtype(np.int64): "long long",
          np.dtype(np.int32): "int", np.dtype(np.uint64): "unsigned long long"}.get(np.dtype(chunk.dtype))
    if et is None:
        return None
    vt = "int" if lev.dtype == cp.int32 else "long long"
    fn = _KERNELS.get((et, vt))
    if fn is None:
        fn = _KERNELS[(et, vt)] = cp.RawKernel(_EDGE_KERNEL.replace("ET", et).replace("VT", vt),
                                               "dbfs_validate_edges")
    chunk = cp.ascontiguousarray(chunk)
    k = int(chunk.shape[0])
    cnt = cp.zeros(4, cp.uint64)
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    fn((max(1, min(-(-k // 256), 32 * sms)),), (256,),
       (chunk, np.int64(k), np.int64(n), lev, parent, found, cnt))
    return [int(x) for x in cnt.get()]


class _EdgeCheck:
    """The edge rules of one search, accumulated chunk by chunk (``found``, counts, examples, nedge)."""

    def __init__(self, xp, parent, lev, n):
        self.parent, self.lev, self.n = parent, lev, n
        self.found = xp.zeros(n, dtype=bool)
        self.totals = [0, 0, 0]
        self.examples = [np.empty(0, np.int64) for _ in range(3)]
        self.nedge = 0

    def chunk(self, xp, chunk):
        parent, lev, n = self.parent, self.lev, self.n
        if xp is not np:   # fast path: counts only; a chunk with a failure is redone below for its examples
            c = _fused_counts(chunk, parent, lev, n, self.found)
            if c is not None and c[0] == c[1] == c[2] == 0:
                self.nedge += c[3]
                return
        u = chunk[:, 0].astype(np.int64)
        v = chunk[:, 1].astype(np.int64)
        bad = (u < 0) | (v < 0) | (u >= n) | (v >= n)
        uu = xp.where(bad, 0, u)
        vv = xp.where(bad, 0, v)
        lu = lev[uu]
        lv = lev[vv]
        ok = ~bad & (lu != -2) & (lv != -2)
        both = ok & (lu >= 0) & (lv >= 0)
        span = ok & ((lu >= 0) != (lv >= 0))
        diff = both & (xp.abs(lu - lv) > 1)
        tree = both & (uu != vv)
        self.nedge += int(tree.sum())
        self.found[vv[tree & (parent[vv] == uu)]] = True
        self.found[uu[tree & (parent[uu] == vv)]] = True
        for kind, mask in enumerate((bad, span, diff)):
            c = int(mask.sum())
            if c:
                self.totals[kind] += c
                self.examples[kind] = _examples(xp, u, v, mask, self.examples[kind])

    def failures(self):
        return [_fail(rule, f"{self.totals[kind]} " + text.format(n=self.n), self.examples[kind], self.totals[kind])
                for kind, (rule, text) in enumerate(_EDGE_RULES) if self.totals[kind]]


def _sweep(xp, edges, checks, chunk_edges):
    """Read the edge list once, chunk by chunk, and feed every chunk to every check."""
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
        for c in checks:
            c.chunk(xp, chunk)
        del chunk


# ----------------------------------------------------------------- driver
def _width(n: int):
    """The id width of the per-vertex arrays: int32 while ids fit (half the memory, so a graph
    that fills most of the device still validates beside its CSR), else int64."""
    return np.int32 if n < 2**31 else np.int64


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
    computed first (its vertex rules), then every edge chunk is read once and
    checked against every search: what a regenerated (virtual) edge list
    costs once per batch instead of once per search. Memory: a level array
    (the id width) and a ``found`` flag per vertex per search. Returns one
    :class:`ValidationResult` per search, in order.
    """
    if not searches:
        return []
    xp = _pick_xp(xp, searches[0][1], edges)
    out, checks = [], []
    for root, parent in searches:
        if _is_cupy(parent) and xp is np:
            parent = parent.get()
        parent = xp.asarray(parent)
        n = int(n_vertices) if n_vertices is not None else int(parent.shape[0])
        root = int(root)
        f = _check_prefix(xp, parent, root, n)      # in the given width: a value past int32 is a range failure
        if f:
            out.append(ValidationResult(False, 0, [f]))
            continue
        parent = parent.astype(_width(n), copy=False)
        lev, failures = _levels(xp, parent, root, n)
        c = _EdgeCheck(xp, parent, lev, n)
        checks.append(c)
        out.append((c, failures))
    _sweep(xp, edges, checks, chunk_edges)
    results = []
    for item in out:
        if isinstance(item, ValidationResult):
            results.append(item)
            continue
        c, failures = item
        failures += c.failures()
        missing = (c.lev > 0) & ~c.found
        cnt = int(missing.sum())
        if cnt:
            failures.append(_fail("tree-edge",
                                  f"{cnt} reached vertex(es) have a parent that is not an input neighbour",
                                  _first(xp, missing), cnt))
        failures.sort(key=lambda x: RULES.index(x.rule))
        results.append(ValidationResult(not failures, int(c.nedge), failures, _host(c.lev) if levels else None))
        c.found = c.lev = c.parent = None
    return results

"""dbfs.validate.gpu gives exactly the CPU validator's result (dbfs.validate).

Every test compares the whole ValidationResult with ``validate``: ok, nedge,
failed rules, count, message and example vertices per failure, and levels.
Here they run on NumPy (``xp=numpy``); the ``gpu`` test repeats the golden
graphs and the corruptions with CuPy arrays.
"""
import sys

import numpy as np
import pytest

from dbfs.bfs import bfs
from dbfs.bfs.reference import bfs_levels
from dbfs.kernel1 import build_csr
from dbfs.validate import MAX_EXAMPLES, ValidationResult, validate
from dbfs.validate.gpu import _pick_xp, validate_gpu, validate_many_gpu

N10 = 1 << 10
N16 = 1 << 16


def assert_same(got, want):
    assert isinstance(got, ValidationResult)
    assert (got.ok, got.nedge, got.rules_failed) == (want.ok, want.nedge, want.rules_failed), \
        f"gpu: {got.summary()} | cpu: {want.summary()}"
    for g, w in zip(got.failures, want.failures):
        assert (g.rule, g.count, g.message) == (w.rule, w.count, w.message)
        assert isinstance(g.vertices, np.ndarray) and g.vertices.dtype == np.int64
        assert len(g.vertices) <= MAX_EXAMPLES
        np.testing.assert_array_equal(g.vertices, w.vertices, err_msg=g.rule)
    if want.levels is None:
        assert got.levels is None
    else:
        assert isinstance(got.levels, np.ndarray) and got.levels.dtype == np.int64
        np.testing.assert_array_equal(got.levels, want.levels)


def compare(edges, root, parent, n_vertices=None, **kw):
    want = validate(edges, root, parent, n_vertices)
    got = validate_gpu(edges, root, parent, n_vertices, xp=np, **kw)
    assert_same(got, want)
    return got


# --------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def case10(golden10):
    edges = golden10["edges"]
    root = golden10["roots"][0]
    g = build_csr(edges, n_vertices=N10)
    parent = bfs(g, root, algorithm="do").parent
    lev = bfs_levels(edges, root, N10)
    return edges, root, parent, lev


@pytest.fixture(scope="module")
def s16(golden16):
    from dbfs.generate.graph500 import kronecker_edges

    edges = kronecker_edges(16)
    assert edges.shape == (golden16["n_edges"], 2)
    return edges, build_csr(edges, n_vertices=N16)


def _children(parent):
    kids = np.zeros(parent.shape[0], np.int64)
    np.add.at(kids, parent[parent >= 0], 1)
    return kids


def _leaves(parent, lev):
    return np.flatnonzero((lev >= 1) & (_children(parent) == 0))


def _path_to(parent, v):
    path = [int(v)]
    while parent[path[-1]] != path[-1]:
        path.append(int(parent[path[-1]]))
    return path[::-1]          # root ... v


# ------------------------------------------------ corruptions (scale 10)
def c_cycle(e, r, p, lev):
    x, y = next((int(u), int(v)) for u, v in e if u != v and lev[u] == lev[v] >= 2)
    p[x], p[y] = y, x


def c_skipped_level(e, r, p, lev):
    v, x = next((int(u), int(w)) for u, w in e if u != w and lev[u] == lev[w] >= 1)
    p[v] = x


def c_not_a_neighbour(e, r, p, lev):
    pairs = set(map(tuple, e.tolist())) | set(map(tuple, e[:, ::-1].tolist()))
    v, y = next((int(v), int(y)) for v in np.flatnonzero(lev == 2) for y in np.flatnonzero(lev == 1)
                if (v, y) not in pairs)
    p[v] = y


def c_parent_unreached(e, r, p, lev):
    p[_leaves(p, lev)[0]] = np.flatnonzero(lev < 0)[0]


def c_unreached_in_component(e, r, p, lev):
    p[_leaves(p, lev)[0]] = -1


def c_many_unreached(e, r, p, lev):
    p[_leaves(p, lev)[:40]] = -1


def c_inner_unreached(e, r, p, lev):
    # an inner vertex unreached: its whole subtree gets -2 (status 2 / 3)
    p[np.flatnonzero((lev == 2) & (_children(p) > 0))[:3]] = -1


def c_outside_component(e, r, p, lev):
    p[np.flatnonzero(lev < 0)[:2]] = r


def c_self_parent(e, r, p, lev):
    p[np.flatnonzero(lev == 2)[0]] = np.flatnonzero(lev == 2)[0]


def c_self_parent_inner(e, r, p, lev):
    v = np.flatnonzero((lev == 1) & (_children(p) > 0))[0]
    p[v] = v


def c_long_cycle(e, r, p, lev):
    # close the deepest root path into a cycle: its subtree hangs off it
    deep = int(np.argmax(lev))
    path = _path_to(p, deep)
    p[path[1]] = deep


def c_combined(e, r, p, lev):
    c_cycle(e, r, p, lev)
    c_unreached_in_component(e, r, p, lev)
    c_not_a_neighbour(e, r, p, lev)
    p[_leaves(p, lev)[5]] = np.flatnonzero(lev < 0)[0]


def c_range(value):
    def f(e, r, p, lev):
        p[np.flatnonzero(lev == 2)[:3]] = value
    return f


CORRUPTIONS = {f.__name__[2:]: f for f in (
    c_cycle, c_skipped_level, c_not_a_neighbour, c_parent_unreached, c_unreached_in_component,
    c_many_unreached, c_inner_unreached, c_outside_component, c_self_parent, c_self_parent_inner,
    c_long_cycle, c_combined)}
CORRUPTIONS.update({f"range-{v}": c_range(v) for v in (N10, 10 ** 12, -2)})
EXPECTED = {"cycle": ["cycle"], "skipped_level": ["level-diff"], "not_a_neighbour": ["tree-edge"],
            "parent_unreached": ["parent-unreached"], "unreached_in_component": ["edge-span"],
            "self_parent": ["cycle"], "range-1024": ["range"], "range--2": ["range"]}


# ------------------------------------------------------------------ valid
def test_golden_scale10_all_roots(golden10):
    edges = golden10["edges"]
    g = build_csr(edges, n_vertices=N10)
    for root, nedge in zip(golden10["roots"], golden10["nedge_v3"]):
        parent = bfs(g, root, algorithm="do").parent
        res = compare(edges, root, parent)
        assert res.ok and res.nedge == nedge
        np.testing.assert_array_equal(res.levels, bfs_levels(edges, root, N10))


def test_golden_scale16(golden16, s16):
    edges, g = s16
    for root, nedge in list(zip(golden16["roots"], golden16["nedge_v3"]))[:6]:
        parent = bfs(g, root, algorithm="do").parent
        res = compare(edges, root, parent)
        assert res.ok and res.nedge == nedge


def test_uint32_edges_and_parent(case10):
    edges, root, parent, lev = case10
    res = compare(edges.astype(np.uint32), root, parent)
    assert res.ok
    assert_same(validate_gpu(edges, root, parent.astype(np.int32)), res)


def test_many_searches_in_one_read_equal_one_at_a_time(case10, golden10):
    """validate_many_gpu: each search's result is the CPU validator's, good and corrupted searches mixed,
    the edges read once (an edge list that counts its reads)."""
    edges, root, parent, lev = case10
    searches = [(root, parent)]
    for name in ("cycle", "range-1024", "skipped_level", "not_a_neighbour", "combined"):
        bad = parent.copy()
        CORRUPTIONS[name](edges, root, bad, lev)
        searches.append((root, bad))
    for r in golden10["roots"][:3]:
        searches.append((r, bfs(build_csr(golden10["edges"], n_vertices=N10), r).parent))

    for e, group in ((edges, searches[:-3]), (golden10["edges"], searches[-3:])):
        src = _Counted(e)
        got = validate_many_gpu(src, group, N10, xp=np, chunk_edges=3000)
        assert src.reads == -(-e.shape[0] // 3000), "one read of every chunk for the whole batch"
        assert len(got) == len(group) >= 2
        for (r, p), g in zip(group, got):
            assert_same(g, validate(e, r, p, N10))


class _Counted:
    """An edge list that counts the row chunks read from it."""

    def __init__(self, e):
        self.e, self.shape, self.reads = e, e.shape, 0

    def __getitem__(self, key):
        self.reads += 1
        return self.e[key]


def _kept_batches(xp, e, group, budget):
    """Two batches over one KeptRows store: (the chunks read from the source by each, the results)."""
    from dbfs.validate.gpu import KeptRows

    src, store = _Counted(e), {}
    reads, got = [], []
    for half in (group[:len(group) // 2], group[len(group) // 2:]):
        before = src.reads
        got += validate_many_gpu(KeptRows(xp, src, store, budget, ("ds",)), half, N10, xp=xp, chunk_edges=3000)
        reads.append(src.reads - before)
    return reads, got, store


@pytest.mark.parametrize("kept_chunks", [0, 3, 99])
def test_kept_rows_are_read_once_and_change_nothing(case10, golden10, kept_chunks):
    """KeptRows: a second batch reads from the source only the chunks the budget did not keep (none, some or
    all kept), and every result is still the CPU validator's."""
    e, group = _mixed_batches(case10, golden10)[0]
    nchunks = -(-e.shape[0] // 3000)
    reads, got, store = _kept_batches(np, e, group, kept_chunks * 3000 * 2 * e.itemsize)
    assert len(store) == min(kept_chunks, nchunks)
    assert sum(int(v.nbytes) for v in store.values()) <= kept_chunks * 3000 * 2 * e.itemsize
    assert reads == [nchunks, nchunks - len(store)]
    for (r, p), g in zip(group, got):
        assert_same(g, validate(e, r, p, N10))


# ------------------------------------------------------------ corruptions
@pytest.mark.parametrize("name", list(CORRUPTIONS))
def test_corruption_matches_cpu(case10, name):
    edges, root, parent, lev = case10
    bad = parent.copy()
    CORRUPTIONS[name](edges, root, bad, lev)
    res = compare(edges, root, bad)
    assert not res.ok
    if name in EXPECTED:
        assert res.rules_failed == EXPECTED[name]


def test_long_cycle_counts_only_cycle_vertices(case10):
    edges, root, parent, lev = case10
    bad = parent.copy()
    c_long_cycle(edges, root, bad, lev)
    res = compare(edges, root, bad)
    f = res.failures[0]
    assert f.rule == "cycle" and f.count == int(lev.max())
    assert (res.levels == -2).sum() > f.count       # the subtree is broken but not on the cycle


def test_root_and_length(case10):
    edges, root, parent, lev = case10
    bad = parent.copy()
    bad[root] = next(int(v) for u, v in edges if u == root and v != root)
    assert compare(edges, root, bad).rules_failed == ["root"]
    bad[root] = -1
    assert compare(edges, root, bad).rules_failed == ["root"]
    for r in (N10, -1):
        assert compare(edges, r, parent).rules_failed == ["root"]
    assert compare(edges, root, parent, n_vertices=N10 + 1).rules_failed == ["length"]
    assert compare(edges, root, parent[:-1], n_vertices=N10).rules_failed == ["length"]


def test_edge_endpoint_out_of_range(case10):
    edges, root, parent, lev = case10
    extra = np.array([[0, N10], [-1, 3], [N10 + 5, N10 + 5]] * 4)
    res = compare(np.concatenate([edges[:100], extra, edges[100:]]), root, parent)
    assert res.rules_failed == ["edge-range"] and res.failures[0].count == 12


def test_random_mutations_match_cpu(case10):
    edges, root, parent, lev = case10
    rng = np.random.default_rng(5)
    seen = set()
    for k in (1, 2, 3, 5, 20, 200):
        for _ in range(6):
            bad = parent.copy()
            idx = rng.choice(np.flatnonzero(np.arange(N10) != root), k, replace=False)
            bad[idx] = rng.integers(-1, N10, k)
            seen.update(compare(edges, root, bad).rules_failed)
    assert {"cycle", "parent-unreached", "edge-span", "level-diff", "tree-edge"} <= seen


# ------------------------------------------------------------ hand graphs
def test_isolated_vertices_and_self_loops():
    edges = np.array([[0, 1], [1, 0], [0, 1], [1, 1], [1, 2], [3, 4], [2, 2], [4, 4], [6, 6]])
    parent = np.array([0, 0, 1, -1, -1, -1, -1, -1])   # 5, 7 isolated; 6 only a self-loop
    res = compare(edges, 0, parent)
    assert res.ok and res.nedge == 4
    res = compare(edges, 6, np.array([-1, -1, -1, -1, -1, -1, 6, -1]))
    assert res.ok and res.nedge == 0
    res = compare(edges, 5, np.array([-1, -1, -1, -1, -1, 5, -1, -1]))
    assert res.ok and res.nedge == 0
    # a self-loop is not a tree edge; an isolated vertex hung on the root is found out
    assert compare(edges, 0, np.array([0, 0, 2, -1, -1, -1, -1, -1])).rules_failed == ["cycle"]
    assert compare(edges, 0, np.array([0, 0, 1, -1, -1, 0, -1, -1])).rules_failed == ["tree-edge"]


def test_reached_vertex_outside_root_component():
    edges = np.array([[0, 1], [1, 2], [2, 3], [5, 6], [6, 7]])
    parent = np.array([0, 0, 1, 2, -1, -1, -1, -1])
    assert compare(edges, 0, parent).ok
    bad = parent.copy()
    bad[5] = 0
    assert compare(edges, 0, bad).rules_failed == ["edge-span", "tree-edge"]
    bad[5], bad[6], bad[7] = 3, 5, 6
    assert compare(edges, 0, bad).rules_failed == ["tree-edge"]


@pytest.mark.parametrize("n", [2, 3, 1000, 4097])
def test_long_paths_and_cycles(n):
    path = np.stack([np.arange(n - 1), np.arange(1, n)], axis=1)
    parent = np.concatenate([[0], np.arange(n - 1)])
    res = compare(path, 0, parent)
    assert res.ok and res.levels.tolist() == list(range(n))
    if n < 3:
        return
    for tail_at in sorted({1, n // 2, n - 2}):   # cycle n-1 -> tail_at ... n-1, length 2 to n-1
        bad = parent.copy()
        bad[tail_at] = n - 1
        res = compare(path, 0, bad)
        assert res.failures[0].rule == "cycle" and res.failures[0].count == n - tail_at
    for k in (3, 5, 7):                      # a 3..7-cycle at the end of a long tail
        if n > k + 1:
            bad = parent.copy()
            bad[1] = -1
            bad[n - k] = n - 1
            compare(path, 0, bad)


def test_random_functional_graphs():
    rng = np.random.default_rng(1)
    for _ in range(200):
        n = int(rng.integers(2, 40))
        edges = rng.integers(0, n, (int(rng.integers(0, 3 * n)), 2))
        parent = rng.integers(-1, n, n)
        parent[parent == np.arange(n)] = -1
        root = int(rng.integers(0, n))
        parent[root] = root
        compare(edges, root, parent)


# ------------------------------------------------------ chunks, streaming
def test_chunking_does_not_change_the_result(case10):
    edges, root, parent, lev = case10
    bad = parent.copy()
    c_many_unreached(edges, root, bad, lev)
    c_skipped_level(edges, root, bad, lev)
    for p in (parent, bad):
        want = validate_gpu(edges, root, p, xp=np)
        for chunk in (97, 1000, 16384):
            assert_same(validate_gpu(edges, root, p, xp=np, chunk_edges=chunk), want)
            assert_same(validate(edges, root, p, chunk_edges=chunk), want)


def test_examples_collected_across_small_chunks():
    # offending tuples spread over many small chunks: examples are the first 8 in input order
    n = 40
    edges = np.array([[i, i + 1] for i in range(n - 1)] + [[i, n + i] for i in range(12)]
                     + [[20 + i, i] for i in range(12)])
    parent = np.concatenate([[0], np.arange(n // 2 - 1), -np.ones(n - n // 2, np.int64)])
    for chunk in (1, 3, 5, 1 << 20):
        res = compare(edges, 0, parent, chunk_edges=chunk)
        assert res.rules_failed == ["edge-range", "edge-span"]
        assert [f.count for f in res.failures] == [12, 13]


def test_streaming_from_zarr(case10):
    zarr = pytest.importorskip("zarr")
    edges, root, parent, lev = case10
    z = zarr.create_array(store=zarr.storage.MemoryStore(), shape=edges.shape, chunks=(1000, 2),
                          dtype="int64")
    z[:] = edges
    bad = parent.copy()
    c_many_unreached(edges, root, bad, lev)
    for p in (parent, bad):
        assert_same(validate_gpu(z, root, p, chunk_edges=777), validate(edges, root, p))


def test_bad_edge_shape_raises(case10):
    edges, root, parent, lev = case10
    with pytest.raises(ValueError, match=r"shape \(M, 2\)"):
        validate_gpu(edges[:, :1], root, parent, xp=np)


def test_numpy_without_cupy(monkeypatch, case10):
    monkeypatch.setitem(sys.modules, "cupy", None)      # `import cupy` would raise
    edges, root, parent, lev = case10
    assert _pick_xp(None, parent, edges) is np
    assert validate_gpu(edges, root, parent).ok


# -------------------------------------------------------------------- GPU
@pytest.mark.gpu
def test_gpu_matches_cpu(cp, golden10, golden16, s16, case10):
    edges10 = golden10["edges"]
    g10 = build_csr(edges10, n_vertices=N10)
    d10 = cp.asarray(edges10)
    for root, nedge in list(zip(golden10["roots"], golden10["nedge_v3"]))[:16]:
        parent = bfs(g10, root, algorithm="do").parent
        want = validate(edges10, root, parent)
        for e in (d10, edges10):                           # device edges, host chunks
            got = validate_gpu(e, root, cp.asarray(parent), chunk_edges=5000)
            assert_same(got, want)
            assert got.ok and got.nedge == nedge
    edges16, g16 = s16
    d16 = cp.asarray(edges16)
    for root, nedge in list(zip(golden16["roots"], golden16["nedge_v3"]))[:4]:
        parent = bfs(g16, root, algorithm="do").parent
        got = validate_gpu(d16, root, cp.asarray(parent))
        assert_same(got, validate(edges16, root, parent))
        assert got.ok and got.nedge == nedge
    edges, root, parent, lev = case10
    for name, corrupt in CORRUPTIONS.items():
        bad = parent.copy()
        corrupt(edges, root, bad, lev)
        assert_same(validate_gpu(d10, root, cp.asarray(bad)), validate(edges, root, bad))


def _mixed_batches(case10, golden10):
    """(edges, [(root, parent), ...]) twice: case10's search with every corruption of it, then five good
    searches of the SCALE 10 golden graph."""
    edges, root, parent, lev = case10
    searches = [(root, parent)]
    for name, corrupt in CORRUPTIONS.items():
        bad = parent.copy()
        corrupt(edges, root, bad, lev)
        searches.append((root, bad))
    g10 = build_csr(golden10["edges"], n_vertices=N10)
    good = [(r, bfs(g10, r, algorithm="do").parent) for r in golden10["roots"][:5]]
    return [(edges, searches), (golden10["edges"], good)]


def test_cpu_batch_equals_one_at_a_time(case10, golden10):
    """validate_many_cpu (one table a batch, one Numba pass a chunk): each search's result is the one-search
    validator's, good and corrupted searches mixed, int64 and uint32 edges, any batch size and chunking."""
    from dbfs.validate.batch_cpu import validate_many_cpu

    for e, group in _mixed_batches(case10, golden10):
        want = [validate(e, r, p, N10) for r, p in group]
        for ev in (e, e.astype(np.uint32)):
            for k, chunk in ((1, 1 << 22), (3, 2000), (len(group), 777)):
                got = []
                for i in range(0, len(group), k):
                    got += validate_many_cpu(ev, group[i:i + k], N10, chunk_edges=chunk)
                for g, w in zip(got, want):
                    w.levels = None
                    assert_same(g, w)


@pytest.mark.gpu
@pytest.mark.parametrize("sweeps", [64, 1])
def test_gpu_batch_table_matches_cpu(cp, case10, golden10, sweeps, monkeypatch):
    """validate_many_gpu on the device: one batch table for good and corrupted searches mixed (the fused
    kernel's counts per search, a failing search's chunk redone for its examples), int64 and uint32 edges,
    levels by sweeps or (one sweep allowed) by pointer jumping, every result the CPU validator's, whatever
    the batch holds."""
    import dbfs.validate.gpu as vg

    monkeypatch.setattr(vg, "SWEEPS_MOST", sweeps)
    for e, group in _mixed_batches(case10, golden10):
        want = [validate(e, r, p, N10) for r, p in group]
        for dev in (cp.asarray(e), cp.asarray(e.astype(np.uint32))):
            # one lane a search: groups of 1, 4 and 8 or 16 lanes a tuple, and past a warp (two searches a lane)
            for k, reps in ((1, 1), (3, 1), (len(group), 1), (3 * len(group), 3)):
                got, many = [], group * reps
                for i in range(0, len(many), k):
                    got += validate_many_gpu(dev, [(r, cp.asarray(p)) for r, p in many[i:i + k]], N10,
                                             chunk_edges=2000)
                assert len(got) == len(want) * reps
                for g, w in zip(got, want * reps):
                    assert_same(g, w)


@pytest.mark.gpu
def test_kept_rows_on_the_device(cp, case10, golden10):
    """KeptRows on CuPy: host rows uploaded once and kept on the device; the second batch reads none of them,
    and the results are the CPU validator's."""
    e, group = _mixed_batches(case10, golden10)[0]
    reads, got, store = _kept_batches(cp, e, [(r, cp.asarray(p)) for r, p in group], 1 << 30)
    assert reads[1] == 0 and all(type(v).__module__.startswith("cupy") for v in store.values())
    for (r, p), g in zip(group, got):
        assert_same(g, validate(e, r, p, N10))


def test_levels_can_be_left_out(golden10):
    from dbfs.validate.gpu import validate_gpu as vg

    edges = golden10["edges"]
    g = build_csr(edges, n_vertices=1 << 10)
    r = int(golden10["roots"][0])
    p = bfs(g, r, algorithm="do").parent
    full, lean = vg(edges, r, p, xp=np), vg(edges, r, p, xp=np, levels=False)
    assert lean.levels is None and full.levels is not None
    assert (lean.ok, lean.nedge, lean.rules_failed) == (full.ok, full.nedge, full.rules_failed)


def test_batch_model_counts_what_each_search_holds_besides():
    """batch_size / keep_budget: parent slices each search keeps on a device (held bytes) shrink the batch and
    the rows kept beside it; what is left for the rows never goes below zero."""
    from dbfs.validate.gpu import batch_size, keep_budget

    n, free = 1 << 28, 64 << 30
    k, k_held = batch_size(free, n), batch_size(free, n, held=4 * (n // 2))
    assert 1 <= k_held < k <= 16
    assert keep_budget(free, n, k_held, 4 * (n // 2)) < keep_budget(free, n, k_held)
    assert keep_budget(1 << 30, n, 16) == 0 and batch_size(1 << 30, n) == 1
    # a device validating 8 of the 16 searches itself (whole searches a worker) holds 8 tables, 16 slices
    big = 256 << 30
    half = keep_budget(big, n, 16, 4 * (n // 2), tables=8)
    assert 0 < keep_budget(big, n, 16, 4 * (n // 2)) < half < keep_budget(big, n, 8, 4 * (n // 2))
    assert half == keep_budget(big, n, 16, 4 * (n // 2)) + 8 * (3 * 4 + 1) * n


def test_mesh_validates_whole_searches_only_where_every_device_keeps_every_row():
    """mesh_plan: W workers validate whole searches where each keeps the whole input list beside its
    ceil(K / W) tables and every worker gets a search; else each its share of the rows, with keep_budget's
    bytes for them."""
    from dbfs.validate.gpu import keep_budget, mesh_plan

    n, free = 1 << 28, 110 << 30
    held = 4 * (n // 2)
    rows = (1 << 32) * 2 * 4                       # SCALE 28's list as uint32 pairs, 32 GiB
    assert mesh_plan(free, n, 16, held, 2, rows) == ("search", keep_budget(free, n, 16, held, tables=8))
    assert mesh_plan(free, n, 16, held, 2, 4 * rows) == ("edges", keep_budget(free, n, 16, held))
    assert mesh_plan(free, n, 1, held, 2, rows)[0] == "edges"          # a batch smaller than the mesh
    assert mesh_plan(free, n, 16, held, 1, rows)[0] == "edges"         # one worker: nothing to split
    assert mesh_plan(40 << 30, n, 16, held, 2, rows)[0] == "edges"     # the rows do not fit beside the tables


def test_id_width_holds_every_id_up_to_two_to_the_31():
    """The per-vertex arrays take int32 while ids fit it (N <= 2**31: SCALE 31's ids 0 .. 2**31 - 1), and the
    range rule over ids that fill their width compares no out-of-range scalar (the boundary at int8)."""
    from dbfs.validate.gpu import _check_prefix, _width

    assert _width(2**31) == np.int32 and _width(2**31 + 1) == np.int64 and _width(2**31 - 1) == np.int32
    n = 128                                         # int8 ids 0 .. 127: n - 1 is the width's largest value
    parent = np.full(n, -1, np.int8)
    parent[5] = 5
    parent[127] = 5
    assert _check_prefix(np, parent, 5, n) is None
    parent[9] = -2
    f = _check_prefix(np, parent, 5, n)
    assert f.rule == "range" and list(f.vertices) == [9]
    parent[9] = 127
    assert _check_prefix(np, parent, 5, n) is None
    assert _check_prefix(np, parent[:-1].astype(np.int16), 5, n - 1).rule == "range"   # 127 >= n - 1 + 1

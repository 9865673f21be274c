"""The Graph500 validator: accepts valid trees, rejects each corruption by its rule.

Valid parents come from the NumPy oracle (``dbfs.bfs.reference``), so these
tests do not depend on any BFS kernel.
"""
import numpy as np
import pytest

from dbfs.bfs.reference import bfs_levels, min_parents
from dbfs.validate import RULES, Failure, ValidationResult, validate

N10 = 1 << 10


def oracle_parent(edges, root, n):
    lev = bfs_levels(edges, root, n)
    return min_parents(edges, lev, root), lev


def adjacency_sets(edges, n):
    adj = [set() for _ in range(n)]
    for u, v in np.asarray(edges):
        if u != v:
            adj[u].add(int(v))
            adj[v].add(int(u))
    return adj


@pytest.fixture(scope="module")
def case10(golden10):
    edges = golden10["edges"]
    root = golden10["roots"][0]
    parent, lev = oracle_parent(edges, root, N10)
    return edges, root, parent, lev, adjacency_sets(edges, N10)


def _children(parent):
    kids = np.zeros(parent.shape[0], np.int64)
    reached = parent >= 0
    np.add.at(kids, parent[reached], 1)
    return kids


def rules(res):
    return [f.rule for f in res.failures]


# ------------------------------------------------------------------ valid
def test_valid_trees_and_nedge_all_golden_roots(golden10):
    edges = golden10["edges"]
    for root, nedge in zip(golden10["roots"], golden10["nedge_v3"]):
        parent, lev = oracle_parent(edges, root, N10)
        res = validate(edges, root, parent)
        assert isinstance(res, ValidationResult)
        assert res.ok and res.failures == [], res.summary()
        assert res.nedge == nedge
        np.testing.assert_array_equal(res.levels, lev)


def test_nedge_counts_tuples_not_edges():
    # duplicates count once per tuple, self-loops never, unreached edges never
    edges = np.array([[0, 1], [1, 0], [0, 1], [1, 1], [1, 2], [3, 4], [2, 2], [4, 4]])
    parent = np.array([0, 0, 1, -1, -1])
    res = validate(edges, 0, parent)
    assert res.ok and res.nedge == 4


def test_chunking_does_not_change_the_result(case10):
    edges, root, parent, _, _ = case10
    want = validate(edges, root, parent)
    for chunk in (1, 7, 1000, 16384, 1 << 30):
        got = validate(edges, root, parent, chunk_edges=chunk)
        assert got.ok and got.nedge == want.nedge


# ---------------------------------------------------------- corruptions
def test_rejects_cycle(case10):
    edges, root, parent, lev, adj = case10
    x, y = next((u, v) for u, v in edges if u != v and lev[u] == lev[v] >= 2)
    bad = parent.copy()
    bad[x], bad[y] = y, x
    res = validate(edges, root, bad)
    assert not res.ok and rules(res) == ["cycle"]
    assert set(res.failures[0].vertices.tolist()) == {x, y}


def test_rejects_self_parent_that_is_not_root(case10):
    edges, root, parent, lev, adj = case10
    v = int(np.flatnonzero(lev == 2)[0])
    bad = parent.copy()
    bad[v] = v
    res = validate(edges, root, bad)
    assert rules(res) == ["cycle"] and res.failures[0].vertices.tolist() == [v]


def test_rejects_skipped_level(case10):
    edges, root, parent, lev, adj = case10
    # v's parent becomes a same-level neighbour: v drops a level, so the edge
    # to its real parent now spans two levels
    v, x = next((int(u), int(w)) for u, w in edges if u != w and lev[u] == lev[w] >= 1)
    bad = parent.copy()
    bad[v] = x
    res = validate(edges, root, bad)
    assert rules(res) == ["level-diff"]


def test_rejects_parent_that_is_not_a_neighbour(case10):
    edges, root, parent, lev, adj = case10
    v = next(int(u) for u in np.flatnonzero(lev == 2)
             if any(lev[y] == 1 and y not in adj[u] for y in range(N10)))
    y = next(y for y in np.flatnonzero(lev == 1) if int(y) not in adj[v])
    bad = parent.copy()
    bad[v] = y
    res = validate(edges, root, bad)
    assert rules(res) == ["tree-edge"]
    assert res.failures[0].vertices.tolist() == [v]


def test_rejects_reached_vertex_with_unreached_parent(case10):
    edges, root, parent, lev, adj = case10
    kids = _children(parent)
    leaf = int(np.flatnonzero((lev >= 1) & (kids == 0))[0])
    isolated = int(np.flatnonzero(lev < 0)[0])
    bad = parent.copy()
    bad[leaf] = isolated
    res = validate(edges, root, bad)
    assert rules(res) == ["parent-unreached"]
    assert res.failures[0].vertices.tolist() == [leaf]


def test_rejects_unreached_vertex_in_root_component(case10):
    edges, root, parent, lev, adj = case10
    kids = _children(parent)
    leaf = int(np.flatnonzero((lev >= 1) & (kids == 0))[0])
    bad = parent.copy()
    bad[leaf] = -1
    res = validate(edges, root, bad)
    assert rules(res) == ["edge-span"]
    assert leaf in res.failures[0].vertices.tolist()


def test_rejects_reached_vertex_outside_root_component():
    edges = np.array([[0, 1], [1, 2], [2, 3], [5, 6], [6, 7]])
    parent = np.array([0, 0, 1, 2, -1, -1, -1, -1])
    assert validate(edges, 0, parent).ok
    bad = parent.copy()
    bad[5] = 0
    res = validate(edges, 0, bad)
    assert "edge-span" in rules(res) and "tree-edge" in rules(res)
    # a whole other component hung under the root: only the missing tree edge
    bad = parent.copy()
    bad[5], bad[6], bad[7] = 3, 5, 6
    assert rules(validate(edges, 0, bad)) == ["tree-edge"]


def test_rejects_parent_out_of_range(case10):
    edges, root, parent, lev, adj = case10
    for value in (N10, 10 ** 12, -2):
        bad = parent.copy()
        bad[int(np.flatnonzero(lev == 2)[0])] = value
        res = validate(edges, root, bad)
        assert rules(res) == ["range"]


def test_rejects_root_not_its_own_parent(case10):
    edges, root, parent, lev, adj = case10
    bad = parent.copy()
    bad[root] = next(iter(adj[root]))
    assert rules(validate(edges, root, bad)) == ["root"]
    bad[root] = -1
    assert rules(validate(edges, root, bad)) == ["root"]
    assert rules(validate(edges, N10, parent)) == ["root"]


def test_rejects_length_and_edge_range():
    edges = np.array([[0, 1], [1, 2]])
    assert rules(validate(edges, 0, np.array([0, 0, 1]), n_vertices=4)) == ["length"]
    res = validate(np.array([[0, 1], [1, 9]]), 0, np.array([0, 0, -1]))
    assert rules(res) == ["edge-range"]
    assert res.failures[0].vertices.tolist() == [1, 9]


def test_failures_are_structured(case10):
    edges, root, parent, lev, adj = case10
    bad = parent.copy()
    leaves = np.flatnonzero((lev >= 1) & (_children(parent) == 0))[:40]
    bad[leaves] = -1
    res = validate(edges, root, bad)
    (f,) = res.failures
    assert isinstance(f, Failure) and f.rule in RULES
    assert f.count >= 40 and 0 < len(f.vertices) <= 32
    assert "reached and an unreached" in f.message
    assert "edge-span" in res.summary()


# ------------------------------------------------------------- streaming
def test_streaming_from_zarr_matches_numpy(case10):
    zarr = pytest.importorskip("zarr")
    edges, root, parent, lev, adj = case10
    z = zarr.create_array(store=zarr.storage.MemoryStore(), shape=edges.shape, chunks=(1000, 2),
                          dtype="int64")
    z[:] = edges
    kids = _children(parent)
    bad = parent.copy()
    bad[np.flatnonzero((lev >= 1) & (kids == 0))[:3]] = -1
    for p in (parent, bad):
        a = validate(edges, root, p)
        b = validate(z, root, p, chunk_edges=777)
        assert (a.ok, a.nedge, rules(a)) == (b.ok, b.nedge, rules(b))
        assert [f.count for f in a.failures] == [f.count for f in b.failures]


# ------------------------------------------------------------- the package
def _same(a, b):
    assert (a.ok, a.nedge, rules(a)) == (b.ok, b.nedge, rules(b))
    for fa, fb in zip(a.failures, b.failures):
        assert (fa.rule, fa.message, fa.count) == (fb.rule, fb.message, fb.count)
        np.testing.assert_array_equal(fa.vertices, fb.vertices)
    np.testing.assert_array_equal(a.levels, b.levels)


def test_package_is_callable_as_the_function(case10):
    import dbfs
    import dbfs.validate as v

    edges, root, parent, lev, adj = case10
    bad = parent.copy()
    bad[np.flatnonzero((lev >= 1) & (_children(parent) == 0))[:3]] = -1
    for p in (parent, bad):
        want = v.validate(edges, root, p)
        _same(v(edges, root, p), want)
        _same(dbfs.validate(edges, root, p), want)
    assert v.validate is validate


def test_validators_import_nothing_from_bfs():
    # the validator is independent of what it checks
    import ast
    from pathlib import Path

    import dbfs.validate as v

    for path in Path(v.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n == "dbfs.bfs" or n.startswith("dbfs.bfs.") for n in names), path.name


def _path_case(n=300):
    """Two components: a path 0 - 1 - ... - n-1 with two chords near 0 (a tree deeper than an int8 level from
    0), and a star of hub n and leaves n+1 .. n+9 (depth 1 from n)."""
    edges = np.asarray([(i, i + 1) for i in range(n - 1)] + [(0, 2), (1, 3)] + [(n, n + k) for k in range(1, 10)],
                       np.int64)
    return edges, n + 10


@pytest.mark.parametrize("wide_ids", [False, True])
def test_cpu_batch_table_compact_widened_and_wide(monkeypatch, wide_ids):
    """The CPU batch table (dbfs.validate.batch_cpu): one-byte levels while every level fits int8, widened
    when a search of the batch is deeper (its earlier columns kept), the wide layout under wide ids; each
    search's result equals the one-search validator's, good and corrupted searches mixed."""
    from dbfs.validate.batch_cpu import SearchTable, validate_many_cpu

    if wide_ids:
        monkeypatch.setenv("DBFS_WIDE_IDS", "1")
    edges, n = _path_case()
    deep_root, shallow_root = 0, n - 10
    deep, _ = oracle_parent(edges, deep_root, n)
    shallow, lev_s = oracle_parent(edges, shallow_root, n)
    assert bfs_levels(edges, deep_root, n).max() > 127 >= lev_s.max()
    # levels past any small width come out exact
    assert np.array_equal(validate(edges, deep_root, deep, n).levels, bfs_levels(edges, deep_root, n))
    bad = deep.copy()
    bad[250] = 10                               # a parent that is no neighbour: tree-edge and level rules
    cycle = shallow.copy()
    cycle[n - 9], cycle[n - 8] = n - 8, n - 9   # a cycle off the root
    for group in ([(shallow_root, shallow), (shallow_root, cycle)],
                  [(shallow_root, shallow), (deep_root, deep), (deep_root, bad), (shallow_root, cycle)]):
        st = SearchTable(n, len(group))
        for r, p in group:
            st.fold(r, p)
        deepest = max(int(bfs_levels(edges, r, n).max()) for r, _ in group)
        assert st.compact == (not wide_ids and deepest <= 127)
        want = [validate(edges, r, p, n) for r, p in group]
        for chunk in (1 << 22, 7):
            got = validate_many_cpu(edges, group, n, chunk_edges=chunk)
            for g, w in zip(got, want):
                assert (g.ok, g.nedge) == (w.ok, w.nedge)
                assert [(f.rule, f.count, f.message, f.vertices.tolist()) for f in g.failures] == \
                    [(f.rule, f.count, f.message, f.vertices.tolist()) for f in w.failures]
        assert [w.ok for w in want] == ([True, False] if len(group) == 2 else [True, True, False, False])


def test_cpu_batch_table_refuses_more_searches_than_its_room():
    from dbfs.validate.batch_cpu import SearchTable

    edges, n = _path_case(20)
    p, _ = oracle_parent(edges, 0, n)
    st = SearchTable(n, 1)
    st.fold(0, p)
    with pytest.raises(ValueError, match="full"):
        st.fold(0, p)


def test_cpu_batch_table_pickles_once():
    """A batch table travels to the edge tasks (dbfs.validate.dask) as its one table: the views are rebuilt on
    the other side, not sent as copies."""
    import pickle

    from dbfs.validate.batch_cpu import SearchTable

    n = 5000
    edges = np.asarray([(0, k) for k in range(1, n)], np.int64)      # a star: one row a vertex, every level 0 or 1
    p, _ = oracle_parent(edges, 0, n)
    st = SearchTable(n, 3)
    st.fold(0, p)
    blob = pickle.dumps(st, protocol=5)
    assert len(blob) < st.table.nbytes + 2048
    back = pickle.loads(blob)
    assert np.shares_memory(back.levs, back.table) and np.shares_memory(back.pars, back.table)
    assert np.array_equal(back.levs[:, 0], st.levs[:, 0]) and np.array_equal(back.pars[:, 0], p)
    assert validate_many_check(back, edges) == validate_many_check(st, edges)


def validate_many_check(st, edges):
    e = st.for_edges()
    e.chunk(edges)
    return [(r.ok, r.nedge) for r in st.results([e.summary()], e.found)]

"""CPU BFS kernels: every algorithm against the NumPy oracle and the validator.

Invariants checked (never identical parent arrays, except spmv's min rule):
the parent array validates against the input edge list, its nedge equals the
reference's ``nedge_v3``, and the levels it implies equal the oracle's.
"""
import numpy as np
import pytest

from dbfs.bfs import BFSResult, algorithm_names, bfs, get_algorithm, prepare
from dbfs.bfs import cpu
from dbfs.bfs.cpu import algorithms as cpu_algorithms
from dbfs.bfs.cpu import topdown as cpu_topdown
from dbfs.bfs.cpu.buffers import _PARENT_POOL_KEEP, _fill_unreached, _seen_bitmap, reserve_parents
from dbfs.bfs.policy import BeamerPolicy, ChangeStatePolicy, make_policy
from dbfs.bfs.reference import Oracle, bfs_levels, min_parents
from dbfs.errors import DbfsError
from dbfs.graph import CSRGraph
from dbfs.validate import validate

try:  # Kernel 1, when it exists
    from dbfs.kernel1 import build_csr as _kernel1_build_csr
except ImportError:  # pragma: no cover - depends on what is merged
    _kernel1_build_csr = None


def _numpy_csr(edges, n, dedupe=True, index_dtype=np.int32):
    """Tiny Kernel 1: symmetrise, drop self-loops, dedupe, sort rows."""
    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    e = e[e[:, 0] != e[:, 1]]
    src = np.concatenate([e[:, 0], e[:, 1]])
    dst = np.concatenate([e[:, 1], e[:, 0]])
    order = np.lexsort((dst, src))
    src, dst = src[order], dst[order]
    if dedupe and src.size:
        keep = np.ones(src.size, bool)
        keep[1:] = (src[1:] != src[:-1]) | (dst[1:] != dst[:-1])
        src, dst = src[keep], dst[keep]
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=indptr[1:])
    return CSRGraph(indptr, dst.astype(index_dtype), n)


def make_graph(edges, n=None, dedupe=True):
    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    n = int(n) if n is not None else int(e.max()) + 1
    if _kernel1_build_csr is not None:
        return _kernel1_build_csr(e, n_vertices=n, dedupe=dedupe)
    return _numpy_csr(e, n, dedupe=dedupe)


def relabel(g, seed=0):
    """The same graph under a random vertex permutation (perm[new] = old)."""
    n = g.n_vertices
    perm = np.random.default_rng(seed).permutation(n).astype(np.int64)
    iperm = np.empty(n, np.int64)
    iperm[perm] = np.arange(n)
    deg = np.diff(g.indptr)[perm]
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(deg, out=indptr[1:])
    indices = np.empty(g.nnz, g.indices.dtype)
    for new in range(n):
        old = perm[new]
        row = iperm[g.indices[g.indptr[old]:g.indptr[old + 1]]]
        indices[indptr[new]:indptr[new + 1]] = np.sort(row)
    return CSRGraph(indptr, indices, n, perm=perm, iperm=iperm)


VARIANTS = [
    ("seq-list", {}),
    ("seq-csr", {}),
    ("td", {}),
    ("bu", {}),
    ("do", {}),
    ("do", {"policy": "change_state"}),
    ("do", {"unexplored": "exact"}),
    ("do", {"tail": "gap"}),
    ("spmv", {}),
]
IDS = [a + "".join(f"-{v}" for v in o.values()) for a, o in VARIANTS]


def test_registry_lists_every_cpu_algorithm():
    assert list(cpu.ALGORITHMS) == ["seq-list", "seq-csr", "td", "bu", "do", "spmv"]
    assert algorithm_names("cpu") == list(cpu.ALGORITHMS)
    for name, fn in cpu.ALGORITHMS.items():
        assert get_algorithm(name, "cpu") is fn


def check_search(edges, n, g, root, algorithm, opts, nedge=None, oracle=None):
    res = bfs(g, root, algorithm, levels=True, **opts)
    assert isinstance(res, BFSResult)
    assert res.parent.dtype == np.int64 and res.parent.shape == (n,)
    assert res.parent[root] == root
    v = validate(edges, root, res.parent, n_vertices=n)
    assert v.ok, f"{algorithm} {opts} root {root}: {v.summary()}"
    lev = bfs_levels(edges, root, n) if oracle is None else oracle
    np.testing.assert_array_equal(res.levels, lev)
    np.testing.assert_array_equal(v.levels, lev)
    if nedge is not None:
        assert v.nedge == nedge
    if algorithm == "spmv":
        np.testing.assert_array_equal(res.parent, min_parents(edges, lev, root))
    return v


# ------------------------------------------------------------ golden graphs
@pytest.fixture(scope="module")
def g10(golden10):
    return make_graph(golden10["edges"], 1 << 10)


@pytest.fixture(scope="module")
def oracle10(golden10):
    oracle = Oracle(golden10["edges"], 1 << 10)
    return {r: oracle.levels(r) for r in golden10["roots"]}


@pytest.fixture(scope="module")
def s16(golden16):
    from dbfs.generate.graph500 import kronecker_edges

    edges = kronecker_edges(16, 16, 2, 3)
    assert edges.shape == (golden16["n_edges"], 2)
    np.testing.assert_array_equal(edges[:len(golden16["first_edges"])], golden16["first_edges"])
    g = make_graph(edges, 1 << 16)
    o = Oracle(edges, 1 << 16)
    oracle = {r: o.levels(r) for r in golden16["roots"]}
    return edges, g, oracle


@pytest.mark.parametrize("algorithm,opts", VARIANTS, ids=IDS)
def test_golden_scale10_all_roots(golden10, g10, oracle10, algorithm, opts):
    assert len(golden10["roots"]) == 64
    for root, nedge in zip(golden10["roots"], golden10["nedge_v3"]):
        check_search(golden10["edges"], 1 << 10, g10, root, algorithm, opts, nedge, oracle10[root])


@pytest.mark.parametrize("algorithm,opts", VARIANTS, ids=IDS)
def test_golden_scale16_all_roots(golden16, s16, algorithm, opts):
    edges, g, oracle = s16
    assert len(golden16["roots"]) == 64
    for root, nedge in zip(golden16["roots"], golden16["nedge_v3"]):
        check_search(edges, 1 << 16, g, root, algorithm, opts, nedge, oracle[root])


@pytest.mark.parametrize("algorithm,opts", VARIANTS, ids=IDS)
def test_relabelled_graph_returns_original_ids(golden10, g10, oracle10, algorithm, opts):
    gr = relabel(g10, seed=7)
    for root, nedge in list(zip(golden10["roots"], golden10["nedge_v3"]))[:8]:
        res = bfs(gr, root, algorithm, levels=True, **opts)
        v = validate(golden10["edges"], root, res.parent)
        assert v.ok, v.summary()
        assert v.nedge == nedge
        np.testing.assert_array_equal(res.levels, oracle10[root])


@pytest.mark.parametrize("algorithm,opts", VARIANTS, ids=IDS)
def test_multigraph_and_int64_indices(golden10, oracle10, algorithm, opts):
    edges = golden10["edges"]
    g = _numpy_csr(edges, 1 << 10, dedupe=False, index_dtype=np.int64)
    assert g.nnz > make_graph(edges, 1 << 10).nnz  # duplicates really kept
    for root, nedge in list(zip(golden10["roots"], golden10["nedge_v3"]))[:8]:
        check_search(edges, 1 << 10, g, root, algorithm, opts, nedge, oracle10[root])


def test_seq_list_uses_the_input_edge_list(golden10, oracle10):
    g = make_graph(golden10["edges"], 1 << 10)
    g.meta["edges"] = golden10["edges"]
    head, nxt, ends = cpu.seq_list_structure(g)
    assert ends.shape == golden10["edges"].shape  # lists over the tuples, not the CSR
    root = golden10["roots"][0]
    check_search(golden10["edges"], 1 << 10, g, root, "seq-list", {}, golden10["nedge_v3"][0], oracle10[root])


# -------------------------------------------------------- hand-made graphs
def _grid(rows, cols):
    idx = np.arange(rows * cols).reshape(rows, cols)
    right = np.stack([idx[:, :-1].ravel(), idx[:, 1:].ravel()], 1)
    down = np.stack([idx[:-1, :].ravel(), idx[1:, :].ravel()], 1)
    return np.concatenate([right, down])


HAND = {
    # name: (edges, n, root, nedge)
    "path": (np.array([[i, i + 1] for i in range(9)]), 10, 0, 9),
    "path-middle-root": (np.array([[i + 1, i] for i in range(9)]), 10, 5, 9),
    "star": (np.array([[0, i] for i in range(1, 50)]), 50, 0, 49),
    "star-leaf-root": (np.array([[i, 0] for i in range(1, 50)]), 50, 17, 49),
    "cycle": (np.array([[i, (i + 1) % 11] for i in range(11)]), 11, 3, 11),
    "two-components": (np.array([[0, 1], [1, 2], [2, 0], [3, 4], [4, 5]]), 6, 4, 2),
    "root-in-pair": (np.array([[0, 1], [2, 3], [3, 4], [4, 2], [5, 6]]), 7, 1, 1),
    "self-loop-vertices": (np.array([[0, 1], [1, 2], [3, 3], [4, 4], [2, 2], [0, 0]]), 5, 1, 2),
    "duplicates": (np.array([[0, 1], [1, 0], [0, 1], [1, 2], [2, 1], [2, 3], [3, 0]]), 4, 0, 7),
    "grid-7x9": (_grid(7, 9), 63, 31, 2 * 7 * 9 - 7 - 9),
    "grid-1x200": (_grid(1, 200), 200, 199, 199),
    "single-edge-isolated": (np.array([[0, 1]]), 70, 0, 1),
    "wide": (np.array([[0, i] for i in range(1, 3000)] + [[i, i + 1] for i in range(1, 2999)]), 3000, 0,
             2999 + 2998),
}


@pytest.mark.parametrize("algorithm,opts", VARIANTS, ids=IDS)
@pytest.mark.parametrize("name", sorted(HAND))
def test_hand_made_graphs(name, algorithm, opts):
    edges, n, root, nedge = HAND[name]
    g = make_graph(edges, n)
    v = check_search(edges, n, g, root, algorithm, opts, nedge)
    assert v.nedge == nedge


def test_hand_made_expected_levels():
    edges, n, root, _ = HAND["path-middle-root"]
    res = bfs(make_graph(edges, n), root, "do", levels=True)
    np.testing.assert_array_equal(res.levels, np.abs(np.arange(10) - 5))
    edges, n, root, _ = HAND["root-in-pair"]
    res = bfs(make_graph(edges, n), root, "bu")
    np.testing.assert_array_equal(res.parent, [1, 1, -1, -1, -1, -1, -1])
    edges, n, root, _ = HAND["self-loop-vertices"]
    res = bfs(make_graph(edges, n), root, "td", levels=True)
    np.testing.assert_array_equal(res.levels, [1, 0, 1, -1, -1])


def test_prepare_builds_helpers_once():
    edges, n, root, _ = HAND["two-components"]
    g = make_graph(edges, n)
    assert prepare(g) is g
    hub = g.meta["_hub"]
    assert g.meta["_rows_sorted"] is True
    np.testing.assert_array_equal(hub[:3] >= 0, True)
    assert hub[4] in (3, 5) and hub[3] == 4
    bfs(g, root, "do")
    assert g.meta["_hub"] is hub  # reused, not rebuilt


def test_isolated_root_reaches_only_itself():
    g = make_graph(np.array([[0, 1], [1, 2]]), 5)
    for name in cpu.ALGORITHMS:
        res = bfs(g, 4, name)
        np.testing.assert_array_equal(res.parent, [-1, -1, -1, -1, 4])


# ------------------------------------------------------------------ stats
@pytest.mark.parametrize("algorithm,opts", VARIANTS, ids=IDS)
def test_level_stats(golden10, g10, oracle10, algorithm, opts):
    root = golden10["roots"][0]
    res = bfs(g10, root, algorithm, stats=True, **opts)
    lev = oracle10[root]
    counts = np.bincount(lev[lev >= 0])
    rec = res.level_stats
    assert [r["level"] for r in rec] == list(range(len(counts)))
    for r in rec:
        assert set(r) >= {"level", "direction", "frontier", "edges", "time", "discovered"}
        assert r["direction"] in ("td", "bu")
        assert r["time"] >= 0 and r["edges"] >= 0
    assert [r["frontier"] for r in rec] == counts.tolist()
    assert [r["discovered"] for r in rec] == counts[1:].tolist() + [0]
    if algorithm in ("td", "seq-csr", "seq-list"):
        assert {r["direction"] for r in rec} == {"td"}
    if algorithm == "bu":
        assert {r["direction"] for r in rec} == {"bu"}
    assert bfs(g10, root, algorithm, **opts).level_stats is None


@pytest.mark.parametrize("policy", ["beamer", "change_state"])
def test_do_switches_direction_on_kronecker(s16, policy):
    edges, g, oracle = s16
    res = bfs(g, 29348, "do", stats=True, policy=policy)
    dirs = [r["direction"] for r in res.level_stats]
    assert dirs[0] == "td" and "bu" in dirs
    assert dirs[-1] == "td"  # the small tail levels go back to top-down
    examined = sum(r["edges"] for r in res.level_stats)
    assert examined < g.nnz / 2  # direction optimization skips most edges


def test_do_options():
    edges, n, root, _ = HAND["grid-7x9"]
    g = make_graph(edges, n)
    for kw in ({"alpha": 1.0, "beta": 1.0}, {"policy": "change_state", "alpha": 2, "beta": 1000}):
        assert validate(edges, root, bfs(g, root, "do", **kw).parent).ok


# ----------------------------------------------------------------- policy
def test_beamer_policy_rules():
    p = BeamerPolicy(alpha=10, beta=10, tail="gap")
    p.start(1000)
    assert p.next(1, 5, 995) == "td"          # 5 <= 1000/10 (edges_to_check starts at m_u + m_f)
    assert p.next(20, 200, 700) == "bu"       # 200 > 995/10
    assert p.next(500, 3000, 100) == "bu"     # growing: stay
    assert p.next(200, 300, 10) == "bu"       # shrinking but 200 >= 1000/10
    assert p.next(50, 60, 5) == "td"          # shrinking and 50 < 100
    assert p.next(40, 50, 4) == "td"          # gap mode: edges_to_check stays large
    q = BeamerPolicy(alpha=10, beta=10, unexplored="exact", tail="gap")
    q.start(1000)
    seq = [(1, 5, 995), (20, 200, 700), (500, 3000, 100), (50, 60, 5), (40, 50, 4)]
    assert [q.next(*c) for c in seq] == ["td", "bu", "bu", "td", "bu"]  # 50 > 4/10: back to bu


def test_beamer_tail_cost_rule():
    """tail='cost' (default): beta's rule fires but bottom-up stays while the
    unvisited vertices have fewer edges (m_u) than the frontier (m_f)."""
    p = BeamerPolicy(alpha=10, beta=10)
    p.start(1000)
    assert [p.next(1, 5, 995), p.next(20, 200, 700), p.next(500, 3000, 100)] == ["td", "bu", "bu"]
    assert p.next(50, 60, 5) == "bu"          # shrinking, 50 < 100, but m_u 5 < m_f 60
    assert p.next(40, 50, 80) == "td"         # m_u 80 >= m_f 50: top-down is no dearer
    with pytest.raises(DbfsError, match="tail"):
        BeamerPolicy(tail="sometimes")


POLICY_VARIANTS = [dict(policy="beamer", unexplored=u, tail=t) for u in ("gap", "exact") for t in ("cost", "gap")] \
    + [dict(policy="change_state")]


@pytest.mark.parametrize("kw", POLICY_VARIANTS, ids=lambda kw: "-".join(kw.values()))
def test_m_f_cap_gives_the_decisions_of_exact_sums(kw):
    """A caller that feeds ``m_f`` capped as ``m_f_cap`` allows (garbage when
    it is None, cap + 1 when the true sum is larger) and keeps ``m_u`` as
    _hybrid does (too large after a capped top-down level) gets the same
    directions as one feeding exact sums, over random count sequences."""
    import math

    from dbfs.bfs.policy import policy_from

    rng = np.random.default_rng(5)
    n = 1 << 20
    fired = set()
    for _ in range(3000):
        pe, pc = policy_from(**kw), policy_from(**kw)
        pe.start(n)
        pc.start(n)
        m_u = int(rng.integers(1, 40 * n))
        m_u_c = m_u
        n_f, m_f = 1, int(rng.integers(1, 1000))
        fed = m_f
        for _ in range(10):
            de, dc = pe.next(n_f, m_f, m_u), pc.next(n_f, fed, m_u_c)
            assert de == dc
            n_f = int(np.exp(rng.uniform(0, math.log(n / 2))))
            m_f = int(n_f * np.exp(rng.uniform(0, math.log(60))))
            m_u = max(m_u - m_f, 0) if rng.random() < 0.5 else int(rng.integers(0, 2 * m_f + 2))
            cap = pc.m_f_cap(n_f, m_u if dc == "bu" else None)
            fired.add("none" if cap is None else "exact" if cap == math.inf else "cap" if m_f > cap else "under")
            fed = -12345 if cap is None else m_f if m_f <= cap else math.floor(cap) + 1
            # _hybrid: exact m_u after a bottom-up level; after a top-down one m_u -= fed
            m_u_c = m_u if dc == "bu" else m_u + (m_f - fed)
    if kw["policy"] == "change_state":
        assert fired == {"none"}
    elif kw["unexplored"] == "exact" and kw["tail"] == "gap":
        assert fired == {"exact", "none"}
    else:
        assert {"cap", "under"} <= fired


@pytest.mark.parametrize("kw", POLICY_VARIANTS, ids=lambda kw: "-".join(kw.values()))
def test_do_directions_equal_with_exact_sums(s16, kw):
    """do's levels (direction, frontier, edges examined) on Kronecker SCALE 16
    equal those of the same search whose policy asks for every sum exactly."""
    import math

    from dbfs.bfs.policy import policy_from

    class Exact(type(policy_from(**kw))):
        def m_f_cap(self, n_f, m_u):
            return math.inf

    edges, g, oracle = s16
    base = policy_from(**kw)
    exact = Exact(**{k: v for k, v in vars(base).items() if k in ("alpha", "beta", "unexplored", "tail")})
    for root in (29348, 1, 4242, 60000):
        key = lambda rec: [(r["direction"], r["frontier"], r["discovered"]) for r in rec]
        a = cpu_algorithms._hybrid(g, root, True, policy_from(**kw), False)
        b = cpu_algorithms._hybrid(g, root, True, exact, False)
        assert key(a[1]) == key(b[1])
        np.testing.assert_array_equal(cpu.levels_from_parent(a[0], root), cpu.levels_from_parent(b[0], root))


def test_change_state_policy_rules():
    p = ChangeStatePolicy(alpha=100, beta=50)
    p.start(1000)
    assert p.next(1, 100, 900) == "td"
    assert p.next(5, 100, 900) == "td"        # growing but 5 <= 10
    assert p.next(40, 100, 900) == "bu"       # growing and 40 > 10
    assert p.next(300, 100, 900) == "bu"
    assert p.next(30, 100, 900) == "bu"       # shrinking but 30 >= 20
    assert p.next(10, 100, 900) == "td"       # shrinking and 10 < 20
    assert p.next(15, 100, 900) == "bu"       # growing again and 15 > 10


def test_make_policy_errors():
    with pytest.raises(DbfsError, match="unknown direction policy"):
        make_policy("nope")
    with pytest.raises(DbfsError, match="alpha > 0"):
        make_policy("beamer", alpha=0)
    with pytest.raises(DbfsError, match="unexplored"):
        make_policy("beamer", unexplored="sometimes")
    assert (make_policy("change_state").alpha, make_policy("change_state").beta) == (1024.0, 64.0)


# ----------------------------------------------------------------- errors
def test_errors_are_dbfs_errors():
    g = make_graph(np.array([[0, 1], [1, 2]]), 3)
    with pytest.raises(DbfsError, match="unknown BFS algorithm 'dfs'"):
        bfs(g, 0, "dfs")
    with pytest.raises(DbfsError, match="unknown BFS backend 'fpga'"):
        bfs(g, 0, "do", backend="fpga")
    with pytest.raises(DbfsError, match="out of range"):
        bfs(g, 3, "do")
    with pytest.raises(DbfsError, match="out of range"):
        bfs(g, -1, "do")
    with pytest.raises(DbfsError, match="not an integer"):
        bfs(g, "x", "do")
    with pytest.raises(DbfsError, match="no option"):
        bfs(g, 0, "td", alpha=3)
    with pytest.raises(DbfsError, match="unknown direction policy"):
        bfs(g, 0, "do", policy="random")


def test_gpu_backend_is_pluggable():
    g = make_graph(np.array([[0, 1]]), 2)
    try:
        import dbfs.bfs.gpu  # noqa: F401
    except ImportError:
        with pytest.raises(DbfsError, match=r"backend gpu needs cupy and a CUDA GPU: pip install -e '?\.\[gpu\]"):
            bfs(g, 0, "do", backend="gpu")
    else:  # pragma: no cover - only with a GPU backend installed
        pytest.skip("dbfs.bfs.gpu is importable here; its own tests cover it")


# ------------------------------------------------------------ named steps
def test_named_steps_on_an_offset_range():
    """td_step / bu_step on the upper half of a graph as if it were a partition."""
    edges = _grid(8, 16)  # 128 vertices; rows 64..127 are the 'local' range
    g = make_graph(edges, 128)
    off = 64
    loc_indptr = g.indptr[off:] - g.indptr[off]
    loc_indices = g.indices[g.indptr[off]:]
    parent = np.full(128, -1, np.int64)
    parent[70] = 70
    gvisited = np.zeros(2, np.int64)  # global visited bitmap, exact
    cpu.mark_queue(np.array([70, 54]), 0, gvisited)
    parent[54] = 54  # pretend 54 was reached earlier
    nxt, examined = cpu.td_step(loc_indptr, loc_indices, off, np.array([70], np.int64), parent, gvisited)
    assert examined == 4 and sorted(nxt.tolist()) == [69, 71, 86]
    assert all(parent[v] == 70 for v in nxt) and parent[54] == 54
    assert all((gvisited[v >> 6] >> (v & 63)) & 1 for v in [54, 69, 70, 71, 86])
    # bottom-up over the local range: frontier bitmap global, visited local and exact
    front = np.zeros(2, np.int64)
    cpu.mark_queue(nxt, 0, front)
    lpar = parent[off:].copy()
    visited = np.zeros(1, np.int64)
    cpu.mark_queue(np.array([70, 69, 71, 86]), off, visited)
    nb = np.zeros(1, np.int64)
    hub = cpu.hub_neighbours(g)[off:]
    multi = cpu.degree_over_bitmap(loc_indptr, 1)
    awake, ex, deg, left = cpu.bu_step(loc_indptr, loc_indices, off, front, lpar, visited, nb, hub, visited, multi,
                                       False, True)
    got = sorted(off + b for b in range(64) if (nb[0] >> b) & 1)
    assert got == [68, 72, 85, 87, 102]
    assert awake == 5 and all(lpar[v - off] in nxt for v in got)
    assert deg == sum(np.diff(g.indptr)[got])
    q = cpu.bitmap_to_queue(nb, off)
    assert q.tolist() == got
    bm = np.zeros(1, np.int64)
    cpu.queue_to_bitmap(q, off, bm)
    assert bm[0] == nb[0]


@pytest.mark.parametrize("level", [1, 2, 3])
def test_bu_step_fill_writes_every_unreached_minus_one(level):
    """bu_step's ``fill`` on a parent array of garbage: afterwards it equals
    the plain step on a -1-filled array, entry for entry (vertices without
    edges, hub misses later found or not, words with nothing left to
    search), and the two steps agree on the new frontier and the counts."""
    from dbfs.generate.graph500 import kronecker_edges
    from dbfs.kernel1 import build_csr

    g = prepare(build_csr(kronecker_edges(12), n_vertices=1 << 12))
    n, root = g.n_vertices, int(np.argmax(np.diff(g.indptr)))
    lv = cpu.levels_from_parent(bfs(g, root, "seq-csr").parent, root)
    ref = bfs(g, root, "seq-csr").parent
    reached = (lv >= 0) & (lv <= level)
    bits = lambda mask: np.packbits(np.append(mask, np.zeros(-n % 64, bool)), bitorder="little").view(np.int64)
    front = bits(lv == level)
    no_edge = g.meta["_no_edge_bitmap"]
    runs = []
    for fill in (False, True):
        parent = np.where(reached, ref, -1 if not fill else 12345).astype(np.int64)
        visited = no_edge | bits(reached)
        nxt = np.zeros_like(front)
        out = cpu.bu_step(g.indptr, g.indices, 0, front, parent, visited, nxt, g.meta["_hub"], no_edge,
                          g.meta["_multi_bitmap"], fill, True)
        runs.append((parent, nxt, visited, out))
    (p0, n0, v0, o0), (p1, n1, v1, o1) = runs
    assert (p0 == 12345).sum() == 0 and (p1 == 12345).sum() == 0
    np.testing.assert_array_equal(p1, p0)
    np.testing.assert_array_equal(n1, n0)
    np.testing.assert_array_equal(v1, v0)
    assert o1 == o0
    assert ((p0 == -1) == ((lv < 0) | (lv > level + 1))).all()


def test_fill_unreached_writes_minus_one_outside_the_reached_set():
    """A do search that never goes bottom-up writes its -1s at the end:
    every vertex clear in ``visited`` or without edges gets -1, the others
    keep their parent (here on a garbage-filled array)."""
    n = 200
    rng = np.random.default_rng(3)
    reached = rng.random(n) < 0.4
    no_edge = rng.random(n) < 0.2
    bits = lambda mask: np.packbits(np.append(mask, np.ones(-n % 64, bool)), bitorder="little").view(np.int64)
    parent = np.where(reached, np.arange(n), 777).astype(np.int64)
    _fill_unreached(parent, bits(reached | no_edge), bits(no_edge))
    np.testing.assert_array_equal(parent, np.where(reached & ~no_edge, np.arange(n), -1))
    # and end to end: a top-down-only search of a graph with two components
    edges, n2, root, _ = HAND["two-components"]
    res = bfs(make_graph(edges, n2), root, "do", stats=True, alpha=1e-9)  # never bottom-up
    assert {r["direction"] for r in res.level_stats} == {"td"}
    assert validate(edges, root, res.parent).ok


@pytest.mark.parametrize("n, targets, f", [(1 << 14, 1 << 14, 2000), (1 << 16, 60, 8000)])
def test_td_step_parallel_path_dedupes(n, targets, f):
    """A frontier whose neighbourhoods overlap heavily, over the parallel path:
    a new frontier larger than the bitmap's word count (read from the
    bitmap) and, with every edge ending in one of ``targets`` vertices (one
    per 64-bit word, so racing claims record each at most once per thread:
    fewer records than words, deterministically) and the frontier outside
    them, a smaller one (gathered from the deduplicated records)."""
    rng = np.random.default_rng(11)
    stride = 1 if targets == n else 64
    edges = np.stack([rng.integers(0, n, 1 << 18), stride * rng.integers(0, targets, 1 << 18)], axis=1)
    g = make_graph(edges, n)
    lo = 0 if targets == n else stride * targets
    frontier = np.unique(rng.integers(lo, n, f)).astype(np.int64)
    parent = np.full(n, -1, np.int64)
    parent[frontier] = frontier
    visited = np.zeros(n >> 6, np.int64)
    cpu.mark_queue(frontier, 0, visited)
    nxt, examined = cpu.td_step(g.indptr, g.indices, 0, frontier, parent, visited)
    assert examined == np.diff(g.indptr)[frontier].sum() > cpu_topdown._TD_SERIAL_EDGES
    fset = set(frontier.tolist())
    want = set(g.indices[np.concatenate([np.arange(g.indptr[u], g.indptr[u + 1]) for u in frontier])].tolist()) - fset
    assert len(nxt) == len(set(nxt.tolist())) == len(want) and set(nxt.tolist()) == want
    adj = {int(u): set(g.indices[g.indptr[u]:g.indptr[u + 1]].tolist()) for u in frontier}
    assert all(int(parent[v]) in fset and v in adj[int(parent[v])] for v in nxt)
    assert all((visited[v >> 6] >> (v & 63)) & 1 for v in nxt)
    assert (len(nxt) > visited.shape[0]) == (targets == n)   # both paths taken
    assert _seen_bitmap(visited.shape[0]).sum() == 0      # left all zero
    # with `front`, a large new frontier is left there as a bitmap
    visited2 = np.zeros(n >> 6, np.int64)
    cpu.mark_queue(frontier, 0, visited2)
    front = np.full(n >> 6, -1, np.int64)                    # any contents on entry
    q2, ex2 = cpu.td_step(g.indptr, g.indices, 0, frontier, parent.copy(), visited2, front)
    assert ex2 == examined
    if targets == n:
        assert q2 is None
        np.testing.assert_array_equal(cpu.bitmap_to_queue(front, 0), np.sort(nxt))
        assert cpu.bitmap_degrees(front, g.indptr) == (len(nxt), np.diff(g.indptr)[nxt].sum())
    else:
        assert set(q2.tolist()) == want
    np.testing.assert_array_equal(visited2, visited)


def test_bitmap_helpers_large():
    n = 1 << 22  # big enough for the parallel paths
    rng = np.random.default_rng(5)
    q = np.unique(rng.integers(0, n, 300_000))
    bm = np.zeros(n >> 6, np.int64)
    cpu.queue_to_bitmap(q, 0, bm)
    np.testing.assert_array_equal(cpu.bitmap_to_queue(bm, 0), q)
    np.testing.assert_array_equal(cpu.bitmap_to_queue(bm, 128), q + 128)
    indptr = np.cumsum(np.append(0, rng.integers(0, 50, n)))
    deg = np.diff(indptr)
    m = int(deg[q].sum())
    small = q[:1000]
    for cap in (None, m, m - 1, 10_000, 0):
        # exact when the sum is <= cap, else some value > cap (stops early)
        for got, want in [(cpu.frontier_edges(indptr, 0, q, cap), m),
                          (cpu.frontier_edges(indptr, 0, small, cap), int(deg[small].sum())),
                          (cpu.bitmap_degrees(bm, indptr, cap), (q.size, m))]:
            if cap is None or np.max(want) <= cap:
                assert got == want
            elif isinstance(want, tuple):
                assert got[0] == want[0] and cap < got[1] <= want[1]
            else:
                assert cap < got <= want


_NO_LOAD_SCRIPT = r"""
import sys, numpy as np
from numba.core.registry import CPUDispatcher
from dbfs.bfs import bfs, cpu
from dbfs.bfs.cpu import algorithms
from dbfs.generate.graph500 import kronecker_edges
from dbfs.kernel1 import build_csr
from dbfs.roots import graph500_roots

if sys.argv[1] == "off":
    algorithms.warm_kernels = lambda indptr, indices: None   # the search as it was without it
edges = kronecker_edges(16)
roots = graph500_roots(edges, 16, n=16).tolist()
g = build_csr(edges, n_vertices=1 << 16)
mods = [m for name, m in sorted(sys.modules.items()) if name.startswith("dbfs.bfs.cpu.")]
sigs = lambda: {f"{m.__name__}.{k}": len(v.signatures) for m in mods for k, v in vars(m).items()
                if isinstance(v, CPUDispatcher)}
runs = [("do", {}), ("do", {"policy": "change_state"}), ("td", {}), ("bu", {}), ("spmv", {})]
for a, o in runs:
    bfs(g, roots[0], a, **o)                             # the harness's one warm-up search
before = sigs()
for a, o in runs:
    for r in roots[1:]:
        bfs(g, r, a, **o)
print(sorted(k for k, v in sigs().items() if v != before[k]))
"""


def test_after_one_search_no_search_loads_a_kernel():
    """One warm-up search loads every kernel the searches use (Numba
    compiles or loads a kernel on its first call, inside a timed search
    otherwise): in a fresh process, after one search per
    algorithm, 15 more roots each load nothing. Without warm_kernels the
    same run does load kernels inside later searches (the check can fail)."""
    import subprocess
    import sys

    def loaded(mode):
        out = subprocess.run([sys.executable, "-c", _NO_LOAD_SCRIPT, mode], capture_output=True, text=True,
                             check=True)
        return out.stdout.strip().splitlines()[-1]

    assert loaded("on") == "[]"
    assert loaded("off") != "[]"


@pytest.mark.parametrize("algorithm", ["td", "do", "spmv"])
def test_top_down_levels_claimed_in_pieces(s16, golden16, monkeypatch, algorithm):
    """A top-down level wider than ``_TD_PIECE`` edges claims piece by piece
    (bounded record buffer); here pieces of 3000 edges (SCALE 16's levels
    have up to ~1M), so every wide level takes that path: the searches still
    validate with the golden nedge and the plain BFS's levels."""
    edges, g, oracle = s16
    monkeypatch.setattr(cpu_topdown, "_TD_PIECE", 3000)
    for root, nedge in list(zip(golden16["roots"], golden16["nedge_v3"]))[:6]:
        check_search(edges, 1 << 16, g, root, algorithm, {}, nedge, oracle[root])


@pytest.mark.parametrize("algorithm,opts", VARIANTS, ids=IDS)
def test_parent_pool_reuses_only_released_arrays(golden10, oracle10, algorithm, opts):
    """``parent_array`` hands a pooled parent array out again only once the
    caller dropped it and every view of it: a held result is never
    overwritten by later searches, a reused array (stale parents of another
    root inside) still gives a valid search, and the pool keeps at most
    ``_PARENT_POOL_KEEP`` arrays."""
    edges = golden10["edges"]
    g = make_graph(edges, 1 << 10)
    r = list(zip(golden10["roots"], golden10["nedge_v3"]))[:6]

    def search(i):
        res = bfs(g, r[i][0], algorithm, **opts)
        check = validate(edges, r[i][0], res.parent, n_vertices=1 << 10)
        assert check.ok and check.nedge == r[i][1], check.summary()
        np.testing.assert_array_equal(check.levels, oracle10[r[i][0]])
        return res.parent

    def addr(a):
        return a.__array_interface__["data"][0]

    p0 = search(0)
    kept = p0.copy()
    p1 = search(1)                              # p0 held: a second array
    p2 = search(2)                              # both pooled arrays held: a fresh, unpooled one
    assert len({addr(p0), addr(p1), addr(p2)}) == 3
    np.testing.assert_array_equal(p0, kept)     # later searches left the held result alone
    assert len(g.meta["_parent_pool"]) == _PARENT_POOL_KEEP
    a0, a1 = addr(p0), addr(p1)
    view = p1[::2]
    del p0, p1
    p3 = search(3)                              # p0's array is free, p1's still has a view
    assert addr(p3) == a0
    p4 = search(4)
    assert addr(p4) not in (a0, a1)
    del view, p4
    p5 = search(5)
    assert addr(p5) == a1


def test_reserved_parent_pool_serves_a_held_batch(golden10):
    """``reserve_parents(g, k)`` keeps ``k`` pooled arrays, paged in (all -1) before any search: ``k - 1``
    held results (the CPU backend's validation batch) and the search after them all get pooled arrays, none a
    fresh one; once the batch is dropped the same arrays serve the next one, and every search validates."""
    edges = golden10["edges"]
    g = make_graph(edges, 1 << 10)
    reserve_parents(g, 4)
    pool = g.meta["_parent_pool"]
    assert len(pool) == 4 and all((a == -1).all() for a in pool)
    ids = {id(a) for a in pool}
    r = list(zip(golden10["roots"], golden10["nedge_v3"]))
    for batch in (r[:4], r[4:8]):
        held = []
        for root, nedge in batch:
            res = bfs(g, root, "do")
            check = validate(edges, root, res.parent, n_vertices=1 << 10)
            assert check.ok and check.nedge == nedge, check.summary()
            held.append(res.parent)
            del res
        assert {id(a) for a in held} <= ids and len({id(a) for a in held}) == 4
        del held
    assert len(g.meta["_parent_pool"]) == 4
    reserve_parents(g, 1)                       # fewer than kept: nothing changes
    assert len(g.meta["_parent_pool"]) == 4 and g.meta["_parent_keep"] == 4


def test_cpu_backend_searches_a_batch_in_pooled_parents(tmp_path):
    """``--backend cpu`` on a plain CSR: after its warm-up, every search of a validation batch (whose parents it
    holds until ``validate_many``) gets an array of the graph's pool, the batch validates, and the next batch
    reuses the same arrays; no fresh parent array is mapped inside a timed search."""
    from dbfs.backends import RunConfig
    from dbfs.pipeline import open_backend
    from dbfs.spec import GraphSpec

    b, ds, _, _ = open_backend(GraphSpec.make("kronecker", 10), tmp_path, RunConfig(n_roots=8, quiet=True))
    try:
        b.warm()
        k = b.validate_batch
        assert b.graph.perm is None and k > 1
        pool = {id(a) for a in b.graph.meta["_parent_pool"]}
        assert len(pool) == k + 1
        roots = [int(r) for r in np.unique(np.asarray(ds.edges()[:64]).ravel())[:2 * k]]
        for batch in (roots[:k], roots[k:]):
            for r in batch:
                b.search(r)
                assert id(b.parent) in pool
            assert all(v.ok for v in b.validate_many(batch))
        assert {id(a) for a in b.graph.meta["_parent_pool"]} == pool
    finally:
        b.close()


def test_internal_parents_map_to_the_original_ones():
    """``bfs(original=False)`` gives a relabelled graph's parents over its internal ids (what the CPU
    backend times); ``graph.to_original`` of them is the default result, and the tree is valid."""
    from dbfs.generate.graph500 import kronecker_edges
    from dbfs.kernel1 import build_csr

    edges = kronecker_edges(10)
    g = prepare(build_csr(edges, n_vertices=1 << 10, relabel="degree"))
    root = int(edges[0, 0])
    inner = bfs(g, root, original=False)
    outer = bfs(g, root)
    assert g.perm is not None and not np.array_equal(inner.parent, outer.parent)
    assert np.array_equal(g.to_original(inner.parent), outer.parent)
    assert validate(edges, root, outer.parent, n_vertices=1 << 10).ok
    with pytest.raises(DbfsError, match="original"):
        bfs(g, root, levels=True, original=False)

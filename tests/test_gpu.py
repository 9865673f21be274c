"""GPU backend (CuPy): BFS algorithms, generator and Kernel 1.

Invariants checked, never identical parent arrays: every GPU parent array
validates against the INPUT edge list (dbfs.validate), its nedge equals the
reference's ``nedge_v3`` where one exists, and the levels it implies equal
the NumPy oracle's (SCALE 10, hand-made graphs, the grid) or the CPU
backend's (SCALE 16). The GPU generator must give the CPU generator's bytes
and GPU Kernel 1 the CPU Kernel 1's bytes.

Tests marked ``gpu`` skip without cupy or a CUDA device. The two unmarked
tests run everywhere: they check that ``dbfs.bfs`` imports without cupy and
that asking for the gpu backend then fails with a DbfsError naming cupy.
"""
import hashlib
import importlib
import sys

import numpy as np
import pytest

import dbfs.bfs as bfs_pkg
from dbfs.bfs import bfs
from dbfs.bfs.reference import bfs_levels
from dbfs.errors import DbfsError
from dbfs.graph import CSRGraph
from dbfs.kernel1 import build_csr
from dbfs.validate import validate

ALGOS = ["harish", "td", "bu", "do"]
VARIANTS = [
    ("harish", {}),
    ("td", {}),
    ("bu", {}),
    ("do", {}),
    ("do", {"policy": "change_state"}),
    ("do", {"unexplored": "exact"}),
    ("do", {"alpha": 1e6, "beta": 2.0}),   # bottom-up at once, top-down once the frontier shrinks
]
IDS = [a + "".join(f"-{k}={v}" for k, v in o.items()) for a, o in VARIANTS]
HOST = [(a, {"device_memory_limit": 0}) for a in ALGOS]


# --------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def gpu(cp):
    return importlib.import_module("dbfs.bfs.gpu")


@pytest.fixture(scope="module")
def g10(golden10):
    return build_csr(golden10["edges"], n_vertices=1 << 10)


@pytest.fixture(scope="module")
def levels10(golden10):
    e = golden10["edges"]
    return {r: bfs_levels(e, r, 1 << 10) for r in golden10["roots"]}


@pytest.fixture(scope="module")
def s16(golden16):
    from dbfs.generate.graph500 import kronecker_edges

    e = kronecker_edges(16)
    return e, build_csr(e, n_vertices=1 << 16)


def check(edges, n, graph, root, algo, opts, ref_levels=None, nedge=None):
    r = bfs(graph, root, algo, backend="gpu", levels=True, **opts)
    assert r.parent.dtype == np.int64 and r.parent.shape == (n,)
    v = validate(edges, root, r.parent, n)
    assert v.ok, f"{algo} {opts} root {root}: {v.summary()}"
    ref = ref_levels if ref_levels is not None else bfs_levels(edges, root, n)
    np.testing.assert_array_equal(r.levels, ref, err_msg=f"{algo} {opts} root {root}: levels differ")
    if nedge is not None:
        assert v.nedge == nedge, f"{algo} {opts} root {root}: nedge {v.nedge} != {nedge}"
    return r


# ------------------------------------------------------ CPU-only (unmarked)
def test_import_dbfs_bfs_works_without_gpu():
    mod = importlib.import_module("dbfs.bfs")
    assert "do" in mod.algorithm_names("cpu")


def test_gpu_backend_without_cupy_raises_dbfs_error(monkeypatch):
    g = build_csr(np.array([[0, 1], [1, 2]]), n_vertices=3)
    monkeypatch.delitem(sys.modules, "dbfs.bfs.gpu", raising=False)
    monkeypatch.setitem(sys.modules, "cupy", None)   # `import cupy` now raises ImportError
    with pytest.raises(DbfsError, match="cupy"):
        bfs(g, 0, backend="gpu")


# ------------------------------------------------------------ BFS: SCALE 10
@pytest.mark.gpu
def test_gpu_algorithms_registered(gpu):
    from dbfs.backends.gpu import GpuBackend

    assert set(bfs_pkg.algorithm_names("gpu")) >= set(ALGOS)
    assert bfs_pkg.algorithm_names("gpu") == GpuBackend.algorithms(), "the backend lists the kernel table"
    assert GpuBackend.unavailable() is None


@pytest.mark.gpu
@pytest.mark.parametrize("algo,opts", VARIANTS, ids=IDS)
def test_scale10_every_root(gpu, golden10, g10, levels10, algo, opts):
    e = golden10["edges"]
    for root, ne in zip(golden10["roots"], golden10["nedge_v3"]):
        check(e, 1 << 10, g10, root, algo, opts, levels10[root], ne)


@pytest.mark.gpu
@pytest.mark.parametrize("algo,opts", HOST, ids=[f"{a}-host" for a, _ in HOST])
def test_scale10_host_memory_mode(gpu, golden10, levels10, algo, opts):
    e = golden10["edges"]
    g = build_csr(e, n_vertices=1 << 10)           # own graph: its device cache is host-mode
    for root, ne in list(zip(golden10["roots"], golden10["nedge_v3"]))[:16]:
        check(e, 1 << 10, g, root, algo, opts, levels10[root], ne)
    dg = g.meta["gpu"]
    assert dg.mode == "host"
    assert len(dg.keep) == 1 and dg.indices.data.ptr == dg.keep[0].ptr, "indices in mapped pinned host memory"
    assert dg.indptr.data.ptr != dg.keep[0].ptr, "indptr is a device copy, not the pinned buffer"


@pytest.mark.gpu
@pytest.mark.parametrize("algo", ALGOS)
def test_degree_relabelled_csr(gpu, golden10, levels10, algo):
    e = golden10["edges"]
    g = build_csr(e, n_vertices=1 << 10, relabel="degree")
    for root, ne in list(zip(golden10["roots"], golden10["nedge_v3"]))[:16]:
        check(e, 1 << 10, g, root, algo, {}, levels10[root], ne)


@pytest.mark.gpu
@pytest.mark.parametrize("algo", ALGOS)
def test_int64_indices(gpu, golden10, g10, levels10, algo):
    e = golden10["edges"]
    g = CSRGraph(g10.indptr, g10.indices.astype(np.int64), g10.n_vertices)
    for root in golden10["roots"][:8]:
        check(e, 1 << 10, g, root, algo, {}, levels10[root])
    assert (g.meta["gpu"].vid, g.meta["gpu"].ent) == ("int", "long long")     # ids by N, entries as stored


@pytest.mark.gpu
def test_device_graph_is_cached(gpu, g10):
    a = gpu.device_graph(g10)
    bfs(g10, 0, "do", backend="gpu")
    assert gpu.device_graph(g10) is a and g10.meta["gpu"] is a


@pytest.mark.gpu
def test_level_stats(gpu, golden10, g10):
    root = golden10["roots"][0]
    for algo in ALGOS:
        r = bfs(g10, root, algo, backend="gpu", stats=True)
        reached = int((r.parent >= 0).sum())
        assert sum(s["discovered"] for s in r.level_stats) + 1 == reached
        assert [s["level"] for s in r.level_stats] == list(range(len(r.level_stats)))
        assert all(s["direction"] in ("td", "bu") for s in r.level_stats)
        assert r.level_stats[-1]["discovered"] == 0


@pytest.mark.gpu
def test_search_timed_and_nedge(cp, gpu, golden10, g10):
    e = golden10["edges"]
    ed = cp.asarray(e)
    for root, ne in list(zip(golden10["roots"], golden10["nedge_v3"]))[:8]:
        parent, secs, rec = gpu.search_timed(g10, root, "do", stats=True)
        assert secs > 0 and rec
        assert validate(e, root, parent, 1 << 10).ok
        pdev, secs, _ = gpu.search_device(g10, root, "do")
        assert gpu.count_nedge(ed, pdev) == ne
    with pytest.raises(DbfsError):
        gpu.search_timed(g10, 1 << 10, "do")
    with pytest.raises(DbfsError):
        gpu.search_timed(g10, 0, "nope")


@pytest.mark.gpu
@pytest.mark.parametrize("n_f", [1, 2048, 2049, 5000, "limit", "limit+1", 20000])
def test_expand_small_and_large_frontiers(cp, gpu, n_f):
    """One top-down expansion on either side of the one-launch kernel's frontier bounds (its shared memory
    sized by the launch): every unvisited neighbour of the frontier claimed once, with a frontier vertex
    adjacent to it as its parent, and the counts the kernel reports."""
    n = 1 << 15
    rng = np.random.default_rng(5)
    e = rng.integers(0, n, size=(6 * n, 2), dtype=np.int64)
    g = build_csr(e, n_vertices=n)
    limit = gpu.td_small_limit()
    n_f = {"limit": limit, "limit+1": limit + 1}.get(n_f, n_f)
    front = np.sort(rng.choice(n, size=n_f, replace=False))
    visited0 = np.zeros(n, bool)
    visited0[front] = True
    visited0[rng.choice(n, size=n // 4, replace=False)] = True
    ip, ix = g.indptr, g.indices
    m_f = int((ip[front + 1] - ip[front]).sum())
    assert gpu.small_frontier(n_f, m_f) == (n_f <= limit)
    dg = gpu.device_graph(g)
    bits = np.packbits(visited0, bitorder="little").view(np.uint32)
    visited = cp.asarray(bits)
    parent = cp.full(n, -1, cp.int32)
    nxt = cp.full(n, -1, cp.int32)
    cnt = cp.zeros(4, cp.uint64)
    gpu.expand(dg.kernels, dg.indptr, dg.adj, cp.asarray(front.astype(np.int32)), n_f, m_f, visited, parent, nxt,
               cnt)
    c = cnt.get()
    want = np.unique(ix[np.concatenate([np.arange(ip[u], ip[u + 1]) for u in front])])
    want = want[~visited0[want]]
    got = np.sort(nxt.get()[:int(c[0])])
    np.testing.assert_array_equal(got, want)
    par = parent.get()
    assert (par[want] >= 0).all() and np.isin(par[want], front).all()
    for v in want[:200]:
        assert v in ix[ip[par[v]]:ip[par[v] + 1]]
    assert int(c[1]) == int((ip[want + 1] - ip[want]).sum())
    vis = np.unpackbits(visited.get().view(np.uint8), bitorder="little")[:n].astype(bool)
    np.testing.assert_array_equal(vis, visited0 | np.isin(np.arange(n), want))


@pytest.mark.gpu
def test_unknown_option_rejected(gpu, g10):
    with pytest.raises(DbfsError, match="option"):
        bfs(g10, 0, "td", backend="gpu", alpha=3)


# ------------------------------------------------------------ BFS: SCALE 16
@pytest.mark.gpu
@pytest.mark.parametrize("algo,opts", VARIANTS[:4] + [HOST[3]], ids=IDS[:4] + ["do-host"])
def test_scale16_roots(gpu, golden16, s16, algo, opts):
    e, g = s16
    pairs = list(zip(golden16["roots"], golden16["nedge_v3"]))
    if algo != "do" or opts:
        pairs = pairs[:8]
    if opts:
        g = build_csr(e, n_vertices=1 << 16)
    for root, ne in pairs:
        ref = bfs(g, root, "seq-csr", backend="cpu", levels=True).levels
        check(e, 1 << 16, g, root, algo, opts, ref, ne)


# ------------------------------------------------------ BFS: small graphs
def _path(n=10):
    return np.array([[i, i + 1] for i in range(n - 1)]), n


def _star(k=40):
    return np.array([[0, i] for i in range(1, k + 1)]), k + 1


def _two_components():
    return np.array([[0, 1], [1, 2], [3, 4], [4, 5], [5, 3]]), 6


def _isolated_root():
    return np.array([[1, 2], [2, 3], [3, 4], [4, 5]]), 6


def _root_island():
    # root 0's neighbourhood {1, 2} touches nothing else; a larger component beside it
    rest = [[i, i + 1] for i in range(3, 40)] + [[3, 39], [10, 30]]
    return np.array([[0, 1], [0, 2]] + rest), 41


def _loops_and_duplicates():
    return np.array([[2, 2], [1, 2], [1, 2], [2, 1], [0, 1], [3, 3], [2, 3], [0, 0]]), 5


def _hub(k=5000):
    # hub 0 with k leaves, each leaf with one pendant: long lists for the
    # load-balanced top-down and the warp-cooperative bottom-up
    e = [[0, i] for i in range(1, k + 1)] + [[i, i + k] for i in range(1, k + 1)]
    return np.array(e), 2 * k + 1


def _random(n=100, m=300):
    rng = np.random.default_rng(7)
    return rng.integers(0, n, size=(m, 2)), n


SMALL = {
    "path": (_path, [0, 5, 9]),
    "star": (_star, [0, 7]),
    "two-components": (_two_components, [0, 4]),
    "isolated-root": (_isolated_root, [0, 3]),
    "root-island": (_root_island, [0, 1, 20]),
    "loops-dups": (_loops_and_duplicates, [0, 2, 4]),
    "hub": (_hub, [0, 1, 10000]),
    "random": (_random, [0, 50, 99]),
}


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(SMALL))
@pytest.mark.parametrize("algo,opts", VARIANTS[:4] + [HOST[3]], ids=IDS[:4] + ["do-host"])
def test_small_graphs(gpu, name, algo, opts):
    make, roots = SMALL[name]
    e, n = make()
    g = build_csr(e, n_vertices=n)
    for root in roots:
        check(e, n, g, root, algo, opts)


@pytest.mark.gpu
@pytest.mark.parametrize("algo,opts", VARIANTS[:4], ids=IDS[:4])
def test_grid2d(gpu, algo, opts):
    from dbfs.generate.grid import grid_edges

    e = grid_edges("grid2d", 12)
    n = 1 << 12
    g = build_csr(e, n_vertices=n)
    for root in (0, 2080, n - 1):
        check(e, n, g, root, algo, opts)


# --------------------------------------------------------------- generator
@pytest.mark.gpu
def test_generator_scale10_golden(cp, golden10):
    from dbfs.generate.gpu import kronecker_edges_gpu

    out = kronecker_edges_gpu(10)
    assert out.dtype == cp.int64 and out.shape == (16384, 2)
    assert cp.asnumpy(out).tobytes() == np.ascontiguousarray(golden10["edges"], dtype=np.int64).tobytes()


@pytest.mark.gpu
def test_generator_scale16_sha256(cp, golden16):
    from dbfs.generate.gpu import kronecker_edges_gpu

    out = cp.asnumpy(kronecker_edges_gpu(16))
    assert hashlib.sha256(out.astype("<i8").tobytes()).hexdigest() == golden16["edges_sha256"]


@pytest.mark.gpu
@pytest.mark.parametrize("start,count,ept", [(15_000_001, 100_003, 16), (16_777_216 - 4099, 4099, 3),
                                             (0, 1, 1), (12_345_678, 70_000, 64)])
def test_generator_scale20_range(cp, start, count, ept):
    from dbfs.generate.graph500 import kronecker_edges
    from dbfs.generate.gpu import kronecker_edges_gpu

    got = cp.asnumpy(kronecker_edges_gpu(20, start=start, stop=start + count, edges_per_thread=ept))
    want = kronecker_edges(20, start=start, stop=start + count)
    assert got.tobytes() == want.tobytes()


@pytest.mark.gpu
@pytest.mark.parametrize("scale", [31, 32, 33, 40])
def test_generator_wide_scales_range(cp, scale):
    """Ids of 31 to 40 bits (SCALE 31-32 runs, and past 32 bits) match the CPU generator on a slice: the
    kernel's 32-bit state arithmetic and its id built by shifts hold for every width."""
    from dbfs.generate.graph500 import kronecker_edges
    from dbfs.generate.gpu import kronecker_edges_gpu

    start = (16 << scale) // 3 + 7
    got = cp.asnumpy(kronecker_edges_gpu(scale, start=start, stop=start + 50_000))
    want = kronecker_edges(scale, start=start, stop=start + 50_000)
    assert got.tobytes() == want.tobytes()
    assert int(want.max()) >= 1 << (scale - 1)      # the top bit is exercised


@pytest.mark.gpu
def test_generator_other_seeds_and_errors(cp):
    from dbfs.generate.graph500 import kronecker_edges
    from dbfs.generate.gpu import kronecker_edges_gpu

    got = cp.asnumpy(kronecker_edges_gpu(12, edgefactor=5, seed1=12345678901, seed2=2**64 - 1))
    assert got.tobytes() == kronecker_edges(12, edgefactor=5, seed1=12345678901, seed2=2**64 - 1).tobytes()
    assert kronecker_edges_gpu(10, start=5, stop=5).shape == (0, 2)
    with pytest.raises(DbfsError):
        kronecker_edges_gpu(10, start=0, stop=1 << 20)
    with pytest.raises(DbfsError):
        kronecker_edges_gpu(0)


# ---------------------------------------------------------------- Kernel 1
def _same_csr(a, b):
    assert a.n_vertices == b.n_vertices
    assert a.indptr.dtype == b.indptr.dtype and a.indices.dtype == b.indices.dtype
    assert a.indptr.tobytes() == b.indptr.tobytes()
    assert a.indices.tobytes() == b.indices.tobytes()


@pytest.mark.gpu
@pytest.mark.parametrize("kw", [{}, {"dedupe": False}, {"n_vertices": 1100}, {"chunk_entries": 1000},
                                {"chunk_entries": 777, "dedupe": False}])
def test_kernel1_scale10(cp, golden10, kw):
    from dbfs.kernel1.gpu import build_csr_gpu

    e = golden10["edges"]
    cpu = build_csr(e, **{k: v for k, v in kw.items() if k != "chunk_entries"})
    _same_csr(build_csr_gpu(e, **kw), cpu)
    _same_csr(build_csr_gpu(cp.asarray(e), **kw), cpu)
    _same_csr(build_csr_gpu(e.astype(np.uint32), **kw), cpu)


@pytest.mark.gpu
def test_kernel1_scale16_from_gpu_generator(cp, s16):
    from dbfs.generate.gpu import kronecker_edges_gpu
    from dbfs.kernel1.gpu import build_csr_gpu

    e, g = s16
    got = build_csr_gpu(kronecker_edges_gpu(16), n_vertices=1 << 16)
    _same_csr(got, g)
    _same_csr(build_csr_gpu(kronecker_edges_gpu(16), chunk_entries=100_000), g)


@pytest.mark.gpu
def test_kernel1_small_and_errors(cp):
    from dbfs.kernel1.gpu import build_csr_gpu

    for e, n in (_loops_and_duplicates(), _two_components(), _hub(50)):
        _same_csr(build_csr_gpu(e), build_csr(e))
        _same_csr(build_csr_gpu(e, n_vertices=n + 7, dedupe=False), build_csr(e, n_vertices=n + 7, dedupe=False))
    empty = build_csr_gpu(np.zeros((0, 2), np.int64), n_vertices=3)
    assert empty.indptr.tolist() == [0, 0, 0, 0] and empty.indices.size == 0
    with pytest.raises(DbfsError):
        build_csr_gpu(np.array([[0, -1]]))
    with pytest.raises(DbfsError):
        build_csr_gpu(np.array([[0, 5]]), n_vertices=3)
    with pytest.raises(DbfsError):
        build_csr_gpu(np.zeros((3, 3), np.int64))


@pytest.mark.gpu
def test_kernel1_device_csr_feeds_bfs(cp, gpu, golden10, levels10):
    from dbfs.kernel1.gpu import build_csr_gpu

    e = golden10["edges"]
    for to_host in (True, False):
        g = build_csr_gpu(cp.asarray(e), n_vertices=1 << 10, to_host=to_host)
        dg = gpu.device_graph(g)
        assert dg.indptr is g.meta["gpu_csr"][0] and dg.mode == "device"
        for root, ne in list(zip(golden10["roots"], golden10["nedge_v3"]))[:8]:
            for algo in ALGOS:
                check(e, 1 << 10, g, root, algo, {}, levels10[root], ne)

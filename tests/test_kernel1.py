"""Kernel 1 tests: edge list -> CSR, in memory and partitioned out of core.

The oracle is scipy.sparse: the symmetrised adjacency of the edge list with
self-loops dropped, deduplicated (data set to 1) or with multiplicities (the
count of tuples (u, v) plus (v, u)), rows sorted. Every dataset here is a real
zarr v3 group in a pytest temp dir, built with :func:`make_dataset`.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import zarr
from zarr.codecs import ZstdCodec

from dbfs.errors import DbfsError
from dbfs.kernel1 import (build_csr, build_partitioned, list_variants, load_csr, load_partition, load_perm,
                          parse_variant, raw_degree, variant_name)
from dbfs.partition import Partitioning

# ---------------------------------------------------------------- helpers
def make_dataset(path, edges, n_vertices, chunk_rows, dtype=np.uint32):
    """A zarr v3 dataset group: ``edges`` (M, 2) chunked by rows + {n_vertices, n_edges, complete}."""
    g = zarr.open_group(str(path), mode="w")
    g.create_array("edges", data=np.asarray(edges).astype(dtype), chunks=(int(chunk_rows), 2),
                   compressors=[ZstdCodec(level=1)])
    g.attrs.update({"n_vertices": int(n_vertices), "n_edges": int(len(edges)), "complete": True})
    return Path(path)


def reference(edges, n, dedupe=True):
    """(indptr, indices) of the scipy oracle; with dedupe=False each v repeats its multiplicity."""
    u, v = edges[:, 0].astype(np.int64), edges[:, 1].astype(np.int64)
    keep = u != v
    r = np.concatenate([u[keep], v[keep]])
    c = np.concatenate([v[keep], u[keep]])
    A = sp.csr_matrix((np.ones(r.size, np.int64), (r, c)), shape=(n, n))
    A.sum_duplicates()
    A.sort_indices()
    if dedupe:
        return A.indptr.astype(np.int64), A.indices.astype(np.int64)
    mult = A.data
    deg = np.add.reduceat(mult, A.indptr[:-1]) if mult.size else np.zeros(n, np.int64)
    deg[np.diff(A.indptr) == 0] = 0
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(deg, out=indptr[1:])
    return indptr, np.repeat(A.indices.astype(np.int64), mult)


def powerlaw_edges(scale, edgefactor=16, seed=7):
    """Seeded R-MAT (0.57, 0.19, 0.19) with scrambled ids: a skewed stand-in for Kronecker."""
    rng = np.random.default_rng(seed)
    m = edgefactor << scale
    u = np.zeros(m, np.int64)
    v = np.zeros(m, np.int64)
    for _ in range(scale):
        x = rng.random(m)
        u = (u << 1) | (x >= 0.76)
        v = (v << 1) | (((x >= 0.57) & (x < 0.76)) | (x >= 0.95))
    perm = rng.permutation(1 << scale)
    return np.stack([perm[u], perm[v]], axis=1)


def kron(scale):
    try:
        from dbfs.generate.graph500 import kronecker_edges
    except ImportError:
        return powerlaw_edges(scale)
    return np.asarray(kronecker_edges(scale), dtype=np.int64)


def read_variant(path, variant):
    """Every array of a stored variant, by relative name (for byte comparisons)."""
    root = Path(path) / "csr" / variant
    attrs = json.loads((root / "zarr.json").read_text())["attributes"]
    out = {}
    for j in range(attrs["P"]):
        for a in ("indptr", "indices"):
            z = zarr.open_array(str(root / f"part-{j:04d}" / a), mode="r")
            out[f"{j}/{a}"] = (z.dtype, z[:])
    if (root / "perm").exists():
        out["perm"] = (np.dtype(np.int64), zarr.open_array(str(root / "perm"), mode="r")[:])
    return out


def assert_same_variant(x, y):
    assert x.keys() == y.keys()
    for k in x:
        assert x[k][0] == y[k][0], k
        assert x[k][1].tobytes() == y[k][1].tobytes(), k


def edge_set(indptr, indices, relabel=None):
    """Directed entries as sorted (u, v) int64 pairs, optionally mapped through ``relabel``."""
    u = np.repeat(np.arange(indptr.size - 1), np.diff(indptr))
    v = indices.astype(np.int64)
    if relabel is not None:
        u, v = relabel[u], relabel[v]
    key = u * (indptr.size - 1) + v
    return np.sort(key)


# ---------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def e10(golden10):
    """The Graph500 reference SCALE 10 edge list (conftest: tests/golden), int64 (16384, 2)."""
    return golden10["edges"]


@pytest.fixture(scope="module")
def e14():
    return kron(14)


@pytest.fixture(scope="module")
def ds10(tmp_path_factory, e10):
    return make_dataset(tmp_path_factory.mktemp("k1") / "kron-s10", e10, 1 << 10, chunk_rows=3000)


@pytest.fixture(scope="module")
def ds14(tmp_path_factory, e14):
    return make_dataset(tmp_path_factory.mktemp("k1") / "kron-s14", e14, 1 << 14, chunk_rows=40000)


# ---------------------------------------------------------------- partition
@pytest.mark.parametrize("kind", ["block", "cyclic"])
@pytest.mark.parametrize("N,P", [(0, 1), (1, 3), (10, 3), (1024, 4), (1025, 4), (7, 7), (5, 8)])
def test_partitioning_covers_each_vertex_once(N, P, kind):
    part = Partitioning(N, P, kind)
    owned = [part.owned_vertices(j) for j in range(P)]
    allv = np.concatenate(owned) if owned else np.zeros(0, np.int64)
    assert np.array_equal(np.sort(allv), np.arange(N)), "partitions must cover [0, N) exactly once"
    sizes = part.counts()
    assert sizes.max() - sizes.min() <= 1, "sizes differ by at most one"
    if kind == "block":
        assert list(sizes) == [N // P + (1 if j < N % P else 0) for j in range(P)], "first N % P get one more"
        assert all(np.array_equal(o, np.arange(len(o)) + part.vertex_range(j).start) for j, o in enumerate(owned))
        starts = part.block_starts()
        assert all(np.array_equal(o, np.arange(starts[j], starts[j + 1])) for j, o in enumerate(owned))
        assert starts[-1] == N
    else:
        with pytest.raises(ValueError, match="cyclic"):
            part.block_starts()
    for j, o in enumerate(owned):
        assert len(o) == part.local_count(j)
        if len(o):
            own, loc = part.owner_local(o)
            assert (own == j).all() and np.array_equal(loc, np.arange(len(o)))
            assert np.array_equal(part.to_global(j, loc), o)
            assert part.owner(int(o[-1])) == j and part.local(int(o[-1])) == len(o) - 1
            assert part.to_global(j, len(o) - 1) == int(o[-1])


def test_partitioning_rejects_bad_arguments():
    with pytest.raises(DbfsError, match="partitioning"):
        Partitioning(10, 2, "random")
    with pytest.raises(DbfsError, match="P=0"):
        Partitioning(10, 0)


# ---------------------------------------------------------------- in memory
@pytest.mark.parametrize("dedupe", [True, False])
@pytest.mark.parametrize("which", ["s10", "s14"])
def test_build_csr_equals_scipy(which, dedupe, e10, e14):
    edges, n = (e10, 1 << 10) if which == "s10" else (e14, 1 << 14)
    g = build_csr(edges, dedupe=dedupe)
    ip, ix = reference(edges, n if g.n_vertices == n else g.n_vertices, dedupe)
    assert g.n_vertices == int(edges.max()) + 1, "n_vertices=None means max id + 1"
    assert g.indptr.dtype == np.int64 and g.indices.dtype == np.int32
    assert np.array_equal(g.indptr, ip)
    assert np.array_equal(g.indices, ix)


def test_build_csr_independent_of_threads_order_and_dtype(e14):
    import numba

    n = 1 << 14
    base = build_csr(e14, n_vertices=n)
    old = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = build_csr(e14, n_vertices=n)
    finally:
        numba.set_num_threads(old)
    shuffled = e14[np.random.default_rng(1).permutation(len(e14))][:, ::-1]
    for g in (one, build_csr(shuffled, n_vertices=n), build_csr(e14.astype(np.uint32), n_vertices=n)):
        assert g.indptr.tobytes() == base.indptr.tobytes()
        assert g.indices.tobytes() == base.indices.tobytes()


def test_build_csr_vertex_count_and_bad_input(e10):
    g = build_csr(e10, n_vertices=2000)
    assert g.n_vertices == 2000 and (g.degree()[1024:] == 0).all(), "extra vertices are isolated"
    with pytest.raises(DbfsError, match="outside"):
        build_csr(e10, n_vertices=100)
    with pytest.raises(DbfsError, match="negative"):
        build_csr(np.array([[0, -1]]))
    with pytest.raises(DbfsError, match="shape"):
        build_csr(np.zeros((4, 3), np.int64))
    with pytest.raises(DbfsError, match="relabel"):
        build_csr(e10, relabel="random")
    empty = build_csr(np.zeros((0, 2), np.int64), n_vertices=5)
    assert np.array_equal(empty.indptr, np.zeros(6)) and empty.indices.size == 0
    loops = build_csr(np.array([[3, 3], [3, 3]]))
    assert loops.n_vertices == 4 and loops.nnz == 0, "self-loops are dropped"


@pytest.mark.parametrize("dedupe", [True, False])
def test_relabel_is_an_isomorphism_by_descending_degree(e14, dedupe):
    n = 1 << 14
    g = build_csr(e14, n_vertices=n, dedupe=dedupe)
    r = build_csr(e14, n_vertices=n, dedupe=dedupe, relabel="degree")
    assert r.perm.dtype == np.int64 and np.array_equal(np.sort(r.perm), np.arange(n))
    assert np.array_equal(r.iperm[r.perm], np.arange(n)), "iperm[perm[new]] == new"
    d = raw_degree(e14, n)[r.perm]
    assert (np.diff(d) <= 0).all(), "new ids by descending raw degree"
    ties = np.diff(d) == 0
    assert (np.diff(r.perm)[ties] > 0).all(), "ties broken by original id ascending"
    for v in range(0, n, 97):
        row = r.indices[r.indptr[v]:r.indptr[v + 1]]
        assert (np.diff(row) >= 0).all(), "rows ascending in new id = heavy neighbours first"
    assert np.array_equal(edge_set(r.indptr, r.indices, r.perm), edge_set(g.indptr, g.indices)), \
        "relabelled graph maps onto the original through perm"


# ---------------------------------------------------------------- partitioned
def check_against_reference(ds, variant, edges, n, dedupe=True):
    ip, ix = reference(edges, n, dedupe)
    attrs = json.loads((Path(ds) / "csr" / variant / "zarr.json").read_text())["attributes"]
    part = Partitioning(n, attrs["P"], attrs["partitioning"])
    seen = []
    for j in range(attrs["P"]):
        pip, pix, meta = load_partition(ds, variant, j)
        rows = part.owned_vertices(j)
        seen.append(rows)
        assert meta["vertex_range"] == part.vertex_range(j) and meta["load_time"] >= 0
        assert pip.dtype == np.int64 and pix.dtype == np.int32
        assert np.array_equal(np.diff(pip), ip[rows + 1] - ip[rows]), f"degrees of part {j}"
        want = np.concatenate([ix[ip[v]:ip[v + 1]] for v in rows]) if rows.size else ix[:0]
        assert np.array_equal(pix, want), f"neighbours (global ids) of part {j}"
    assert np.array_equal(np.sort(np.concatenate(seen)), np.arange(n)), "partitions cover [0, N)"
    g = load_csr(ds, variant)
    assert np.array_equal(g.indptr, ip) and np.array_equal(g.indices, ix)
    assert attrs["nnz_total"] == ip[-1] and attrs["complete"] is True


@pytest.mark.parametrize("kind", ["block", "cyclic"])
@pytest.mark.parametrize("P", [1, 2, 3, 4])
def test_partitioned_equals_scipy_s14(ds14, e14, P, kind):
    a = build_partitioned(ds14, P=P, partitioning=kind, progress=False)
    assert a["variant"] == f"p{P}-{kind}" and a["reused"] is False
    check_against_reference(ds14, a["variant"], e14, 1 << 14)
    if kind == "block":
        assert a["vertex_ranges"] == [[r.start, r.stop] for r in
                                      (Partitioning(1 << 14, P).vertex_range(j) for j in range(P))]


@pytest.mark.parametrize("P,kind,dedupe", [(1, "block", True), (3, "cyclic", True), (2, "block", False),
                                           (4, "cyclic", False)])
def test_partitioned_equals_scipy_s10(ds10, e10, P, kind, dedupe):
    a = build_partitioned(ds10, P=P, partitioning=kind, dedupe=dedupe, progress=False)
    check_against_reference(ds10, a["variant"], e10, 1 << 10, dedupe)
    deg = np.diff(reference(e10, 1 << 10, dedupe)[0])
    assert a["degree"] == {"min": int(deg.min()), "max": int(deg.max()), "mean": deg.sum() / deg.size,
                           "isolated": int((deg == 0).sum())}
    assert a["options"]["dedupe"] is dedupe and a["construction_time"] > 0
    assert {"checksums", "nnz", "dbfs_version", "P", "partitioning"} <= a.keys()


def test_partitioned_bytes_independent_of_edge_chunking(tmp_path, e14):
    variants = []
    for rows in (16384, 7777, 262144):
        ds = make_dataset(tmp_path / f"c{rows}", e14, 1 << 14, chunk_rows=rows)
        a = build_partitioned(ds, P=3, partitioning="cyclic", progress=False)
        variants.append(read_variant(ds, a["variant"]))
    assert_same_variant(variants[0], variants[1])
    assert_same_variant(variants[0], variants[2])


def test_partitioned_relabel_matches_in_memory(tmp_path, e14):
    n = 1 << 14
    ds = make_dataset(tmp_path / "d", e14, n, chunk_rows=50000)
    a = build_partitioned(ds, P=2, partitioning="block", relabel="degree", progress=False)
    assert a["variant"] == "p2-block-deg"
    r = build_csr(e14, n_vertices=n, relabel="degree")
    g = load_csr(ds, "p2-block-deg")
    assert np.array_equal(g.perm, r.perm) and np.array_equal(load_perm(ds, "p2-block-deg"), r.perm)
    assert np.array_equal(g.indptr, r.indptr) and np.array_equal(g.indices, r.indices)
    ip, ix = reference(e14, n)
    assert np.array_equal(edge_set(g.indptr, g.indices, g.perm), edge_set(ip, ix)), "isomorphic via perm"
    assert load_perm(ds, build_partitioned(ds, P=1, progress=False)["variant"]) is None


def test_memory_budget_splits_into_subranges(tmp_path, e14):
    ds = make_dataset(tmp_path / "d", e14, 1 << 14, chunk_rows=16384)
    whole = build_partitioned(ds, P=2, progress=False)
    assert whole["subranges"] == [1, 1]
    ref = read_variant(ds, "p2-block")
    shutil.rmtree(ds / "csr" / "p2-block")
    small = build_partitioned(ds, P=2, memory_budget=1 << 19, progress=False)
    assert sum(small["subranges"]) > 2 and small["tasks"]["rows"] > 2, "a small budget cuts sub-ranges"
    assert small["tasks"]["bucket"] >= whole["tasks"]["bucket"], "edge slices never grow with the budget"
    assert small["options"]["memory_budget"] == 1 << 19
    assert_same_variant(read_variant(ds, "p2-block"), ref)
    with pytest.raises(DbfsError, match="memory budget"):
        build_partitioned(ds, P=2, partitioning="cyclic", memory_budget=1 << 10, progress=False)
    assert not list((ds / "csr").glob(".p2-cyclic*")), "a failed build leaves no temp dir"


def test_scratch_elsewhere_same_bytes_and_buckets_gone_before_the_write(tmp_path, e14, monkeypatch):
    """``scratch=DIR`` holds the build's scratch outside the dataset, gives the same bytes, and is emptied; the
    bucket files are gone before phase 3 writes the CSR (the disk never holds buckets, rows and CSR at once)."""
    import dbfs.kernel1.partitioned as kp

    ds = make_dataset(tmp_path / "d", e14, 1 << 14, chunk_rows=16384)
    ref = read_variant(ds, build_partitioned(ds, P=3, relabel="degree", progress=False)["variant"])
    shutil.rmtree(ds / "csr" / "p3-block-deg")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    seen = []
    real = kp._phase_write

    def spy(tmp, scr, *a, **k):
        seen.append((Path(scr).parent, sorted(p.suffix for p in Path(scr).iterdir())))
        return real(tmp, scr, *a, **k)

    monkeypatch.setattr(kp, "_phase_write", spy)
    a = build_partitioned(ds, P=3, relabel="degree", progress=False, scratch=scratch)
    assert_same_variant(read_variant(ds, a["variant"]), ref)
    (parent, suffixes), = seen
    assert parent == scratch and set(suffixes) == {".ptr", ".idx"}, suffixes
    assert list(scratch.iterdir()) == [], "the build's scratch is removed"
    assert sorted(p.name for p in (ds / "csr").iterdir() if p.is_dir()) == ["p3-block-deg"], "no leftovers"


def test_scratch_must_exist_and_bounds_add_up(tmp_path, e10):
    from dbfs.kernel1.partitioned import _need_bytes, scratch_bytes

    ds = make_dataset(tmp_path / "d", e10, 1 << 10, chunk_rows=5000)
    with pytest.raises(DbfsError, match=r"^scratch directory .*nowhere does not exist: create it"):
        build_partitioned(ds, P=2, progress=False, scratch=tmp_path / "nowhere")
    assert not (ds / "csr").exists() or not list((ds / "csr").iterdir()), "nothing written"
    M, N, P = 1 << 31, 1 << 27, 16
    buckets, rows = scratch_bytes(M, N, 4, 4)
    assert (buckets, rows) == (32 << 30, (16 << 30) + (1 << 30))
    out = 2 * M * 4 + 8 * (N + P) + 8 * N
    assert _need_bytes(M, N, P, 4, 4) == rows + max(buckets, out) < buckets + rows + out
    assert _need_bytes(M, N, P, 4, 4, separate=True) == out


def test_reuse_and_rebuild_after_interruption(tmp_path, e10):
    ds = make_dataset(tmp_path / "kron-s10-ef16-s2-3", e10, 1 << 10, chunk_rows=5000)
    first = build_partitioned(ds, P=4, progress=False)
    again = build_partitioned(ds, P=4, progress=False)
    assert again["reused"] is True and again["construction_time"] == first["construction_time"]
    # interrupted: the marker is gone -> loading refuses, building rebuilds
    zj = ds / "csr" / "p4-block" / "zarr.json"
    meta = json.loads(zj.read_text())
    del meta["attributes"]["complete"]
    zj.write_text(json.dumps(meta))
    assert [(v["name"], v["complete"]) for v in list_variants(ds)] == [("p4-block", False)]
    with pytest.raises(DbfsError, match=r"incomplete: rebuild it with `dbfs build kron-s10-ef16-s2-3 --partitions 4`"):
        load_partition(ds, "p4-block", 0)
    # a half-written temp dir of a killed build is ignored and removed
    junk = ds / "csr" / ".p4-block.tmp-deadbeef" / "part-0000"
    junk.mkdir(parents=True)
    (junk / "garbage").write_bytes(b"x" * 10)
    rebuilt = build_partitioned(ds, P=4, progress=False)
    assert rebuilt["reused"] is False and rebuilt["complete"] is True
    assert not (ds / "csr" / ".p4-block.tmp-deadbeef").exists()
    assert [v["name"] for v in list_variants(ds) if v["complete"]] == ["p4-block"]
    assert sorted(p.name for p in (ds / "csr").iterdir() if p.is_dir()) == ["p4-block"], "no leftovers"
    check_against_reference(ds, "p4-block", e10, 1 << 10)
    assert (ds / "edges" / "zarr.json").exists() and json.loads((ds / "zarr.json").read_text())["attributes"][
        "complete"] is True, "edges untouched"


def test_load_detects_damage(tmp_path, e10):
    ds = make_dataset(tmp_path / "d", e10, 1 << 10, chunk_rows=5000)
    build_partitioned(ds, P=2, progress=False)
    z = zarr.open_array(str(ds / "csr" / "p2-block" / "part-0001" / "indices"), mode="r+")
    z[:5] = z[5:10]
    with pytest.raises(DbfsError, match="corrupt.*checksum.*rebuild it with `dbfs build d --partitions 2`"):
        load_partition(ds, "p2-block", 1)
    for f in (ds / "csr" / "p2-block" / "part-0000" / "indptr" / "c").iterdir():
        f.unlink()   # missing chunks read back as the fill value
    with pytest.raises(DbfsError, match="corrupt"):
        load_csr(ds, "p2-block")
    with pytest.raises(DbfsError, match="does not exist: build it with `dbfs build d --partitions 3 "
                                        "--partitioning cyclic --keep-duplicates --relabel degree`"):
        load_csr(ds, "p3-cyclic-dup-deg")


def test_dataset_checks(tmp_path, e10):
    ds = make_dataset(tmp_path / "d", e10, 1 << 10, chunk_rows=5000)
    g = zarr.open_group(str(ds), mode="r+")
    g.attrs["complete"] = False
    with pytest.raises(DbfsError, match="incomplete"):
        build_partitioned(ds, progress=False)
    bad = make_dataset(tmp_path / "bad", e10, 1000, chunk_rows=5000)
    with pytest.raises(DbfsError, match="outside"):
        build_partitioned(bad, progress=False)
    with pytest.raises(DbfsError, match="not found"):
        build_partitioned(tmp_path / "nothing", progress=False)


def test_variant_names():
    assert variant_name(4, "block") == "p4-block"
    assert variant_name(1, "block", dedupe=False, relabel="degree") == "p1-block-dup-deg"
    assert variant_name(3, "cyclic", relabel="degree") == "p3-cyclic-deg"
    for name in ("p4-block", "p1-block-dup-deg", "p12-cyclic-dup"):
        o = parse_variant(name)
        assert variant_name(o["P"], o["partitioning"], o["dedupe"], o["relabel"]) == name
    with pytest.raises(DbfsError):
        parse_variant("p4-random")


# ---------------------------------------------------------------- distributed
@pytest.fixture(scope="module")
def cluster_client():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  worker_dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        yield client


@pytest.mark.distributed
@pytest.mark.parametrize("P,kind,relabel,budget", [(2, "block", "none", 1 << 20), (3, "cyclic", "degree", None)])
def test_distributed_same_bytes_as_threaded(tmp_path, e14, cluster_client, P, kind, relabel, budget):
    a = make_dataset(tmp_path / "a", e14, 1 << 14, chunk_rows=20000)
    b = make_dataset(tmp_path / "b", e14, 1 << 14, chunk_rows=9000)
    ta = build_partitioned(a, P=P, partitioning=kind, relabel=relabel, progress=False)
    tb = build_partitioned(b, P=P, partitioning=kind, relabel=relabel, client=cluster_client, progress=False,
                           memory_budget=budget)
    assert ta["variant"] == tb["variant"]
    if budget is not None:
        assert sum(tb["subranges"]) > P, "the small budget splits partitions on the workers too"
    else:
        assert tb["options"]["memory_budget"] > 0, "default budget derived from the workers' memory"
    assert_same_variant(read_variant(a, ta["variant"]), read_variant(b, tb["variant"]))
    assert ta["checksums"] == tb["checksums"]


# ---------------------------------------------------------------- memory
def _reset_peak_rss():
    """Worker side: settle, reset the kernel's peak-RSS mark (VmHWM), return current RSS in bytes."""
    import gc

    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _rss_status()["VmRSS"]


def _rss_status():
    with open("/proc/self/status") as f:
        d = dict(line.split(":", 1) for line in f)
    return {k: int(d[k].split()[0]) * 1024 for k in ("VmRSS", "VmHWM")}


@pytest.mark.slow
@pytest.mark.distributed
def test_peak_worker_rss_under_budget_s18(tmp_path):
    """SCALE 18 on 2 worker processes with a 64 MiB budget: peak RSS <= baseline + budget + 32 MiB.

    Baseline: each worker's RSS after a warm-up build (Python, numpy, numba
    with every kernel loaded, zarr, distributed: about 200 MB), after which the
    kernel's peak-RSS mark is reset (``/proc/self/clear_refs``), so the peak
    read afterwards (VmHWM) is the build's own. Slack: 32 MiB for allocator
    fragmentation, zarr codec buffers and task bookkeeping. Measured on the
    2-core dev machine: +48..62 MiB at a 64 MiB budget, +128 MiB unsplit.
    """
    distributed = pytest.importorskip("distributed")
    if not Path("/proc/self/clear_refs").exists():
        pytest.skip("needs Linux /proc/self/clear_refs to reset the peak RSS mark")
    budget = 64 << 20
    ds = make_dataset(tmp_path / "s18", kron(18), 1 << 18, chunk_rows=1 << 18)
    warm = make_dataset(tmp_path / "warm", kron(10), 1 << 10, chunk_rows=5000)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  memory_limit="4GiB") as cluster, distributed.Client(cluster) as client:
        build_partitioned(warm, P=2, memory_budget=1 << 18, client=client, progress=False)
        base = client.run(_reset_peak_rss)
        a = build_partitioned(ds, P=2, memory_budget=budget, client=client, progress=False)
        peak = client.run(_rss_status)
    assert sum(a["subranges"]) > 2, "the budget forces sub-ranges at SCALE 18"
    for w in peak:
        grew = peak[w]["VmHWM"] - base[w]
        assert grew <= budget + (32 << 20), (
            f"worker {w}: peak grew {grew >> 20} MiB over baseline {base[w] >> 20} MiB, budget {budget >> 20} MiB")


@pytest.mark.parametrize("dedupe", [True, False])
def test_store_csr_equals_partitioned_build(tmp_path, e14, dedupe):
    """store_csr (the GPU builder's writer) stores an in-memory CSR with the
    bytes, checksums and loader contract of build_partitioned's p1 variant."""
    import time as _time

    from dbfs.kernel1 import reusable_variant, store_csr

    a = make_dataset(tmp_path / "a", e14, 1 << 14, chunk_rows=40000)
    b = make_dataset(tmp_path / "b", e14, 1 << 14, chunk_rows=40000)
    ref = build_partitioned(a, P=1, dedupe=dedupe, progress=False)
    g = build_csr(e14, n_vertices=1 << 14, dedupe=dedupe)
    name = ref["variant"]
    assert reusable_variant(b, 1, "block", dedupe) is None
    got = store_csr(b, g.indptr, g.indices, e14.shape[0], dedupe, _time.perf_counter(), builder="test", threads=3)
    assert got["variant"] == name and got["complete"] and not got["reused"]
    assert_same_variant(read_variant(b, name), read_variant(a, name))
    for k in ("P", "partitioning", "n_vertices", "n_edges", "nnz", "nnz_total", "index_dtype", "checksums",
              "vertex_ranges", "degree"):
        assert got[k] == ref[k], k
    loaded = load_csr(b, name)
    assert loaded.indptr.tobytes() == g.indptr.tobytes() and loaded.indices.tobytes() == g.indices.tobytes()
    assert reusable_variant(b, 1, "block", dedupe)["reused"] is True
    assert not [p for p in (b / "csr").iterdir() if p.name.startswith(".")], "no temp dir left"

"""Vertex ids past 2**31 (SCALE 32: 2**31 < N <= 2**32), with the wide path forced at a small SCALE.

The rule (:func:`dbfs.graph.index_dtype`): a CSR's adjacency entries are uint32 there (never -1, so 4 bytes
an entry instead of 8: SCALE 32's CSR fits the 4-GPU box only so); every id that may be -1 (parents, hub
tables, queues, claims) is int64 (:func:`dbfs.graph.id_dtype`). ``DBFS_WIDE_IDS=1`` takes that path at any
N. Checked here with it forced: every CPU Kernel 1 (in memory, in passes, out of core into zarr, the CPU
shuffle's rank build) writes uint32 entries holding the narrow build's values; the hub table is int64 with -1
for an empty row; every CPU algorithm's parents validate with the narrow graph's levels (and its parents, sequentially); the
stored variant loads back as uint32; the GPU kernels (compiled with int64 ids and uint32 entries) build the
same CSR and search it level for level as the narrow one, and ``dbfs run`` (``--backend cpu``, ``dask`` with
four partitions on CPU workers, ``gpu`` and ``dask`` on GPU workers) validates every search end to end. A
real SCALE 32 request on a cluster of GPU workers only is refused in one line before generating (their
arrays over all N are not sized for a device yet).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from dbfs import kernel1
from dbfs.bfs import bfs
from dbfs.generate import kronecker_edges
from dbfs.graph import WIDE_ENV, id_dtype, index_dtype
from dbfs.validate import validate

SCALE = 10


def test_the_widths_at_the_real_boundaries(monkeypatch):
    monkeypatch.delenv(WIDE_ENV, raising=False)
    assert [index_dtype(n) for n in (2**31, 2**31 + 1, 2**32, 2**32 + 1)] == \
        [np.int32, np.uint32, np.uint32, np.int64]
    assert [id_dtype(n) for n in (2**31, 2**31 + 1, 2**32)] == [np.int32, np.int64, np.int64]


@pytest.fixture(scope="module")
def edges():
    e = kronecker_edges(SCALE)
    e[:5, 1] = e[:5, 0]                      # self-loops
    return np.concatenate([e, e[:50]])       # duplicates


@pytest.fixture(scope="module")
def narrow(edges):
    os.environ.pop(WIDE_ENV, None)
    return kernel1.build_csr(edges, 1 << SCALE)


@pytest.fixture
def wide(monkeypatch):
    monkeypatch.setenv(WIDE_ENV, "1")


def test_kernel1_writes_uint32_entries_with_the_narrow_values(edges, narrow, wide, tmp_path):
    from dbfs.kernel1.shuffle import ShufflePlan, build_rank, read_buckets

    n = 1 << SCALE
    assert narrow.indices.dtype == np.int32
    for g in (kernel1.build_csr(edges, n), kernel1.build_csr_passes(edges, n, memory_budget=64 << 10)):
        assert g.indices.dtype == np.uint32
        assert np.array_equal(g.indptr, narrow.indptr) and np.array_equal(g.indices.astype(np.int64),
                                                                           narrow.indices.astype(np.int64))
    plan = ShufflePlan.make(n, 2)
    pieces = [read_buckets(edges, a, b, plan)[0] for a, b in ((0, 7000), (7000, edges.shape[0]))]
    ip, ix, _ = build_rank([p[1] for p in pieces], plan, 1, True, None)
    lo = plan.part.vertex_range(1).start
    assert ix.dtype == np.uint32
    assert np.array_equal(ix.astype(np.int64), narrow.indices[narrow.indptr[lo]:].astype(np.int64))


def test_stored_variant_holds_uint32_and_loads_back(edges, narrow, wide, tmp_path):
    from dbfs import store
    from dbfs.spec import GraphSpec

    ds, _ = store.generate(GraphSpec.make("kronecker", SCALE), root=tmp_path, client=None, quiet=True)
    kernel1.build_partitioned(ds.path, P=2, client=None, progress=False)
    g = kernel1.load_csr(ds.path, kernel1.variant_name(2))
    ref = kernel1.build_csr(ds.edges()[:], ds.n_vertices)
    assert g.indices.dtype == np.uint32 == ref.indices.dtype
    assert np.array_equal(g.indptr, ref.indptr) and np.array_equal(g.indices, ref.indices)
    ip, ix, _ = kernel1.load_partition(ds.path, kernel1.variant_name(2), 1)
    assert ix.dtype == np.uint32


@pytest.mark.parametrize("algorithm", ["seq-list", "seq-csr", "td", "bu", "do", "spmv"])
def test_every_cpu_search_equals_the_narrow_one(edges, narrow, wide, algorithm):
    from dbfs.bfs.cpu import hub_neighbours
    from dbfs.roots import graph500_roots

    n = 1 << SCALE
    g = kernel1.build_csr(edges, n)
    hub = hub_neighbours(g)
    assert hub.dtype == np.int64 and (hub == -1).any()          # an empty row's -1 kept, not 2**32 - 1
    for r in graph500_roots(edges, SCALE, n=4, n_vertices=n):
        got = bfs(g, int(r), algorithm, levels=True)
        os.environ.pop(WIDE_ENV)
        ref = bfs(narrow, int(r), algorithm, levels=True)
        os.environ[WIDE_ENV] = "1"
        assert validate(edges, int(r), got.parent, n_vertices=n).ok
        assert np.array_equal(got.levels, ref.levels)
        if algorithm.startswith("seq"):      # (the parallel ones may claim any parent of the level before)
            assert np.array_equal(got.parent, ref.parent)


@pytest.mark.gpu
def test_gpu_kernel1_and_searches_of_uint32_entries_equal_the_narrow_ones(cp, edges, narrow, wide):
    """GPU Kernel 1 writes the narrow build's values as uint32; the kernels compiled for int64 ids and uint32
    entries (``bfs.cu``'s ENT_T) search it with the narrow graph's levels and valid parents, every algorithm."""
    from dbfs.bfs import get_algorithm
    from dbfs.bfs.gpu import device_graph
    from dbfs.kernel1.gpu import build_csr_gpu
    from dbfs.roots import graph500_roots

    n = 1 << SCALE
    g = build_csr_gpu(edges, n)
    assert g.indices.dtype == np.uint32
    assert np.array_equal(g.indptr, narrow.indptr) and np.array_equal(g.indices.astype(np.int64),
                                                                       narrow.indices.astype(np.int64))
    dg = device_graph(g)
    assert (dg.vid, dg.ent) == ("long long", "unsigned int") and dg.hub.dtype == np.int64
    for algorithm in ("td", "bu", "do"):
        fn = get_algorithm(algorithm, "gpu")
        for r in graph500_roots(edges, SCALE, n=4, n_vertices=n):
            parent, st = fn(g, int(r), stats=True)
            os.environ.pop(WIDE_ENV)
            ref, st_ref = fn(narrow, int(r), stats=True)
            os.environ[WIDE_ENV] = "1"
            assert validate(edges, int(r), np.asarray(parent), n_vertices=n).ok
            assert [x["frontier"] for x in st] == [x["frontier"] for x in st_ref]


@pytest.mark.gpu
@pytest.mark.parametrize("flags", [["--backend", "gpu"], ["--backend", "gpu", "--relabel", "none"],
                                   ["--cluster", "local-gpu", "--backend", "dask", "--partitions", "2"]],
                         ids=["gpu", "gpu-plain", "dask-gpu-p2"])
def test_dbfs_run_on_gpus_end_to_end(cp, tmp_path, flags):
    """(GPU Kernel 1, the GPU searches and the validation on the devices with the wide path forced; the plain CSR
    is stored with uint32 entries)"""
    _run_wide(tmp_path, flags, "p1-block" if "none" in flags else None)


def test_a_cluster_of_gpu_workers_refuses_scale_32_before_generating(tmp_path):
    """``dbfs run --scale 32 --backend dask`` on a cluster of GPU workers only (a real LocalCluster whose worker
    declares the GPU resource) is refused in one line at its preflight, before anything is generated: the
    request of a 4-GPU box, whose arrays over all N are not sized for a device yet."""
    from distributed import LocalCluster

    env = {k: v for k, v in os.environ.items() if k != WIDE_ENV}
    with LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=None, resources={"GPU": 1}) as lc:
        res = subprocess.run([sys.executable, "-m", "dbfs.cli", "run", "--scale", "32", "--roots", "4",
                              "--scheduler", lc.scheduler_address, "--backend", "dask", "--partitions", "4",
                              "--datasets", str(tmp_path / "d")], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode != 0
    last = res.stderr.strip().splitlines()[-1]
    assert "1 GPU worker(s) and no CPU worker" in last and "4294967296 vertices" in last, res.stderr[-2000:]
    assert not any((tmp_path / "d").glob("kron-*"))           # nothing generated


@pytest.mark.parametrize("flags", [["--backend", "cpu"], ["--backend", "dask", "--partitions", "4", "--relabel", "none"]],
                         ids=["cpu", "dask-p4"])
def test_dbfs_run_end_to_end(tmp_path, flags):
    """(the dask run: the partitions' searches on CPU workers, the variant stored with uint32 entries)"""
    _run_wide(tmp_path, flags, "p4-block" if "dask" in flags else None)


def _run_wide(tmp_path, flags, stored):
    """``dbfs run`` at SCALE with the wide path forced: 8 searches, every one valid; ``stored``: the variant
    whose entries must be stored as uint32."""
    from dbfs.zattrs import read_attrs

    out = tmp_path / "run.json"
    env = {**os.environ, WIDE_ENV: "1"}
    res = subprocess.run([sys.executable, "-m", "dbfs.cli", "run", "--scale", str(SCALE), "--roots", "8",
                          "--datasets", str(tmp_path / "d"), "--json", str(out), *flags],
                         capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    rec = json.loads(out.read_text())
    assert len(rec["searches"]) == 8 and all(s["valid"] for s in rec["searches"])
    if stored:
        assert read_attrs(tmp_path / "d" / rec["dataset"] / "csr" / stored)["index_dtype"] == "uint32"


def test_a_split_adjacency_of_uint32_pieces_searches_the_same(edges, narrow, wide):
    """(the CPU backend's simulated device/host split: two uint32 pieces, an int64 hub table)"""
    from dbfs.bfs import prepare
    from dbfs.bfs.cpu import hub_neighbours, split_graph
    from dbfs.roots import graph500_roots
    from dbfs.split import plan_split

    n = 1 << SCALE
    g = kernel1.build_csr(edges, n)
    s = prepare(split_graph(g, plan_split(g.indptr, g.nnz // 3, "suffix", 4)))
    assert s.indices.a.dtype == np.uint32 and hub_neighbours(s).dtype == np.int64
    for r in graph500_roots(edges, SCALE, n=2, n_vertices=n):
        got = bfs(s, int(r), "do", levels=True)
        assert validate(edges, int(r), got.parent, n_vertices=n).ok
        assert np.array_equal(got.levels, bfs(g, int(r), "do", levels=True).levels)

"""One contract for a partitioned graph (dbfs.bfs.dask.search.graphs), on a real LocalCluster of worker processes.

What is checked:

- a stored variant (:class:`Stored`) and the partitions built on the workers
  (:class:`OnWorkers`) open as the same :class:`PartitionedGraph`: searches
  from several roots validate together (``validate_many``) and agree with
  the CPU validator on the parents gathered to the client (``parents``),
  ``nedge`` equals the validation's, ``eligible`` equals a pass over the
  input edges, ``describe`` names the workers, and ``close`` releases the
  partitions (a later search is a one-line error);
- Kernel 1 of ``--backend dask`` hands the load its typed result through
  the pipeline (:func:`dbfs.pipeline.open_backend`), not through ``ds.memo``;
- the datasets a GPU worker keeps for Kernel 1 live in its worker plugin,
  not in module state of :mod:`dbfs.bfs.dask.layout.built`;
- (GPU) the CSR built in a GPU worker's memory (:class:`Resident`) answers
  the same calls.
"""
from __future__ import annotations

import numpy as np
import pytest

from dbfs import kernel1, store
from dbfs.backends import RunConfig
from dbfs.bfs.dask.search.graphs import DistributedPartitions, OnWorkers, PartitionedGraph, Resident, Stored, open_graph
from dbfs.errors import DbfsError
from dbfs.validate.batch_cpu import CPU_VALIDATE_MOST
from dbfs.spec import GraphSpec

pytestmark = pytest.mark.distributed

SPEC = GraphSpec.make("kronecker", 10, 16, 2, 3)


@pytest.fixture(scope="module")
def kron(tmp_path_factory):
    """SCALE 10 Kronecker graph with its p2-block variant stored; its input edges on the host."""
    ds, _ = store.generate(SPEC, root=tmp_path_factory.mktemp("pg"), client=None, quiet=True)
    kernel1.build_partitioned(ds.path, P=2, partitioning="block", client=None, progress=False)
    ds.edges_np = np.asarray(ds.edges()[:], np.int64)
    return ds


def _open(kind, client, ds) -> PartitionedGraph:
    from dbfs.bfs.dask import build_distributed

    k1 = Stored("p2-block") if kind == "stored" else OnWorkers(build_distributed(client, ds.path, 2))
    assert str(k1) == "p2-block"
    return open_graph(client, ds.path, k1)


@pytest.mark.parametrize("kind", ["stored", "on-workers"])
def test_stored_and_on_workers_graphs_answer_the_contract(kind, client, kron):
    from dbfs.roots import eligible
    from dbfs.validate import validate

    g = _open(kind, client, kron)
    try:
        assert isinstance(g, DistributedPartitions)
        # CPU workers: a batch of searches validated as Dask tasks over one read of the edges
        assert (g.gpus, g.batched, g.events) == ([], True, []) and 1 <= g.validate_batch <= CPU_VALIDATE_MOST
        assert g.dg.source == ("zarr" if kind == "stored" else "edges") and g.load_time > 0
        cands = np.arange(kron.n_vertices, dtype=np.int64)
        mask = g.eligible(cands)
        assert mask.dtype == bool and np.array_equal(mask, eligible(kron.edges_np, cands))
        roots = [int(r) for r in cands[mask][[0, 7, 100]]]
        results = [g.search(r, algorithm=alg)[0] for r, alg in zip(roots, ("do", "td", "bu"))]
        vs = g.validate_many(results)
        assert [r.root for r in results] == roots and len(vs) == 3
        for r, res, v in zip(roots, results, vs):
            parent = g.parents(res)
            assert parent.dtype == np.int64 and parent.shape == (kron.n_vertices,) and parent[r] == r
            ref = validate(kron.edges_np, r, parent)
            assert v.ok and ref.ok, (v.summary(), ref.summary())
            assert v.nedge == ref.nedge == g.nedge(res) > 0
        out = g.describe()
        assert sorted(rk for w in out["workers"] for rk in w["partitions"]) == [0, 1]
        assert {w["kind"] for w in g.workers_table()} == {"cpu"}
    finally:
        g.close()
    assert not g.dg.part_futures, "close releases the partitions"
    with pytest.raises(DbfsError, match="closed"):
        g.search(roots[0])


def test_open_graph_refuses_what_kernel1_did_not_make(client, kron):
    with pytest.raises(DbfsError, match="cannot search"):
        open_graph(client, kron.path, 42)


def test_kernel1_hands_the_load_a_typed_result(client, tmp_path, monkeypatch):
    """The disk has no room for p2-block: Kernel 1 builds the partitions on the workers and the load searches
    that very graph; nothing goes through ``ds.memo``; the run's variant stays a plain name."""
    from dbfs.backends.dask import DaskBackend
    from dbfs.pipeline import open_backend

    ds, _ = store.generate(SPEC, root=tmp_path, client=None, quiet=True)
    monkeypatch.setenv("DBFS_DISK_BUDGET", "100KiB")
    cfg = RunConfig(backend="dask", partitions=2, relabel="none", n_roots=2, quiet=True)
    built, k1 = DaskBackend.csr(ds, cfg, client)
    try:
        assert isinstance(built, OnWorkers) and str(built) == "p2-block" and k1["in_memory"]
        assert not {"built", "built_dg"} & set(ds.memo)
        b = DaskBackend(cfg, client)
        b.load(ds, built)
        try:
            assert b.pg.dg is built.dg and b.dg is built.dg
            (root,) = b.roots(1)
            b.search(int(root))
            assert b.validate(int(root)).ok
        finally:
            b.close()
    finally:
        built.dg.close()

    b, ds2, variant, k1 = open_backend(SPEC, tmp_path, cfg, client)
    try:
        assert type(variant) is str and variant == "p2-block" and k1["in_memory"]
        assert isinstance(b.pg, DistributedPartitions) and b.pg.dg.source == "edges"
        assert not {"built", "built_dg"} & set(ds2.memo)
    finally:
        b.close()


def _probe_kept(dask_worker=None):
    """(client.run) whether this worker's kept datasets are its plugin's, kept between calls."""
    from dbfs.bfs.dask.layout import built
    from dbfs.bfs.dask.mesh.plugin import get_plugin

    kept = built._kept(dask_worker)
    kept["probe"] = 1
    try:
        return get_plugin(dask_worker).scratch[built._SCRATCH_KEY] is kept and built._kept(dask_worker)["probe"] == 1
    finally:
        kept.pop("probe")


def test_kept_datasets_live_in_the_worker_plugin(client):
    from dbfs.bfs.dask.layout import built
    from dbfs.bfs.dask.mesh import ensure_plugin

    assert not hasattr(built, "_KEPT"), "no device state in module globals"
    ensure_plugin(client)
    got = client.run(_probe_kept)
    assert len(got) == 2 and all(got.values()), got


@pytest.mark.gpu
def test_resident_graph_answers_the_contract(cp, tmp_path):
    """The P = 1 CSR built in a GPU worker's memory, through the same calls (validated on the worker, and on
    the CPU from the parents gathered to the client)."""
    pytest.importorskip("dask_cuda")
    from dbfs.bfs.dask.layout.built import build_on_worker
    from dbfs.bfs.dask.search.graphs import ResidentGraph
    from dbfs.bfs.dask.layout.placement import gpu_workers
    from dbfs.cluster import client_for
    from dbfs.roots import eligible
    from dbfs.validate import validate

    prof = tmp_path / "gpu.yaml"
    prof.write_text("type: local-gpu\ngpus: [0]\nthreads_per_gpu_worker: 2\ncpu_workers: 1\ncpu_threads: 2\n")
    with client_for(profile=str(prof), quiet=True) as gc:
        ds, _ = store.generate(SPEC, root=tmp_path, client=None, quiet=True)
        edges = np.asarray(ds.edges()[:], np.int64)
        (w,) = gpu_workers(gc)
        fut, info = build_on_worker(gc, ds, w, relabel="degree", order="prefix", quiet=True)
        g = open_graph(gc, ds.path, Resident(fut, w, info))
        try:
            assert isinstance(g, ResidentGraph) and g.batched and g.gpus == []
            cands = np.arange(ds.n_vertices, dtype=np.int64)
            mask = g.eligible(cands)
            assert np.array_equal(mask, eligible(edges, cands))
            roots = [int(r) for r in cands[mask][[0, 7]]]
            results = [g.search(r)[0] for r in roots]
            for r, res, v in zip(roots, results, g.validate_many(results)):
                ref = validate(edges, r, g.parents(res))
                assert v.ok and ref.ok and v.nedge == ref.nedge == g.nedge(res)
            out = g.describe()
            assert out["memory"]["peak_device_bytes"] > 0 and "GPU worker" in out["kernel1"]
        finally:
            g.close()

"""Kernel 1 as one shuffle (:mod:`dbfs.kernel1.shuffle`, ``build_distributed``'s build on CPU workers).

The oracle for the bytes is the in-memory build (:func:`dbfs.kernel1.build_csr`: a rank's rows are its slice),
the stored variant ``p<P>-block`` (:func:`dbfs.kernel1.build_partitioned`) and the per-rank build it replaces
(:func:`dbfs.bfs.dask.layout.worker._build_part`). The edge rows a build reads are counted inside the worker
processes of a real LocalCluster: the dataset's edge readers (:class:`dbfs.store.integrity.CheckedArray`,
:class:`dbfs.store.virtual.VirtualEdges`) are wrapped there so every row they return is added up, and the
test asserts each edge row is read exactly once per build (the per-rank build read the list at least twice per
rank).
"""
from __future__ import annotations

import sys

import numpy as np
import pytest
import zarr
from zarr.codecs import ZstdCodec

from dbfs import kernel1, store
from dbfs.errors import DbfsError
from dbfs.kernel1.shuffle import (ShufflePlan, _bucket_xp, bucket_chunk, build_rank, check_sum, read_buckets,
                                  reader_spans)
from dbfs.spec import GraphSpec


def _rows_of(g, plan, rk):
    """(indptr, indices) of the rows of ``g`` (a CSRGraph) rank ``rk`` owns, in its local order."""
    vs = plan.part.owned_vertices(rk)
    deg = np.diff(g.indptr)[vs]
    ptr = np.zeros(vs.size + 1, np.int64)
    np.cumsum(deg, out=ptr[1:])
    idx = [g.indices[g.indptr[v]:g.indptr[v + 1]] for v in vs]
    return ptr, (np.concatenate(idx) if idx else np.empty(0, g.indices.dtype))


def _edges(n, m, seed=1, dtype=np.uint32):
    e = np.random.default_rng(seed).integers(0, n, size=(m, 2)).astype(dtype)
    k = min(10, m // 6)
    e[:k, 1] = e[:k, 0]                      # self-loops
    e[k:2 * k] = e[2 * k:3 * k]              # duplicate tuples
    e[3 * k:4 * k] = e[4 * k:5 * k][:, ::-1]  # the same edges reversed
    return e


# ------------------------------------------------------------ the pieces, in one process
def test_reader_spans_cover_every_row_once():
    for m, c, G in [(0, 4, 2), (10, 4, 1), (10, 4, 2), (10, 4, 5), (100, 7, 3), (3, 10, 4)]:
        spans = reader_spans(m, c, G)
        assert len(spans) == G
        assert [r for a, b in spans for r in range(a, b)] == list(range(m))
        assert all(a % c == 0 for a, b in spans if b > a)
    with pytest.raises(DbfsError, match="readers"):
        reader_spans(10, 4, 0)


@pytest.mark.parametrize("kind", ["block", "cyclic"])
@pytest.mark.parametrize("n,m,P,G", [(1000, 20000, 4, 3), (777, 5000, 3, 2), (100, 50, 1, 4), (5, 3, 7, 2)])
def test_build_rank_is_the_in_memory_rows(kind, n, m, P, G):
    """Every rank's rows from its pieces of G readers = that rank's rows of build_csr, byte for byte: dedupe on
    and off, in one range or cut into many by a small budget."""
    e = _edges(n, m)
    plan = ShufflePlan.make(n, P, kind)
    got = [read_buckets(e, a, b, plan) for a, b in reader_spans(m, 999, G)]
    assert sum(info["rows"] for _, info in got) == m
    check_sum(e, [info for _, info in got])
    for dedupe in (True, False):
        g = kernel1.build_csr(e, n, dedupe=dedupe)
        for rk in range(P):
            want = _rows_of(g, plan, rk)
            for budget, many in ((None, False), (1 << 30, False), (2600, True)):
                ip, ix, info = build_rank([res[rk] for res, _ in got], plan, rk, dedupe, budget)
                assert ip.tobytes() == want[0].tobytes() and ix.dtype == g.indices.dtype
                assert ix.tobytes() == want[1].tobytes()
                if many and want[1].size > 200:
                    assert info["ranges"] > 1


def test_bucket_with_array_operations_is_the_same():
    """bucket_chunk's array-module path (here with NumPy as ``xp``) gives the Numba path's pieces up to order."""
    e = _edges(500, 3000, seed=2, dtype=np.int64)
    for kind, P in (("block", 3), ("cyclic", 4), ("block", 1)):
        plan = ShufflePlan.make(500, P, kind)
        a, b = bucket_chunk(e[:, 0], e[:, 1], plan), _bucket_xp(e[:, 0], e[:, 1], plan, np)
        for (s1, d1), (s2, d2) in zip(a, b):
            assert s1.dtype == s2.dtype == plan.sdt and d1.dtype == d2.dtype == plan.idt
            k1, k2 = np.lexsort((d1, s1)), np.lexsort((d2, s2))
            assert np.array_equal(s1[k1], s2[k2]) and np.array_equal(d1[k1], d2[k2])
    with pytest.raises(DbfsError, match="outside"):
        bucket_chunk(np.array([1, 600]), np.array([2, 3]), ShufflePlan.make(500, 2))
    with pytest.raises(DbfsError, match="outside"):
        _bucket_xp(np.array([1, 600]), np.array([2, 3]), ShufflePlan.make(500, 2), np)


def test_read_buckets_keeps_the_ranks_asked_and_refuses_bad_ids(tmp_path):
    """A real zarr dataset read chunk by chunk: only the asked ranks' pieces are kept (a rebuild's subset), and an
    id outside [0, N) is one line naming the chunk."""
    e = _edges(300, 1000, seed=3)
    g = zarr.open_group(str(tmp_path / "d"), mode="w")
    g.create_array("edges", data=e, chunks=(128, 2), compressors=[ZstdCodec(level=1)])
    g.attrs.update({"n_vertices": 300, "n_edges": 1000, "complete": True})
    edges = store.open_edges(tmp_path / "d")
    plan = ShufflePlan.make(300, 4)
    full, info = read_buckets(edges, 0, 1000, plan)
    part, _ = read_buckets(edges, 0, 1000, plan, ranks=[3, 1])
    assert sorted(part) == [1, 3] and info["rows"] == 1000 and info["span"] == (0, 1000)
    for rk in (1, 3):
        assert all(np.array_equal(x, y) for x, y in zip(part[rk], full[rk]))
    with pytest.raises(DbfsError, match="readers' spans"):
        check_sum(edges, [info, info])
    bad = e.copy()
    bad[700] = (5, 300)
    g2 = zarr.open_group(str(tmp_path / "bad"), mode="w")
    g2.create_array("edges", data=bad, chunks=(128, 2), compressors=[ZstdCodec(level=1)])
    g2.attrs.update({"n_vertices": 300, "n_edges": 1000, "complete": True})
    with pytest.raises(DbfsError, match=r"chunk 5 .*ids outside \[0, 300\).*row 700"):
        read_buckets(store.open_edges(tmp_path / "bad"), 512, 1000, plan)


def test_a_changed_row_fails_the_checksum(tmp_path):
    ds, _ = store.generate(GraphSpec.make("kronecker", 8, 8, 2, 3), root=tmp_path, chunk_edges=512, quiet=True)
    edges = ds.edges()
    plan = ShufflePlan.make(ds.n_vertices, 2)
    infos = [read_buckets(edges, a, b, plan)[1] for a, b in reader_spans(ds.n_edges, 512, 2)]
    check_sum(edges, infos)
    infos[1]["checksum"] = (infos[1]["checksum"] + 1) % (1 << 64)
    with pytest.raises(DbfsError, match="edges_checksum"):
        check_sum(edges, infos)


# ------------------------------------------------------------ on a LocalCluster: each edge row read once
def _count_edge_rows():
    """(on a worker) wrap the dataset edge readers so every row they return is counted; reset the count."""
    import dbfs.store.integrity as integrity
    from dbfs.store.integrity import CheckedArray
    from dbfs.store.virtual import VirtualEdges

    for cls in (CheckedArray, VirtualEdges):
        if "_uncounted_getitem" not in cls.__dict__:
            def counted(self, key, _orig=cls.__getitem__):
                out = _orig(self, key)
                if self.array == "edges" and np.ndim(out) == 2:
                    integrity._edge_rows_counted += int(out.shape[0])
                return out

            cls._uncounted_getitem = cls.__getitem__
            cls.__getitem__ = counted
    integrity._edge_rows_counted = 0


def _edge_rows_counted():
    import dbfs.store.integrity as integrity

    return integrity._edge_rows_counted


@pytest.fixture(scope="module")
def client():
    import cloudpickle

    from dbfs.cluster import client_for

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    with client_for(n_workers=2, threads_per_worker=1, quiet=True) as c:
        yield c


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("shuffle-datasets")
    spec = GraphSpec.make("kronecker", 11, 16, 2, 3)
    return {how: store.generate(spec, root=root / how, chunk_edges=4096, quiet=True, edges=how)[0]
            for how in ("stored", "virtual")}


def _bytes(client, dg, rk):
    return client.submit(lambda p: (p.indptr[p.pad:].tobytes(), p.indices.tobytes()), dg.part_futures[rk],
                         workers=[dg.rank_worker[rk]], pure=False).result()


@pytest.mark.parametrize("how,P", [("stored", 2), ("stored", 4), ("virtual", 4)])
def test_each_edge_row_is_read_once(client, datasets, how, P):
    """build_distributed on 2 workers reads every edge row exactly once in all (a stored list's chunks, a virtual
    list's regenerated ones), says so in its partitions' info, and builds the stored variant's bytes (also the
    per-rank build's); a rebuild of some ranks reads every row once more and builds only those."""
    import dbfs.bfs.dask as D
    from dbfs.bfs.dask.layout.placement import _submit_loads
    from dbfs.bfs.dask.layout.worker import _build_part

    ds = datasets[how]
    m = ds.n_edges
    assert m // 4096 >= 8, "enough chunks for two readers"
    stored = datasets["stored"]
    variant = kernel1.build_partitioned(stored.path, P=P, client=client, progress=False)["variant"]
    client.run(_count_edge_rows)
    with D.build_distributed(client, ds.path, P) as dg:
        counted = client.run(_edge_rows_counted)
        assert sorted(counted) == sorted(set(dg.rank_worker.values())) and len(counted) == 2
        assert sum(counted.values()) == m, f"edge rows read {counted}, stored {m}: each row once"
        assert all(v > 0 for v in counted.values()), "both workers read"
        info = dg.part_info
        assert sum(info[rk]["edge_rows_read"] for rk in range(P)) == m
        for w, n in counted.items():          # each worker's reads reported by its partitions
            assert sum(info[rk]["edge_rows_read"] for rk in range(P) if dg.rank_worker[rk] == w) == n
        assert all(info[rk]["edge_readers"] == 2 for rk in range(P))
        assert {w["worker"]: w["edge_rows_read"] for w in dg.workers_table()} == counted    # as the JSON shows it
        for rk in range(P):
            ip, ix, _ = kernel1.load_partition(stored.path, variant, rk)
            assert _bytes(client, dg, rk) == (np.asarray(ip).tobytes(), np.asarray(ix).tobytes())
        if P == 4:
            old = _build_part(str(ds.path), P, 1)
            assert (old.indptr[old.pad:].tobytes(), old.indices.tobytes()) == _bytes(client, dg, 1)
            assert old.info()["edge_rows_read"] >= 2 * m             # the per-rank build: the list twice or more
            before = {rk: _bytes(client, dg, rk) for rk in range(P)}
            client.run(_count_edge_rows)
            _submit_loads(dg, [1, 3])                                 # a lost worker's ranks, rebuilt
            assert sum(client.run(_edge_rows_counted).values()) == m
            assert {rk: _bytes(client, dg, rk) for rk in range(P)} == before
            assert dg.part_info[1]["edge_rows_read"] + dg.part_info[3]["edge_rows_read"] == m
            assert dg.part_info[1]["edge_readers"] == 1              # ranks 1 and 3 share one worker


class _Counting:
    """A chunk source over an in-memory edge list that counts the rows it returns."""

    def __init__(self, e, step):
        self.e, self.step, self.m, self.rows = e, step, e.shape[0], 0

    def read(self, a, b):
        self.rows += b - a
        return self.e[a:b].astype(np.int64)


def test_span_reads_read_each_row_once_when_kept():
    """:class:`SpanReads` (the GPU shuffle's reader): its span read once and kept in 32-bit ids however many
    sweeps (a degree sweep and a sweep a pass), or read again each sweep when not kept; ids mapped by ``iperm``."""
    from dbfs.kernel1.shuffle import SpanReads

    e = _edges(500, 1000, seed=3, dtype=np.int64)
    for keep, reads in ((True, 1), (False, 3)):
        src = _Counting(e, 64)
        sr = SpanReads(src, 128, 700, keep=keep, narrow=np.uint32)
        for _ in range(3):
            got = list(sr.sweep())
            assert [(a, b) for a, b, _ in got] == [(a, min(a + 64, 700)) for a in range(128, 700, 64)]
            assert np.array_equal(np.concatenate([x for _, _, x in got]), e[128:700])
        assert sr.rows_read == src.rows == reads * 572
        assert got[0][2].dtype == (np.uint32 if keep else np.int64)
    rev = np.arange(500)[::-1].copy()
    for keep in (True, False):          # kept: renumbered once in place, in its width; else mapped each sweep
        src = _Counting(e, 64)
        sr = SpanReads(src, 128, 700, keep=keep, narrow=np.uint32)
        list(sr.sweep())
        sr.renumber(rev)
        for _ in range(2):
            got = [x for _, _, x in sr.sweep()]
            assert np.array_equal(np.concatenate(got), 499 - e[128:700])
        assert (sr.iperm is None) == keep and got[0].dtype == (np.uint32 if keep else np.int64)
        assert sr.rows_read == (1 if keep else 3) * 572
        raw = np.concatenate([x for _, _, x in sr.sweep(mapped=False)])     # the caller maps by sr.iperm itself
        assert np.array_equal(raw, 499 - e[128:700] if keep else e[128:700])


def test_span_reads_keep_an_id_that_does_not_fit_as_read():
    from dbfs.kernel1.shuffle import SpanReads

    e = np.array([[0, 1], [2, 1 << 32], [3, -1]], np.int64)
    sr = SpanReads(_Counting(e, 1), 0, 3, keep=True, narrow=np.uint32)
    got = [x for _, _, x in sr.sweep()]
    assert [x.dtype for x in got] == [np.uint32, np.int64, np.int64]
    assert np.array_equal(np.concatenate(got), e)       # (the build's id check sees 2**32 and -1 as read)


@pytest.mark.parametrize("P", [1, 2, 3, 5])
def test_rank_passes_tile_each_rank_within_the_budget(P):
    """Every rank gets the same number of passes (the shuffle's collectives run in step), its ranges tile its
    rows in order, and each range's cost is within the budget."""
    from dbfs.kernel1.shuffle import rank_passes
    from dbfs.partition import Partitioning

    rng = np.random.default_rng(P)
    n = 1000
    deg = rng.zipf(1.8, n).clip(max=400)
    raw = np.zeros(n + 1, np.int64)
    np.cumsum(deg, out=raw[1:])
    part = Partitioning(n, P, "block")
    fixed, i_isz, row_cost, budget = 1000, 32, 48, 1000 + 32 * 600 + 48 * 100
    plans = rank_passes(raw, part, budget, i_isz, fixed, row_cost=row_cost)
    assert len({len(p) for p in plans}) == 1 and len(plans[0]) > 1
    for r, p in enumerate(plans):
        rg = part.vertex_range(r)
        assert p[0][0] == rg.start and p[-1][1] == rg.stop
        assert all(a[1] == b[0] for a, b in zip(p, p[1:]))
        for lo, hi in p:
            if hi > lo:
                assert fixed + i_isz * int(raw[hi] - raw[lo]) + row_cost * (hi - lo + 1) <= budget
    with pytest.raises(DbfsError, match="too small"):
        rank_passes(raw, part, fixed + 10, i_isz, fixed, row_cost=row_cost)


def test_placed_passes_split_only_a_build_whose_ranks_pass_the_room():
    """The GPU shuffle's split rule (dbfs.kernel1.shuffle.placed_passes): every rank whole on the device where the
    room holds every rank (however little the passes then get, as SCALE 31 in 4 partitions on 4 x H200 ran);
    past it, each rank's device piece within the room less its row starts and within what leaves the passes a
    fifth of the budget, and the passes planned with the pieces, not the whole ranks."""
    from dbfs.kernel1.shuffle import placed_passes, rank_passes
    from dbfs.partition import Partitioning

    rng = np.random.default_rng(7)
    n, P, idw, i_isz, row_cost, fixed = 4000, 2, 4, 32, 48, 1000
    raw = np.zeros(n + 1, np.int64)
    np.cumsum(rng.zipf(1.8, n).clip(max=400), out=raw[1:])
    part = Partitioning(n, P, "block")
    whole = [idw * int(raw[rg.stop] - raw[rg.start]) + 8 * (len(rg) + 1) for rg in map(part.vertex_range, range(P))]
    budget = fixed + max(whole) + 32 * 420 + 48 * 100       # the whole ranks fit, the passes get less than a fifth
    assert budget - fixed - max(whole) < budget // 5
    for room in (None, max(whole)):
        plans, ents, caps = placed_passes(raw, part, budget, i_isz, fixed, idw, room, row_cost=row_cost)
        assert caps == ents
        assert plans == rank_passes(raw, part, budget, i_isz, fixed + max(w - 8 for w in whole), row_cost=row_cost)
    room = max(whole) // 2
    plans, ents, caps = placed_passes(raw, part, budget, i_isz, fixed, idw, room, row_cost=row_cost)
    assert all(c < e for c, e in zip(caps, ents))
    for r, c in enumerate(caps):
        rows = len(part.vertex_range(r))
        assert idw * c + 8 * (rows + 1) <= min(room, budget - fixed - budget // 5)
        assert idw * (c + 1) + 8 * (rows + 1) > min(room, budget - fixed - budget // 5)   # the most that fits
    out = max(idw * c + 8 * len(part.vertex_range(r)) for r, c in enumerate(caps))
    assert plans == rank_passes(raw, part, budget, i_isz, fixed + out, row_cost=row_cost)
    assert len(plans[0]) < len(rank_passes(raw, part, budget, i_isz, fixed + max(w - 8 for w in whole),
                                           row_cost=row_cost)[0])      # the passes get what the pieces leave


def test_gpu_shuffle_applies_to_a_whole_build_one_rank_a_gpu_worker(monkeypatch):
    """Which partitions built from the edges go through the GPU shuffle: all ranks at once, one a GPU worker,
    every worker on one host, NCCL not switched off; else the reason (the ranks are then built one by one)."""
    from dbfs.bfs.dask.layout.placement import DistributedGraph, _gpu_shuffle_why
    from dbfs.partition import Partitioning

    def dg(P, workers, kinds, source="edges"):
        return DistributedGraph(client=None, dataset_path=None, variant="p2-block", partitioning=Partitioning(
            100, P, "block"), nnz_total=0, rank_worker=dict(enumerate(workers)), part_futures={},
            rank_kind=dict(enumerate(kinds)), source=source)

    a, b, c = "tcp://10.0.0.1:4000", "tcp://10.0.0.1:4001", "tcp://10.0.0.2:4000"
    monkeypatch.delenv("DBFS_NCCL", raising=False)
    assert _gpu_shuffle_why(dg(2, [a, b], ["gpu", "gpu"]), [0, 1]) == ""
    assert "some partitions" in _gpu_shuffle_why(dg(2, [a, b], ["gpu", "gpu"]), [1])
    assert "one partition a GPU" in _gpu_shuffle_why(dg(2, [a, b], ["gpu", "cpu"]), [0, 1])
    assert "one partition a GPU" in _gpu_shuffle_why(dg(3, [a, b, a], ["gpu"] * 3), [0, 1, 2])
    assert "several hosts" in _gpu_shuffle_why(dg(2, [a, c], ["gpu", "gpu"]), [0, 1])
    assert "not built from the edges" in _gpu_shuffle_why(dg(2, [a, b], ["gpu", "gpu"], "zarr"), [0, 1])
    monkeypatch.setenv("DBFS_NCCL", "off")
    assert "DBFS_NCCL=off" in _gpu_shuffle_why(dg(2, [a, b], ["gpu", "gpu"]), [0, 1])

"""Distributed BFS (``dbfs.bfs.dask``) on a real LocalCluster.

The oracle is the single-process backend: for every root the distributed
parent array must validate (serial :func:`dbfs.validate.validate` and the
Dask-task :func:`validate_distributed`) and agree with ``bfs(graph, root,
algorithm="do")`` on invariants (level of every vertex, nedge) and on the
per-level counts (direction, frontier, edges, discovered), never on the
parent array itself (cuGraph's rule: any valid BFS tree is right).

One module-scoped cluster of 2 worker processes x 1 thread; the worker-death
test starts its own 3-worker cluster (nannies restart the killed worker).
Faults are injected through the worker plugin's per-level listeners
(``MeshPlugin.level_listeners``), installed with ``client.run``: the level
loop itself has no test hook.
"""
from __future__ import annotations

import numpy as np
import pytest
import zarr
from zarr.codecs import ZstdCodec

from dbfs import kernel1, store
from dbfs.bfs import bfs
import dbfs.bfs.dask as D
from dbfs.errors import DbfsError
from dbfs.spec import GraphSpec
from dbfs.validate import validate
from dbfs.workers_info import workers_info

pytestmark = pytest.mark.distributed


# ---------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def droot(tmp_path_factory):
    return tmp_path_factory.mktemp("dist-datasets")


class Graph:
    """A stored dataset plus its in-memory edges and single-process CSR."""

    def __init__(self, path, edges, n):
        self.path = path
        self.edges = np.asarray(edges, dtype=np.int64)
        self.n = int(n)
        self.csr = kernel1.build_csr(self.edges, self.n)

    def variant(self, P, client, partitioning="block"):
        kernel1.build_partitioned(self.path, P=P, partitioning=partitioning, client=client, progress=False)
        return kernel1.variant_name(P, partitioning)

    def roots(self, k, seed=0):
        deg = np.diff(self.csr.indptr)
        cand = np.flatnonzero(deg > 0)
        return np.random.default_rng(seed).choice(cand, size=min(k, cand.size), replace=False).tolist()


def _generated(droot, spec):
    ds, _ = store.generate(spec, root=droot, client=None, quiet=True)
    return Graph(ds.path, ds.edges()[:], ds.n_vertices)


def _raw(droot, name, edges, n):
    """A minimal dataset group (edges + counts + marker), for graphs no generator makes."""
    path = droot / name
    g = zarr.open_group(str(path), mode="w")
    g.create_array("edges", data=np.asarray(edges, np.uint32), chunks=(max(1, len(edges) // 3), 2),
                   compressors=[ZstdCodec(level=1)])
    g.attrs.update({"n_vertices": int(n), "n_edges": int(len(edges)), "complete": True})
    return Graph(path, edges, n)


@pytest.fixture(scope="module")
def kron10(droot, golden10):
    g = _generated(droot, GraphSpec.make("kronecker", 10, 16, 2, 3))
    assert np.array_equal(g.edges, golden10["edges"])
    return g


@pytest.fixture(scope="module")
def kron16(droot):
    return _generated(droot, GraphSpec.make("kronecker", 16, 16, 2, 3))


@pytest.fixture(scope="module")
def grid(droot):
    return _generated(droot, GraphSpec.make("grid2d", 10))


@pytest.fixture(scope="module")
def forest(droot):
    """G(n, M) with M = n / 2: hundreds of components (and isolated vertices)."""
    return _generated(droot, GraphSpec.make("uniform", 11, 1, 5, 7))


@pytest.fixture(scope="module")
def sparse_tail(droot):
    """1000 vertices, edges only among the first 300: with P = 4 two partitions have no edges."""
    rng = np.random.default_rng(3)
    e = rng.integers(0, 300, size=(1500, 2))
    e = np.concatenate([e, [[999, 999]]])       # a self-loop makes N = 1000
    return _raw(droot, "sparse-tail", e, 1000)


# ----------------------------------------------------------------- helpers
def check_search(client, g: Graph, dg, root, algorithm="do", validate_dask=True):
    """Run one distributed search and compare it with the single-process do."""
    res, seconds, rec = D.search(dg, root, algorithm=algorithm)
    assert seconds > 0 and res.wall >= seconds
    parent = D.gather_parent(res)
    v = validate(g.edges, root, parent)
    assert v.ok, v.summary()
    ref = bfs(g.csr, root, algorithm="do", stats=True, levels=True)
    vref = validate(g.edges, root, ref.parent)
    assert np.array_equal(v.levels, ref.levels), "levels per vertex differ from the single-process do"
    assert v.nedge == vref.nedge
    if algorithm == "do":
        key = ("direction", "frontier", "edges", "discovered")
        assert [tuple(r[k] for k in key) for r in rec] == [tuple(r[k] for k in key) for r in ref.level_stats]
    for r in rec:
        assert r["overhead"] >= 0 and r["kernel"] >= 0 and r["time"] >= r["overhead"]
    if validate_dask:
        vd = D.validate_distributed(client, g.path, dg, res, root)
        assert vd.ok, vd.summary()
        assert vd.nedge == v.nedge
    return res, v


def _install_fault(level, how, dask_worker=None):
    """(client.run) one-shot level listener on this worker: after ``level``
    it exits the process (``how="exit"``) or raises (``how="raise"``)."""
    import os

    from dbfs.bfs.dask.mesh.plugin import get_plugin

    listeners = get_plugin(dask_worker).level_listeners

    def fault(lv, ranks, record):
        if lv != level:
            return
        listeners.remove(fault)
        if how == "raise":
            raise RuntimeError(f"injected failure after level {lv} on the worker of ranks {list(ranks)}")
        os._exit(1)                                    # this worker dies mid-search

    listeners.append(fault)
    return True


def inject_fault(client, dg, rank, level, how="exit"):
    """Make the worker holding ``rank`` exit (or raise) after ``level`` of the next search."""
    client.run(_install_fault, level, how, workers=[dg.rank_worker[rank]])


# -------------------------------------------------------------------- tests
@pytest.mark.parametrize("P", [1, 2, 3, 4])
def test_kron10_golden_roots(client, kron10, golden10, P):
    dg = D.load_distributed(client, kron10.path, kron10.variant(P, client))
    try:
        # two worker processes on this host: the frontier is shared through /dev/shm
        assert dg.shm == ("one worker" if P == 1 else "")
        assert dg.load_time > 0 and set(dg.part_load_times) == set(range(P))
        assert sorted(dg.rank_worker) == list(range(P))
        for i, root in enumerate(golden10["roots"][:4]):
            _, v = check_search(client, kron10, dg, root, validate_dask=(i == 0))
            assert v.nedge == golden10["nedge_v3"][i]
    finally:
        dg.close()


@pytest.mark.parametrize("P", [2, 3])
def test_a_batch_of_searches_is_one_task_a_worker(client, kron16, golden16, P):
    """search_many: one _bsp_search task a mesh worker for the whole batch, and per root the same parents,
    nedge and level counts as a search of its own."""
    with D.load_distributed(client, kron16.path, kron16.variant(P, client)) as dg:
        roots = golden16["roots"][:4]
        from distributed import get_task_stream

        with get_task_stream(client) as ts:
            got = D.search_many(dg, roots)
        assert sum(t["key"].startswith("_bsp_search") for t in ts.data) == len(dg.mesh_workers)
        key = ("direction", "frontier", "edges", "discovered")
        for r, (res, seconds, rec) in zip(roots, got):
            one, _, rec1 = D.search(dg, r)
            assert res.root == r and seconds > 0 and res.wall > 0
            assert np.array_equal(D.gather_parent(res), D.gather_parent(one))
            assert [tuple(x[k] for k in key) for x in rec] == [tuple(x[k] for k in key) for x in rec1]
            assert all(len(x["workers"]) == len(dg.mesh_workers) for x in rec)
            assert validate(kron16.edges, r, D.gather_parent(res)).ok
        assert D.search_many(dg, []) == []
        # roots mapped by their owners' workers, a batch in one round trip (a partition relabelled within
        # itself maps them; a CPU partition keeps its ids): the same searches
        from functools import partial

        from dbfs.bfs.dask.search.client import _roots_within

        assert _roots_within(dg, roots) == [int(r) for r in roots]
        dg.roots_of = partial(_roots_within, dg)
        for r, (res, _, _) in zip(roots, D.search_many(dg, roots)):
            assert res.root == r and validate(kron16.edges, r, D.gather_parent(res)).ok


@pytest.mark.parametrize("P", [2, 4])
def test_kron16(client, kron16, golden16, P):
    with D.load_distributed(client, kron16.path, kron16.variant(P, client)) as dg:
        for i, root in enumerate(golden16["roots"][:2]):
            _, v = check_search(client, kron16, dg, root, validate_dask=(i == 0))
            assert v.nedge == golden16["nedge_v3"][i]


def test_grid_many_levels(client, grid):
    with D.load_distributed(client, grid.path, grid.variant(3, client)) as dg:
        res, v = check_search(client, grid, dg, 0)
        assert len(res.level_stats) > 60           # 32 x 32 lattice from a corner: 63 levels
        check_search(client, grid, dg, 527, validate_dask=False)


def test_many_components(client, forest):
    deg = np.diff(forest.csr.indptr)
    with D.load_distributed(client, forest.path, forest.variant(4, client)) as dg:
        roots = forest.roots(5, seed=1)
        for i, root in enumerate(roots):
            res, v = check_search(client, forest, dg, root, validate_dask=(i < 2))
        # an isolated vertex: the tree is the root alone
        iso = int(np.flatnonzero(deg == 0)[0])
        res, _, rec = D.search(dg, iso)
        parent = D.gather_parent(res)
        assert parent[iso] == iso and (parent >= 0).sum() == 1


@pytest.mark.parametrize("P", [3, 4])
@pytest.mark.parametrize("shm", [None, False])
def test_partitions_without_edges(client, sparse_tail, P, shm):
    with D.load_distributed(client, sparse_tail.path, sparse_tail.variant(P, client), shared_memory=shm) as dg:
        assert dg.shm == ("" if shm is None else "switched off")
        nnz = dg.attrs["nnz"]
        assert 0 in nnz                            # a partition with no edges
        for root in sparse_tail.roots(3):
            check_search(client, sparse_tail, dg, root)


@pytest.mark.parametrize("shm", [None, False])
def test_partitions_sharing_bitmap_words(client, droot, shm):
    """150 vertices in 4 blocks of 37-38: ranks 1, 2 and 3 all have rows in
    bitmap word 1 (vertices 64..127), so the shared frontier's boundary words
    get several contributions; also the frontier slices sent by the mesh."""
    rng = np.random.default_rng(11)
    e = np.concatenate([rng.integers(0, 150, size=(400, 2)), np.c_[np.arange(149), np.arange(1, 150)]])
    g = _raw(droot, "tiny-blocks", e, 150)
    with D.load_distributed(client, g.path, g.variant(4, client), shared_memory=shm) as dg:
        assert dg.shm == ("" if shm is None else "switched off")
        for root in (0, 70, 149):
            res, _ = check_search(client, g, dg, root, validate_dask=False)
            assert any(r["direction"] == "bu" for r in res.level_stats)
        check_search(client, g, dg, 100, algorithm="bu", validate_dask=False)


def test_cyclic(client, kron10, golden10):
    with D.load_distributed(client, kron10.path, kron10.variant(3, client, "cyclic")) as dg:
        assert dg.shm == "cyclic partitions"
        for root in golden10["roots"][:3]:
            check_search(client, kron10, dg, root)


@pytest.mark.parametrize("algorithm", ["td", "bu"])
def test_fixed_directions(client, kron10, golden10, algorithm):
    with D.load_distributed(client, kron10.path, kron10.variant(3, client)) as dg:
        res, _ = check_search(client, kron10, dg, golden10["roots"][0], algorithm=algorithm, validate_dask=False)
        assert {r["direction"] for r in res.level_stats} == {algorithm}


def test_fewer_workers_than_partitions(client, kron10, golden10):
    client.wait_for_workers(2, timeout=60)     # an earlier test's killed worker may still be restarting
    ws = sorted(workers_info(client))
    assert len(ws) == 2
    variant = kron10.variant(4, client)
    levels = []
    for use in (ws, ws[:1]):
        with D.load_distributed(client, kron10.path, variant, workers=use) as dg:
            assert set(dg.rank_worker.values()) == set(use)
            _, v = check_search(client, kron10, dg, golden10["roots"][1], validate_dask=False)
            levels.append(v.levels)
    assert np.array_equal(levels[0], levels[1])


@pytest.mark.parametrize("transport", ["tcp-threads", "dask"])
def test_other_transports(client, kron10, golden10, transport):
    with D.load_distributed(client, kron10.path, kron10.variant(4, client), transport=transport) as dg:
        check_search(client, kron10, dg, golden10["roots"][2])


def test_level_records_count_the_bytes_each_worker_sends(client, kron10, golden10):
    """Per level and worker: kernel seconds, exchange seconds and the array bytes handed to the mesh; a
    top-down search over two workers without the shared memory (as on two hosts) sends its claim pairs, so some
    level of it sends bytes (with it, none: tests/test_shm_claims.py)."""
    with D.load_distributed(client, kron10.path, kron10.variant(2, client), shared_memory=False) as dg:
        assert len(dg.mesh_workers) == 2
        res, _, rec = D.search(dg, golden10["roots"][0], algorithm="td")
        res.release()
    for r in rec:
        assert len(r["workers"]) == 2
        assert all(isinstance(w["sent_bytes"], int) and w["sent_bytes"] >= 0 for w in r["workers"]), r
    assert sum(w["sent_bytes"] for r in rec for w in r["workers"]) > 0


@pytest.mark.parametrize("shm", [None, False])
def test_rounds_per_level_through_the_exchange(client, kron16, golden16, shm):
    """The mesh rounds a level makes, pinned: top-down two (pairs, counts), bottom-up one (counts with the
    frontier slices or the shared frontier), one more at a top-down -> bottom-up switch; the level's kernel is
    its slowest worker's."""
    with D.load_distributed(client, kron16.path, kron16.variant(2, client), shared_memory=shm) as dg:
        assert len(dg.mesh_workers) == 2
        res, _, rec = D.search(dg, golden16["roots"][0])
        res.release()
    assert {r["direction"] for r in rec} == {"td", "bu"}
    prev = None
    for r in rec:
        want = 2 if r["direction"] == "td" else 2 if prev == "td" else 1
        assert r["rounds"] == want, (r["level"], r["direction"], r["rounds"])
        assert r["kernel"] == max(w["kernel"] for w in r["workers"])
        prev = r["direction"]


def _scattered(client, res, parent) -> list:
    """``parent`` cut into ``res``'s partition slices, each scattered to the worker holding that rank."""
    part = res.partitioning
    return [client.scatter(parent[part.vertex_range(rk).start:part.vertex_range(rk).stop], workers=[w], hash=False)
            for rk, w in sorted(res.rank_worker.items())]


def _corrupted(good, root) -> dict:
    """Copies of a valid parent array, each breaking other rules: edges, cycle, range, root."""
    reached = np.flatnonzero(good >= 0)
    cases = {k: good.copy() for k in ("edges", "cycle", "range", "root")}
    p = cases["edges"]
    p[reached[5]] = reached[6]                 # wrong parent (not an edge / wrong level)
    p[reached[7]] = -1                         # a reached vertex dropped (span, parent-unreached)
    p = cases["cycle"]
    p[reached[10]], p[reached[11]] = reached[11], reached[10]   # a 2-cycle
    cases["range"][3] = 5000                   # out of range
    cases["root"][root] = reached[reached != root][0]
    return cases


def test_validate_dask_matches_serial_on_bad_results(client, kron10, golden10):
    """Corrupt the parent slices on the workers; both validators report the same rules, counts, examples."""
    from dbfs.validate.dask import validate_partitioned

    root = golden10["roots"][0]
    with D.load_distributed(client, kron10.path, kron10.variant(3, client)) as dg:
        res, _, _ = D.search(dg, root)
        good = D.gather_parent(res)
        part = res.partitioning
        cases = _corrupted(good, root)
        for name, p in cases.items():
            vd = validate_partitioned(client, kron10.path, _scattered(client, res, p), part, root)
            vs = validate(kron10.edges, root, p)
            assert not vs.ok and not vd.ok, name
            assert vd.nedge == vs.nedge, name
            assert [(f.rule, f.count, f.message, f.vertices.tolist()) for f in vd.failures] == \
                [(f.rule, f.count, f.message, f.vertices.tolist()) for f in vs.failures], name


def test_validate_dask_batch_matches_serial(client, kron10, golden10, tmp_path):
    """Good and corrupted searches and one with a slice missing, validated as one batch of Dask tasks (one
    table, one read of the edges in four tasks, their marks OR-ed in a tree): each result the serial
    validator's, rule for rule."""
    from dbfs.validate.dask import validate_partitioned_many

    four, _ = store.generate(GraphSpec.make("kronecker", 10, 16, 2, 3), root=tmp_path, chunk_edges=4096,
                             client=None, quiet=True)      # the same edges in four zarr chunks
    root = golden10["roots"][0]
    with D.load_distributed(client, kron10.path, kron10.variant(3, client)) as dg:
        res, _, _ = D.search(dg, root)
        good = D.gather_parent(res)
        part = res.partitioning
        cases = [("good", good)] + list(_corrupted(good, root).items())
        batch = [(root, _scattered(client, res, p)) for _, p in cases]
        batch.insert(2, (root, _scattered(client, res, good)[:-1]))
        got = validate_partitioned_many(client, four.path, batch, part, chunk_edges=4096)
        assert len(got) == len(cases) + 1
        short = got.pop(2)
        assert not short.ok and short.rules_failed == ["length"] and "parent slices for 3 partitions" in \
            short.failures[0].message
        for (name, p), vd in zip(cases, got):
            vs = validate(kron10.edges, root, p)
            assert (vd.ok, vd.nedge) == (vs.ok, vs.nedge), name
            assert [(f.rule, f.count, f.message, f.vertices.tolist()) for f in vd.failures] == \
                [(f.rule, f.count, f.message, f.vertices.tolist()) for f in vs.failures], name


def test_validate_on_worker_shares_matches_serial(client, kron10, golden10):
    """The GPU workers' validation method (each worker one share of the input rows, a batch of searches per
    pass, tree-edge bitmaps OR-ed on one worker), run with NumPy on the CPU workers: the same rules, counts,
    messages and examples as the serial validator, for a batch of good and corrupted searches."""
    from dbfs.validate.gpus import validate_on_gpus

    root = golden10["roots"][0]
    with D.load_distributed(client, kron10.path, kron10.variant(3, client)) as dg:
        res, _, _ = D.search(dg, root)
        good = D.gather_parent(res)
        part = res.partitioning
        bad = _corrupted(good, root)
        cases = [good, bad["edges"], bad["cycle"], bad["range"]]
        searches = [(root, _scattered(client, res, p)) for p in cases]
        workers = sorted(workers_info(client))
        got = validate_on_gpus(client, kron10.path, searches, part, workers, device=False)
    assert len(workers) >= 2 and len(got) == len(cases)
    assert got[0].ok and got[0].nedge == validate(kron10.edges, root, good).nedge
    for i, (vd, p) in enumerate(zip(got, cases)):
        vs = validate(kron10.edges, root, p)
        assert vd.ok == vs.ok and vd.nedge == vs.nedge, i
        assert [(f.rule, f.count, f.message, f.vertices.tolist()) for f in vd.failures] == \
            [(f.rule, f.count, f.message, f.vertices.tolist()) for f in vs.failures], i
    rules = [[f.rule for f in v.failures] for v in got]
    assert "tree-edge" in rules[1] and "edge-span" in rules[1] and rules[2][0] == "cycle" and rules[3] == ["range"], rules


class _ThreadComm:
    """W threads as the ranks of a communicator: ``allgather`` joins every rank's buffer in rank order (the
    collective's meaning), each call a barrier, as NCCL's ranks wait for each other."""

    kind = "nccl"

    def __init__(self, W):
        import queue
        import threading

        self.W, self.slots, self.bar = W, [None] * W, threading.Barrier(W, timeout=60)
        self.calls = [0] * W
        self.boxes = {(a, b): queue.Queue() for a in range(W) for b in range(W)}     # point to point, in order
        self.sent = [0] * W

    def rank(self, g):
        import contextlib

        comm = self

        class _End:
            W, widx = comm.W, g

            def allgather(self, send, recv):
                comm.slots[g] = np.array(send)
                comm.bar.wait()
                recv[...] = np.concatenate(comm.slots)
                comm.calls[g] += 1
                comm.bar.wait()

            def send(self, a, peer):
                comm.boxes[(g, peer)].put(np.array(a))
                comm.sent[g] += a.size

            def recv(self, a, peer):
                got = comm.boxes[(peer, g)].get(timeout=60)
                assert got.shape == a.shape and got.dtype == a.dtype
                a[...] = got

            @contextlib.contextmanager
            def group(self):
                yield
                comm.calls[g] += 1

            def check(self):
                pass

        return _End()


def _as_ranks(W, work):
    """``work(g)`` on W threads at once (the ranks of a :class:`_ThreadComm`); an exception in any fails."""
    import threading

    errors = []

    def one(g):
        try:
            work(g)
        except BaseException as exc:       # the main thread reports it
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(g,)) for g in range(W)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors


def _as_serial(edges, got, cases):
    """Each result of ``got`` is the serial validator's on ``(root, parent)`` of ``cases`` (None skipped)."""
    for i, (vd, (r, p)) in enumerate(zip(got, cases)):
        if p is None:
            continue
        vs = validate(edges, r, p)
        assert vd.ok == vs.ok and vd.nedge == vs.nedge, i
        assert [(f.rule, f.count, f.message, f.vertices.tolist()) for f in vd.failures] == \
            [(f.rule, f.count, f.message, f.vertices.tolist()) for f in vs.failures], i


def test_parents_joined_over_a_communicator_validate_as_serial(kron10, golden10):
    """The validation of parents held on the GPU workers (:mod:`dbfs.bfs.dask.search.validate_nccl`), its
    protocol run with NumPy by three threads as the ranks: the slices of unequal ranks (342, 341, 341
    vertices: padded, then cut) joined by allgathers, every rank making the same collectives, one share of
    the input rows each; a slice of the wrong length is the length failure on every rank with no data
    collective, the searches after it still joined. The same rules, counts, messages and examples as the
    serial validator."""
    from dbfs.bfs.dask.search.validate_nccl import _joined
    from dbfs.partition import Partitioning
    from dbfs.validate.gpus import check_share, finish

    root = golden10["roots"][0]
    good = bfs(kron10.csr, root).parent
    bad = _corrupted(good, root)
    cases = [good, bad["edges"], None, bad["cycle"], bad["range"]]      # None: rank 1's slice one short
    W = 3
    part = Partitioning(kron10.n, W, "block")
    assert len(set(part.counts().tolist())) == 2
    comm = _ThreadComm(W)
    shares = [None] * W

    def rank(g):
        rg = part.vertex_range(g)
        mine = [(good[rg.start:rg.stop - 1] if g == 1 else good[rg.start:rg.stop]) if p is None else
                p[rg.start:rg.stop] for p in cases]
        joined = _joined(np, comm.rank(g), part, g, mine)
        shares[g] = check_share(np, kron10.path, g, W, False, kron10.n, [root] * len(cases), joined.__getitem__)

    _as_ranks(W, rank)
    assert comm.calls == [1 + len(cases) - 1] * W          # the lengths, then one allgather a joined search
    got = finish(kron10.n, [root] * len(cases), *shares)
    assert got[0].ok and got[0].nedge == validate(kron10.edges, root, good).nedge
    assert [f.rule for f in got[2].failures] == ["length"] and not got[2].ok
    _as_serial(kron10.edges, got, [(root, p) for p in cases])


def test_whole_searches_sent_to_their_workers_validate_as_serial(kron10, golden10):
    """The validation by search of parents held on the GPU workers (:mod:`dbfs.bfs.dask.search.validate_nccl`),
    its protocol run with NumPy by three threads as the ranks: search k's slices of unequal ranks sent to
    worker k mod 3, which validates it whole against every input row; a slice of the wrong length is the
    length failure of its search's worker with no data moved for it; the results, put back in batch order,
    have the serial validator's rules, counts, messages and examples."""
    from dbfs.bfs.dask.search.validate_nccl import _in_order, _owned
    from dbfs.partition import Partitioning
    from dbfs.validate.gpus import whole_searches

    roots = [int(r) for r in golden10["roots"][:2]]
    good = [bfs(kron10.csr, r).parent for r in roots]
    bad = _corrupted(good[0], roots[0])
    cases = [(roots[0], good[0]), (roots[1], good[1]), (roots[0], None), (roots[0], bad["cycle"]),
             (roots[0], bad["edges"]), (roots[1], good[1]), (roots[0], bad["range"])]  # None: rank 1's slice short
    W = 3
    part = Partitioning(kron10.n, W, "block")
    comm = _ThreadComm(W)
    shares = [None] * W

    def rank(g):
        rg = part.vertex_range(g)
        mine = [(good[0][rg.start:rg.stop - 1] if g == 1 else good[0][rg.start:rg.stop]) if p is None else
                p[rg.start:rg.stop] for _, p in cases]
        parents = _owned(np, comm.rank(g), part, g, mine)
        assert len(parents) == len(range(g, len(cases), W))
        assert [isinstance(p, np.ndarray) and p.shape == (kron10.n,) for p in parents] == \
            [k != 2 for k in range(g, len(cases), W)]
        shares[g] = whole_searches(np, kron10.path, False, kron10.n, [r for r, _ in cases][g::W], parents)

    _as_ranks(W, rank)
    assert comm.calls == [1 + len(cases) - 1] * W          # the lengths, then one group a search moved
    counts = part.counts()
    # each rank sent its slice of every moved search it does not validate, and nothing more
    assert comm.sent == [sum(int(counts[g]) for k in range(len(cases)) if k % W != g and k != 2) for g in range(W)]
    got = _in_order(kron10.n, [r for r, _ in cases], *shares)
    assert [f.rule for f in got[2].failures] == ["length"] and not got[2].ok
    _as_serial(kron10.edges, got, cases)
    assert got[0].ok and got[1].ok and not got[3].ok and not got[6].ok


def test_parents_stay_on_the_devices_only_with_one_rank_a_worker_over_nccl():
    """The rule the client (``DistributedGraph.parents_on_device``) and every GPU worker (``_NcclSearch.hold``)
    both ask of the same ranks: mesh worker i holds rank i alone, and the levels go over NCCL."""
    from dbfs.bfs.dask.layout.placement import DistributedGraph
    from dbfs.bfs.dask.mesh.nccl import holds_parents
    from dbfs.partition import Partitioning

    assert holds_parents([[0], [1]]) and holds_parents([(0,), (1,), (2,), (3,)])
    assert not holds_parents([[0, 2], [1, 3]]) and not holds_parents([[1], [0]]) and not holds_parents([[0], []])
    dg = DistributedGraph(client=None, dataset_path=None, variant="p2-block", partitioning=Partitioning(128, 2),
                          nnz_total=0, rank_worker={0: "a", 1: "b"}, part_futures={}, mesh_workers=["a", "b"])
    assert not dg.parents_on_device                     # the TCP mesh or CUDA IPC: host copies
    dg.level_exchange = "nccl"
    assert dg.parents_on_device
    dg.rank_worker = {0: "a", 1: "a"}
    dg.mesh_workers = ["a"]
    assert not dg.parents_on_device                     # two ranks on one worker


def test_errors(client, kron10):
    with pytest.raises(DbfsError, match="missing or incomplete"):
        D.load_distributed(client, kron10.path, "p7-block")
    with D.load_distributed(client, kron10.path, kron10.variant(2, client)) as dg:
        with pytest.raises(DbfsError, match="out of range"):
            D.search(dg, kron10.n)
        with pytest.raises(DbfsError, match="unknown algorithm"):
            D.search(dg, 0, algorithm="spmv")
        with pytest.raises(DbfsError, match="policy"):
            D.search(dg, 0, policy="nope")
    with pytest.raises(DbfsError, match="closed"):
        D.search(dg, 0)


def test_worker_death_is_recovered(kron16, golden16):
    """The worker holding rank 1 exits after level 1 of the first attempt: the
    partition is reloaded on a live worker, the search reruns and validates."""
    from dbfs.cluster import client_for

    with client_for(n_workers=3, threads_per_worker=1, quiet=True) as c:
        variant = kron16.variant(4, c)
        with D.load_distributed(c, kron16.path, variant, timeout=60) as dg:
            root = golden16["roots"][0]
            before = dict(dg.rank_worker)
            inject_fault(c, dg, 1, 1)
            res, seconds, rec = D.search(dg, root)
            assert res.attempts == 2 and len(res.events) == 1
            ev = res.events[0]
            assert ev["event"] == "worker-lost" and before[1] in ev["workers_lost"] and 1 in ev["ranks_reloaded"]
            assert ev["stage"] == "search"
            assert dg.events == res.events
            assert dg.rank_worker[1] != before[1]
            parent = D.gather_parent(res)
            v = validate(kron16.edges, root, parent)
            assert v.ok and v.nedge == golden16["nedge_v3"][0]
            vd = D.validate_distributed(c, kron16.path, dg, res, root)
            assert vd.ok and vd.nedge == v.nedge
            # the graph stays usable; a worker lost in the first search of a batch: the whole batch reruns
            inject_fault(c, dg, 0, 2)
            roots = golden16["roots"][1:3]
            got = D.search_many(dg, roots)
            for r, (res2, _, _) in zip(roots, got):
                assert res2.attempts == 2 and res2.events and res2.events[0]["stage"] == "search"
                assert validate(kron16.edges, r, D.gather_parent(res2)).ok


def test_relabel_within_partitions_needs_gpu_workers(client, kron16):
    """CPU workers search a stored degree-ordered variant: a build on them relabelled within each partition is
    refused in one line, before any work."""
    with pytest.raises(DbfsError, match="needs GPU workers") as e:
        D.build_distributed(client, kron16.path, 2, relabel="degree")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("P", [2, 3])
def test_built_on_workers_equals_the_stored_variant(client, kron16, golden16, P):
    """build_distributed: every partition built from the edges on its worker is the stored variant's, byte for
    byte, no variant is written, and the searches are the single-process ones (levels, directions, nedge)."""
    from dbfs.bfs.dask.layout.worker import _part_info

    csr = kron16.path / "csr"
    before = sorted(p.name for p in csr.iterdir()) if csr.exists() else []
    with D.build_distributed(client, kron16.path, P) as dg:
        assert dg.source == "edges" and dg.variant == f"p{P}-block"
        assert (sorted(p.name for p in csr.iterdir()) if csr.exists() else []) == before, "nothing stored"
        assert dg.nnz_total == kron16.csr.nnz and sum(dg.attrs["nnz"]) == dg.nnz_total
        assert all(client.submit(_part_info, dg.part_futures[rk]).result()["kind"] == "cpu" for rk in range(P))
        for rk in range(P):
            built = client.submit(lambda p: (p.indptr[p.pad:].copy(), p.indices.copy()), dg.part_futures[rk],
                                  workers=[dg.rank_worker[rk]]).result()
            ip, ix, _ = kernel1.load_partition(kron16.path, kron16.variant(P, client), rk)
            assert built[0].tobytes() == np.asarray(ip).tobytes() and built[1].tobytes() == np.asarray(ix).tobytes()
        for i, root in enumerate(golden16["roots"][:2]):
            _, v = check_search(client, kron16, dg, root, validate_dask=(i == 0))
            assert v.nedge == golden16["nedge_v3"][i]
        from dbfs.roots import eligible

        cands = np.random.default_rng(P).integers(0, kron16.n, 3000)
        want = eligible(kron16.edges, cands)
        assert 0 < want.sum() < want.size and np.array_equal(D.eligible_distributed(dg, cands), want)


@pytest.mark.parametrize("P,partitioning,relabel", [(2, "block", "none"), (3, "cyclic", "none"),
                                                   (2, "block", "degree")])
def test_eligibility_from_the_rows_on_the_workers(client, kron16, P, partitioning, relabel):
    """eligible_distributed on a stored variant (block, cyclic, degree-ordered): the streamed pass over the
    input edges' answer, and the same Graph500 search keys."""
    from dbfs.roots import eligible, select_roots

    a = kernel1.build_partitioned(kron16.path, P=P, partitioning=partitioning, relabel=relabel, client=client,
                                  progress=False)
    with D.load_distributed(client, kron16.path, a["variant"]) as dg:
        cands = np.random.default_rng(P).integers(0, kron16.n, 4000)
        want = eligible(kron16.edges, cands)
        assert 0 < want.sum() < want.size and np.array_equal(D.eligible_distributed(dg, cands), want)
        assert np.array_equal(select_roots(kron16.n, 2, 3, 16, lambda c: D.eligible_distributed(dg, c)),
                              select_roots(kron16.n, 2, 3, 16, lambda c: eligible(kron16.edges, c)))


def test_built_partition_is_rebuilt_after_a_lost_worker(kron16, golden16):
    """A worker holding built partitions exits mid-search: they are rebuilt from the edges on a live worker and
    the search reruns valid."""
    from dbfs.cluster import client_for

    with client_for(n_workers=3, threads_per_worker=1, quiet=True) as c:
        with D.build_distributed(c, kron16.path, 4, timeout=60) as dg:
            root = golden16["roots"][0]
            before = dict(dg.rank_worker)
            inject_fault(c, dg, 1, 1)
            res, _, _ = D.search(dg, root)
            assert res.attempts == 2 and 1 in res.events[0]["ranks_reloaded"]
            assert dg.rank_worker[1] != before[1] and dg.source == "edges"
            v = validate(kron16.edges, root, D.gather_parent(res))
            assert v.ok and v.nedge == golden16["nedge_v3"][0]


def test_task_error_is_raised_not_retried(client, kron10, golden10):
    """A genuine error on one worker reaches the caller at once (no retry, no timeout); the graph stays usable."""
    import time

    with D.load_distributed(client, kron10.path, kron10.variant(2, client), timeout=60) as dg:
        inject_fault(client, dg, 1, 0, how="raise")
        t0 = time.perf_counter()
        with pytest.raises(RuntimeError, match="injected failure"):
            D.search(dg, golden10["roots"][0])
        assert time.perf_counter() - t0 < 30 and not dg.events
        check_search(client, kron10, dg, golden10["roots"][0], validate_dask=False)


def _information_per_level(g, dg, rec, levels):
    """Per level: (bits of information the mesh carried, packed pair bits) modelled from the BFS levels.

    Each worker sends every peer its ranks' frontier slices (the level's frontier at a top-down ->
    bottom-up switch, the new one after a bottom-up level): log2 C(n, k) bits per rank of n vertices, k
    of them in the frontier. A top-down level sends the claims of each worker outside its own ranks:
    the unvisited (in that worker's view) neighbours of its frontier, log2 n + log2 N bits a pair
    (n: the owner rank's vertices). A worker's view: the root, every frontier exchanged, its claims, the
    vertices it owns reached so far."""
    from math import lgamma, log, log2

    from dbfs.bfs.dask.mesh.codec import pair_widths
    from dbfs.partition import Partitioning

    N, P, W = g.n, dg.P, len(dg.mesh_workers)
    part = Partitioning(N, P, "block")
    first = np.array([part.vertex_range(rk).start for rk in range(P)] + [N])
    cnt = np.diff(first)
    rank_of = np.searchsorted(first, np.arange(N), side="right") - 1
    wof = np.array([dg.mesh_workers.index(dg.rank_worker[rk]) for rk in range(P)])
    ip, ix = g.csr.indptr, g.csr.indices

    def info(ks):
        return sum((lgamma(n + 1) - lgamma(k + 1) - lgamma(n - k + 1)) / log(2) for n, k in zip(cnt, ks))

    def slices(F):
        return (W - 1) * info(np.bincount(rank_of[F], minlength=P))

    def nbrs(F):
        lens = ip[F + 1] - ip[F]
        pos = np.repeat(ip[F] - np.cumsum(lens) + lens, lens) + np.arange(lens.sum())
        return np.unique(ix[pos])

    root = int(np.flatnonzero(levels == 0)[0])
    seen = np.zeros((W, N), bool)
    seen[:, root] = True
    out, prev = [], None
    for r in rec:
        lv = r["level"]
        F, F1 = np.flatnonzero(levels == lv), np.flatnonzero(levels == lv + 1)
        assert (r["frontier"], r["discovered"]) == (F.size, F1.size)
        bits = packed = 0.0
        if r["direction"] == "td":
            for w in range(W):
                claims = nbrs(F[wof[rank_of[F]] == w])
                claims = claims[~seen[w, claims]]
                seen[w, claims] = True
                away = claims[wof[rank_of[claims]] != w]
                per_rank = np.bincount(rank_of[away], minlength=P)
                bits += sum(c * (log2(cnt[rk]) + log2(N)) for rk, c in enumerate(per_rank))
                packed += sum(c * sum(pair_widths(cnt[rk], N)) for rk, c in enumerate(per_rank))
            for w in range(W):
                seen[w, F1[wof[rank_of[F1]] == w]] = True
        else:
            if prev != "bu":
                bits += slices(F)
                seen[:, F] = True
            bits += slices(F1)
            seen[:, F1] = True
        out.append((bits, packed))
        prev = r["direction"]
    return out


@pytest.mark.parametrize("P", [2, 4])
def test_across_hosts_a_level_sends_at_most_twice_its_information(client, kron16, golden16, P):
    """Two hosts simulated on one (shared_memory=False: frontier slices and claim pairs by TCP): every search
    is the single-process do level for level, and each level's bytes on the wire (its workers' sent_bytes)
    are at most twice the information it carries (slices: log2 C(n, k) a rank; top-down pairs:
    log2 n + log2 N each, packed in their ceilings' bits: the pair count is pinned both ways)."""
    with D.load_distributed(client, kron16.path, kron16.variant(P, client), shared_memory=False) as dg:
        assert dg.shm == "switched off" and len(dg.mesh_workers) == 2
        runs = [(root, "do") for root in golden16["roots"][:2]] + [(golden16["roots"][2], "td"),
                                                                    (golden16["roots"][2], "bu")]
        for i, (root, algorithm) in enumerate(runs):
            res, v = check_search(client, kron16, dg, root, algorithm=algorithm, validate_dask=(i == 0))
            rec = res.level_stats
            model = _information_per_level(kron16, dg, rec, v.levels)
            for r, (bits, packed) in zip(rec, model):
                sent = 8 * sum(w["sent_bytes"] for w in r["workers"])
                assert sent <= 2 * bits, (root, algorithm, r["level"], r["direction"], sent / 8, bits / 8)
                if r["direction"] == "td":      # one stream per (source, destination) rank: a byte's rounding each
                    assert packed <= sent <= packed + 8 * P * P, (r["level"], sent, packed)
            assert sum(w["sent_bytes"] for r in rec for w in r["workers"]) > 0


def test_live_words_end_at_the_last_row_with_an_edge():
    """gpu_live.own_live_words: the leading 32-row words of a rank's bitmap slice up to its last row with an
    edge (rows without edges inside the live part kept), at most the slice, 0 for a rank without edges."""
    from types import SimpleNamespace

    from dbfs.bfs.dask.search.gpu_live import own_live_words

    def part(degrees):
        return SimpleNamespace(indptr_host=np.concatenate([[0], np.cumsum(degrees)]).astype(np.int64))

    assert own_live_words(part([2, 0, 3, 0, 0]), 4) == 1
    assert own_live_words(part([1] * 32 + [0] * 40), 4) == 1
    assert own_live_words(part([1] * 33 + [0] * 40), 4) == 2
    assert own_live_words(part([0] * 70 + [5]), 4) == 3
    assert own_live_words(part([1] * 200), 4) == 4          # never past the slice
    assert own_live_words(part([0] * 64), 2) == 0
    assert own_live_words(SimpleNamespace(indptr_host=np.zeros(0, np.int64)), 2) == 0

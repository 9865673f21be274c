"""NCCL level exchange between GPU workers on two devices (markers ``gpu``; skipped with fewer than two GPUs).

What is checked: a mesh of two GPU workers on two devices of one host gets an
NCCL communicator (``frontier_sharing == "nccl"``); every search over it (P = 2,
stored, and P = 2 built on the workers) validates against the input edge list
and equals ``--backend gpu``'s single-process search level for level
(direction, frontier size, edges examined); every level makes at most two
collectives (top-down: the claims in one allgather where every frontier is small, else the
fixed regions of claims, then the counts; bottom-up:
the counts, then the frontier as ids or as bits (one group where a worker
holds several ranks or the slices are small), one more at the top-down -> bottom-up switch), three where the
regions would be too large (forced here by a zero region limit: the exact
buckets, their sizes first) and records each worker's kernel and exchange seconds and bytes sent;
the frontier forced to go always as ids, then always as bits, gives the same levels; every large top-down
level forced to go as bits (claimed bits to their owner, who finds the parents bottom-up) gives the same
levels; the small
top-down levels replayed as captured CUDA graphs and issued call by call give the same levels, with
graphs captured and replayed (or none made);
``DBFS_NCCL=off`` falls back to CUDA IPC.
"""
import sys

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.distributed]

try:
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
except ImportError:
    pass

SCALE = 16
ROOTS = 4


@pytest.fixture(scope="module")
def two_devices(cp):
    if cp.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs on this host (one device per NCCL rank)")
    pytest.importorskip("dask_cuda")


@pytest.fixture(scope="module")
def nds(two_devices, tmp_path_factory):
    from dbfs import kernel1, store
    from dbfs.roots import graph500_roots
    from dbfs.spec import GraphSpec

    root = tmp_path_factory.mktemp("nccl")
    ds, _ = store.generate(GraphSpec.make("kronecker", SCALE), root=root, client=None, quiet=True)
    for P in (1, 2, 4):
        kernel1.build_partitioned(ds.path, P=P, client=None, progress=False)
    edges = ds.edges()[:]
    roots = [int(r) for r in graph500_roots(edges, SCALE, 2, 3, n=ROOTS, n_vertices=ds.n_vertices)]
    from dbfs.bfs import get_algorithm

    g = kernel1.load_csr(ds.path, kernel1.variant_name(1))
    fn = get_algorithm("do", "gpu")
    return ds, edges, roots, {r: fn(g, r, stats=True)[1] for r in roots}


@pytest.fixture(scope="module")
def nclient(nds, tmp_path_factory):
    from dbfs.cluster import client_for

    p = tmp_path_factory.mktemp("prof") / "gpu2.yaml"
    p.write_text("type: local-gpu\ngpus: [0, 1]\nthreads_per_gpu_worker: 2\ncpu_workers: 0\n")
    with client_for(profile=str(p), quiet=True) as client:
        client.wait_for_workers(2, timeout=120)
        yield client


def _bootstrap_interface():
    import os

    return os.environ.get("NCCL_SOCKET_IFNAME")


def _searches(client, dg, nds, td_rounds=2, same_edges=True):
    import dbfs.bfs.dask as D
    from dbfs.validate import validate

    ds, edges, roots, single = nds
    levels = []
    for r in roots:
        res, sec, lst = D.search(dg, r, stats=True)
        assert res.on_device == dg.parents_on_device == (dg.level_exchange == "nccl" and dg.P == 2)
        levels += lst
        v = validate(edges, r, D.gather_parent(res, client, dg))
        assert v.ok, v.summary()
        ref = single[r]
        keep = 3 if same_edges else 2       # (a bottom-up level's edges examined depend on the numbering)
        assert [(x["direction"], x["frontier"], x["edges"])[:keep] for x in lst] == \
            [(x["direction"], x["frontier"], x["edges"])[:keep] for x in ref]
        prev = None
        for x in lst:
            td, switch = x["direction"] == "td", x["direction"] == "bu" and prev != "bu"
            assert 1 <= x["rounds"] <= (td_rounds if td else 3 if switch else 2), x     # collectives in the level
            assert len(x["workers"]) == 2 and all(w["kernel"] >= 0 and w["exchange"] >= 0 for w in x["workers"])
            prev = x["direction"]
        if dg.level_exchange == "nccl":        # (CUDA IPC moves frontiers and pairs device to device, unsent)
            assert any(w["sent_bytes"] > 0 for x in lst for w in x["workers"])
        res.release()
    return levels


@pytest.mark.parametrize("P", [2, 4])
def test_nccl_levels_equal_single_gpu(nclient, nds, P):
    import dbfs.bfs.dask as D
    from dbfs import kernel1

    dg = D.load_distributed(nclient, nds[0].path, kernel1.variant_name(P))
    try:
        assert len(dg.mesh_workers) == 2 and dg.frontier_sharing == "nccl", (dg.frontier_sharing, dg.nccl_off)
        assert set(nclient.run(_bootstrap_interface).values()) == {"lo"}      # NCCL's bootstrap on loopback
        _searches(nclient, dg, nds)
    finally:
        dg.close()


def _set(consts: dict) -> dict:
    """(client.run) set module constants of gpu_nccl (``gpu_dense.NAME`` for that module's) on a worker;
    returns their old values."""
    from dbfs.bfs.dask.search import gpu_dense, gpu_nccl

    mods = {"gpu_dense": gpu_dense}
    old = {}
    for k, v in consts.items():
        mod, _, name = k.rpartition(".")
        m = mods[mod] if mod else gpu_nccl
        old[k] = getattr(m, name)
        setattr(m, name, v)
    return old


def _searches_with(nclient, nds, consts, relabel=None, **kw):
    """The searches of P = 2 on the two workers with gpu_nccl's ``consts`` set on both (restored after): on the
    stored plain partitions, or (``relabel``) on partitions built on the workers and relabelled so."""
    import dbfs.bfs.dask as D
    from dbfs import kernel1

    old = list(nclient.run(_set, consts).values())[0]
    if relabel:
        dg = D.build_distributed(nclient, nds[0].path, 2, relabel=relabel)
        kw["same_edges"] = False
    else:
        dg = D.load_distributed(nclient, nds[0].path, kernel1.variant_name(2))
    try:
        return _searches(nclient, dg, nds, **kw)
    finally:
        dg.close()
        nclient.run(_set, old)


def test_nccl_exact_buckets_past_the_region_limit(nclient, nds):
    """Past the region limit (and no level small enough for one allgather) a top-down level sends exact
    buckets (their sizes read first): the same levels."""
    levels = _searches_with(nclient, nds, {"CAPPED_PAIRS": 0, "TINY_EDGES": -1, "gpu_dense.DENSE_SHARE": 1e9},
                            td_rounds=3)
    assert any(x["rounds"] == 3 for x in levels if x["direction"] == "td"), levels


@pytest.mark.parametrize("tiny", [1 << 40, -1])
def test_nccl_top_down_claims_in_one_allgather_or_in_regions(nclient, nds, tiny):
    """Every top-down level's claims in one allgather of (id, parent) pairs, then none (the regions): the
    same levels as one GPU; the allgather and the counts, two collectives, every top-down level."""
    levels = _searches_with(nclient, nds, {"TINY_EDGES": tiny, "gpu_dense.DENSE_SHARE": 1e9})
    if tiny > 0:
        assert all(x["rounds"] == 2 for x in levels if x["direction"] == "td"), levels


@pytest.mark.parametrize("share,relabel", [(0.0, None), (1e9, None), (0.0, "degree")])
def test_nccl_large_top_down_levels_as_bits_or_as_pairs(nclient, nds, share, relabel):
    """Every top-down level exchanged as bits (the claim pass's bits to their owner rank, ``bu_step`` over
    the claimed rows), then none: the same levels,
    frontiers and edges as one GPU, valid parents, two collectives a top-down level, bytes sent. On partitions
    relabelled by degree within themselves (the rows without edges each slice's tail), only the slices'
    live words go: fewer bytes than two whole slices."""
    levels = _searches_with(nclient, nds, {"gpu_dense.DENSE_SHARE": share, "TINY_EDGES": -1}, relabel=relabel)
    td = [x for x in levels if x["direction"] == "td"]
    assert td and all(x["rounds"] == 2 for x in td), td
    slice_bytes = (1 << SCALE) // 2 // 8
    sent = [w["sent_bytes"] for x in td for w in x["workers"]]
    if not share and not relabel:       # each worker sends its frontier's slice and a slice of its claimed bits
        assert all(b >= 2 * slice_bytes for b in sent), td
    elif not share:
        assert all(0 < b < 2 * slice_bytes for b in sent), td


def _replays(dask_worker=None):
    """(client.run) this worker's replayed level graphs: (launches of a kept graph, captures) over its meshes."""
    from dbfs.bfs.dask.mesh.plugin import get_plugin

    rps = [getattr(c, "replays", None) for c in get_plugin(dask_worker).shms.values()]
    return sum(r.hits for r in rps if r is not None), sum(r.captures for r in rps if r is not None)


@pytest.mark.parametrize("replay", [True, False])
def test_nccl_small_top_down_levels_replayed_as_graphs_or_issued(nclient, nds, replay):
    """Every small top-down level (one allgather) replayed as a captured CUDA graph, then issued call by call:
    the same levels as one GPU either way, each level's kernel and exchange seconds recorded (the graph's own
    events), and the graphs captured once and replayed (or never made)."""
    import dbfs.bfs.dask as D
    from dbfs import kernel1

    old = list(nclient.run(_set, {"TINY_EDGES": 1 << 16, "REPLAY": replay}).values())[0]
    dg = D.load_distributed(nclient, nds[0].path, kernel1.variant_name(2))
    try:
        levels = _searches(nclient, dg, nds)
        hits = list(nclient.run(_replays).values())
    finally:
        dg.close()
        nclient.run(_set, old)
    td = [x for x in levels if x["direction"] == "td" and x["edges"] <= 1 << 16]
    assert td and all(x["rounds"] == 2 for x in td), td
    assert all(w["kernel"] > 0 and w["exchange"] > 0 for x in td for w in x["workers"]), td
    if replay:      # each worker: graphs captured, and some launched again (a graph a slot size and buffers)
        assert all(h > 0 and c > 0 for h, c in hits), hits
    else:
        assert all(c == 0 for _, c in hits), hits


@pytest.mark.parametrize("share,relabel", [(1e9, None), (0.0, None), (0.0, "degree")])
def test_nccl_bottom_up_frontier_as_ids_or_as_bits(nclient, nds, share, relabel):
    """The counts read before the frontier's exchange at any slice size, every bottom-up level's frontier then
    sent as ids (any size), then as bits (none as ids): the same levels as one GPU, and both ways send bytes;
    as bits on partitions relabelled by degree within themselves, only each slice's live words (less than
    the whole slice a level, which the plain partitions send)."""
    levels = _searches_with(nclient, nds, {"SPARSE_SHARE": share, "SPLIT_MIN_BYTES": 0}, relabel=relabel)
    bu = [x for x in levels if x["direction"] == "bu" and x["discovered"]]
    assert bu and all(x["rounds"] >= 2 for x in bu), bu      # the counts, then the frontier
    if not share:       # bitmaps a level: its frontier's, and after a top-down level the switch's too
        slice_bytes = (1 << SCALE) // 2 // 8
        before = ["td"] + [y["direction"] for y in levels]
        sent = [(w["sent_bytes"], 2 if prev == "td" else 1) for prev, x in zip(before, levels)
                if x["direction"] == "bu" and x["discovered"] for w in x["workers"]]
        assert all(b > 0 for b, _ in sent), bu
        if relabel:
            assert all(b < k * slice_bytes for b, k in sent), (sent, bu)
        else:
            assert all(b >= k * slice_bytes for b, k in sent), (sent, bu)


def test_nccl_on_partitions_built_on_the_workers(nclient, nds):
    import dbfs.bfs.dask as D

    dg = D.build_distributed(nclient, nds[0].path, 2)
    try:
        assert dg.frontier_sharing == "nccl", (dg.frontier_sharing, dg.nccl_off)
        _searches(nclient, dg, nds)
    finally:
        dg.close()


def _held_rows(p):
    """(on the partition's worker) its rows (a split rank's two pieces joined in entry order), hub table, Kernel 1
    report and split, on the host."""
    import cupy as cp
    import numpy as np

    nnz = int(p.indptr_host[-1])
    if p.indices is not None:
        idx = cp.asnumpy(p.indices)
    else:                                   # ADJ_PARAMS: entries [0, at) in the first piece, the rest in the second
        a, b, at = p.adj
        at = min(int(at), nnz)
        idx = np.concatenate([cp.asnumpy(a[:at]), cp.asnumpy(b[:nnz - at])])
    return {"indptr": p.indptr_host[p.pad:].copy(), "indices": idx, "hub": cp.asnumpy(p.hub)[p.pad:],
            "read": p.meta.get("edge_rows_read"), "kernel1": p.meta.get("kernel1"), "split": p.split}


def test_kernel1_as_one_gpu_shuffle_reads_each_edge_row_once(nds):
    """P = 2 built on the two GPU workers of a NEW cluster (the build is its first use): Kernel 1 is one shuffle
    over NCCL (each GPU reads its half of the edge rows once, no other read) and every partition is byte for
    byte the stored p2-block's, its hub table the CPU's from the global degrees."""
    import numpy as np

    import dbfs.bfs.dask as D
    from dbfs import kernel1
    from dbfs.bfs.cpu import hub_by_degree
    from dbfs.cluster import client_for
    from dbfs.kernel1.shuffle import reader_spans
    from dbfs.kernel1.on_workers import shuffle_source

    ds = nds[0]
    p = ds.path.parent / "gpu2-fresh.yaml"
    p.write_text("type: local-gpu\ngpus: [0, 1]\nthreads_per_gpu_worker: 2\ncpu_workers: 0\n")
    with client_for(profile=str(p), quiet=True) as fresh:
        fresh.wait_for_workers(2, timeout=120)
        dg = D.build_distributed(fresh, ds.path, 2)
        try:
            held = [fresh.submit(_held_rows, dg.part_futures[rk], workers=[dg.rank_worker[rk]]).result()
                    for rk in range(2)]
            table = dg.workers_table()
            steps = dict(dg.load_steps)
        finally:
            dg.close()
    stored = [kernel1.load_partition(ds.path, kernel1.variant_name(2), rk)[:2] for rk in range(2)]
    deg = np.concatenate([np.diff(ip) for ip, _ in stored])
    src = shuffle_source(ds)
    spans = reader_spans(src.m, src.step, 2)
    for rk, (h, (ip, idx)) in enumerate(zip(held, stored)):
        assert h["kernel1"] == "gpu-shuffle"
        assert np.array_equal(h["indptr"], ip) and np.array_equal(h["indices"], idx)
        assert np.array_equal(h["hub"].astype(np.int64), hub_by_degree(ip, idx, deg).astype(np.int64))
        assert h["read"] == spans[rk][1] - spans[rk][0]
    assert sum(h["read"] for h in held) == ds.n_edges
    assert [w["edge_rows_read"] for w in table] == [h["read"] for h in held]
    for w in table:         # where each GPU's Kernel 1 went: every phase timed, the passes' included
        assert w["build_ranges"] >= 1
        phases = {"degrees", "plan", "swap", "rows", "sink", "finish"}
        phases |= {"read", "emit"} if w["edge_rows_read"] else set()    # a GPU with no rows to read makes none
        assert phases <= set(w["kernel1_seconds"]), w
        assert all(t >= 0 for t in w["kernel1_seconds"].values())
    assert "kernel1_nccl" in steps


def _free_device_bytes():
    import cupy as cp

    cp.get_default_memory_pool().free_all_blocks()
    return int(cp.cuda.runtime.memGetInfo()[0])


def test_kernel1_gpu_shuffle_in_passes_reading_its_span_again(nclient, nds, monkeypatch):
    """A device budget too small to keep a GPU's span of the edge rows (what SCALE 31 on four GPUs meets): every
    pass reads it again and the emit kernel maps its ids by the degree numbering; several passes; the
    relabelled partitions equal those of the build that kept its span, byte for byte."""
    import numpy as np

    import dbfs.bfs.dask as D
    import dbfs.bfs.dask.layout.placement as placement
    from dbfs.kernel1.shuffle import reader_spans
    from dbfs.kernel1.shuffle_gpu import shuffle_fixed
    from dbfs.kernel1.on_workers import shuffle_source

    ds, edges, _, _ = nds

    def built():
        dg = D.build_distributed(nclient, ds.path, 2, relabel="degree")
        try:
            return ([nclient.submit(_held_rows, dg.part_futures[rk], workers=[dg.rank_worker[rk]]).result()
                     for rk in range(2)], dg.workers_table())
        finally:
            dg.close()

    kept, _ = built()
    n, src = ds.n_vertices, shuffle_source(ds)
    rows = max(b - a for a, b in reader_spans(src.m, src.step, 2))
    e = edges.astype(np.int64)
    deg = np.bincount(e[e[:, 0] != e[:, 1]].ravel(), minlength=n)
    out = max(4 * int(deg[:n // 2].sum()), 4 * int(deg[n // 2:].sum())) + 8 * (n // 2)
    fixed = shuffle_fixed(n, src.step, 0, False, 4)
    budget = fixed + out + 32 * int(deg.sum()) // 6        # about three passes of the larger rank
    assert 8 * rows > (budget - fixed) // 3                 # too small to keep the span
    monkeypatch.setattr(placement, "K1_DEVICE_SHARE", budget / min(nclient.run(_free_device_bytes).values()))
    again, table = built()
    assert max(w["build_ranges"] for w in table) >= 2, table
    assert sum(w["edge_rows_read"] for w in table) > ds.n_edges     # the span read again each pass
    for a, b in zip(kept, again):
        assert np.array_equal(a["indptr"], b["indptr"]) and np.array_equal(a["indices"], b["indices"])
        assert np.array_equal(a["hub"], b["hub"])


@pytest.mark.parametrize("relabel, order", [("none", "prefix"), ("degree", "suffix")])
def test_kernel1_gpu_shuffle_splits_a_rank_past_the_device_room(nclient, nds, monkeypatch, relabel, order):
    """A rank whose rows pass the device room left beside the searches (SCALE 31 on two H200s): every GPU places
    its passes' rows into a device piece and, past it, a mapped pinned host piece (the low-degree tail on the
    device where relabelled); the rows are byte for byte the unsplit build's, and the searches over the two pieces
    are valid, level for level the single GPU's."""
    import numpy as np

    import dbfs.bfs.dask as D
    import dbfs.bfs.dask.layout.placement as placement

    ds, edges, _, _ = nds

    def built(check=False):
        dg = D.build_distributed(nclient, ds.path, 2, relabel=relabel)
        try:
            held = [nclient.submit(_held_rows, dg.part_futures[rk], workers=[dg.rank_worker[rk]]).result()
                    for rk in range(2)]
            if check:
                _searches(nclient, dg, nds, same_edges=relabel == "none")
            return held
        finally:
            dg.close()

    whole = built()
    assert all(h["split"] is None for h in whole)
    n = ds.n_vertices
    least = min(int(h["indptr"][-1]) for h in whole)
    room = 8 * (n // 2 + 1) + 4 * (least // 3)         # a third of the smaller rank's entries on the device
    monkeypatch.setattr(placement, "mesh_room", lambda *a: room)
    split = built(check=True)
    for a, b in zip(whole, split):
        assert b["split"]["mode"] == "split" and b["split"]["order"] == order, b["split"]
        assert 0 < b["split"]["device_entries"] <= (room - 8 * (n // 2 + 1)) // 4
        assert b["split"]["device_entries"] + b["split"]["host_entries"] == int(a["indptr"][-1])
        assert np.array_equal(a["indptr"], b["indptr"]) and np.array_equal(a["indices"], b["indices"])
        assert np.array_equal(a["hub"], b["hub"])


def test_kernel1_gpu_shuffle_refuses_a_wrong_checksum_on_every_gpu(nclient, nds, tmp_path):
    """A dataset whose recorded edges_checksum the rows do not add up to: one line naming it, from the
    collective check (no GPU left waiting), and the workers build the next graph as before."""
    import shutil

    import zarr

    import dbfs.bfs.dask as D
    from dbfs.errors import DbfsError

    ds = nds[0]
    bad = tmp_path / ds.path.name
    shutil.copytree(ds.path, bad)
    zarr.open_group(str(bad), mode="r+").attrs["edges_checksum"] = "0123456789abcdef"
    with pytest.raises(DbfsError, match="edges_checksum") as err:
        D.build_distributed(nclient, bad, 2)
    assert "\n" not in str(err.value)
    dg = D.build_distributed(nclient, ds.path, 2)
    dg.close()


@pytest.mark.parametrize("P", [2, 4])
def test_nccl_on_partitions_relabelled_within_themselves(nclient, nds, P):
    """--relabel degree on GPU workers at P > 1 (one rank a worker, or two): each partition numbered by degree
    within itself; roots, parents and root eligibility in original ids, the same levels as the single GPU."""
    import numpy as np

    import dbfs.bfs.dask as D
    from dbfs.bfs.dask.search.client import eligible_distributed

    ds, edges, roots, _ = nds
    dg = D.build_distributed(nclient, ds.path, P, relabel="degree")
    try:
        assert dg.frontier_sharing == "nccl" and dg.attrs["options"]["relabel"] == "degree"
        _searches(nclient, dg, nds, same_edges=False)
        cands = np.arange(0, ds.n_vertices, 7)
        e = edges.astype(np.int64)
        touched = np.zeros(ds.n_vertices, bool)
        touched[e[e[:, 0] != e[:, 1]].ravel()] = True
        assert eligible_distributed(dg, cands).tolist() == touched[cands].tolist()
    finally:
        dg.close()


def _with_parent(sl, i, v):
    out = sl.copy()
    out[i] = v
    return out


def _kept_bytes(mesh_id, dask_worker=None):
    from dbfs.bfs.dask.mesh.plugin import get_plugin

    return sum(int(v.nbytes) for v in get_plugin(dask_worker).shms[mesh_id].kept.values())


def _kind(sl):
    return type(sl).__module__.split(".")[0], str(sl.dtype)


@pytest.mark.parametrize("by", ["search", "edges"])
def test_nccl_validation_joins_the_parents_on_the_devices(nclient, nds, monkeypatch, by):
    """P = 2, one rank a GPU worker, partitions relabelled within themselves: each search's parents stay on
    its devices (original ids, the id width), a batch is validated with the slices joined over NCCL (the
    host path, which would move them through Dask, refused here), whole searches a worker against every
    input row or each worker its share of the rows for every search, with the serial validator's results:
    the valid searches, and a search whose parent slice on rank 1 was corrupted on its device."""
    import numpy as np

    import dbfs.bfs.dask as D
    from dbfs.bfs.dask.layout.placement import gpu_workers
    from dbfs.bfs.dask.mesh.plugin import memory_peaks
    from dbfs.bfs.dask.search import parents as C
    from dbfs.bfs.reference import bfs_levels
    from dbfs.validate import validate

    ds, edges, roots, _ = nds
    dg = D.build_distributed(nclient, ds.path, 2, relabel="degree")
    try:
        assert dg.parents_on_device
        results = [D.search(dg, r, stats=False)[0] for r in roots]
        assert all(r.on_device for r in results)
        assert nclient.submit(_kind, results[0].parents[1], workers=[dg.rank_worker[1]]).result() == \
            ("cupy", "int32")
        full = [D.gather_parent(r, nclient, dg) for r in results]
        rg = dg.partitioning.vertex_range(1)
        want = [p.copy() for p in full]
        loc = int(np.flatnonzero(full[-1][rg.start:rg.stop] >= 0)[-1])
        want[-1][rg.start + loc] = -1                   # an unreached vertex beside reached ones: span
        # a parent one level up that is not a neighbour: only the tree-edge rule fails
        lev = bfs_levels(edges, results[-2].root, ds.n_vertices)
        v = next(x for x in range(rg.start, rg.stop) if lev[x] >= 2)
        near = set(edges[edges[:, 0] == v, 1].tolist()) | set(edges[edges[:, 1] == v, 0].tolist())
        u = next(int(x) for x in np.flatnonzero(lev == lev[v] - 1) if int(x) not in near)
        want[-2][v] = u
        for k, (i, val) in ((-1, (loc, -1)), (-2, (v - rg.start, u))):
            results[k].parents[1] = nclient.submit(_with_parent, results[k].parents[1], i, val,
                                                   workers=[dg.rank_worker[1]], pure=False)

        def host_path(*a, **k):
            raise AssertionError("the parents went through Dask")

        monkeypatch.setattr(C, "validate_on_gpus", host_path)
        dg.validate_by = by
        dg.keep_bytes = 1 << 30     # each worker keeps its rows on its device
        got = C.validate_many_distributed(nclient, ds.path, dg, results, gpu_workers(nclient))
        kept = nclient.run(_kept_bytes, dg.mesh_id, workers=dg.mesh_workers)
        assert len(kept) == 2 and all(b > 0 for b in kept.values()), kept
        again = C.validate_many_distributed(nclient, ds.path, dg, results, gpu_workers(nclient))
        assert [(g.ok, g.nedge, g.rules_failed) for g in again] == [(g.ok, g.nedge, g.rules_failed) for g in got]
        for i, (res, r, p) in enumerate(zip(got, results, want)):
            vs = validate(edges, r.root, p)
            assert res.ok == vs.ok and res.nedge == vs.nedge, i
            assert [(f.rule, f.count, f.message, f.vertices.tolist()) for f in res.failures] == \
                [(f.rule, f.count, f.message, f.vertices.tolist()) for f in vs.failures], i
        assert all(res.ok for res in got[:-2]) and not got[-1].ok
        assert got[-2].rules_failed == ["tree-edge"]
        # the searches' claim arrays went before the validation; each worker's most device memory in use
        assert not any(nclient.run(_has_claim_arrays, workers=dg.mesh_workers).values())
        peaks = memory_peaks(nclient, dg.mesh_workers)
        assert len(peaks) == 2 and all(p["peak_device_bytes"] > 0 and p["peak_host_rss_bytes"] > 0
                                       for p in peaks.values()), peaks
    finally:
        dg.close()


def _has_claim_arrays(dask_worker=None):
    from dbfs.bfs.dask.mesh.plugin import get_plugin

    return "gpu" in get_plugin(dask_worker).scratch


def test_nccl_switched_off_falls_back_to_cuda_ipc(nclient, nds, monkeypatch):
    import dbfs.bfs.dask as D
    from dbfs import kernel1

    monkeypatch.setenv("DBFS_NCCL", "off")
    dg = D.load_distributed(nclient, nds[0].path, kernel1.variant_name(2))
    try:
        assert dg.frontier_sharing == "cuda-ipc" and "DBFS_NCCL=off" in dg.nccl_off, (dg.frontier_sharing,
                                                                                     dg.nccl_off)
        _searches(nclient, dg, nds)
    finally:
        dg.close()

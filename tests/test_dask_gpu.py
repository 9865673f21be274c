"""GPU workers in the dask backend, on the real GPU with a real dask-cuda cluster (marker ``gpu``).

What is checked (invariants, never identical parent arrays): every search's
parents gathered from the workers validate against the INPUT edge list;
per level, the direction, the frontier size and the edges examined equal
``--backend gpu``'s single-process search of the same graph and root
(P = 1, 2, 4 on one GPU worker; two GPU workers on one GPU, the second
started by hand as dask-cuda refuses two workers per device, their pairs
and frontiers shared through CUDA IPC or staged through the host; GPU + CPU
workers, where only directions and frontier sizes are compared: the CPU
kernels count examined edges their own way). A GPU worker killed mid-search
is replaced and the search rerun (an event recorded).
Skipped without a GPU, CuPy or dask-cuda.
"""
import os
import re
import subprocess
import sys
import time

import pytest

from dbfs.workers_info import workers_info

pytestmark = [pytest.mark.gpu, pytest.mark.distributed]

# client.run ships this module's functions by value: the workers cannot import a test module
try:
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
except ImportError:       # no distributed: every test here skips anyway
    pass

SCALE = 18
ROOTS = 4


@pytest.fixture(scope="module")
def gds(cp, tmp_path_factory):
    """A SCALE 18 Kronecker dataset with block variants P = 1, 2, 4, its edges and search keys."""
    pytest.importorskip("dask_cuda")
    from dbfs import kernel1, store
    from dbfs.roots import graph500_roots
    from dbfs.spec import GraphSpec

    root = tmp_path_factory.mktemp("dgpu")
    ds, _ = store.generate(GraphSpec.make("kronecker", SCALE), root=root, client=None, quiet=True)
    for P in (1, 2, 4):
        kernel1.build_partitioned(ds.path, P=P, client=None, progress=False)
    kernel1.build_partitioned(ds.path, P=4, relabel="degree", client=None, progress=False)
    edges = ds.edges()[:]
    roots = [int(r) for r in graph500_roots(edges, SCALE, 2, 3, n=ROOTS, n_vertices=ds.n_vertices)]
    return ds, edges, roots


@pytest.fixture(scope="module")
def single(gds):
    """``--backend gpu``'s level stats per root (the reference of the invariants)."""
    from dbfs import kernel1
    from dbfs.bfs import get_algorithm

    ds, edges, roots = gds
    g = kernel1.load_csr(ds.path, kernel1.variant_name(1))
    fn = get_algorithm("do", "gpu")
    return {r: fn(g, r, stats=True)[1] for r in roots}


def _profile(tmp_path, cpu_workers):
    p = tmp_path / "gpu.yaml"
    # GPU 0 only: the tests model one GPU worker (a second one is started by hand on the same device), on
    # boxes of any number of GPUs
    p.write_text(f"type: local-gpu\ngpus: [0]\nthreads_per_gpu_worker: 2\ncpu_workers: {cpu_workers}\ncpu_threads: 2\n")
    return str(p)


@pytest.fixture(scope="module")
def gclient(gds, tmp_path_factory):
    """A LocalCUDACluster (one GPU worker) plus one CPU worker."""
    from dbfs.cluster import client_for

    with client_for(profile=_profile(tmp_path_factory.mktemp("prof"), 1), quiet=True) as client:
        yield client


def _kinds(client):
    from dbfs.bfs.dask.layout.placement import worker_kinds

    ws = sorted(workers_info(client))
    return worker_kinds(client, ws)


def _check(client, dg, gds, single, full_levels=True):
    import dbfs.bfs.dask as D
    from dbfs.validate import validate

    ds, edges, roots = gds
    for r in roots:
        res, _sec, lst = D.search(dg, r, stats=True)
        parent = D.gather_parent(res, client, dg)
        v = validate(edges, r, parent)
        assert v.ok, v.summary()
        ref = single[r]
        assert [x["direction"] for x in lst] == [x["direction"] for x in ref]
        assert [x["frontier"] for x in lst] == [x["frontier"] for x in ref]
        if full_levels:
            assert [x["edges"] for x in lst] == [x["edges"] for x in ref]
        assert all("workers" in x for x in lst)
        res.release()


@pytest.mark.parametrize("P", [1, 2, 4])
def test_gpu_worker_partitions_equal_gpu_backend(gclient, gds, single, P):
    import dbfs.bfs.dask as D
    from dbfs import kernel1

    ds = gds[0]
    gpu_w = [w for w, k in _kinds(gclient).items() if k == "gpu"]
    assert len(gpu_w) == 1
    dg = D.load_distributed(gclient, ds.path, kernel1.variant_name(P), workers=gpu_w)
    try:
        assert set(dg.rank_kind.values()) == {"gpu"}
        assert dg.shm                       # the shared /dev/shm frontier is off with GPU workers
        table = dg.workers_table()
        assert table[0]["kind"] == "gpu" and table[0]["device_bytes"] > 0
        _check(gclient, dg, gds, single)
    finally:
        dg.close()


def test_gpu_plus_cpu_workers(gclient, gds, single):
    """P = 4 with the GPU worker's budget holding two partitions: the other two go to the CPU worker."""
    import dbfs.bfs.dask as D
    from dbfs import kernel1
    from dbfs.bfs.dask.layout.gpu_part import worker_bytes

    ds = gds[0]
    dg0 = D.load_distributed(gclient, ds.path, kernel1.variant_name(4))
    per = max(dg0.part_bytes)
    dg0.close()
    limit = worker_bytes(ds.n_vertices) + 2 * per + per // 2
    for placement in ("block", "random"):
        dg = D.load_distributed(gclient, ds.path, kernel1.variant_name(4), placement=placement,
                                device_memory_limit=limit)
        try:
            kinds = sorted(dg.rank_kind.values())
            assert kinds == ["cpu", "cpu", "gpu", "gpu"], kinds
            assert dg.frontier_sharing.startswith("mesh: GPU and CPU workers"), dg.frontier_sharing
            _check(gclient, dg, gds, single, full_levels=False)
        finally:
            dg.close()


@pytest.mark.parametrize("placement", ["degree", "degree-low"])
def test_degree_classes_on_gpu_and_cpu(gclient, gds, single, placement):
    """A degree-ordered variant over the GPU and the CPU worker: valid, same directions and frontiers."""
    import dbfs.bfs.dask as D
    from dbfs import kernel1
    from dbfs.bfs.dask.layout.gpu_part import worker_bytes

    ds = gds[0]
    v = kernel1.variant_name(4, "block", True, "degree")
    dg0 = D.load_distributed(gclient, ds.path, v, placement=placement)
    sizes = sorted(dg0.part_bytes)
    dg0.close()
    limit = worker_bytes(ds.n_vertices) + sizes[0] + sizes[1] + 1
    dg = D.load_distributed(gclient, ds.path, v, placement=placement, device_memory_limit=limit)
    try:
        kinds = [dg.rank_kind[r] for r in range(4)]
        assert "gpu" in kinds and "cpu" in kinds, kinds           # the budget holds part of the graph only
        used = sum(dg.part_bytes[r] for r in range(4) if kinds[r] == "gpu")
        assert used <= limit - worker_bytes(ds.n_vertices)
        _check(gclient, dg, gds, single, full_levels=False)
    finally:
        dg.close()


def _extra_gpu_worker(address):
    """A second GPU worker on the same device, started by hand (with a nanny)."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]}
    return subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address, "--resources", "GPU=1",
                             "--nthreads", "2", "--host", "127.0.0.1", "--no-dashboard", "--name", "gpu-extra"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.fixture()
def two_gpu(gclient):
    n0 = len(workers_info(gclient))
    proc = _extra_gpu_worker(gclient.scheduler.address)
    gclient.wait_for_workers(n0 + 1, timeout=90)
    try:
        yield [w for w, k in _kinds(gclient).items() if k == "gpu"]
    finally:
        proc.terminate()
        proc.wait(30)
        deadline = time.monotonic() + 30
        while len(workers_info(gclient)) > n0 and time.monotonic() < deadline:
            time.sleep(0.2)


def _ipc_bytes(mesh_id, dask_worker=None):
    from dbfs.bfs.dask.mesh.plugin import get_plugin

    sh = get_plugin(dask_worker).shms.get(mesh_id)
    return None if sh is None else (sh.published, sh.collected, sh.pulled)


@pytest.mark.parametrize("P", [2, 4])
def test_two_gpu_workers_exchange(gclient, gds, single, two_gpu, P):
    """P = 2, 4 over two GPU workers: top-down pairs and frontier bitmaps go device to device
    through CUDA IPC, and, switched off, through host staging and the mesh; both equal
    --backend gpu level for level."""
    import dbfs.bfs.dask as D
    from dbfs import kernel1

    assert len(two_gpu) == 2
    for shared, how in ((None, "cuda-ipc"), (False, "mesh: switched off")):
        dg = D.load_distributed(gclient, gds[0].path, kernel1.variant_name(P), workers=two_gpu,
                                shared_memory=shared)
        try:
            assert len(dg.mesh_workers) == 2 and set(dg.rank_kind.values()) == {"gpu"}
            assert dg.frontier_sharing == how, dg.frontier_sharing
            _check(gclient, dg, gds, single)
            moved = gclient.run(_ipc_bytes, dg.mesh_id, workers=two_gpu)
            if shared is None:   # both workers moved bottom-up frontiers and top-down pairs device to device
                assert all(pub > 0 and col > 0 and pulled > 0 for pub, col, pulled in moved.values()), moved
            else:
                assert all(v is None for v in moved.values()), moved
        finally:
            dg.close()


def test_validation_on_two_gpu_workers_matches_serial(gclient, gds, two_gpu):
    """The GPU workers' validation (each checks half of the regenerated input rows on its device, a batch
    of searches per pass): the serial validator's rules, counts, messages and examples, good and corrupted."""
    import numpy as np

    import dbfs.bfs.dask as D
    from dbfs import kernel1
    from dbfs.validate import validate
    from dbfs.validate.gpus import validate_on_gpus

    ds, edges, roots = gds
    dg = D.load_distributed(gclient, ds.path, kernel1.variant_name(2), workers=two_gpu)
    try:
        res, _, _ = D.search(dg, roots[0])
        good = D.gather_parent(res, gclient, dg)
        part = res.partitioning
        reached = np.flatnonzero(good >= 0)
        bad = good.copy()
        bad[reached[5]] = reached[6]
        bad[reached[7]] = -1
        cases = [good, bad]
        searches = [(roots[0], [gclient.scatter(p[part.vertex_range(rk).start:part.vertex_range(rk).stop], hash=False,
                                                workers=[w]) for rk, w in sorted(res.rank_worker.items())])
                    for p in cases]
        got = validate_on_gpus(gclient, ds.path, searches, part, two_gpu)
        for vd, p in zip(got, cases):
            vs = validate(edges, roots[0], p)
            assert vd.ok == vs.ok and vd.nedge == vs.nedge
            assert [(f.rule, f.count, f.message, f.vertices.tolist()) for f in vd.failures] == \
                [(f.rule, f.count, f.message, f.vertices.tolist()) for f in vs.failures]
        assert got[0].ok and not got[1].ok
        res.release()
    finally:
        dg.close()


@pytest.mark.parametrize("P", [1, 2])
def test_one_gpu_worker_keeps_and_validates_its_parents_on_the_device(gclient, gds, P):
    """A mesh of one GPU worker holding every rank of a stored variant: the searches' parents stay on its device
    (the id width, original ids) and are validated there, not copied to the host, with the serial validator's
    results."""
    import dbfs.bfs.dask as D
    from dbfs import kernel1
    from dbfs.bfs.dask.search.parents import validate_many_distributed
    from dbfs.graph import id_dtype
    from dbfs.validate import validate

    ds, edges, roots = gds
    gpu_w = [w for w, k in _kinds(gclient).items() if k == "gpu"]
    dg = D.load_distributed(gclient, ds.path, kernel1.variant_name(P), workers=gpu_w)
    try:
        assert dg.parents_on_device and dg.level_exchange != "nccl"
        assert dg.held_parent_bytes() == dg.n_vertices * id_dtype(dg.n_vertices).itemsize
        got = [D.search(dg, r)[0] for r in roots[:3]]
        assert all(r.on_device for r in got)
        kinds = gclient.gather([gclient.submit(lambda a: type(a).__module__.split(".")[0], f, workers=gpu_w,
                                               pure=False) for r in got for f in r.parents.values()])
        assert set(kinds) == {"cupy"}, kinds
        vals = validate_many_distributed(gclient, ds.path, dg, got, gpu_w)
        for res, vd in zip(got, vals):
            vs = validate(edges, res.root, D.gather_parent(res, gclient, dg))
            assert vd.ok and vs.ok and vd.nedge == vs.nedge
            res.release()
    finally:
        dg.close()


@pytest.mark.parametrize("P", [2, 3])
def test_partition_built_on_the_device_is_the_stored_one(gds, P):
    """_build_part(device=True), as a GPU worker runs it: every partition's rows built on the GPU from the
    edges stay in device memory and are the stored variant's partition byte for byte."""
    import numpy as np

    from dbfs import kernel1
    from dbfs.bfs.dask.layout.worker import _build_part
    from dbfs.graph import id_dtype

    ds = gds[0]
    v = kernel1.build_partitioned(ds.path, P=P, client=None, progress=False)["variant"]
    for rk in range(P):
        p = _build_part(str(ds.path), P, rk, True, True)
        assert p.on_device and p.hub is None      # (its hub is built with the global degrees, by _prepare_part)
        ip, ix, _ = kernel1.load_partition(ds.path, v, rk)
        assert p.indptr_host[p.pad:].tobytes() == np.asarray(ip).tobytes(), rk
        assert p.indptr.get()[p.pad:].tobytes() == np.asarray(ip).tobytes(), rk
        assert p.indices.get().tobytes() == np.asarray(ix).astype(id_dtype(ds.n_vertices)).tobytes(), rk


@pytest.mark.parametrize("P", [2, 4])
def test_built_on_two_gpu_workers(gclient, gds, single, two_gpu, P):
    """build_distributed over two GPU workers on one GPU: partitions built on the devices, frontiers through
    CUDA IPC, the searches equal --backend gpu, eligibility read from the rows there; a GPU worker killed
    mid-search has its partitions rebuilt on a live worker and the search reruns valid."""
    import numpy as np

    import dbfs.bfs.dask as D
    from dbfs.roots import eligible

    ds, edges, _ = gds
    dg = D.build_distributed(gclient, ds.path, P, workers=two_gpu)
    try:
        assert dg.source == "edges" and set(dg.rank_kind.values()) == {"gpu"} and len(dg.mesh_workers) == 2
        assert dg.frontier_sharing == "cuda-ipc", dg.frontier_sharing
        cands = np.random.default_rng(P).integers(0, ds.n_vertices, 5000)
        assert np.array_equal(D.eligible_distributed(dg, cands), eligible(edges, cands))
        _check(gclient, dg, gds, single)
        if P == 2:
            _kill_rank_and_search(gclient, dg, gds, single, 1)
    finally:
        dg.close()


def _install_exit(level, dask_worker=None):
    import os as _os

    from dbfs.bfs.dask.mesh.plugin import get_plugin

    listeners = get_plugin(dask_worker).level_listeners

    def fault(lv, ranks, record):
        if lv == level:
            listeners.remove(fault)
            _os._exit(1)

    listeners.append(fault)
    return True


def _kill_rank_and_search(client, dg, gds, single, rank):
    """The worker holding ``rank`` exits at level 1 of a search: the search reruns and is valid, level for level
    the single-process search's frontiers."""
    import dbfs.bfs.dask as D
    from dbfs.validate import validate

    _ds, edges, roots = gds
    client.run(_install_exit, 1, workers=[dg.rank_worker[rank]])
    res, _sec, lst = D.search(dg, roots[0], stats=True)
    assert any(e.get("event") == "worker-lost" for e in res.events), res.events
    v = validate(edges, roots[0], D.gather_parent(res, client, dg))
    assert v.ok, v.summary()
    assert [x["frontier"] for x in lst] == [x["frontier"] for x in single[roots[0]]]


def test_killed_gpu_worker_recovers(gclient, gds, single, two_gpu):
    import dbfs.bfs.dask as D
    from dbfs import kernel1

    dg = D.load_distributed(gclient, gds[0].path, kernel1.variant_name(2), workers=two_gpu)
    try:
        _kill_rank_and_search(gclient, dg, gds, single, 1)
    finally:
        dg.close()


def test_gpu_budget_too_small_is_one_line(gclient, gds):
    """No CPU worker and a budget no partition fits: a one-line error naming --device-memory-limit."""
    import dbfs.bfs.dask as D
    from dbfs import kernel1
    from dbfs.errors import DbfsError

    gpu_w = [w for w, k in _kinds(gclient).items() if k == "gpu"]
    with pytest.raises(DbfsError) as ei:
        D.load_distributed(gclient, gds[0].path, kernel1.variant_name(2), workers=gpu_w, device_memory_limit=1 << 20)
    msg = str(ei.value)
    assert "--device-memory-limit" in msg and "\n" not in msg


def test_cli_run_local_gpu(gds, tmp_path):
    """README's `dbfs run --scale 16 --cluster local-gpu --backend dask --partitions 2 --roots 4`, as written:
    valid, the GPU worker named on stderr, and no CPU validator's kernels loaded (the searches are validated on
    the GPU workers)."""
    out = subprocess.run([sys.executable, "-m", "dbfs.cli", "run", "--scale", "16", "--cluster", "local-gpu",
                          "--backend", "dask", "--partitions", "2", "--roots", "4"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Numba kernels of validation" not in out.stderr, out.stderr[-2000:]
    assert "harmonic_mean_TEPS" in out.stdout
    assert "GPU worker" in out.stderr and "in device memory" in out.stderr
    assert re.search(r"validation on \d+ GPU worker\(s\)", out.stderr), out.stderr[-2000:]
    from dbfs.cluster.gpu import gpu_count

    if gpu_count() >= 2:        # an NCCL mesh whose devices all keep every row: whole searches a worker
        assert "each checking whole searches against every input edge" in out.stderr, out.stderr[-2000:]
    teps = re.search(r"harmonic_mean_TEPS:\s*!?\s*([0-9.eE+-]+)", out.stdout)
    assert teps and float(teps.group(1)) > 0, out.stdout

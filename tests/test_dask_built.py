"""Kernel 1 in a GPU worker's memory (dbfs.bfs.dask.layout.built), on the real GPU with a real dask-cuda cluster.

What is checked: ``--backend dask`` at P = 1 with ``--relabel degree`` on a
cluster with a GPU worker generates the graph on that worker, builds the CSR
there (never stored: no ``csr/`` variant appears) split between device and
pinned host memory, and its searches validate on the worker against the
input edges; per level, the direction, frontier size and edges examined
equal ``--backend gpu``'s run of the same graph, options and roots; the
parents gathered to the client validate on the CPU too; README's command
runs as written. Skipped without a GPU, CuPy or dask-cuda.
"""
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.distributed]

SCALE = 18
ROOTS = 4


def _cfg(backend):
    from dbfs.pipeline import RunConfig

    # 10 MiB for the row offsets and the device piece: most of the adjacency goes to pinned host memory
    return RunConfig(backend=backend, n_roots=ROOTS, relabel="degree", placement="degree-low",
                     device_memory_limit=10 << 20, quiet=True)


@pytest.fixture(scope="module")
def gclient(cp, tmp_path_factory):
    pytest.importorskip("dask_cuda")
    from dbfs.cluster import client_for

    prof = tmp_path_factory.mktemp("prof") / "gpu.yaml"
    prof.write_text("type: local-gpu\nthreads_per_gpu_worker: 2\ncpu_workers: 1\ncpu_threads: 2\n")
    with client_for(profile=str(prof), quiet=True) as client:
        yield client


@pytest.fixture(scope="module")
def runs(gclient, tmp_path_factory):
    """The dask run (on the cluster) and the gpu run (this process) of one SCALE 18 graph."""
    from dbfs.pipeline import run_graph500
    from dbfs.spec import GraphSpec

    root = tmp_path_factory.mktemp("built")
    spec = GraphSpec.make("kronecker", SCALE)
    d = run_graph500(spec, root, _cfg("dask"), client=gclient)
    g = run_graph500(spec, root, _cfg("gpu"))
    return root, spec, d, g


def test_built_on_the_worker_and_not_stored(runs):
    root, spec, d, _g = runs
    assert d.validated and d.ok and len(d.valid) == ROOTS, d.failures
    assert any("kept in memory for this run" in n for n in d.config["notes"]), d.config["notes"]
    assert "GPU worker" in d.config["kernel1"]
    assert not (root / spec.name / "csr").exists() or not any((root / spec.name / "csr").iterdir())
    pl = d.config["placement"]
    assert pl["device_entries"] > 0 and pl["host_entries"] > 0, pl
    (w,) = d.config["workers"]
    assert w["kind"] == "gpu" and w["partitions"] == [0]
    assert d.config["memory"]["peak_device_bytes"] > 0 and d.config["memory"]["peak_host_rss_bytes"] > 0


def test_same_levels_as_the_gpu_backend(runs):
    _root, _spec, d, g = runs
    assert d.roots == g.roots
    assert d.nedges == g.nedges
    for a, b in zip(d.levels, g.levels):
        assert [(x["direction"], x["frontier"], x["edges"]) for x in a] == \
               [(x["direction"], x["frontier"], x["edges"]) for x in b]


def test_parents_reach_the_client_in_original_ids(gclient, runs):
    """The parents of a search copied to the client validate on the CPU against the stored input edges."""
    from dbfs.backends import get_backend
    from dbfs.bfs.dask.search.graphs import ResidentGraph
    from dbfs.pipeline import open_backend
    from dbfs.store import open_dataset
    from dbfs.validate import validate

    root, spec, d, _g = runs
    b, ds, _variant, _k1 = open_backend(spec, root, _cfg("dask"), client=gclient)
    try:
        assert isinstance(b, get_backend("dask")) and isinstance(b.pg, ResidentGraph)
        r = d.roots[1]
        b.search(r)
        v = validate(open_dataset(spec.name, root).edges()[:], r, b.parents())
        assert v.ok, v.summary()
        assert b.nedge(r) == d.nedges[1]
    finally:
        b.close()


def test_cli_run_built_on_the_gpu_worker(cp, tmp_path):
    """README's `dbfs run --scale 16 --cluster local-gpu --backend dask --relabel degree --placement degree-low
    --roots 4`, as written: valid, Kernel 1 said to run on the GPU worker, and no CPU validator's kernels loaded
    (the searches are validated on that worker's device)."""
    pytest.importorskip("dask_cuda")
    out = subprocess.run([sys.executable, "-m", "dbfs.cli", "run", "--scale", "16", "--cluster", "local-gpu",
                          "--backend", "dask", "--relabel", "degree", "--placement", "degree-low", "--roots", "4"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "harmonic_mean_TEPS" in out.stdout and "INVALID" not in out.stderr
    assert "Kernel 1 of" in out.stderr and "GPU worker" in out.stderr, out.stderr[-2000:]
    assert "Numba kernels of validation" not in out.stderr, out.stderr[-2000:]

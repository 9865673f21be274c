"""The GPU pipeline: generation and Kernel 1 into the store on the GPU, and
``dbfs run --backend gpu`` (device validation, --energy).

Marked ``gpu`` (skip without cupy or a CUDA device), except the CPU-only
checks of the error paths at the end. Invariants: the GPU-made dataset and
CSR variant have the CPU-made bytes; a GPU run picks the CPU run's roots and
its searches validate with the CPU run's nedge per root.
"""
import json

import numpy as np
import pytest
from click.testing import CliRunner

from dbfs import kernel1, store
from dbfs.cli import cli
from dbfs.pipeline import RunConfig, run_graph500
from dbfs.roots import eligible
from dbfs.spec import GraphSpec


def _cli(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def _variant_bytes(ds_path, variant):
    g = kernel1.load_csr(ds_path, variant)
    return g.indptr.tobytes(), g.indices.tobytes(), str(g.indices.dtype)


@pytest.mark.gpu
def test_gpu_generation_and_kernel1_store_cpu_bytes(cp, tmp_path):
    from dbfs.kernel1.build_gpu import build_gpu
    from dbfs.roots import eligible_gpu

    spec = GraphSpec.make(scale=15, edgefactor=16)
    cpu_ds, _ = store.generate(spec, tmp_path / "cpu", chunk_edges=100_000, quiet=True)
    gpu_ds, how = store.generate(spec, tmp_path / "gpu", chunk_edges=70_000, quiet=True, backend="gpu")
    assert how == "generated" and gpu_ds.attrs["generated_on"] == "gpu"
    assert gpu_ds.attrs["edges_checksum"] == cpu_ds.attrs["edges_checksum"]
    host = cpu_ds.edges()[:]
    assert gpu_ds.edges()[:].tobytes() == host.tobytes()
    dev = gpu_ds.memo["device_edges"]
    assert cp.asnumpy(dev).tobytes() == host.tobytes()
    cands = np.arange(0, 1 << 15, 7, dtype=np.int64)
    assert np.array_equal(eligible_gpu(dev, cands), eligible(host, cands))
    for dedupe in (True, False):
        ref = kernel1.build_partitioned(cpu_ds.path, P=1, dedupe=dedupe, progress=False)
        got = build_gpu(gpu_ds, dedupe=dedupe, quiet=True)
        assert got["variant"] == ref["variant"] and got["checksums"] == ref["checksums"]
        assert _variant_bytes(gpu_ds.path, got["variant"]) == _variant_bytes(cpu_ds.path, ref["variant"])
        assert build_gpu(gpu_ds, dedupe=dedupe)["reused"] is True
    # a dataset opened from the store (no memo) is read back to the device
    reopened = store.open_dataset(spec.name, tmp_path / "gpu")
    assert "device_edges" not in reopened.memo
    assert kernel1.reusable_variant(reopened.path) is not None  # stored, complete
    from dbfs.store.gpu import DeviceRows, device_edges

    # a stored Kronecker list is regenerated on the device, not read: the stored bytes all the same
    assert cp.asnumpy(DeviceRows(reopened)[1000:70000]).tobytes() == host[1000:70000].tobytes()
    assert cp.asnumpy(device_edges(reopened)).tobytes() == host.tobytes()


@pytest.mark.gpu
def test_run_gpu_matches_cpu_run(cp, tmp_path):
    spec = GraphSpec.make(scale=14, edgefactor=16)
    cpu = run_graph500(spec, tmp_path / "c", RunConfig(n_roots=8, quiet=True))
    gpu = run_graph500(spec, tmp_path / "g", RunConfig(backend="gpu", n_roots=8, quiet=True))
    assert gpu.ok and cpu.ok and all(gpu.valid)
    assert gpu.roots == cpu.roots
    assert gpu.nedges == cpu.nedges
    assert gpu.load_time == 0.0, "the CSR GPU Kernel 1 just built is searched without a reload"
    again = run_graph500(spec, tmp_path / "g", RunConfig(backend="gpu", n_roots=8, quiet=True))
    assert again.nedges == cpu.nedges and again.ok, "reused dataset and CSR (loaded from zarr)"


@pytest.mark.gpu
def test_cli_run_gpu_energy_json(cp, tmp_path):
    out = tmp_path / "r.json"
    res = _cli("run", "--scale", 12, "--backend", "gpu", "--roots", 4, "--energy", "--json", out,
               "--datasets", tmp_path)
    assert res.exit_code == 0, res.output
    assert "MTEPS_per_W:" in res.output and "energy_mean_power_W:" in res.output
    rec = json.loads(out.read_text())
    e = rec["energy"]
    assert 5 < e["mean_watts"] < 2000 and e["joules"] > 0 and e["mteps_per_watt"] > 0
    assert e["seconds"] >= 2.0 and e["searches"] >= 4 and e["searches"] % 4 == 0
    assert e["method"] in ("energy_counter", "power_sampling")


@pytest.mark.gpu
def test_cli_generate_and_build_gpu(cp, tmp_path):
    res = _cli("generate", "--scale", 11, "--backend", "gpu", "--datasets", tmp_path)
    assert res.exit_code == 0, res.output
    name = res.output.strip().splitlines()[-1]
    res = _cli("build", name, "--backend", "gpu", "--datasets", tmp_path)
    assert res.exit_code == 0 and "p1-block" in res.output, res.output
    ref = kernel1.build_csr(store.open_dataset(name, tmp_path).edges()[:], n_vertices=1 << 11)
    g = kernel1.load_csr(tmp_path / name, "p1-block")
    assert g.indices.tobytes() == ref.indices.tobytes() and g.indptr.tobytes() == ref.indptr.tobytes()


# ------------------------------------------------------- CPU-only error paths
def test_energy_needs_gpu_backend(tmp_path):
    res = CliRunner().invoke(cli, ["run", "--scale", "10", "--energy", "--datasets", str(tmp_path)])
    assert res.exit_code == 2 and "--energy does not apply to --backend cpu: it measures GPU power" in res.output


def test_gpu_generation_is_kronecker_only(tmp_path):
    res = CliRunner().invoke(cli, ["generate", "--kind", "grid2d", "--scale", "6", "--backend", "gpu",
                                   "--datasets", str(tmp_path)])
    assert res.exit_code == 2 and "Kronecker graphs only" in res.output
    with pytest.raises(Exception, match="Kronecker graphs only"):
        store.generate(GraphSpec.make(kind="grid2d", scale=6), tmp_path, backend="gpu")


def test_gpu_build_is_one_block_partition(tmp_path):
    _cli("generate", "--scale", 8, "--datasets", tmp_path, "--scheduler", "threads")
    res = CliRunner().invoke(cli, ["build", "kron-s8-ef16-s2-3", "--backend", "gpu", "--partitions", "2",
                                   "--datasets", str(tmp_path)])
    assert res.exit_code == 2 and "one block partition" in res.output


def test_kernel1_memory_model():
    """The GPU Kernel 1 size rule (CPU-only: pure arithmetic on counts)."""
    from types import SimpleNamespace

    from dbfs.kernel1.build_gpu import kernel1_device_bytes, kernel1_fits

    s26 = SimpleNamespace(n_edges=16 << 26, n_vertices=1 << 26, name="kron-s26")
    s28 = SimpleNamespace(n_edges=16 << 28, n_vertices=1 << 28, name="kron-s28")
    assert kernel1_device_bytes(16 << 26, 1 << 26) == 32 * (16 << 26) + 32 * (1 << 26) + (1 << 30)
    h100_free = 79 << 30
    assert kernel1_fits(s26, free=h100_free), "SCALE 26 builds on an H100"
    assert not kernel1_fits(s28, free=h100_free), "SCALE 28 does not: dbfs run falls back to the CPU build"


def test_energy_without_nvml_fails_before_any_work(tmp_path):
    from dbfs.energy import available

    if available():
        pytest.skip("this machine has NVML")
    res = CliRunner().invoke(cli, ["run", "--scale", "10", "--backend", "gpu", "--energy", "--datasets", str(tmp_path)])
    assert res.exit_code == 2 and ("NVML" in res.output or "--backend gpu cannot run here" in res.output)
    assert not any(tmp_path.iterdir()), "nothing generated"


def test_edges_fit_rule_on_a_stored_dataset(tmp_path):
    """edges_fit reads the stored dtype from the dataset attributes (CPU-only)."""
    from dbfs.store.gpu import edges_fit

    ds, _ = store.generate(GraphSpec.make(scale=8), tmp_path, quiet=True)
    raw = ds.n_edges * 2 * 4   # uint32 pairs
    assert ds.attrs["edge_dtype"] == "uint32"
    assert edges_fit(ds, free=4 * raw) and not edges_fit(ds, free=4 * raw - 4)
    ds.memo["device_edges"] = object()
    assert edges_fit(ds, free=0), "a device copy already made is used whatever is free"

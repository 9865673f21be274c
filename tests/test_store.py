"""Dataset store and the generate/datasets/export commands, on real zarr stores."""
import json
import os
import shutil

import numpy as np
import pytest
from click.testing import CliRunner

import dbfs
from dbfs import store
from dbfs.cli import cli
from dbfs.spec import GraphSpec
from dbfs.store import write as store_write

NAME10 = "kron-s10-ef16-s2-3"


def run(*args, ok=True):
    res = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    if ok:
        assert res.exit_code == 0, res.output + res.stderr
    return res


def gen(root, *extra, ok=True):
    return run("generate", "--datasets", root, "--scheduler", "threads", *extra, ok=ok)


def attrs(path):
    with open(path / "zarr.json") as f:
        return json.load(f)["attributes"]


def test_generate_attrs_and_export(tmp_path, golden10):
    res = gen(tmp_path, "--scale", 10, "--chunk-edges", 3000)
    assert res.stdout.strip() == NAME10
    a = attrs(tmp_path / NAME10)
    assert a["complete"] is True and a["n_edges"] == 16384 and a["n_vertices"] == 1024
    assert a["edge_dtype"] == "uint32" and a["spec"]["kind"] == "kronecker" and a["dbfs_version"] == dbfs.__version__
    assert a["generation_time"] > 0 and len(a["edges_checksum"]) == 16
    out = tmp_path / "e.npy"
    run("export", NAME10, "--datasets", tmp_path, "--out", out)
    e = np.load(out)
    assert e.dtype == np.int64
    np.testing.assert_array_equal(e, golden10["edges"])


def test_chunkings_same_bytes_and_checksum(tmp_path):
    gen(tmp_path / "a", "--scale", 12, "--chunk-edges", 1000)
    gen(tmp_path / "b", "--scale", 12, "--chunk-edges", 65536)
    name = "kron-s12-ef16-s2-3"
    ea, eb = (store.open_dataset(name, tmp_path / d).edges()[:] for d in "ab")
    np.testing.assert_array_equal(ea, eb)
    assert attrs(tmp_path / "a" / name)["edges_checksum"] == attrs(tmp_path / "b" / name)["edges_checksum"]


@pytest.mark.distributed
def test_generate_on_two_process_localcluster(tmp_path):
    res = run("generate", "--datasets", tmp_path, "--scale", 12, "--chunk-edges", 5000, "--workers", 2)
    assert "dashboard:" in res.stderr
    got = store.open_dataset("kron-s12-ef16-s2-3", tmp_path).edges()[:]
    np.testing.assert_array_equal(got.astype(np.int64), dbfs.kronecker_edges(12))


def test_reuse_then_rebuild_after_interruption(tmp_path):
    gen(tmp_path, "--scale", 10)
    res = gen(tmp_path, "--scale", 10)
    assert "reusing complete dataset" in res.stderr
    # simulated interruption: the marker is missing
    meta = tmp_path / NAME10 / "zarr.json"
    doc = json.loads(meta.read_text())
    del doc["attributes"]["complete"]
    meta.write_text(json.dumps(doc))
    assert store.status(tmp_path / NAME10)[0] == "incomplete"
    res = gen(tmp_path, "--scale", 10)
    assert "incomplete" in res.stderr and "rebuilding" in res.stderr
    assert store.status(tmp_path / NAME10)[0] == "complete"
    # an interrupted attempt's temp dir is cleaned up on the next generation
    (tmp_path / f".{NAME10}.tmp-deadbeef").mkdir()
    gen(tmp_path, "--scale", 10, "--force")
    assert not list(tmp_path.glob(".*"))


def test_missing_chunk_is_corrupt_and_rebuilt(tmp_path):
    gen(tmp_path, "--scale", 10, "--chunk-edges", 4096)
    chunk = next((tmp_path / NAME10 / "edges" / "c").rglob("*"))
    while chunk.is_dir():
        chunk = next(chunk.iterdir())
    chunk.unlink()
    assert store.status(tmp_path / NAME10)[0] == "corrupt"
    res = run("export", NAME10, "--datasets", tmp_path, "--out", tmp_path / "x.npy", ok=False)
    assert res.exit_code == 2 and "corrupt" in res.stderr and "dbfs datasets rm" in res.stderr
    assert not (tmp_path / "x.npy").exists()
    res = gen(tmp_path, "--scale", 10, "--chunk-edges", 4096)
    assert "rebuilding" in res.stderr and store.status(tmp_path / NAME10)[0] == "complete"


def test_damaged_chunk_fails_checksum(tmp_path):
    gen(tmp_path, "--scale", 10)
    ds = store.open_dataset(NAME10, tmp_path)
    import zarr

    z = zarr.open_array(ds.path / "edges", mode="r+")
    z[5] = [1, 2]
    res = run("export", NAME10, "--datasets", tmp_path, "--out", tmp_path / "x.npy", ok=False)
    assert res.exit_code == 2 and "edges chunk 0" in res.stderr and "digest" in res.stderr
    assert not (tmp_path / "x.npy").exists() and not list(tmp_path.glob(".x.npy*"))


def test_corrupt_metadata(tmp_path):
    gen(tmp_path, "--scale", 10)
    (tmp_path / NAME10 / "zarr.json").write_text("{not json")
    res = run("datasets", "info", NAME10, "--datasets", tmp_path)
    assert json.loads(res.stdout)["status"] == "corrupt"
    res = run("export", NAME10, "--datasets", tmp_path, "--out", tmp_path / "x.npy", ok=False)
    assert res.exit_code == 2 and "corrupt" in res.stderr


def test_force_keeps_old_copy_until_new_complete(tmp_path, monkeypatch):
    gen(tmp_path, "--scale", 10, "--chunk-edges", 2000)
    before = store.open_dataset(NAME10, tmp_path).edges()[:]
    calls = {"n": 0}
    real = store_write._write_block

    def failing(path, block, start):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("simulated crash while writing")
        return real(path, block, start)

    monkeypatch.setattr(store_write, "_write_block", failing)
    with pytest.raises(RuntimeError):
        gen(tmp_path, "--scale", 10, "--chunk-edges", 2000, "--force")
    monkeypatch.setattr(store_write, "_write_block", real)
    assert store.status(tmp_path / NAME10)[0] == "complete"
    np.testing.assert_array_equal(store.open_dataset(NAME10, tmp_path).edges()[:], before)
    assert not list(tmp_path.glob(".*"))
    res = gen(tmp_path, "--scale", 10, "--force")
    assert "--force" in res.stderr and store.status(tmp_path / NAME10)[0] == "complete"


def test_list_info_rm(tmp_path):
    gen(tmp_path, "--scale", 10)
    gen(tmp_path, "--scale", 4, "--kind", "grid2d")
    res = run("datasets", "list", "--datasets", tmp_path)
    lines = res.stdout.splitlines()
    assert lines[0].split() == ["NAME", "KIND", "SCALE", "EDGES", "STORAGE", "SIZE", "STAGES", "COMPLETE"]
    assert any(l.startswith("grid2d-s4 ") for l in lines) and any(l.startswith(NAME10) and "16,384" in l for l in lines)
    info = json.loads(run("datasets", "info", NAME10, "--datasets", tmp_path).stdout)
    assert info["complete"] and info["stages"] == ["edges"] and info["size_bytes"] > 0 and info["edges"] == "stored"
    run("datasets", "rm", NAME10, "--datasets", tmp_path)
    assert not (tmp_path / NAME10).exists()
    res = run("datasets", "rm", NAME10, "--datasets", tmp_path, ok=False)
    assert res.exit_code == 2 and "not found" in res.stderr
    assert json.loads(run("datasets", "list", "--json", "--datasets", tmp_path).stdout)[0]["name"] == "grid2d-s4"


def test_env_var_root(tmp_path, monkeypatch):
    monkeypatch.setenv("DBFS_DATASETS", str(tmp_path / "envroot"))
    run("generate", "--scale", 5, "--scheduler", "threads")
    assert (tmp_path / "envroot" / "kron-s5-ef16-s2-3" / "zarr.json").exists()


def test_other_kinds_stored(tmp_path):
    gen(tmp_path, "--scale", 6, "--kind", "uniform", "--edgefactor", 4)
    gen(tmp_path, "--scale", 6, "--kind", "rmat", "--a", 0.45, "--b", 0.22, "--c", 0.22)
    gen(tmp_path, "--scale", 6, "--kind", "grid3d")
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["grid3d-s6", "rmat-s6-ef16-a4500-b2200-c2200-s2-3", "uniform-s6-ef4-s2-3"]
    for n in names:
        ds = store.open_dataset(n, tmp_path)
        spec = ds.spec
        np.testing.assert_array_equal(ds.edges()[:].astype(np.int64), spec.edges())


def test_import_edge_list(tmp_path):
    src = tmp_path / "tiny.txt"
    src.write_text("# a tiny graph\n0 1\n1 2\n\n2 0\n5 3\n")
    res = gen(tmp_path / "ds", "--kind", "import", "--input", src)
    name = res.stdout.strip()
    assert name.startswith("import-tiny-")
    ds = store.open_dataset(name, tmp_path / "ds")
    assert ds.n_vertices == 6 and ds.n_edges == 4
    np.testing.assert_array_equal(ds.edges()[:], [[0, 1], [1, 2], [2, 0], [5, 3]])
    res = gen(tmp_path / "ds", "--input", src)
    assert "reusing" in res.stderr


BAD = [
    (["--scale", 0], "SCALE 0"),
    (["--scale", 43], "SCALE 43"),
    (["--edgefactor", 0], "edgefactor 0"),
    (["--seed1", -1], "seed1"),
    (["--seed2", 2**64], "seed2"),
    (["--kind", "nope"], "nope"),
    (["--kind", "import"], "--input"),
    (["--input", "/no/such/file.txt"], "/no/such/file.txt"),
    (["--chunk-edges", 0], "--chunk-edges"),
    (["--kind", "import", "--input", "/no/such/file.txt", "--scale", 4], "--scale does not apply to --kind import"),
    (["--kind", "rmat", "--a", 0.9, "--b", 0.2], "initiator"),
]


@pytest.mark.parametrize("args,needle", BAD)
def test_bad_input_exit_2(tmp_path, args, needle):
    imports = "--input" in args or "import" in args     # an imported graph takes no --scale (refused)
    res = gen(tmp_path, *([] if imports else ["--scale", 4]), *args, ok=False)
    assert res.exit_code == 2
    err = res.stderr.strip()
    assert needle in err
    assert not [p for p in tmp_path.iterdir()] if tmp_path.exists() else True


def test_unparsable_input(tmp_path):
    src = tmp_path / "bad.txt"
    src.write_text("0 1\n1 x\n")
    res = gen(tmp_path / "ds", "--input", src, ok=False)
    assert res.exit_code == 2 and "line 2" in res.stderr


def test_unwritable_and_too_small_dir(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    res = gen(blocker / "sub", "--scale", 4, ok=False)
    assert res.exit_code == 2 and "--datasets" in res.stderr
    # a disk with too little room: the size estimate is checked before any write
    monkeypatch.setattr(store_write.shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10**12, 10**12 - 1000, 1000))
    res = gen(tmp_path / "small", "--scale", 20, "--edges", "stored", ok=False)
    assert res.exit_code == 2 and "GiB free" in res.stderr
    assert not (tmp_path / "small" / "kron-s20-ef16-s2-3").exists()


def test_missing_dataset_errors(tmp_path):
    res = run("export", "kron-s9-ef16-s2-3", "--datasets", tmp_path, "--out", tmp_path / "x.npy", ok=False)
    assert res.exit_code == 2 and "not found" in res.stderr and "dbfs generate" in res.stderr
    res = run("export", NAME10, "--datasets", tmp_path, "--out", tmp_path / "x.txt", ok=False)
    assert res.exit_code == 2


def test_help_works():
    res = run("--help")
    assert "generate" in res.stdout and "datasets" in res.stdout
    assert "[default: 16]" in run("generate", "--help").stdout


@pytest.mark.distributed
def test_generate_joins_existing_scheduler(tmp_path):
    from distributed import LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster:
        res = run("generate", "--datasets", tmp_path, "--scale", 9, "--scheduler", cluster.scheduler_address)
        assert f"joined Dask cluster {cluster.scheduler_address}" in res.stderr
        assert cluster.scheduler.workers  # our exit left the cluster running
    assert store.status(tmp_path / "kron-s9-ef16-s2-3")[0] == "complete"


def test_unreachable_scheduler(tmp_path):
    res = gen(tmp_path, "--scale", 4, ok=False)  # sanity: threads works
    assert res.exit_code == 0
    res = run("generate", "--datasets", tmp_path, "--scale", 5, "--scheduler", "tcp://127.0.0.1:9", ok=False)
    assert res.exit_code == 2 and "cannot reach the Dask scheduler" in res.stderr


@pytest.mark.distributed
def test_cluster_profile(tmp_path):
    prof = tmp_path / "one.yaml"
    prof.write_text("type: local\nworkers: 1\nthreads_per_worker: 1\n")
    res = run("generate", "--datasets", tmp_path / "ds", "--scale", 8, "--cluster", prof)
    assert "LocalCluster (1 worker processes x 1 thread)" in res.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("type: moon\n")
    for p in (bad, tmp_path / "missing.yaml"):
        res = run("generate", "--datasets", tmp_path / "ds2", "--scale", 8, "--cluster", p, ok=False)
        assert res.exit_code == 2 and "cluster profile" in res.stderr
    from dbfs.cluster import load_profile

    assert load_profile("local")["type"] == "local" and load_profile("local-4x4")["workers"] == 4


# ---- names that are not datasets ---------------------------------------------------------------
@pytest.mark.parametrize("name", ["", ".", "..", "../x", "a/b", ".hidden", "/etc"])
def test_names_that_are_paths_are_refused(tmp_path, name):
    gen(tmp_path / "root", "--scale", 4)
    for cmd in (["datasets", "rm", name], ["datasets", "info", name], ["datasets", "verify", name],
                ["export", name, "--out", tmp_path / "x.npy"]):
        res = run(*cmd, "--datasets", tmp_path / "root", ok=False)
        assert res.exit_code == 2 and "is not a dataset name" in res.stderr, (cmd, res.stderr)
        assert "Traceback" not in res.stderr
    assert (tmp_path / "root" / "kron-s4-ef16-s2-3").is_dir() and (tmp_path / "root").is_dir()


# ---- imported ids -----------------------------------------------------------------------------
def test_sparse_import_refused_naming_compact_ids(tmp_path):
    src = tmp_path / "sparse.txt"
    src.write_text("0 1\n1 4294967296\n")
    res = gen(tmp_path / "ds", "--kind", "import", "--input", src, ok=False)
    assert res.exit_code == 2 and "--compact-ids" in res.stderr and "4,294,967,297 vertices" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "ds").exists() or not list((tmp_path / "ds").iterdir())


def test_compact_ids_relabels_stores_and_exports_original_ids(tmp_path):
    src = tmp_path / "sparse.txt"
    src.write_text("# sparse ids\n0 1\n1 4294967296\n4294967296 70\n")
    res = gen(tmp_path / "ds", "--kind", "import", "--input", src, "--compact-ids")
    name = res.stdout.strip()
    assert name.startswith("import-sparse-") and name.endswith("-compact")
    ds = store.open_dataset(name, tmp_path / "ds")
    assert ds.n_vertices == 4 and ds.n_edges == 3 and ds.attrs["spec"]["compact_ids"] is True
    # ascending order of the original id: 0 -> 0, 1 -> 1, 70 -> 2, 4294967296 -> 3
    np.testing.assert_array_equal(ds.edges()[:], [[0, 1], [1, 3], [3, 2]])
    np.testing.assert_array_equal(ds.original_ids(), [0, 1, 70, 4294967296])
    out = tmp_path / "e.npy"
    run("export", name, "--datasets", tmp_path / "ds", "--out", out)
    np.testing.assert_array_equal(np.load(out), [[0, 1], [1, 4294967296], [4294967296, 70]])
    assert gen(tmp_path / "ds", "--input", src, "--compact-ids").stderr.count("reusing") == 1
    run("build", name, "--datasets", tmp_path / "ds", "--scheduler", "threads")
    assert run("datasets", "verify", name, "--datasets", tmp_path / "ds").exit_code == 0


def test_compact_ids_applies_to_imports_only(tmp_path):
    res = gen(tmp_path, "--scale", 4, "--compact-ids", ok=False)
    assert res.exit_code == 2 and "--compact-ids" in res.stderr


def test_dense_import_needs_no_compaction_and_keeps_its_name(tmp_path):
    src = tmp_path / "dense.txt"
    src.write_text("0 1\n1 2\n2 3\n")
    name = gen(tmp_path / "ds", "--input", src).stdout.strip()
    assert not name.endswith("-compact") and "compact_ids" not in attrs(tmp_path / "ds" / name)["spec"]

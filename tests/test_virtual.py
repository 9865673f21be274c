"""Virtual edge lists (dbfs.store.virtual): a dataset that stores its spec gives every reader
(export, Kernel 1, validation, searches) the bytes a stored one holds; flags, auto choice,
integrity and Dask task names. Real zarr stores, the real CLI."""
import json

import numpy as np
import pytest
from click.testing import CliRunner

from dbfs import kernel1, store
from dbfs.cli import cli
from dbfs.errors import DbfsError
from dbfs.spec import GraphSpec

NAME = "kron-s11-ef16-s2-3"


def run(*args, ok=True, env=None):
    res = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False, env=env)
    if ok:
        assert res.exit_code == 0, res.output + res.stderr
    return res


def gen(root, *extra, ok=True, env=None):
    return run("generate", "--datasets", root, "--scheduler", "threads", *extra, ok=ok, env=env)


def one_line(res, needle):
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1 and needle in lines[0], res.stderr
    return lines[0]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """The same spec stored (root/s) and virtual (root/v), with different chunkings."""
    root = tmp_path_factory.mktemp("virtual")
    gen(root / "s", "--scale", 11, "--edges", "stored", "--chunk-edges", 5000)
    res = gen(root / "v", "--scale", 11, "--edges", "virtual", "--chunk-edges", 7000)
    assert "virtual edges" in res.stderr
    return root


def test_export_and_reads_byte_identical(pair):
    assert (pair / "s" / NAME / "edges").is_dir() and not (pair / "v" / NAME / "edges").exists()
    for d in "sv":
        run("export", NAME, "--datasets", pair / d, "--out", pair / f"{d}.npy")
    assert (pair / "s.npy").read_bytes() == (pair / "v.npy").read_bytes()
    s, v = (store.open_dataset(NAME, pair / d) for d in "sv")
    assert v.storage == "virtual" and s.storage == "stored"
    es, ev = s.edges(), v.edges()
    assert (ev.shape, ev.dtype, ev.chunks) == (es.shape, es.dtype, (7000, 2))
    for key in (slice(None), slice(123, 9001), slice(30000, None), slice(5, 400, 7), 17, -1, (slice(10, 20), 1)):
        a, b = es[key], ev[key]
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), key
    np.testing.assert_array_equal(s.edges_dask().compute(), v.edges_dask().compute())


def _csr_arrays(ds_path, variant):
    import zarr

    g = zarr.open_group(str(ds_path / "csr" / variant), mode="r")
    return {k: np.asarray(a[:]) for k, a in g.arrays()} | {
        f"{p}/{k}": np.asarray(a[:]) for p, sub in g.groups() for k, a in sub.arrays()}


def test_kernel1_csr_identical(pair):
    for d in "sv":  # the CLI path, one partition
        run("build", NAME, "--datasets", pair / d, "--scheduler", "threads")
        # several slices, partitions and the degree phase, each slice regenerated on its own
        kernel1.build_partitioned(pair / d / NAME, P=2, relabel="degree", memory_budget=1 << 20, progress=False)
    for variant in ("p1-block", "p2-block-deg"):
        a, b = (_csr_arrays(pair / d / NAME, variant) for d in "sv")
        assert a.keys() == b.keys() and len(a) >= 2
        for k in a:
            assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), (variant, k)


def test_search_invariants_equal(pair):
    out = {}
    for d in "sv":
        run("run", NAME, "--datasets", pair / d, "--roots", 3, "--json", pair / f"{d}.json", "--scheduler", "threads")
        out[d] = json.loads((pair / f"{d}.json").read_text())
    s, v = out["s"], out["v"]
    assert s["validated"] and v["validated"] and not s["failures"] and not v["failures"]
    for key in ("root", "nedge", "levels"):
        got = [[x[key] if key != "levels" else len(x[key]) for x in r["searches"]] for r in (s, v)]
        assert got[0] == got[1], key


def test_info_list_verify(pair):
    info = json.loads(run("datasets", "info", NAME, "--datasets", pair / "v").stdout)
    assert info["edges"] == "virtual" and info["complete"] and info["stages"][0] == "edges(virtual)"
    assert json.loads(run("datasets", "info", NAME, "--datasets", pair / "s").stdout)["edges"] == "stored"
    row = [line for line in run("datasets", "list", "--datasets", pair / "v").stdout.splitlines()
           if line.startswith(NAME)][0]
    assert " virtual " in row and row.rstrip().endswith("yes")
    res = run("datasets", "verify", NAME, "--datasets", pair / "v")
    assert res.stdout.startswith(f"ok: {NAME}:") and "spec attributes and virtual_digest intact" in res.stdout
    assert "edges_checksum matches" in res.stdout


def test_auto_picks_virtual_when_space_is_short_then_converts(tmp_path):
    res = gen(tmp_path, "--scale", 9, env={"DBFS_DISK_BUDGET": "1MiB"})
    assert "--edges auto: virtual" in res.stderr and "capped by $DBFS_DISK_BUDGET" in res.stderr
    assert store.open_dataset("kron-s9-ef16-s2-3", tmp_path).storage == "virtual"
    res = gen(tmp_path, "--scale", 9, env={"DBFS_DISK_BUDGET": "1MiB"})  # auto: the virtual one is reused
    assert "reusing" in res.stderr
    res = gen(tmp_path, "--scale", 9, "--edges", "stored")  # an explicit storage converts it
    assert "is virtual; making it stored" in res.stderr
    assert store.open_dataset("kron-s9-ef16-s2-3", tmp_path).storage == "stored"
    res = gen(tmp_path / "b", "--scale", 9, env={"DBFS_DISK_BUDGET": "1GiB"})  # room: stored, as always
    assert "--edges auto" not in res.stderr and "(stored edges)" in res.stderr
    assert store.open_dataset("kron-s9-ef16-s2-3", tmp_path / "b").storage == "stored"


def test_edges_flag_refusals_are_one_line(tmp_path):
    src = tmp_path / "g.txt"
    src.write_text("0 1\n1 2\n2 0\n")
    one_line(gen(tmp_path / "d", "--input", src, "--edges", "virtual", ok=False), "always stored")
    assert not (tmp_path / "d").exists() or not any((tmp_path / "d").iterdir())
    res = gen(tmp_path / "d", "--input", src, env={"DBFS_DISK_BUDGET": "1KiB"}, ok=False)  # imports never virtual
    one_line(res, "GiB free")
    one_line(gen(tmp_path / "d", "--scale", 8, env={"DBFS_DISK_BUDGET": "lots"}, ok=False), "$DBFS_DISK_BUDGET")
    one_line(gen(tmp_path / "d", "--scale", 8, "--edges", "stored", env={"DBFS_DISK_BUDGET": "1MiB"}, ok=False),
             "GiB free")
    with pytest.raises(DbfsError, match="stored, virtual or auto"):
        store.generate(GraphSpec.make(scale=4), tmp_path / "d", edges="maybe")


def _edit(path, **changes):
    f = path / "zarr.json"
    meta = json.loads(f.read_text())
    for k, v in changes.items():
        if k == "seed1":
            meta["attributes"]["spec"]["seed1"] = v
        elif v is None:
            meta["attributes"].pop(k, None)
        else:
            meta["attributes"][k] = v
    f.write_text(json.dumps(meta))


@pytest.mark.parametrize("change, status, needle", [
    ({"seed1": 5}, "corrupt", "virtual_digest mismatch"),
    ({"n_edges": 5000}, "corrupt", "are not its spec's"),
    ({"virtual_digest": None}, "corrupt", "virtual_digest mismatch"),
    ({"complete": None}, "incomplete", "no complete marker"),
])
def test_edited_or_half_written_virtual_dataset(tmp_path, change, status, needle):
    name = "kron-s8-ef16-s2-3"
    gen(tmp_path, "--scale", 8, "--edges", "virtual")
    _edit(tmp_path / name, **change)
    assert store.status(tmp_path / name) == (status, store.status(tmp_path / name)[1])
    assert needle in store.status(tmp_path / name)[1]
    line = one_line(run("export", name, "--datasets", tmp_path, "--out", tmp_path / "x.npy", ok=False), status)
    assert needle in line and not (tmp_path / "x.npy").exists()
    one_line(run("build", name, "--datasets", tmp_path, "--scheduler", "threads", ok=False), name)
    if status == "corrupt":
        assert "--edges virtual" in line and "--force" in line  # the fix regenerates it as it was
        res = run("datasets", "verify", name, "--datasets", tmp_path, ok=False)
        assert res.exit_code == 1 and res.stdout.startswith("corrupt:")
    res = gen(tmp_path, "--scale", 8)  # damage is rebuilt, not reused; --edges auto keeps the storage
    assert store.status(tmp_path / name) == ("complete", "ok")
    if "seed1" not in change:  # (an edited spec is another dataset's: auto decides afresh)
        assert "as the copy it replaces" in res.stderr
        assert store.open_dataset(name, tmp_path).storage == "virtual"


def _keys_run(fn):
    """The keys of every task the threaded scheduler ran during fn()."""
    from dask.callbacks import Callback

    keys = []
    with Callback(pretask=lambda key, dsk, state: keys.append(key)):
        fn()
    return keys


def test_dask_task_names(tmp_path):
    from distributed.utils import key_split

    spec = GraphSpec.make(scale=9)
    for edges in ("stored", "virtual"):
        keys = _keys_run(lambda: store.generate(spec, tmp_path / edges, chunk_edges=1000, quiet=True, edges=edges))
        assert len(keys) == 9 and {key_split(k) for k in keys} == {"generate-chunk"}, keys
    path = tmp_path / "virtual" / spec.name
    keys = _keys_run(lambda: kernel1.build_partitioned(path, P=2, relabel="degree", memory_budget=1 << 19,
                                                       progress=False))
    prefixes = {key_split(k) for k in keys}
    assert {"kernel1-degree", "kernel1-bucket", "kernel1-rows", "kernel1-write"} <= prefixes, prefixes
    assert all(p.startswith("kernel1-") for p in prefixes), prefixes


@pytest.mark.distributed
def test_task_names_on_localcluster(tmp_path):
    from distributed import Client, LocalCluster, get_task_stream
    from distributed.utils import key_split

    spec = GraphSpec.make(scale=9)
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=True, dashboard_address=None) as lc, \
            Client(lc) as client, get_task_stream(client) as ts:
        store.generate(spec, tmp_path, chunk_edges=2000, client=client, quiet=True, edges="virtual")
        kernel1.build_partitioned(tmp_path / spec.name, P=1, client=client, progress=False)
    prefixes = {key_split(t["key"]) for t in ts.data}
    assert {"generate-chunk", "kernel1-bucket", "kernel1-rows", "kernel1-write"} <= prefixes, prefixes


@pytest.mark.gpu
def test_gpu_virtual_generation_and_device_rows(cp, tmp_path):
    from dbfs.store.gpu import device_edges

    spec = GraphSpec.make(scale=14)
    cpu, _ = store.generate(spec, tmp_path / "c", chunk_edges=40000, quiet=True, edges="stored")
    gpu, _ = store.generate(spec, tmp_path / "g", chunk_edges=50000, quiet=True, edges="virtual", backend="gpu")
    assert gpu.storage == "virtual" and gpu.attrs["edges_checksum"] == cpu.attrs["edges_checksum"]
    fresh = store.open_dataset(spec.name, tmp_path / "g")  # no memo: regenerated on the device
    np.testing.assert_array_equal(cp.asnumpy(device_edges(fresh)), cpu.edges()[:])


def test_readme_generate_synopsis_runs(tmp_path):
    """README's `dbfs generate` line lists --edges with the choices the CLI takes, each of which runs."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = text.split("dbfs generate --scale S", 1)[1].split("dbfs build", 1)[0]
    flags = set(re.findall(r"--[a-z][a-z0-9-]*", block))
    helptext = run("generate", "--help").stdout
    assert "--edges" in flags and all(f in helptext for f in flags), flags
    choices = re.search(r"--edges ([a-z|]+)", block).group(1).split("|")
    assert sorted(choices) == ["auto", "stored", "virtual"]
    for c in choices:
        assert "edges" in gen(tmp_path / c, "--scale", 5, "--edges", c).stderr


@pytest.mark.distributed
def test_dask_backend_on_virtual_edges(tmp_path):
    """`--backend dask` searches and validates (Dask tasks over edge row ranges) a virtual dataset."""
    gen(tmp_path, "--scale", "12", "--edges", "virtual")
    res = run("run", "kron-s12-ef16-s2-3", "--datasets", tmp_path, "--backend", "dask", "--partitions", "2", "--workers", "2",
              "--roots", "2")
    assert "harmonic_mean_TEPS" in res.output and "No results" not in res.output

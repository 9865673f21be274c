"""A flag that does not apply to the command or backend is refused: one line, exit 2, no work done."""
import pytest

REFUSED = [
    # (args, words the one-line error must contain)
    (["run", "--scale", 8, "--partitions", 2], ["--partitions", "--backend cpu"]),
    (["run", "--scale", 8, "--device-memory-limit", "1GiB", "--algorithm", "spmv"],
     ["--algorithm spmv", "--device-memory-limit", "--backend cpu"]),
    (["run", "--scale", 8, "--placement", "degree-low", "--relabel", "degree"], ["--placement", "--device-memory-limit"]),
    (["run", "--scale", 8, "--energy"], ["--energy", "--backend cpu"]),
    (["run", "--scale", 8, "--backend", "dask", "--placement", "degree", "--relabel", "none"],
     ["--placement degree", "--relabel degree"]),
    (["run", "--scale", 8, "--backend", "dask", "--energy"], ["--energy", "--backend dask"]),
    (["run", "NAME", "--seed1", 5], ["--seed1", "NAME"]),
    (["run", "NAME", "--scale", 12], ["--scale", "NAME"]),
    (["bfs", "NAME", "--root", 1, "--edgefactor", 8], ["--edgefactor", "NAME"]),
    (["run", "--scale", 8, "--algorithm", "nosuch"], ["nosuch", "use one of"]),
    (["run", "--scale", 8, "--backend", "dask", "--algorithm", "spmv"], ["spmv", "backend dask"]),
    (["run", "--scale", 8, "--roots", 0], ["--roots 0"]),
    (["run", "--scale", 8, "--scheduler", "tcp://127.0.0.1:1", "--workers", 2], ["--workers", "joining"]),
    (["build", "NAME", "--backend", "gpu", "--memory-budget", "1GiB"], ["--memory-budget", "--backend gpu"]),
    (["build", "NAME", "--backend", "gpu", "--workers", 2], ["--workers", "--backend gpu"]),
    (["build", "NAME", "--backend", "gpu", "--partitions", 2], ["--partitions", "--backend gpu"]),
    (["build", "NAME", "--backend", "gpu", "--scheduler", "threads"], ["--scheduler", "--backend gpu"]),
    (["build", "NAME", "--backend", "gpu", "--scratch", "/tmp"], ["--scratch", "--backend gpu"]),
    (["generate", "--scale", 8, "--backend", "gpu", "--workers", 2], ["--workers", "--backend gpu"]),
    (["generate", "--kind", "grid2d", "--scale", 8, "--edgefactor", 4], ["--edgefactor", "grid2d"]),
    (["generate", "--kind", "kronecker", "--scale", 8, "--a", 0.5], ["--a", "kronecker"]),
    (["cluster", "scheduler", "--workers", 2], ["--workers", "scheduler"]),
    (["run", "--scale", 8, "--cluster", "nosuch-profile"], ["nosuch-profile", "not found"]),
]


@pytest.mark.parametrize("args,words", REFUSED, ids=[" ".join(map(str, a)) for a, _ in REFUSED])
def test_refused(args, words, tmp_path, dbfs_cli):
    res = dbfs_cli(*args, "--datasets", tmp_path, ok=False) if args[0] != "cluster" else dbfs_cli(*args, ok=False)
    err = res.stderr.strip()
    assert res.exit_code == 2, (res.exit_code, res.output)
    assert len(err.splitlines()) == 1 and err.startswith("dbfs: error: "), err
    for w in words:
        assert w in err, (w, err)
    assert not any(tmp_path.iterdir()), "a refused command must do no work"


def test_gpu_backend_refuses_cluster_flags_or_is_unavailable(tmp_path, dbfs_cli):
    """--backend gpu runs every stage in this process: --workers is refused
    (or, on a machine without a GPU, the backend itself is, in one line)."""
    res = dbfs_cli("run", "--scale", 8, "--backend", "gpu", "--workers", 2, "--datasets", tmp_path, ok=False)
    assert res.exit_code == 2 and len(res.stderr.strip().splitlines()) == 1
    assert "--workers" in res.stderr or "cannot run here" in res.stderr


def test_algorithms_lists_every_backend(dbfs_cli):
    out = dbfs_cli("algorithms").stdout.splitlines()
    assert [line.split(":")[0] for line in out] == ["cpu", "gpu", "dask"]
    cpu, gpu, dask = out
    assert "seq-list seq-csr td bu do spmv" in cpu and "(available)" in cpu
    assert "harish td bu do" in gpu and ("(available)" in gpu or "unavailable: " in gpu)
    assert "do td bu" in dask


@pytest.mark.parametrize("variant", [["--partitioning", "cyclic"], ["--keep-duplicates"]])
def test_every_built_variant_can_be_searched(variant, tmp_path, dbfs_cli):
    """`dbfs bfs`/`run` search the cyclic and keep-duplicates variants `dbfs build` makes."""
    ds = tmp_path / "ds"
    name = dbfs_cli("generate", "--scale", 8, "--datasets", ds, "--scheduler", "threads").stdout.strip()
    dbfs_cli("build", name, *variant, "--datasets", ds, "--scheduler", "threads")
    res = dbfs_cli("bfs", name, "--root", 1, *variant, "--datasets", ds)
    assert "levels" in res.stdout
    res = dbfs_cli("run", name, *variant, "--roots", 4, "--datasets", ds)
    assert "bfs  harmonic_mean_TEPS" in res.stdout
    missing = dbfs_cli("bfs", name, "--root", 1, "--partitioning", "cyclic", "--keep-duplicates",
                       "--datasets", ds, ok=False)
    assert missing.exit_code == 2 and "dbfs build" in missing.stderr


def test_build_scratch_is_used_and_a_missing_one_refused(tmp_path, dbfs_cli):
    """`dbfs build --scratch DIR`: the build's scratch goes there and is removed; a missing DIR is one line."""
    ds, scratch = tmp_path / "ds", tmp_path / "scratch"
    scratch.mkdir()
    name = dbfs_cli("generate", "--scale", 8, "--datasets", ds, "--scheduler", "threads").stdout.strip()
    res = dbfs_cli("build", name, "--scratch", tmp_path / "nowhere", "--datasets", ds, "--scheduler", "threads",
                   ok=False)
    assert res.exit_code != 0 and len(res.stderr.strip().splitlines()) == 1 and "does not exist" in res.stderr
    dbfs_cli("build", name, "--scratch", scratch, "--datasets", ds, "--scheduler", "threads")
    assert not any(scratch.iterdir())
    assert "levels" in dbfs_cli("bfs", name, "--root", 1, "--datasets", ds).stdout


def test_more_roots_than_eligible_is_said_and_recorded(tmp_path, dbfs_cli):
    """--roots beyond the eligible vertices: every eligible one is searched, said on stderr and kept in the JSON."""
    import json

    js = tmp_path / "r.json"
    res = dbfs_cli("run", "--scale", 6, "--roots", 100000, "--datasets", tmp_path / "ds", "--scheduler", "threads",
                   "--json", js)
    nbfs = int(next(line for line in res.stdout.splitlines() if line.startswith("NBFS:")).split()[1])
    assert 0 < nbfs < 64 and f"searching all {nbfs} of them" in res.stderr
    notes = json.loads(js.read_text())["config"]["notes"]
    assert len(notes) == 1 and "--roots 100000" in notes[0]


def test_run_too_large_refused_before_work(tmp_path, dbfs_cli):
    """A SCALE the searches cannot hold: one line naming the memory, the bytes short and the fix; nothing made."""
    from dbfs.preflight import check_run, csr_bytes

    res = dbfs_cli("run", "--scale", 34, "--datasets", tmp_path, ok=False)
    err = res.stderr.strip()
    assert res.exit_code == 2 and len(err.splitlines()) == 1, err
    assert "SCALE 34 with --backend cpu does not fit host memory" in err and "short" in err, err
    assert not any(tmp_path.iterdir()) and "LocalCluster" not in err
    ip, ix = csr_bytes(1 << 20, 16 << 20)
    assert check_run("cpu", 1 << 20, 16 << 20, host=ip + ix + 40 * (1 << 20))["host"] == ip + ix + 40 * (1 << 20)
    with pytest.raises(Exception, match="short"):
        check_run("cpu", 1 << 20, 16 << 20, host=ip + ix)
    # the GPU backend: refused only when the device and host memory (zero-copy) together cannot hold it
    assert check_run("gpu", 1 << 20, 16 << 20, host=1 << 40, device=1 << 20)["device"] > 1 << 20
    with pytest.raises(Exception, match="fits neither the GPU"):
        check_run("gpu", 1 << 20, 16 << 20, host=1 << 20, device=1 << 20)
    # SCALE 30 on one H200 box (139 GiB device, ~120 GiB host free): allowed, as #20 plans it
    assert check_run("gpu", 1 << 30, 16 << 30, host=120 << 30, device=139 << 30)["device"] > 139 << 30
    assert check_run("dask", 1 << 40, 1 << 44, host=1, device=1)["csr"] > 0     # the cluster's memory: not here


def test_dask_run_the_cluster_cannot_hold_is_refused_before_work(tmp_path, dbfs_cli):
    """--backend dask: once the cluster has started and before anything is generated (a virtual SCALE 32 list's
    checksum alone would take hours here), a graph no split over its workers can hold is refused in one line
    naming the cluster's memory, host and device, and the bytes short; nothing is made. The rule lets the
    runs #37 plans through (SCALE 30 on one H200 box, 31 and 32 on four H200s) and checks nothing when a
    worker has no memory limit."""
    from dbfs.errors import DbfsError
    from dbfs.preflight import check_cluster

    res = dbfs_cli("run", "--scale", 32, "--backend", "dask", "--datasets", tmp_path / "ds", ok=False)
    err = res.stderr.strip().splitlines()
    assert res.exit_code == 2 and "Traceback" not in res.stderr, res.stderr
    assert "SCALE 32 does not fit the Dask cluster" in err[-1] and "short" in err[-1], err
    assert "LocalCluster" in res.stderr            # (the cluster started: its memory is what was checked)
    assert not (tmp_path / "ds").exists() or not any((tmp_path / "ds").iterdir())
    gib = 1 << 30
    h200 = 139 * gib
    assert check_cluster(1 << 30, 1 << 34, {"g": 120 * gib}, {"g": h200})["need"] < 120 * gib + h200
    four = dict.fromkeys("abcd", h200)
    assert check_cluster(1 << 31, 1 << 35, dict.fromkeys("abcd", 120 * gib), four)["have"] > 0
    assert check_cluster(1 << 32, 1 << 36, dict.fromkeys("abcd", 120 * gib), four)["have"] > 0
    with pytest.raises(DbfsError) as e:
        check_cluster(1 << 32, 1 << 36, {"a": 11 * gib, "b": 11 * gib}, {}, scale=32)
    assert "\n" not in str(e.value) and "2 worker(s) have 22.0 GiB of memory" in str(e.value), str(e.value)
    assert check_cluster(1 << 32, 1 << 36, {"a": 0, "b": 11 * gib}, {}) == {}


def test_partitions_on_gpu_workers_that_cannot_hold_them_are_refused_in_one_line():
    """P > 1 built on GPU workers (every rank in device memory): refused before Kernel 1 naming the worker
    short of memory and by how much; SCALE 28 in 2 on two 80 GB devices fits (it ran: docs/BENCHMARKS.md),
    SCALE 31 in 4 on four 140 GB devices fits (uint32 entries past 2**31 do not change SCALE 31's int32),
    SCALE 32 in 4 on four 140 GB devices does not (wholly on the devices); with host memory and one rank a
    worker (the shuffle splits a rank past its device), SCALE 31 in 2 on two 140 GB devices fits with the rest in
    pinned host memory, and too little host memory, or a device short of the row starts and the searches' arrays,
    is refused naming what is short."""
    from dbfs.errors import DbfsError
    from dbfs.preflight import check_gpu_ranks

    gib = 1 << 30
    h100, h200 = 78 * gib, 139 * gib
    assert check_gpu_ranks(1 << 28, 1 << 32, 2, {"a": h100, "b": h100})["per_worker"] < h100
    assert check_gpu_ranks(1 << 31, 1 << 35, 4, dict.fromkeys("abcd", h200))["per_worker"] < h200
    with pytest.raises(DbfsError) as err:
        check_gpu_ranks(1 << 32, 1 << 36, 4, {"a": h200, "b": h200, "c": 60 * gib, "d": h200}, scale=32)
    msg = str(err.value)
    assert "\n" not in msg and "SCALE 32 in 4 partitions on 4 GPU worker(s)" in msg and "GPU worker c" in msg
    assert "short" in msg and "one partition a GPU worker" in msg
    two = {"a": h200, "b": h200}
    got = check_gpu_ranks(1 << 31, 1 << 35, 2, two, host=240 * gib)
    assert got["per_worker"] > h200 and 0 < got["host"] <= 240 * gib
    assert check_gpu_ranks(1 << 31, 1 << 35, 4, dict.fromkeys("abcd", h200), host=240 * gib)["host"] == 0
    with pytest.raises(DbfsError, match="the host has 64.0 GiB available") as err:
        check_gpu_ranks(1 << 31, 1 << 35, 2, two, scale=31, host=64 * gib)
    assert "\n" not in str(err.value) and "SCALE 31 in 2 partitions" in str(err.value)
    with pytest.raises(DbfsError, match="GPU worker a has 40.0 GiB free"):
        check_gpu_ranks(1 << 31, 1 << 35, 2, {"a": 40 * gib, "b": h200}, host=1 << 50)
    with pytest.raises(DbfsError, match="short"):       # two ranks a worker: no split
        check_gpu_ranks(1 << 31, 1 << 35, 4, two, host=1 << 50)
    with pytest.raises(DbfsError, match=r"\(2 partition\(s\)"):     # two ranks on the fullest of two workers
        check_gpu_ranks(1 << 28, 1 << 32, 4, {"a": 20 * gib, "b": 20 * gib})
    assert check_gpu_ranks(1 << 28, 1 << 32, 2, {}) == {}

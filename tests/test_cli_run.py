"""`dbfs run`, `dbfs bfs`, `dbfs build` end to end through the CLI."""
import json
import re

import numpy as np
import pytest
from click.testing import CliRunner

from dbfs.cli import cli

REF_KEYS = None


def run(*args, ok=True):
    res = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    if ok:
        assert res.exit_code == 0, res.output + res.stderr
    return res


def _keys(text):
    return [line[:32].rstrip().rstrip(":").replace("     !", "").rstrip(":") for line in text.splitlines()]


def test_run_scale12_format_json_plot(tmp_path, golden_stdout):
    js, png = tmp_path / "r.json", tmp_path / "r.png"
    res = run("run", "--scale", 12, "--datasets", tmp_path, "--scheduler", "threads", "--json", js, "--plot", png)
    out = res.stdout
    ref_lines = golden_stdout.splitlines()
    lines = out.splitlines()
    # the reference block, key by key, values from column 33, then dbfs extras
    assert _keys("\n".join(lines[:len(ref_lines)])) == _keys(golden_stdout)
    for line in lines[:len(ref_lines)]:
        assert line[32] != " " and line[31] == " ", line
    assert lines[0] == "SCALE:                          12"
    assert lines[2] == "NBFS:                           64"
    assert lines[4] == "num_mpi_processes:              1"
    assert "bfs  harmonic_mean_TEPS:     !  " in out
    assert "load_time:" in out and "bfs  mean_TEPS:" in out
    rec = json.loads(js.read_text())
    assert len(rec["searches"]) == 64 and rec["validated"] is True
    s0 = rec["searches"][0]
    assert s0["valid"] is True and s0["nedge"] > 0 and s0["time"] > 0 and s0["levels"]
    assert {"level", "direction", "frontier", "edges", "time"} <= set(s0["levels"][0])
    assert rec["graph500"]["SCALE"] == 12 and rec["machine"]["cores"] >= 1
    assert rec["construction_time"] > 0 and rec["spec"]["kind"] == "kronecker"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # everything is reused the second time
    res2 = run("run", "--scale", 12, "--datasets", tmp_path, "--scheduler", "threads", "--roots", 4,
               "--algorithm", "td")
    assert "reusing complete dataset" in res2.stderr and "NBFS:                           4" in res2.stdout


def test_run_no_validate_marks_output(tmp_path):
    res = run("run", "--scale", 8, "--datasets", tmp_path, "--scheduler", "threads", "--roots", 3, "--no-validate")
    assert "validation:" in res.stdout and "unvalidated" in res.stdout
    assert "min_validate" not in res.stdout


def test_run_stored_grid_dataset(tmp_path):
    run("generate", "--kind", "grid2d", "--scale", 8, "--datasets", tmp_path, "--scheduler", "threads")
    res = run("run", "grid2d-s8", "--datasets", tmp_path, "--scheduler", "threads", "--roots", 4)
    assert "NBFS:                           4" in res.stdout


def test_invalid_run_prints_no_results(tmp_path, monkeypatch):
    """A kernel that drops one reached vertex: every search fails validation, nothing is printed."""
    from dbfs.bfs import cpu
    from dbfs.bfs.cpu import direction_optimizing

    def broken(graph, root, stats=False):
        parent, levels = direction_optimizing(graph, root, stats=stats)
        parent = parent.copy()
        reached = np.flatnonzero((parent >= 0) & (np.arange(parent.size) != root))
        parent[reached[-1]] = -1  # drop one reached vertex: the tree no longer spans the component
        return parent, levels

    monkeypatch.setitem(cpu.ALGORITHMS, "broken-for-test", broken)   # removed again after the test
    res = run("run", "--scale", 8, "--datasets", tmp_path, "--scheduler", "threads", "--roots", 2,
              "--algorithm", "broken-for-test", ok=False)
    assert res.exit_code == 1
    assert res.stdout.strip() == "No results printed for invalid run."
    assert "validation failed" in res.stderr


def test_bfs_command_levels(tmp_path):
    run("generate", "--scale", 10, "--datasets", tmp_path, "--scheduler", "threads")
    res = run("bfs", "kron-s10-ef16-s2-3", "--root", 458, "--datasets", tmp_path, ok=False)
    assert res.exit_code == 2 and "dbfs build kron-s10-ef16-s2-3" in res.stderr  # no CSR yet
    out = run("build", "kron-s10-ef16-s2-3", "--datasets", tmp_path, "--scheduler", "threads").stdout
    assert "construction_time" in out
    res = run("bfs", "kron-s10-ef16-s2-3", "--root", 458, "--algorithm", "td", "--datasets", tmp_path)
    lines = res.stdout.splitlines()
    assert lines[1].split() == ["level", "dir", "frontier", "edges", "examined", "time", "ms"]
    assert re.match(r"levels \d+  reached [\d,]+ of 1,024", lines[-1])


def test_validate_command_checks_any_parent_file(tmp_path, golden10):
    """`dbfs bfs --out` writes the parents; `dbfs validate` checks a parent
    file against the stored input edges: the golden nedge when valid (exit
    0), the failed rule when corrupted (exit 1), one-line errors for bad
    input (exit 2)."""
    name = "kron-s10-ef16-s2-3"
    run("generate", "--scale", 10, "--datasets", tmp_path, "--scheduler", "threads")
    run("build", name, "--datasets", tmp_path, "--scheduler", "threads")
    root, nedge = int(golden10["roots"][0]), int(golden10["nedge_v3"][0])
    p = tmp_path / "p.npy"
    run("bfs", name, "--root", root, "--datasets", tmp_path, "--out", p)
    res = run("bfs", name, "--root", root, "--datasets", tmp_path, "--out", tmp_path / "no-dir" / "p.npy", ok=False)
    assert res.exit_code == 2 and "--out" in res.stderr and "not writable" in res.stderr   # before the search
    parent = np.load(p)
    assert parent.dtype == np.int64 and parent.shape == (1024,) and parent[root] == root
    res = run("validate", name, "--root", root, "--parent", p, "--datasets", tmp_path, "--seconds", 0.5)
    assert res.stdout.startswith("valid: ") and f"nedge {nedge:,}" in res.stdout
    assert f"TEPS {nedge / 0.5:.6g}" in res.stdout
    other = np.nonzero((parent >= 0) & (np.arange(1024) != root))[0]
    bad = parent.copy()
    bad[other[0]] = -1                                   # a reached vertex left unreached
    np.save(tmp_path / "bad.npy", bad)
    res = run("validate", name, "--root", root, "--parent", tmp_path / "bad.npy", "--datasets", tmp_path, ok=False)
    assert res.exit_code == 1 and res.stdout.startswith("INVALID") and str(other[0]) in res.stdout
    np.save(tmp_path / "short.npy", parent[:100])
    np.save(tmp_path / "float.npy", parent.astype(float))
    for args, needle in [(["--parent", tmp_path / "short.npy"], "has 100 entries"),
                         (["--parent", tmp_path / "float.npy"], "float64"),
                         (["--parent", tmp_path / "missing.npy"], "not found"),
                         (["--parent", p, "--seconds", 0], "--seconds 0"),
                         (["--parent", p, "--root", 5000], "out of range")]:
        argv = ["validate", name, "--root", root, "--datasets", tmp_path, *args]
        res = run(*argv, ok=False)
        assert res.exit_code == 2 and needle in res.stderr, (args, res.stderr)


@pytest.mark.parametrize("args,needle", [
    (["--roots", 0], "--roots 0"),
    (["--algorithm", "nope"], "unknown BFS algorithm"),
])
def test_run_bad_input(tmp_path, args, needle):
    res = run("run", "--scale", 6, "--datasets", tmp_path, "--scheduler", "threads", *args, ok=False)
    assert res.exit_code == 2 and needle in res.stderr


def test_bfs_bad_roots(tmp_path):
    # vertex 3 of this edge list has only a self-loop: isolated
    src = tmp_path / "g.txt"
    src.write_text("0 1\n1 2\n3 3\n")
    name = run("generate", "--input", src, "--datasets", tmp_path, "--scheduler", "threads").stdout.strip()
    run("build", name, "--datasets", tmp_path, "--scheduler", "threads")
    res = run("bfs", name, "--root", 7, "--datasets", tmp_path, ok=False)
    assert res.exit_code == 2 and "out of range" in res.stderr
    res = run("bfs", name, "--root", 3, "--datasets", tmp_path, ok=False)
    assert res.exit_code == 2 and "isolated" in res.stderr
    res = run("bfs", "no-such-dataset", "--root", 0, "--datasets", tmp_path, ok=False)
    assert res.exit_code == 2 and "not found" in res.stderr


@pytest.mark.distributed
def test_run_dask_backend_matches_cpu(tmp_path):
    args = ("--scale", 10, "--datasets", tmp_path, "--roots", 4)
    cpu = run("run", *args, "--scheduler", "threads").stdout
    res = run("run", *args, "--backend", "dask", "--partitions", 3, "--workers", 2, "--json", tmp_path / "d.json")
    assert "num_mpi_processes:              3" in res.stdout
    rec = json.loads((tmp_path / "d.json").read_text())     # per worker: kind, partitions, bytes; per level
    assert rec["config"]["placement"] == "block"
    ws = rec["config"]["workers"]
    assert sorted(r for w in ws for r in w["partitions"]) == [0, 1, 2] and {w["kind"] for w in ws} == {"cpu"}
    assert all(w["host_bytes"] > 0 and w["device_bytes"] == 0 for w in ws)
    # each worker's peak host RSS (above its partitions' bytes); no device memory on a CPU worker
    assert all(w["peak_host_rss_bytes"] > w["host_bytes"] and w["peak_device_bytes"] is None for w in ws)
    lv = rec["searches"][0]["levels"][0]["workers"]
    assert len(lv) == len(ws) and all(x["kernel"] >= 0 and x["exchange"] >= 0 for x in lv)
    assert "closed the LocalCluster" not in res.stderr     # the dask backend searches on it
    nedge = [l for l in cpu.splitlines() if l.startswith("min_nedge")]
    assert nedge and nedge[0] in res.stdout.splitlines()
    deg = run("run", *args, "--backend", "dask", "--partitions", 3, "--workers", 2, "--relabel", "degree",
              "--placement", "degree")          # a degree-ordered variant: searched in its ids, validated in ours
    assert nedge[0] in deg.stdout.splitlines() and "num_mpi_processes:              3" in deg.stdout
    res = run("bfs", "kron-s10-ef16-s2-3", "--root", 458, "--backend", "dask", "--partitions", 3,
              "--datasets", tmp_path, "--workers", 2, "--out", tmp_path / "p.npy")
    ref = run("bfs", "kron-s10-ef16-s2-3", "--root", 458, "--datasets", tmp_path).stdout
    summary = lambda out: out.splitlines()[-1].split("  time")[0]  # noqa: E731
    assert summary(res.stdout) == summary(ref) and "reached 897 of 1,024" in summary(ref)
    res = run("validate", "kron-s10-ef16-s2-3", "--root", 458, "--parent", tmp_path / "p.npy",
              "--datasets", tmp_path)                    # the parents gathered from the workers
    assert res.stdout.startswith("valid: ") and "reached 897 of 1,024" in res.stdout


@pytest.mark.distributed
def test_run_starts_a_cluster_only_for_work_left(tmp_path):
    """`dbfs run` (and `dbfs bfs` without NAME) starts its LocalCluster only
    when generation or Kernel 1 is left to do: a stored dataset with its CSR
    runs without one, a stored dataset without the CSR still gets one for
    Kernel 1."""
    first = run("run", "--scale", 8, "--datasets", tmp_path, "--roots", 2, "--workers", 1)
    assert "started LocalCluster" in first.stderr
    again = run("run", "--scale", 8, "--datasets", tmp_path, "--roots", 2, "--workers", 1)
    assert "started LocalCluster" not in again.stderr and "no cluster to start" in again.stderr
    assert "reusing complete dataset" in again.stderr
    assert again.stdout.splitlines()[:3] == first.stdout.splitlines()[:3]
    assert "bfs  harmonic_mean_TEPS" in again.stdout
    run("generate", "--scale", 7, "--datasets", tmp_path, "--scheduler", "threads")
    build = run("run", "--scale", 7, "--datasets", tmp_path, "--roots", 2, "--workers", 1)
    assert "started LocalCluster" in build.stderr and "no cluster to start" not in build.stderr
    one = run("bfs", "--scale", 8, "--root", 1, "--datasets", tmp_path, "--workers", 1)  # `dbfs bfs` alike
    assert "started LocalCluster" not in one.stderr and "no cluster to start" in one.stderr
    assert "reached" in one.stdout.splitlines()[-1]
    run("generate", "--scale", 6, "--datasets", tmp_path, "--scheduler", "threads")
    one = run("bfs", "--scale", 6, "--root", 1, "--datasets", tmp_path, "--workers", 1)
    assert "started LocalCluster" in one.stderr and "no cluster to start" not in one.stderr


def test_partitions_need_dask(tmp_path):
    res = run("run", "--scale", 6, "--datasets", tmp_path, "--partitions", 2, ok=False)
    assert res.exit_code == 2 and "--backend dask" in res.stderr


@pytest.mark.distributed
def test_run_closes_its_local_cluster_before_the_searches(tmp_path):
    """A single-process run closes the LocalCluster it started once the
    graph is loaded (its idle workers and scheduler would preempt the timed
    searches) and still prints valid results; a joined cluster is left
    running."""
    from distributed import LocalCluster

    from dbfs.cluster import client_for, release_local_cluster

    res = run("run", "--scale", 8, "--datasets", tmp_path, "--roots", 3, "--workers", 1)
    assert "started LocalCluster" in res.stderr and "closed the LocalCluster" in res.stderr
    assert res.stderr.index("closed the LocalCluster") < res.stderr.index("search 1/3")
    assert "bfs  harmonic_mean_TEPS" in res.stdout
    with client_for(n_workers=1, quiet=True) as client:
        assert release_local_cluster(client) and client.status == "closed"
        assert not release_local_cluster(client)
    assert not release_local_cluster(None)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster:
        with client_for(cluster.scheduler_address, quiet=True) as client:
            assert not release_local_cluster(client) and client.status == "running"
        res = run("run", "--scale", 8, "--datasets", tmp_path, "--roots", 2, "--scheduler", cluster.scheduler_address)
        assert "closed the LocalCluster" not in res.stderr and cluster.scheduler.workers


def test_csr_kept_in_memory_when_the_disk_is_short(tmp_path, monkeypatch):
    """No room on disk for the CSR: Kernel 1 keeps it in memory for the run (said, noted in the JSON,
    nothing stored) and the run equals one with the CSR stored."""
    args = ("--scale", 10, "--roots", 4, "--scheduler", "threads")
    ref = run("run", *args, "--datasets", tmp_path / "a").stdout
    run("generate", "--scale", 10, "--datasets", tmp_path / "b", "--scheduler", "threads")
    monkeypatch.setenv("DBFS_DISK_BUDGET", "1MiB")
    res = run("run", *args, "--datasets", tmp_path / "b", "--json", tmp_path / "r.json")
    assert "keeps it in memory for this run" in res.stderr
    assert not (tmp_path / "b" / "kron-s10-ef16-s2-3" / "csr").exists() or \
        not any((tmp_path / "b" / "kron-s10-ef16-s2-3" / "csr").iterdir())
    pick = lambda out: [l for l in out.splitlines() if "nedge" in l or l.startswith("NBFS")]  # noqa: E731
    assert pick(res.stdout) == pick(ref) and pick(ref)
    assert any("in memory" in n for n in json.loads((tmp_path / "r.json").read_text())["config"]["notes"])


def test_dask_partitions_built_on_the_workers_when_the_disk_is_short(tmp_path, monkeypatch):
    """--backend dask at P = 2 with no room on disk for the variant: each partition is built on the worker that
    searches it (said, noted in the JSON, nothing stored) and the run's searches equal a run on the stored
    variant (NBFS, every nedge)."""
    args = ("--scale", 10, "--roots", 4, "--backend", "dask", "--partitions", 2, "--workers", 2)
    ref = run("run", *args, "--datasets", tmp_path / "a").stdout
    run("generate", "--scale", 10, "--datasets", tmp_path / "b", "--scheduler", "threads")
    monkeypatch.setenv("DBFS_DISK_BUDGET", "100KiB")     # the build needs up to 392 KiB
    res = run("run", *args, "--datasets", tmp_path / "b", "--json", tmp_path / "r.json")
    assert "no room on disk for CSR variant p2-block" in res.stderr and "on the workers that search them" in res.stderr
    csr = tmp_path / "b" / "kron-s10-ef16-s2-3" / "csr"
    assert not csr.exists() or not any(csr.iterdir()), "nothing stored"
    pick = lambda out: [l for l in out.splitlines() if "nedge" in l or l.startswith("NBFS")]  # noqa: E731
    assert pick(res.stdout) == pick(ref) and pick(ref)
    assert any("on the workers that search them" in n for n in json.loads((tmp_path / "r.json").read_text())[
        "config"]["notes"])


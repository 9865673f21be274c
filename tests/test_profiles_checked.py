"""Cluster profiles, scheduler addresses and worker counts are checked before any work, stored data or not.

Rules checked:

- a profile with ``memory_limit: lots``, a malformed one, one with a ``!!python`` tag, ``--scheduler
  notaurl`` and ``--workers 0`` are each one line ``dbfs: error: ...`` with exit 2, for every command
  that takes them, also when the dataset is stored and no cluster would start (before, some exited 0,
  some printed a traceback, and ``--workers 0`` started one worker per core);
- a pipeline spec's ``cluster`` profile and ``scheduler`` address likewise;
- `dbfs pipeline run` whose outputs are all stored starts no cluster (as `dbfs run` does);
- `dbfs cluster local --scheduler-port P --dashboard-port Q` serves on those ports (a taken port is one
  line); the profile keys ``scheduler_port`` / ``dashboard_port`` do the same;
- the per-level panels of the run plot are ticked at whole levels only.
"""
from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NAME = "kron-s10-ef16-s2-3"

BAD_PROFILES = {
    "lots.yaml": ("type: local\nmemory_limit: lots\n", "memory_limit is 'lots'"),
    "zero.yaml": ("type: local\nmemory_limit: 0\n", "memory_limit is 0"),
    "malformed.yaml": ("type: [local\n", "not valid YAML"),
    "python.yaml": ("type: local\nworkers: !!python/object/apply:os.getpid []\n", "not valid YAML"),
    "port.yaml": ("type: local\nscheduler_port: 70000\n", "scheduler_port is 70000"),
    "walltime.yaml": ("type: slurm\ncores: 2\nmemory: 1GB\nwalltime: soon\n", "walltime is 'soon'"),
    "address.yaml": ("type: scheduler\naddress: notaurl\n", "address is 'notaurl'"),
}


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """SCALE 10 with CSR p1-block, built in this process (no cluster)."""
    from dbfs import kernel1, store
    from dbfs.spec import GraphSpec

    root = tmp_path_factory.mktemp("profiles")
    ds, _ = store.generate(GraphSpec.make("kronecker", 10, 16, 2, 3), root=root, client=None, quiet=True)
    kernel1.build_partitioned(ds.path, P=1, partitioning="block", client=None, progress=False)
    return root


def _commands(root):
    """Every command that takes --cluster/--scheduler/--workers, on a stored dataset (no cluster needed)."""
    d = ["--datasets", root]
    return {"run": ["run", "--scale", 10, "--roots", 2, *d], "run-name": ["run", NAME, "--roots", 2, *d],
            "bfs": ["bfs", NAME, "--root", 1, *d], "bfs-scale": ["bfs", "--scale", 10, "--root", 1, *d],
            "generate": ["generate", "--scale", 10, *d], "build": ["build", NAME, *d]}


def _one_line(res, *words):
    err = res.stderr.strip()
    assert res.exit_code == 2 and len(err.splitlines()) == 1 and err.startswith("dbfs: error:"), res.output + err
    assert "Traceback" not in err and "LocalCluster" not in err
    for w in words:
        assert w in err, err
    return err


@pytest.mark.parametrize("profile", sorted(BAD_PROFILES))
@pytest.mark.parametrize("command", ["run", "run-name", "bfs", "bfs-scale", "generate", "build"])
def test_bad_profile_is_one_line_before_any_work(stored, tmp_path, dbfs_cli, profile, command):
    text, words = BAD_PROFILES[profile]
    (tmp_path / profile).write_text(text)
    res = dbfs_cli(*_commands(stored)[command], "--cluster", tmp_path / profile, ok=False)
    _one_line(res, profile, words)


@pytest.mark.parametrize("command", ["run", "run-name", "bfs", "generate", "build"])
@pytest.mark.parametrize("flags,words", [(["--scheduler", "notaurl"], "--scheduler 'notaurl'"),
                                         (["--scheduler", "tcp://host:port"], "no port number"),
                                         (["--workers", 0], "--workers 0"), (["--workers", -3], "--workers -3")])
def test_bad_scheduler_or_workers_is_one_line(stored, dbfs_cli, command, flags, words):
    _one_line(dbfs_cli(*_commands(stored)[command], *flags, ok=False), words)


def test_pipeline_spec_cluster_and_scheduler_are_checked(stored, tmp_path, dbfs_cli):
    (tmp_path / "lots.yaml").write_text(BAD_PROFILES["lots.yaml"][0])
    base = (REPO / "pipelines" / "graph500.yaml").read_text().replace("scale: 16", "scale: 10")
    for extra, words in ((f"cluster: {tmp_path / 'lots.yaml'}\n", "memory_limit is 'lots'"),
                         ("scheduler: notaurl\n", "scheduler 'notaurl' is not"), ("cluster: [1]\n", "cluster is [1]")):
        spec = tmp_path / "spec.yaml"
        spec.write_text(extra + base)
        _one_line(dbfs_cli("pipeline", "run", spec, "--datasets", stored, ok=False), words)
    _one_line(dbfs_cli("pipeline", "run", REPO / "pipelines" / "graph500.yaml", "--datasets", stored,
                       "--workers", 0, ok=False), "--workers 0")


def test_pipeline_run_with_everything_stored_starts_no_cluster(stored, tmp_path, dbfs_cli):
    spec = tmp_path / "g500.yaml"
    spec.write_text((REPO / "pipelines" / "graph500.yaml").read_text()
                    .replace("scale: 16", "scale: 10").replace("roots: 64", "roots: 2"))
    res = dbfs_cli("pipeline", "run", spec, "--datasets", stored)
    assert "no cluster to start" in res.stderr and "LocalCluster" not in res.stderr, res.stderr
    assert "NBFS:                           2" in res.stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cluster(*args):
    """`dbfs cluster ARGS` until its address line: (process, stderr lines)."""
    p = subprocess.Popen([sys.executable, "-m", "dbfs.cli", "cluster", *map(str, args)], stderr=subprocess.PIPE,
                         text=True, cwd=REPO)
    lines, t0 = [], time.monotonic()
    while time.monotonic() - t0 < 120:
        line = p.stderr.readline()
        if not line:
            break
        lines.append(line)
        if "Ctrl-C closes the cluster" in line:
            break
    return p, lines


def _stop(p):
    if p.poll() is None:
        p.send_signal(signal.SIGINT)
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()


@pytest.mark.distributed
def test_cluster_command_takes_ports(tmp_path):
    """The README's monitoring example: a cluster on known ports, its dashboard answering there; a taken port
    is one line; the same from a profile's keys."""
    sched, dash = _free_port(), _free_port()
    p, lines = _cluster("local", "--workers", 1, "--scheduler-port", sched, "--dashboard-port", dash)
    try:
        assert any(f"--scheduler tcp://127.0.0.1:{sched})" in ln for ln in lines), "".join(lines)
        assert any(f"dashboard: http://127.0.0.1:{dash}/" in ln for ln in lines), "".join(lines)
        with urllib.request.urlopen(f"http://127.0.0.1:{dash}/status", timeout=30) as r:
            assert r.status == 200
        taken = subprocess.run([sys.executable, "-m", "dbfs.cli", "cluster", "local", "--workers", "1",
                                "--scheduler-port", str(sched)], capture_output=True, text=True, timeout=120)
        assert taken.returncode == 2 and len(taken.stderr.strip().splitlines()) == 1, taken.stderr
        assert f"scheduler port {sched} on 127.0.0.1 is not free" in taken.stderr
    finally:
        _stop(p)
    prof = tmp_path / "ports.yaml"
    prof.write_text(f"type: local\nworkers: 1\nscheduler_port: {sched}\ndashboard_port: {dash}\n")
    p, lines = _cluster(prof)
    try:
        assert any(f"--scheduler tcp://127.0.0.1:{sched})" in ln for ln in lines), "".join(lines)
    finally:
        _stop(p)


def test_ports_apply_to_clusters_on_this_host_only(dbfs_cli):
    _one_line(dbfs_cli("cluster", "scheduler", "--scheduler-port", 8786, ok=False), "--scheduler-port does not apply")


def test_level_axes_have_whole_level_ticks():
    """A 4-level search: the frontier and edges panels tick 0, 1, 2, 3, never 0.5."""
    from types import SimpleNamespace

    from dbfs.report.plots import _figure

    levels = [{"level": i, "frontier": 10 ** i, "edges": 5 * 10 ** i, "direction": "bu" if i == 2 else "td"}
              for i in range(4)]
    res = SimpleNamespace(roots=[5], times=[0.1, 0.2], nedges=[100, 120], config={"algorithm": "do", "backend": "cpu"},
                          dataset="x", n_vertices=16, n_edges=32)
    fig = _figure(res, {"do": levels})
    fig.canvas.draw()
    for ax in fig.axes[:2]:
        lo, hi = ax.get_xlim()
        ticks = [t for t in ax.get_xticks() if lo <= t <= hi]
        assert ticks and all(float(t).is_integer() for t in ticks), ticks
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_address_problems():
    from dbfs.profiles import address_problem

    for ok in ("tcp://127.0.0.1:8786", "127.0.0.1:8786", "tls://h.example:1", "inproc://x/1", "ucx://[::1]:9"):
        assert address_problem(ok) is None, ok
    for bad in ("notaurl", "tcp://host", "http://h:1", "tcp://:8786", "tcp://h:0", "tcp://h:70000"):
        assert address_problem(bad), bad


def test_profile_gpus_count_the_devices_this_process_sees():
    """A local-gpu profile's ``gpus`` number the devices CUDA_VISIBLE_DEVICES leaves (a SLURM allocation's),
    as CUDA numbers them: ``gpus: [0]`` under ``2,3`` is device 2; a number past them is refused in one line."""
    from dbfs.cluster.gpu import _devices
    from dbfs.errors import DbfsError

    assert _devices(None, "2,3") is None
    assert _devices([0], "2,3") == "2"
    assert _devices([1, 0], "2,3") == "3,2"
    assert _devices("1", "GPU-aa,GPU-bb") == "GPU-bb"
    assert _devices([0, 1], "") == "0,1"                   # nothing set: the host's numbers
    with pytest.raises(DbfsError, match=r"gpus '2' is not one of the 2 device\(s\).*CUDA_VISIBLE_DEVICES=2,3"):
        _devices([2], "2,3")

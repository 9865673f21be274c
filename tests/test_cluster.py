"""Cluster profiles through the CLI: SLURM jobs through dask-jobqueue (the
job script a profile makes, bad profiles, a machine without sbatch, and real
jobs where a SLURM controller answers), and `dbfs cluster` keeping a cluster
up for other commands to join."""
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import yaml
from click.testing import CliRunner

from dbfs.cli import cli


def run(*args, ok=True):
    res = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    if ok:
        assert res.exit_code == 0, res.output + res.stderr
    return res


def _profile(tmp_path, **over):
    prof = {"type": "slurm", "jobs": 1, "cores": 2, "memory": "4GB", "processes": 2, "walltime": "00:10:00",
            "wait": 120}
    prof.update(over)
    path = tmp_path / "prof.yaml"
    path.write_text(yaml.safe_dump(prof))
    return path


def _slurm_up() -> bool:
    """A SLURM controller answers and has an idle, responding node."""
    try:
        res = subprocess.run(["sinfo", "-h", "-r", "-t", "idle", "-o", "%n"], capture_output=True, text=True,
                             timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return res.returncode == 0 and bool(res.stdout.strip())


def test_slurm_profile_job_script(tmp_path):
    """The shipped profile and a site's own become the #SBATCH lines, thread
    settings and worker command of each job (printed, nothing submitted)."""
    s = run("cluster", "slurm", "--script").stdout
    assert "#SBATCH --cpus-per-task=32" in s and "#SBATCH -t 01:00:00" in s and "#SBATCH --mem=" in s
    assert "--nworkers 4" in s and "--nthreads 8" in s
    assert "export NUMBA_NUM_THREADS=8" in s and "export OMP_NUM_THREADS=8" in s
    assert "#SBATCH -p" not in s and "#SBATCH -A" not in s      # null: the site's defaults
    p = _profile(tmp_path, queue="compute", account="proj42", cores=8, processes=2,
                 job_extra_directives=["--exclusive"], job_script_prologue=["source /opt/venv/bin/activate"])
    s = run("cluster", p, "--script").stdout
    assert "#SBATCH -p compute" in s and "#SBATCH -A proj42" in s and "#SBATCH --exclusive" in s
    assert "--nworkers 2" in s and "--nthreads 4" in s
    assert s.index("export NUMBA_NUM_THREADS=4") < s.index("source /opt/venv/bin/activate") < s.index("dask_worker")


def test_slurm_keeps_ctrl_c():
    """dask-jobqueue's import makes SIGINT a silent sys.exit() (exit 0); dbfs
    keeps Python's handler, so Ctrl-C still interrupts a run (exit 1).
    In a fresh process: the module is imported once per process."""
    code = ("import signal; from dbfs.cluster import load_profile, slurm_cluster; "
            "h = signal.getsignal(signal.SIGINT); c = slurm_cluster(load_profile('slurm')); c.close(); "
            "import dask_jobqueue; assert signal.getsignal(signal.SIGINT) is h, signal.getsignal(signal.SIGINT)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize("over, needle", [
    ({"cpus": 4}, "unknown keys cpus"),
    ({"memory": None}, "needs memory"),
    ({"cores": 3, "processes": 2}, "positive multiple of processes"),
    ({"type": "pbs"}, "needs type: local, type: slurm"),
])
def test_bad_slurm_profile(tmp_path, over, needle):
    res = run("generate", "--scale", 6, "--datasets", tmp_path / "ds", "--cluster", _profile(tmp_path, **over),
              ok=False)
    assert res.exit_code == 2 and needle in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not list((tmp_path / "ds").glob("kron-*"))          # nothing generated


def test_slurm_profile_without_sbatch(tmp_path, monkeypatch):
    """Where sbatch is not on PATH a slurm profile is a one-line error before any work."""
    monkeypatch.setenv("PATH", str(tmp_path))
    res = run("run", "--scale", 6, "--datasets", tmp_path / "ds", "--cluster", _profile(tmp_path), ok=False)
    assert res.exit_code == 2 and "sbatch" in res.stderr and "--cluster local" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and not list((tmp_path / "ds").glob("kron-*"))


def test_cluster_command_bad_input(tmp_path):
    res = run("cluster", "local", "--script", ok=False)
    assert res.exit_code == 2 and "SLURM job script" in res.stderr
    res = run("cluster", "scheduler", ok=False)
    assert res.exit_code == 2 and "nothing to start" in res.stderr
    res = run("cluster", tmp_path / "none.yaml", ok=False)
    assert res.exit_code == 2 and "not found" in res.stderr


@pytest.mark.distributed
def test_cluster_command_keeps_a_cluster_for_others(tmp_path):
    """`dbfs cluster local` starts a LocalCluster, prints its address and
    dashboard and keeps it up: a `dbfs generate --scheduler ADDRESS` runs on
    it; SIGINT closes it and the command exits 0."""
    proc = subprocess.Popen([sys.executable, "-m", "dbfs.cli", "cluster", "local", "--workers", "1"],
                            stderr=subprocess.PIPE, text=True)
    try:
        lines, addr, t0 = [], None, time.monotonic()
        while addr is None and time.monotonic() - t0 < 120:
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line)
            m = re.search(r"--scheduler (tcp://\S+)\)", line)
            addr = m.group(1) if m else None
        assert addr, "".join(lines)
        assert any("dashboard: http" in x for x in lines)
        res = run("generate", "--scale", 6, "--datasets", tmp_path, "--scheduler", addr)
        assert f"joined Dask cluster {addr}" in res.stderr
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
        assert "closing the cluster" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.slurm
@pytest.mark.skipif(not _slurm_up(), reason="no SLURM controller with an idle node answers sinfo here")
def test_run_on_slurm_jobs(tmp_path):
    """Real SLURM jobs: Kernel 1 on them and the searches in this process
    (cluster closed after the load), then the distributed search across the
    workers of a job; the jobs are cancelled at the end of each run."""
    p = _profile(tmp_path, jobs=1, cores=2, processes=2, memory="8GB", log_directory=str(tmp_path / "logs"))
    res = run("run", "--scale", 10, "--roots", 4, "--datasets", tmp_path / "ds", "--cluster", p)
    assert "submitted SLURMCluster (1 jobs x 2 worker processes x 1 threads)" in res.stderr
    assert "closed the SLURMCluster" in res.stderr and "SCALE:                          10" in res.stdout
    res = run("run", "--scale", 10, "--roots", 4, "--datasets", tmp_path / "ds", "--cluster", p,
              "--backend", "dask", "--partitions", 2)
    assert "num_mpi_processes:              2" in res.stdout
    for _ in range(30):                      # scancel is asynchronous
        if not subprocess.run(["squeue", "-h", "-n", "dask-worker"], capture_output=True, text=True).stdout.strip():
            break
        time.sleep(1)
    else:
        pytest.fail("the run's SLURM jobs are still queued or running")
    assert os.listdir(tmp_path / "logs")      # the jobs ran and logged there

"""Cluster profiles through the CLI, and SLURM jobs that fail fast and leave nothing behind.

Default suite, no SLURM needed: the job script a profile makes, bad profiles,
a machine without sbatch, the readers of squeue/sinfo/sbatch output on
captured text, the signal guard, and whole runs against stand-in sbatch /
squeue / scancel / sinfo commands first on PATH (a refused submission, a job
SLURM will never start, signals while a job is queued, --check).
`slurm` marker: real jobs where a SLURM controller answers sinfo with an idle
node (a one-node SLURM 22.05 from Debian's slurm-wlm: ../shared/tools/slurm/).
"""
import functools
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import yaml
from click.testing import CliRunner

from dbfs.cluster import slurm
from dbfs.cli import cli


def run(*args, ok=True):
    res = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    if ok:
        assert res.exit_code == 0, res.output + res.stderr
    return res


def _profile(tmp_path, name="prof.yaml", **over):
    prof = {"type": "slurm", "jobs": 1, "cores": 2, "memory": "4GB", "processes": 2, "walltime": "00:10:00",
            "wait": 120}
    prof.update(over)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(prof))
    return path


@functools.lru_cache(maxsize=None)
def _slurm_up() -> bool:
    """A SLURM controller answers and has an idle, responding node (asked once)."""
    try:
        res = subprocess.run(["sinfo", "-h", "-r", "-t", "idle", "-o", "%n"], capture_output=True, text=True,
                             timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return res.returncode == 0 and bool(res.stdout.strip())


class _Dbfs:
    """`python -m dbfs.cli ARGS` in a subprocess, its stderr collected line by line."""

    def __init__(self, *args, env=None, cwd=None):
        self.t0 = time.monotonic()
        self.p = subprocess.Popen([sys.executable, "-m", "dbfs.cli", *map(str, args)], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
        self.lines = []
        self._reader = threading.Thread(target=lambda: self.lines.extend(self.p.stderr), daemon=True)
        self._reader.start()

    def wait_for(self, pattern, timeout=120):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if any(re.search(pattern, x) for x in self.lines):
                return True
            if self.p.poll() is not None:
                self._reader.join(5)
                return any(re.search(pattern, x) for x in self.lines)
            time.sleep(0.1)
        return False

    def finish(self, timeout=120):
        try:
            rc = self.p.wait(timeout)
        finally:
            if self.p.poll() is None:
                self.p.kill()
        self._reader.join(10)
        return rc, time.monotonic() - self.t0, "".join(self.lines)


# --- profiles and the CLI ------------------------------------------------------------------------------------------

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


def test_shipped_slurm_profile_says_it_is_a_template():
    from importlib.resources import files

    text = (files("dbfs") / "profiles" / "slurm.yaml").read_text()
    head = text.split("type:")[0]
    assert "TEMPLATE" in head and "--check" in head
    for key in ("queue", "account", "cores", "memory", "jobs", "walltime", "interface"):
        assert key in head, key
        assert re.search(rf"^{key}:.*# SIZE", text, re.M) or key == "interface", key


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
    ({"cpus": 4}, "unknown key 'cpus'"),
    ({"memory": None}, "needs memory"),
    ({"memory": "lots"}, "memory is 'lots'"),
    ({"cores": 3, "processes": 2}, "must be a multiple of processes"),
    ({"type": "pbs"}, "use type: local, local-gpu, slurm or scheduler"),
])
def test_bad_slurm_profile(tmp_path, over, needle):
    res = run("generate", "--scale", 6, "--datasets", tmp_path / "ds", "--cluster", _profile(tmp_path, **over),
              ok=False)
    assert res.exit_code == 2 and needle in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
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
    res = run("cluster", "local", "--check", ok=False)
    assert res.exit_code == 2 and "--check asks SLURM" in res.stderr
    res = run("cluster", "scheduler", ok=False)
    assert res.exit_code == 2 and "nothing to start" in res.stderr
    res = run("cluster", tmp_path / "none.yaml", ok=False)
    assert res.exit_code == 2 and "cannot be read" in res.stderr
    res = run("cluster", "nosuchprofile", ok=False)
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


# --- reading SLURM's output (captured from SLURM 22.05) ------------------------------------------------------------

SQUEUE = """\
12|PENDING|Resources
13|PENDING|PartitionConfig
14|RUNNING|None
15|PENDING|Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions
16|CANCELLED|PartitionConfig
17|PENDING|QOSMaxWallDurationPerJobLimit
18|PENDING|AssocGrpCpuLimit
"""

# `sinfo -h -N -o "%P|%N|%c|%m|%t|%l|%a|%B"`: the one-node test SLURM, and a site with two partitions
SINFO_ONE = "debug*|vm|2|23081|idle|infinite|up|UNLIMITED\n"
SINFO_SITE = """\
cpu*|c001|64|256000|mix|1-00:00:00|up|UNLIMITED
cpu*|c002|64|256000|drain|1-00:00:00|up|UNLIMITED
big|m001|128|1024000|idle|2:00:00|up|96
gpu|g001|32|512000|idle|infinite|down|UNLIMITED
"""

# dask-jobqueue's RuntimeError when sbatch refuses a job (captured from a run with queue: nosuch)
SBATCH_ERROR = ("Command exited with non-zero exit code.\nExit code: 1\nCommand:\nsbatch /tmp/tmpg77t763d.sh\n"
                "stdout:\n\nstderr:\nsbatch: error: invalid partition specified: nosuch\n"
                "sbatch: error: Batch job submission failed: Invalid partition name specified\n\n")


def test_parse_squeue_and_classify():
    st = slurm.parse_squeue(SQUEUE + "garbage line\n")
    assert st["12"] == ("PENDING", "Resources") and len(st) == 7
    verdicts = {j: slurm.classify(*v)[0] for j, v in st.items()}
    assert verdicts == {"12": "queued", "13": "never", "14": "running", "15": "maybe", "16": "ended",
                        "17": "never", "18": "queued"}
    assert slurm.classify(*st["13"])[2] == ("cores", "memory", "walltime", "queue")
    assert slurm.classify(*st["17"])[2] == ("walltime",)
    assert slurm.classify("PENDING", "ReqNodeNotAvail, UnavailableNodes:vm")[0] == "maybe"
    assert slurm.classify("PENDING", "InvalidAccount")[2] == ("account",)
    assert slurm.classify("PENDING", "QOSMaxCpuPerJobLimit")[2] == ("cores",)
    assert slurm.classify("PENDING", "QOSMaxJobsPerUserLimit")[0] == "queued"    # clears as jobs end
    assert slurm.classify("PENDING", "Priority") == ("queued", "PENDING (Priority)", ())
    assert slurm.classify("FAILED", "NonZeroExitCode")[:2] == ("ended", "ended FAILED (NonZeroExitCode)")


def test_describe_jobs():
    assert slurm.describe({"10": ("RUNNING", "None"), "9": ("PENDING", "Resources")}) == \
        "job 9 PENDING (Resources), job 10 RUNNING"
    many = {str(i): ("PENDING", "Priority") for i in range(6)} | {"7": ("RUNNING", "None")}
    assert slurm.describe(many) == "6 jobs PENDING (Priority), 1 jobs RUNNING"


@pytest.mark.parametrize("stderr, reason, keys", [
    (SBATCH_ERROR, "Invalid partition name specified (invalid partition specified: nosuch)", "queue"),
    ("sbatch: error: Memory specification can not be satisfied\nsbatch: error: Batch job submission failed: "
     "Requested node configuration is not available\n", "Requested node configuration is not available", "memory"),
    ("sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified",
     "Invalid account or account/partition combination specified", "account, queue"),
    ("sbatch: error: Batch job submission failed: Requested time limit is invalid (missing or exceeds some limit)",
     "Requested time limit is invalid", "walltime"),
    ("sbatch: error: Batch job submission failed: Invalid feature specification", "Invalid feature",
     "job_extra_directives"),
    ("something else broke", "something else broke", "queue, account, cores, memory, walltime"),
])
def test_sbatch_failure_quotes_slurm(stderr, reason, keys):
    msg = slurm.sbatch_failure(stderr)
    assert msg.startswith("sbatch refused the worker job: ") and reason in msg and f"change {keys}" in msg, msg
    assert "\n" not in msg


def test_slurm_times_and_memory():
    assert slurm.slurm_seconds("01:00:00") == 3600 and slurm.slurm_seconds("30") == 1800
    assert slurm.slurm_seconds("30:15") == 1815 and slurm.slurm_seconds("1-00:00:00") == 86400
    assert slurm.slurm_seconds("2-12") == 2 * 86400 + 12 * 3600
    assert slurm.slurm_seconds("infinite") is None and slurm.slurm_seconds(None) is None
    assert slurm.request_mib("4GB") == 4096 and slurm.request_mib("128GB") == 120 * 1024   # --mem=120G
    assert slurm.request_mib("500MiB") == 500 and slurm.request_mib(2 ** 30) == 1024


def test_parse_sinfo():
    nodes = slurm.parse_sinfo(SINFO_SITE + "\n")
    assert [n.name for n in nodes] == ["c001", "c002", "m001", "g001"]
    assert nodes[0].default and nodes[0].partition == "cpu" and nodes[0].time_limit_s == 86400
    assert nodes[2].max_cpus == 96 and nodes[3].time_limit_s is None and nodes[3].avail == "down"


def _fit(sinfo, **prof):
    base = {"type": "slurm", "jobs": 1, "cores": 2, "memory": "4GB", "processes": 1, "queue": None,
            "walltime": "01:00:00"}
    return slurm.check_fit(base | prof, slurm.parse_sinfo(sinfo))


def test_check_fit():
    ok = _fit(SINFO_ONE, jobs=1, cores=2)
    assert ok.partition == "debug" and not ok.problems and ok.cpus == 2 and ok.mem_mib == 23081
    shipped = _fit(SINFO_ONE, jobs=2, cores=32, memory="128GB", processes=4)
    texts = [t for t, _ in shipped.problems]
    assert any(t.startswith("cores 32 > 2 CPUs") for t in texts)
    assert any(t.startswith("memory 128GB (--mem 122880 MiB) > 23081 MiB") for t in texts)
    assert [t for t, _ in _fit(SINFO_ONE, jobs=3, cores=1).problems] == \
        ["jobs 3: partition debug holds at most 2 such jobs at once and dbfs waits for all of them"]
    (t, keys), = _fit(SINFO_ONE, queue="nosuch").problems
    assert "no such partition (partitions: debug)" in t and keys == ("queue",)
    # a site: the default partition, limits per partition, a down partition, a drained node
    assert not _fit(SINFO_SITE, jobs=2, cores=64, memory="200GB").problems
    assert _fit(SINFO_SITE, jobs=3, cores=64).problems[0][1] == ("jobs", "cores", "memory")
    (t, keys), = _fit(SINFO_SITE, queue="big", cores=128).problems
    assert "cores 128 > 96 CPUs" in t                                # MaxCPUsPerNode of the partition
    (t, keys), = _fit(SINFO_SITE, queue="big", walltime="04:00:00").problems
    assert keys == ("walltime",) and "time limit of partition big (2 h)" in t
    assert _fit(SINFO_SITE, queue="gpu").problems[0][0] == "partition gpu is down"
    assert _fit(SINFO_SITE, queue="gpu", account="p1").notes == ["account is not checked (sinfo does not know accounts)"]


def test_signal_guard_restores_handlers():
    """SIGTERM/SIGHUP unwind while a SLURM cluster is up (nested calls count), then the old handlers are back;
    a handler set by Python code (or an ignored signal) is left in charge."""
    old = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        assert slurm.guard_signals() and slurm.guard_signals()
        assert signal.getsignal(signal.SIGTERM) is slurm._on_signal
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN          # nohup: stays ignored
        with pytest.raises(SystemExit) as e:
            slurm._on_signal(signal.SIGTERM, None)
        assert e.value.code == 128 + signal.SIGTERM
        slurm.unguard_signals()
        assert signal.getsignal(signal.SIGTERM) is slurm._on_signal       # one cluster still up
        slurm.unguard_signals()
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        mine = lambda *_: None                                              # noqa: E731
        signal.signal(signal.SIGTERM, mine)
        slurm.guard_signals()
        assert signal.getsignal(signal.SIGTERM) is mine
        slurm.unguard_signals()
        with slurm.held_signals() as pending:                               # held while jobs are cancelled
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.1)
        assert pending == [signal.SIGTERM] and signal.getsignal(signal.SIGTERM) is mine
    finally:
        for s, h in old.items():
            signal.signal(s, h)


# --- whole runs against stand-in SLURM commands ----------------------------------------------------------------------

_FAKES = {
    "sbatch": """\
        echo "sbatch $*" >> "$FAKE_SLURM_LOG"
        if [ -n "$FAKE_SBATCH_ERROR" ]; then printf '%b' "$FAKE_SBATCH_ERROR" >&2; exit 1; fi
        echo "Submitted batch job $$"
        """,
    "squeue": """\
        echo "squeue $*" >> "$FAKE_SLURM_LOG"
        while [ $# -gt 0 ]; do
          if [ "$1" = "-j" ]; then for id in $(echo "$2" | tr ',' ' '); do echo "$id|$FAKE_SQUEUE"; done; fi
          shift
        done
        """,
    "scancel": 'echo "scancel $*" >> "$FAKE_SLURM_LOG"\n',
    "sinfo": 'echo "sinfo $*" >> "$FAKE_SLURM_LOG"\nprintf "%b" "$FAKE_SINFO"\n',
}


@pytest.fixture
def fake_slurm(tmp_path):
    """sbatch/squeue/scancel/sinfo stand-ins first on PATH (their calls logged); returns (env, log path)."""
    pytest.importorskip("dask_jobqueue")
    bindir = tmp_path / "fakebin"
    bindir.mkdir()
    for name, body in _FAKES.items():
        f = bindir / name
        f.write_text("#!/bin/sh\n" + textwrap.dedent(body))
        f.chmod(0o755)
    log = tmp_path / "calls.log"
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}", FAKE_SLURM_LOG=str(log),
               FAKE_SQUEUE="PENDING|Priority", FAKE_SINFO=SINFO_ONE, FAKE_SBATCH_ERROR="")
    return env, log


def _calls(log):
    return log.read_text() if log.exists() else ""


def _hold_port(port: int):
    """A listening socket on 127.0.0.1:``port``, or None where the port is taken already (either way, a
    server asking for it gets another)."""
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
        s.listen(1)
        return s
    except OSError:
        s.close()
        return None


def test_sbatch_refusal_is_one_line_within_seconds(tmp_path, fake_slurm):
    """sbatch fails at once ('Invalid partition name specified'): a one-line error quoting it, no traceback from
    tornado or dask-jobqueue, nothing generated, long before the profile's wait; the dashboard's usual port
    8787 taken (another Dask session on the login node) adds no library line either."""
    env, log = fake_slurm
    env["FAKE_SBATCH_ERROR"] = ("sbatch: error: invalid partition specified: nosuch\\n"
                                "sbatch: error: Batch job submission failed: Invalid partition name specified\\n")
    p = _profile(tmp_path, queue="nosuch", wait=600)
    held = _hold_port(8787)
    try:
        rc, took, err = _Dbfs("run", "--scale", 6, "--datasets", tmp_path / "ds", "--cluster", p, env=env).finish()
    finally:
        if held is not None:
            held.close()
    assert rc == 2 and took < 60, (rc, took, err)
    last = err.strip().splitlines()[-1]
    assert last.startswith("dbfs: error: sbatch refused the worker job: Invalid partition name specified"), err
    assert "change queue" in last
    assert all(x.startswith("dbfs: ") for x in err.strip().splitlines()), err     # no library output at all
    assert "sbatch " in _calls(log) and not list((tmp_path / "ds").glob("kron-*"))


def test_job_slurm_never_starts_ends_the_wait(tmp_path, fake_slurm):
    """squeue says PartitionConfig: the wait ends at once naming the keys sinfo shows are too big; the job is
    cancelled (by id and by the process's job name)."""
    env, log = fake_slurm
    env["FAKE_SQUEUE"] = "PENDING|PartitionConfig"
    p = _profile(tmp_path, cores=32, processes=4, memory="128GB", wait=600)
    rc, took, err = _Dbfs("cluster", p, env=env).finish()
    last = err.strip().splitlines()[-1]
    assert rc == 2 and took < 60 and "Traceback" not in err, (rc, took, err)
    assert re.match(r"dbfs: error: SLURM will never start job \d+ \(squeue reason PartitionConfig\)", last), last
    assert "cores 32 > 2 CPUs" in last and "change cores, processes, memory in the profile" in last
    calls = _calls(log)
    job = re.search(r"job (\d+)", last).group(1)
    assert re.search(rf"^scancel {job}$", calls, re.M) and re.search(r"^scancel --name=dbfs-\d+-\w+ --user=", calls, re.M)


def test_job_that_ends_early_ends_the_wait(tmp_path, fake_slurm):
    env, log = fake_slurm
    env["FAKE_SQUEUE"] = "FAILED|NonZeroExitCode"
    rc, took, err = _Dbfs("cluster", _profile(tmp_path, log_directory=str(tmp_path / "logs")), env=env).finish()
    last = err.strip().splitlines()[-1]
    assert rc == 2 and "ended FAILED (NonZeroExitCode) before its workers connected" in last, err
    assert f"{tmp_path / 'logs'}/dbfs-" in last


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 1)])
def test_signal_while_queued_cancels_the_jobs(tmp_path, fake_slurm, sig, code):
    """A queued job keeps the wait going with a status line showing its squeue state; SIGTERM, SIGHUP or
    SIGINT then end dbfs within seconds and its jobs are cancelled."""
    env, log = fake_slurm
    proc = _Dbfs("run", "--scale", 6, "--datasets", tmp_path / "ds", "--cluster", _profile(tmp_path, wait=600),
                 env=env)
    assert proc.wait_for(r"waiting for 2 SLURM workers \(0 connected, \d+ of 600 s\): job \d+ PENDING \(Priority\)"), \
        "".join(proc.lines)
    proc.p.send_signal(sig)
    t0 = time.monotonic()
    rc, _, err = proc.finish(timeout=60)
    assert rc == code and time.monotonic() - t0 < 30, (rc, err)
    assert "Traceback" not in err
    job = re.search(r"job (\d+) PENDING", err).group(1)
    assert re.search(rf"^scancel {job}$", _calls(log), re.M), _calls(log)


def test_check_asks_sinfo_and_submits_nothing(tmp_path, fake_slurm, monkeypatch):
    env, log = fake_slurm
    for k in ("PATH", "FAKE_SLURM_LOG", "FAKE_SINFO"):
        monkeypatch.setenv(k, env[k])
    res = run("cluster", "slurm", "--check", ok=False)
    assert res.exit_code == 2 and len(res.stderr.strip().splitlines()) == 2, res.stderr
    assert "partition debug: 1 node(s), at most 2 CPUs and 23081 MiB per node" in res.stderr
    assert "profile slurm does not fit: cores 32 > 2 CPUs" in res.stderr and "change cores, processes, memory" in res.stderr
    res = run("cluster", _profile(tmp_path, jobs=2, cores=1, processes=1), "--check")
    assert "fits partition debug (nothing submitted)" in res.stderr
    res = run("cluster", _profile(tmp_path, queue="nosuch"), "--check", ok=False)
    assert "queue nosuch: SLURM has no such partition (partitions: debug)" in res.stderr
    assert "sinfo -h -N" in _calls(log) and "sbatch" not in _calls(log) and "squeue" not in _calls(log)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    res = run("cluster", "slurm", "--check", ok=False)
    assert res.exit_code == 2 and "sinfo, which is not on PATH" in res.stderr


# --- real SLURM jobs ----------------------------------------------------------------------------------------------

def _our_jobs() -> list:
    out = subprocess.run(["squeue", "-h", "-o", "%i %j %T"], capture_output=True, text=True).stdout
    return [x for x in out.splitlines() if " dbfs-" in x]


def _no_jobs_left(timeout=30) -> bool:
    end = time.monotonic() + timeout                  # scancel is asynchronous
    while time.monotonic() < end:
        if not _our_jobs():
            return True
        time.sleep(0.5)
    return False


def _node_cpus() -> int:
    out = subprocess.run(["sinfo", "-h", "-r", "-t", "idle", "-o", "%c"], capture_output=True, text=True).stdout
    return int(re.match(r"\d+", out.split()[0]).group(0))


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
    assert _no_jobs_left()
    res = run("run", "--scale", 10, "--roots", 4, "--datasets", tmp_path / "ds", "--cluster", p,
              "--backend", "dask", "--partitions", 2)
    assert "num_mpi_processes:              2" in res.stdout
    assert _no_jobs_left(), "the run's SLURM jobs are still queued or running"
    assert os.listdir(tmp_path / "logs")      # the jobs ran and logged there


@pytest.mark.slurm
@pytest.mark.skipif(not _slurm_up(), reason="no SLURM controller with an idle node answers sinfo here")
@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 1)])
def test_slurm_signal_cancels_real_jobs(tmp_path, sig, code):
    """Two jobs of a whole node each: one runs, one waits for it (Resources) while dbfs shows the squeue state;
    the signal ends dbfs within seconds and neither job is left in the queue."""
    p = _profile(tmp_path, jobs=2, cores=_node_cpus(), processes=1, memory="1GB", wait=600)
    proc = _Dbfs("run", "--scale", 8, "--datasets", tmp_path / "ds", "--cluster", p)
    assert proc.wait_for(r"job \d+ PENDING \(Resources\), job \d+ RUNNING|job \d+ RUNNING, job \d+ PENDING "
                         r"\(Resources\)"), "".join(proc.lines)
    assert len(_our_jobs()) == 2
    proc.p.send_signal(sig)
    t0 = time.monotonic()
    rc, _, err = proc.finish(timeout=60)
    assert rc == code and time.monotonic() - t0 < 30 and "Traceback" not in err, (rc, err)
    assert _no_jobs_left(), _our_jobs()


@pytest.mark.slurm
@pytest.mark.skipif(not _slurm_up(), reason="no SLURM controller with an idle node answers sinfo here")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_slurm_cluster_command_cancels_on_signal(tmp_path, sig):
    """`dbfs cluster PROFILE` with its workers connected: SIGTERM (closes like Ctrl-C, exit 0) or SIGHUP
    (exit 129) cancel the jobs."""
    proc = _Dbfs("cluster", _profile(tmp_path, jobs=1, cores=1, processes=1, memory="1GB"))
    assert proc.wait_for(r"dbfs: scheduler tcp://"), "".join(proc.lines)
    assert len(_our_jobs()) == 1
    proc.p.send_signal(sig)
    rc, _, err = proc.finish(timeout=60)
    assert rc == (0 if sig == signal.SIGTERM else 129) and "Traceback" not in err, (rc, err)
    assert _no_jobs_left(), _our_jobs()


@pytest.mark.slurm
@pytest.mark.skipif(not _slurm_up(), reason="no SLURM controller with an idle node answers sinfo here")
def test_slurm_error_inside_the_run_cancels_jobs(tmp_path):
    code = ("from dbfs.cluster import client_for\n"
            f"with client_for(profile={str(_profile(tmp_path, cores=1, processes=1, memory='1GB'))!r}) as c:\n"
            "    raise RuntimeError('boom')\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 1 and "RuntimeError: boom" in res.stderr
    assert _no_jobs_left(), _our_jobs()


@pytest.mark.slurm
@pytest.mark.skipif(not _slurm_up(), reason="no SLURM controller with an idle node answers sinfo here")
@pytest.mark.parametrize("over, needle", [
    ({"queue": "nosuch"}, "sbatch refused the worker job: Invalid partition name specified"),
    ({"memory": "100TB"}, "sbatch refused the worker job: Requested node configuration is not available "
                          "(Memory specification can not be satisfied): change memory"),
    ({"cores": 4096, "processes": 1}, "(squeue reason PartitionConfig)"),
])
def test_slurm_hopeless_request_fails_fast(tmp_path, over, needle):
    """Refused or never-starting jobs: a one-line error within seconds (not the 600 s wait), no traceback,
    nothing left in the queue."""
    p = _profile(tmp_path, **({"wait": 600, "memory": "1GB", "cores": 1, "processes": 1} | over))
    rc, took, err = _Dbfs("run", "--scale", 6, "--datasets", tmp_path / "ds", "--cluster", p).finish()
    last = err.strip().splitlines()[-1]
    assert rc == 2 and took < 60 and needle in last, (rc, took, err)
    assert all(x.startswith("dbfs: ") for x in err.strip().splitlines()), err
    assert _no_jobs_left(), _our_jobs()


@pytest.mark.slurm
@pytest.mark.skipif(not _slurm_up(), reason="no SLURM controller with an idle node answers sinfo here")
def test_slurm_wait_ends_with_the_queue_state(tmp_path):
    """A job that only waits (Resources) is waited for until `wait`, then cancelled with the last state shown."""
    p = _profile(tmp_path, jobs=2, cores=_node_cpus(), processes=1, memory="1GB", wait=8)
    rc, took, err = _Dbfs("run", "--scale", 6, "--datasets", tmp_path / "ds", "--cluster", p).finish()
    last = err.strip().splitlines()[-1]
    assert rc == 2 and "only 1 of 2 SLURM workers connected within 8 s" in last and "(Resources)" in last, err
    assert _no_jobs_left(), _our_jobs()


@pytest.mark.slurm
@pytest.mark.skipif(not _slurm_up(), reason="no SLURM controller with an idle node answers sinfo here")
def test_slurm_check_against_real_sinfo(tmp_path):
    cpus = _node_cpus()
    res = run("cluster", _profile(tmp_path, cores=cpus * 2, processes=1, memory="1GB"), "--check", ok=False)
    assert res.exit_code == 2 and f"cores {cpus * 2} > {cpus} CPUs" in res.stderr
    res = run("cluster", _profile(tmp_path, cores=1, processes=1, memory="1GB"), "--check")
    assert "(nothing submitted)" in res.stderr and not _our_jobs()


def test_worker_deaths_keeps_what_the_nanny_said():
    """dbfs.worker_deaths keeps a local nanny's exit and memory-restart lines (and nothing else) for the
    one-line errors; the SIGKILL case through a real cluster is in tests/test_dask_reliability.py."""
    import logging
    import time

    from dbfs import worker_deaths

    worker_deaths.watch()
    worker_deaths.watch()                     # idempotent: one handler
    log = logging.getLogger("distributed.nanny")
    assert sum(h is worker_deaths._HANDLER for h in log.handlers) == 1
    t0 = time.monotonic()
    log.info("Worker process %d was killed by signal %d", 4242, 9)
    log.info("Nanny asking worker to close")
    logging.getLogger("distributed.nanny.memory").warning(
        "Worker tcp://127.0.0.1:1 (pid=4243) exceeded 95% memory budget. Restarting...")
    assert worker_deaths.said_since(t0) == ["Worker process 4242 was killed by signal 9",
                                            "Worker tcp://127.0.0.1:1 (pid=4243) exceeded 95% memory budget. "
                                            "Restarting..."]
    assert worker_deaths.why(t0, most=1) == ("; the nanny said: Worker tcp://127.0.0.1:1 (pid=4243) exceeded 95% "
                                             "memory budget. Restarting...")
    assert worker_deaths.why(time.monotonic() + 1) == ""


def test_idle_openmp_threads_of_workers_sleep(monkeypatch):
    """``worker_env``: ``OMP_WAIT_POLICY=PASSIVE`` for every worker (a LocalCluster's, a SLURM job's), a policy
    in the environment kept; the thread pools sized to the worker's threads."""
    from dbfs.cluster import worker_env

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert worker_env(4)["OMP_WAIT_POLICY"] == "PASSIVE"
    assert worker_env(8)["NUMBA_NUM_THREADS"] == worker_env(8)["OMP_NUM_THREADS"] == "8"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert worker_env(4)["OMP_WAIT_POLICY"] == "ACTIVE"
    monkeypatch.delenv("OMP_WAIT_POLICY")
    assert "export OMP_WAIT_POLICY=PASSIVE" in run("cluster", "slurm", "--script").stdout

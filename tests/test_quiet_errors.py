"""The terminal shows dbfs's lines only; the Dask detail goes to a log file that the one-line error names.

Rules checked on real `dbfs` subprocesses (their stderr is what a terminal shows) on a LocalCluster of
2 worker processes:

- a damaged edges chunk met by Kernel 1 on a worker (`dbfs run --backend dask`, SCALE 10): one error
  line naming the chunk and the log file ``<datasets>/.dbfs-logs/run-*.log``, which holds the worker's
  "Compute Failed" record and its traceback; no other line but dbfs's;
- (slow) worker processes killed with SIGKILL every 0.3 s while `dbfs generate` writes: for 4 s, every
  stderr line is dbfs's own (no traceback, no nanny block) and the kills are in the log; until the nannies
  stop restarting them, one line within about a minute (no wait for a worker forever), naming the log;
- in this process (no CLI), nothing changes: :class:`dbfs.worker_logs.DaskLog` routes the Dask loggers to
  its file only while entered, and an empty file is removed.
"""
from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from test_dask_reliability import _children
from test_integrity import NAME, _chunk, flip

pytestmark = pytest.mark.distributed

REPO = Path(__file__).resolve().parents[1]
NOTE = re.compile(r"\(Dask details: (\S+\.log)\)")


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """SCALE 10 in 4 edges chunks, generated in this process (no cluster), no CSR."""
    from dbfs import store
    from dbfs.spec import GraphSpec

    root = tmp_path_factory.mktemp("quiet")
    store.generate(GraphSpec.make("kronecker", 10, 16, 2, 3), root=root, client=None, quiet=True,
                   chunk_edges=4096)    # as tests/test_integrity.py damages them
    return root


def _dbfs(root, *args):
    return subprocess.Popen([sys.executable, "-m", "dbfs.cli", *map(str, args), "--datasets", str(root)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO,
                            env={k: v for k, v in os.environ.items() if k != "DBFS_LOGS"})


def _logs(root, command="run") -> list:
    return sorted((Path(root) / ".dbfs-logs").glob(f"{command}-*.log"))


def _only_dbfs_lines(err: str) -> None:
    assert "Traceback" not in err and "Compute Failed" not in err, err[-4000:]
    strays = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("dbfs: ")]
    assert not strays, err[-4000:]


def _kill_workers(root, after: str, seconds: float, *args):
    """``dbfs ARGS`` with its worker processes SIGKILLed every 0.3 s for ``seconds`` from the stderr line
    holding ``after``; returns (exit code, stderr, kills, the new log file or None)."""
    before = set(_logs(root, "*"))
    p = _dbfs(root, *args)
    lines, started = [], threading.Event()

    def read():
        for ln in p.stderr:
            lines.append(ln)
            if after in ln:
                started.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert started.wait(180), "".join(lines)
    kills, t_end = 0, time.monotonic() + seconds
    while time.monotonic() < t_end and p.poll() is None:
        for k in _children(p.pid):
            try:
                if "spawn_main" in " ".join(k.cmdline()):
                    k.send_signal(signal.SIGKILL)
                    kills += 1
            except Exception:  # noqa: BLE001 (a process that ended meanwhile)
                pass
        time.sleep(0.3)
    try:
        p.wait(timeout=240)
    finally:
        if p.poll() is None:
            p.kill()
    reader.join(10)
    new = sorted(set(_logs(root, "*")) - before)
    return p.returncode, "".join(lines), kills, (new[0] if len(new) == 1 else None)


def _error_names(err: str, log: Path) -> str:
    """The one error line, naming ``log``."""
    errs = [ln for ln in err.splitlines() if ln.startswith("dbfs: error:")]
    assert len(errs) == 1, err[-3000:]
    m = NOTE.search(errs[0])
    assert m and Path(m.group(1)) == log.resolve(), errs[0]
    return errs[0]


@pytest.mark.slow
def test_workers_killed_during_generation(tmp_path):
    """Workers killed every 0.3 s for 4 s while `dbfs generate` writes: the stage finishes or fails in one line,
    the terminal shows only dbfs's lines (no nanny traceback), the kills and the nannies' detail are in the log."""
    code, err, kills, log = _kill_workers(tmp_path, "generating", 4.0, "generate", "--scale", 12,
                                          "--chunk-edges", 1024, "--workers", 2)
    assert kills, err
    _only_dbfs_lines(err)
    assert log is not None and "was killed by signal 9" in log.read_text(), err[-2000:]
    if code:
        assert code == 2
        _error_names(err, log)


@pytest.mark.slow
def test_workers_that_never_come_back_end_in_one_line(tmp_path):
    """Workers killed every 0.3 s until none is restarted (their nannies give up): within about a minute
    one line says so, naming the log; before, the stage waited for a worker forever."""
    code, err, kills, log = _kill_workers(tmp_path, "generating", 150.0, "generate", "--scale", 12,
                                          "--chunk-edges", 1024, "--workers", 2)
    assert kills, err
    _only_dbfs_lines(err)
    assert code == 2 and log is not None, err[-2000:]
    assert "none was restarted within" in _error_names(err, log)


def test_damaged_chunk_on_a_worker_names_the_log(stored, tmp_path):
    """Kernel 1 on a worker meets a damaged edges chunk: one error line naming the chunk and the log file;
    the file holds the worker's "Compute Failed" record with its traceback."""
    root = tmp_path / "ds"
    shutil.copytree(stored, root)
    flip(_chunk(root, "edges", 2), None)
    p = _dbfs(root, "run", NAME, "--roots", 2, "--backend", "dask", "--partitions", 2, "--workers", 2)
    _, err = p.communicate(timeout=300)
    _only_dbfs_lines(err)
    errs = [ln for ln in err.splitlines() if ln.startswith("dbfs: error:")]
    assert p.returncode == 2 and len(errs) == 1 and "edges chunk" in errs[0], err[-3000:]
    m = NOTE.search(errs[0])
    assert m, errs[0]
    text = Path(m.group(1)).read_text()
    assert "Compute Failed" in text and "Traceback" in text and "DbfsError" in text, text[-3000:]


def test_the_log_is_routed_only_while_entered(tmp_path):
    """A DaskLog sends the distributed loggers' records to its file while entered, restores the handlers
    after, removes an empty file, and says nothing when there is nothing to say."""
    from dbfs import worker_logs

    worker_logs.configure(lambda: (tmp_path / "logs", "test"))
    try:
        lg = logging.getLogger("distributed.nanny")
        before = (logging.getLogger("distributed").handlers[:], logging.lastResort)
        with worker_logs.DaskLog.create() as quiet:
            pass
        assert not quiet.path.exists() and quiet.note() == ""
        with worker_logs.DaskLog.create() as log:
            assert worker_logs.current() is log
            lg.error("boom %d", 1)
            lg.info("Worker process 1234 was killed by signal 9")
            lg.info("chatter")
        assert worker_logs.current() is None
        assert (logging.getLogger("distributed").handlers[:], logging.lastResort) == before
        text = log.path.read_text()
        assert "boom 1" in text and "killed by signal 9" in text and "chatter" not in text
        assert log.note() == f" (Dask details: {log.path})"
    finally:
        worker_logs.configure(None)


def _raise_in(name: str, filename: str):
    """exc_info of a NameError raised by a function ``name`` compiled as if it lived in ``filename``."""
    ns: dict = {}
    exec(compile(f"def {name}():\n    return unbound_future_name\n", filename, "exec"), ns)
    try:
        ns[name]()
    except NameError:
        return sys.exc_info()
    raise AssertionError("no NameError")


def test_the_sync_cancel_race_record_is_dropped_and_no_other(monkeypatch):
    """A Ctrl-C that lands while distributed's ``sync`` waits, before its future exists, makes its ``cancel``
    callback raise NameError on the event loop, which tornado logs with a traceback: the CLI's
    :func:`dbfs.worker_logs.configure` drops that record on ``tornado.application`` and keeps every other
    (another function, another file, another exception)."""
    from dbfs import worker_logs

    log = logging.getLogger("tornado.application")
    monkeypatch.setattr(log, "filters", list(log.filters))
    monkeypatch.setattr(worker_logs, "_where", worker_logs._where)
    monkeypatch.setattr(worker_logs, "_until_exit", worker_logs._until_exit)
    worker_logs.configure(None)
    worker_logs.configure(None)                     # once, however often the CLI configures
    assert sum(isinstance(f, worker_logs.DropSyncCancelRace) for f in log.filters) == 1

    def record(exc_info):
        return log.makeRecord(log.name, logging.ERROR, __file__, 1, "Exception in callback", (), exc_info)

    race = _raise_in("cancel", os.path.join("site-packages", "distributed", "utils.py"))
    assert not log.filter(record(race))
    assert log.filter(record(_raise_in("cancel", os.path.join("site-packages", "dbfs", "utils.py"))))
    assert log.filter(record(_raise_in("wait", os.path.join("site-packages", "distributed", "utils.py"))))
    try:
        raise ValueError("x")
    except ValueError:
        assert log.filter(record(sys.exc_info()))
    assert log.filter(record(None))

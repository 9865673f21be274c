"""``dbfs run --json FILE`` keeps FILE up to date as the run goes (``"complete": false``), so a run cut off by a
job's time limit (a 10-minute device command, a SLURM wall clock) still leaves Kernel 1 and every search
validated so far; the finished run's record replaces it (``"complete": true``). Checked with a real run
killed (SIGKILL, nothing to clean up) once its file shows searches, and a run left to finish."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time



def _read(path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def test_a_killed_run_leaves_its_record_so_far(tmp_path):
    out = tmp_path / "run.json"
    proc = subprocess.Popen([sys.executable, "-m", "dbfs.cli", "run", "--scale", "14", "--roots", "64",
                             "--backend", "cpu", "--datasets", str(tmp_path / "d"), "--json", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    rec, deadline = None, time.monotonic() + 300
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            rec = _read(out)
            if rec and len(rec.get("searches", [])) >= 2:
                break
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert rec is not None and proc.returncode == -signal.SIGKILL, "the run ended before it could be cut off"
    rec = _read(out)                                  # what the cut-off run left
    assert rec["complete"] is False and rec["scale"] == 14 and rec["config"]["backend"] == "cpu"
    assert rec["config"]["edges"] == "stored"       # the list this run generated and stored
    assert rec["construction_time"] > 0 and "kernel1" in rec["stages"] and len(rec["roots"]) == 64
    assert 2 <= len(rec["searches"]) < 64
    for s in rec["searches"]:
        assert s["valid"] is True and s["time"] > 0 and s["nedge"] > 0 and s["root"] in rec["roots"]
        assert s["levels"] and s["levels"][0]["level"] == 0 and s["levels"][0]["frontier"] == 1   # where it went
    assert not list(tmp_path.glob(".run.json.tmp"))   # never half a file


def test_a_finished_run_replaces_it_with_the_whole_record(tmp_path):
    """On a virtual list generated before (its edges regenerated where they are read), which the record says."""
    out = tmp_path / "run.json"
    gen = subprocess.run([sys.executable, "-m", "dbfs.cli", "generate", "--scale", "10", "--edges", "virtual",
                          "--datasets", str(tmp_path / "d")], capture_output=True, text=True, timeout=600)
    assert gen.returncode == 0, gen.stderr[-2000:]
    res = subprocess.run([sys.executable, "-m", "dbfs.cli", "run", "--scale", "10", "--roots", "4", "--backend",
                          "cpu", "--datasets", str(tmp_path / "d"), "--json", str(out)],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    rec = json.loads(out.read_text())
    assert rec["complete"] is True and len(rec["searches"]) == 4 and "graph500" in rec
    assert rec["config"]["edges"] == "virtual"

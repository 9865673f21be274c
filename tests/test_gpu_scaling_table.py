"""``benchmarks/gpu_scaling.py``'s table from committed ``dbfs run --json`` records (no GPU needed): the searches
compared over the roots every run searched (a run cut before its end counts its validated searches), Kernel 1
and validation against the fewest GPUs, as docs/BENCHMARKS.md reports the SCALE 30 pair."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RES = ROOT / "benchmarks" / "results"
P1 = RES / "run-dask-s30-p1-deg-degreelow-cut230s-h200x4-ed5c7c0-20261127.json"
P4 = RES / "run-dask-s30-p4-deg-h200x4-ed5c7c0-20261127.json"

_SPEC = importlib.util.spec_from_file_location("gpu_scaling", ROOT / "benchmarks" / "gpu_scaling.py")
gpu_scaling = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(gpu_scaling)


def test_the_scale_30_pair_over_the_roots_both_searched():
    runs = {g: gpu_scaling.summary(json.loads(f.read_text())) for g, f in ((1, P1), (4, P4))}
    assert not runs[1]["complete"] and runs[1]["searches"] == 12 and runs[4]["searches"] == 16
    t = gpu_scaling.table(runs)
    assert t["roots"] == 12
    common = sorted(runs[1]["times"])
    by_hand = [sum(runs[g]["nedge"][r] for r in common) / sum(runs[g]["times"][r] for r in common) for g in (1, 4)]
    assert t["runs"][1]["hmean_teps"] == pytest.approx(by_hand[0]) and by_hand[0] == pytest.approx(994.6e9, rel=1e-3)
    assert t["runs"][4]["over_base"]["searches"] == pytest.approx(by_hand[1] / by_hand[0])
    assert round(t["runs"][4]["over_base"]["searches"], 2) == 1.74
    assert t["runs"][4]["over_base"]["kernel1"] == pytest.approx(49.39 / 125.60, rel=1e-3)


def test_from_records_prints_the_table_and_refuses_a_bad_pair():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_scaling.py"), "--from-records",
                          f"1={P1}", f"4={P4}"], capture_output=True, text=True, check=True).stdout
    assert "over the 12 roots" in out and "searches 1.74x" in out and "(run cut before its end)" in out
    bad = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_scaling.py"), "--from-records", str(P1)],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "G=FILE" in bad.stderr


def test_each_run_says_whether_its_list_was_stored_or_virtual(capsys):
    """A record's ``config.edges`` (from 7c5d378 on) reaches the summary and the table's line; older records say
    nothing."""
    rec = json.loads(P4.read_text())
    assert gpu_scaling.summary(rec)["edges"] is None
    rec["config"]["edges"] = "virtual"
    runs = {4: gpu_scaling.summary(rec)}
    assert runs[4]["edges"] == "virtual"
    gpu_scaling.show(runs, gpu_scaling.table(runs))
    assert "valid 16/16, list virtual" in capsys.readouterr().out


def test_each_runs_whole_record_is_kept_beside_the_summary(tmp_path):
    summary = tmp_path / "gpu_scaling-20261128T000000Z.json"
    summary.write_text("{}")
    kept = gpu_scaling.keep_run(P4, summary, 4)
    assert kept == tmp_path / "gpu_scaling-20261128T000000Z-g4.json"
    assert kept.read_bytes() == P4.read_bytes()

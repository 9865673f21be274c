"""``benchmarks/td_duplicates.py``: the claims a partitioned top-down level makes for each vertex it discovers,
on a graph small enough to count by hand, and the script end to end at SCALE 10."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
_SPEC = importlib.util.spec_from_file_location("td_duplicates", ROOT / "benchmarks" / "td_duplicates.py")
td_duplicates = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(td_duplicates)


def test_a_vertex_bordering_two_workers_frontiers_is_claimed_twice():
    """Eight vertices, edges 0-4, 5-4, 5-6 and 1-7 (both directions); level 1 is {0, 1, 5} (worker 0 holds
    0..3, worker 1 4..7 at P = 2). Worker 0 claims 4 and 7, worker 1 claims 4 and 6: 4 claims, 3 discovered;
    at P = 1 one claim each."""
    adj = {0: [4], 1: [7], 4: [0, 5], 5: [4, 6], 6: [5], 7: [1]}
    indptr = np.concatenate([[0], np.cumsum([len(adj.get(v, [])) for v in range(8)])]).astype(np.int64)
    indices = np.array([u for v in range(8) for u in adj.get(v, [])], np.int32)
    levels = np.array([1, 1, -1, -1, 2, 1, 2, 2])
    assert td_duplicates.level_claims(indptr, indices, levels, 1, 2) == (4, 3)
    assert td_duplicates.level_claims(indptr, indices, levels, 1, 1) == (3, 3)


def test_the_script_end_to_end(tmp_path, monkeypatch):
    monkeypatch.setenv("DBFS_RESULTS", str(tmp_path))
    td_duplicates.main(["--scale", "10", "--partitions", "1", "4", "--roots", "2", "--min-edges", "100"])
    rec = json.loads(next(tmp_path.glob("td_duplicates-*.json")).read_text())
    assert rec["claims_per_discovered"]["1"] == 1.0 and rec["claims_per_discovered"]["4"] > 1.0
    assert all(r["claims"] >= r["discovered"] > 0 for r in rec["levels"])

"""``benchmarks/gap_anchor.py``: the ``.sg`` writer against GAP's serialized layout (gapbs ``src/writer.h``),
its parsing of GAP's output, its one-line refusals, and (with g++ and ``DBFS_GAP_SRC``, a gapbs checkout) one
run end to end at SCALE 10."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
_SPEC = importlib.util.spec_from_file_location("gap_anchor", ROOT / "benchmarks" / "gap_anchor.py")
gap_anchor = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(gap_anchor)

# a triangle 0-1-2, an edge 2-3 and an isolated vertex 4, both directions of every edge
INDPTR = np.array([0, 2, 4, 7, 8, 8], dtype=np.int64)
INDICES = np.array([1, 2, 0, 2, 0, 1, 3, 2], dtype=np.int32)


def test_sg_bytes_follow_gaps_serialized_layout(tmp_path):
    p = tmp_path / "g.sg"
    written = gap_anchor.write_sg(p, INDPTR, INDICES.astype(np.int64))   # int64 ids are narrowed to int32
    raw = p.read_bytes()
    n, nnz = 5, 8
    assert written == len(raw) == 1 + 8 + 8 + 8 * (n + 1) + 4 * nnz
    assert raw[0] == 0                                                    # bool directed = false
    assert np.frombuffer(raw, np.int64, 2, offset=1).tolist() == [nnz, n]    # edges to write, then nodes
    offsets = np.frombuffer(raw, np.int64, n + 1, offset=17)
    neigh = np.frombuffer(raw, np.int32, nnz, offset=17 + 8 * (n + 1))
    assert offsets.tolist() == INDPTR.tolist()
    assert neigh.tolist() == INDICES.tolist()


@pytest.mark.parametrize("indptr, indices, why", [
    (INDPTR, np.array([1, 2, 0, 2, 0, 1, 5, 2]), "outside"),         # id 5 in a 5-vertex graph
    (INDPTR + 1, INDICES, "rise from 0"),                             # offsets not starting at 0
    (np.array([0, 2, 1, 3]), np.array([1, 2, 0]), "rise from 0"),    # falling offsets
])
def test_sg_writer_refuses_what_gap_cannot_read(tmp_path, indptr, indices, why):
    with pytest.raises(SystemExit, match=why):
        gap_anchor.write_sg(tmp_path / "bad.sg", indptr, indices)


def test_gap_output_parsed():
    text = ("Read Time:           0.01234\nGraph has 1024 nodes and 10551 undirected edges for degree: 10\n"
            "Trial Time:          0.00012\nVerification:           PASS\nVerification Time:   0.00100\n"
            "Trial Time:          0.02000\nAverage Time:        0.01006\n")
    out = gap_anchor.parse_gap(text)
    assert out["trial_times"] == [0.00012, 0.02]
    assert (out["nodes"], out["edges"], out["directed"]) == (1024, 10551, False)
    assert out["verification"] == ["PASS"]
    assert gap_anchor.hmean_teps([10, 30], [1.0, 1.0]) == pytest.approx(2 / (1 / 10 + 1 / 30))


def _one_line(exc) -> str:
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith("gap_anchor: ")
    return msg


def _fake_gapbs(root: Path) -> Path:
    (root / "src").mkdir(parents=True)
    (root / "Makefile").write_text("bfs:\n\ttrue\n")
    (root / "src" / "bfs.cc").write_text("int main() { return 0; }\n")
    return root


def test_refusals_are_one_line(tmp_path, monkeypatch):
    with pytest.raises(SystemExit) as e:          # GAP's NodeID is int32
        gap_anchor.main(["--gap-src", str(tmp_path), "--scales", "20", "31"])
    assert "SCALE 31" in _one_line(e) and "int32" in _one_line(e)
    with pytest.raises(SystemExit) as e:
        gap_anchor.main(["--gap-src", str(tmp_path), "--scales", "10"])
    assert "no Makefile" in _one_line(e)
    src = _fake_gapbs(tmp_path / "gapbs")
    monkeypatch.setenv("CXX", "no-such-compiler-dbfs")
    with pytest.raises(SystemExit) as e:
        gap_anchor.main(["--gap-src", str(src), "--scales", "10"])
    assert "no no-such-compiler-dbfs on PATH" in _one_line(e)


def test_gap_revision_of_a_plain_directory_is_unknown(tmp_path):
    assert gap_anchor.gap_revision(tmp_path, None) == "unknown"
    assert gap_anchor.gap_revision(tmp_path, "abc123") == "abc123"


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++: GAP's bfs cannot be built")
@pytest.mark.skipif(not os.environ.get("DBFS_GAP_SRC"), reason="DBFS_GAP_SRC (a gapbs checkout) is not set")
def test_end_to_end_scale_10(tmp_path):
    out = tmp_path / "results"
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gap_anchor.py"), "--gap-src",
                        os.environ["DBFS_GAP_SRC"], "--scales", "10", "--roots", "2", "--trials", "1",
                        "--datasets", str(tmp_path / "datasets"), "--out", str(out)],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "SCALE 10: GAP " in p.stdout and " GTEPS, dbfs do " in p.stdout and "dbfs/GAP " in p.stdout
    files = list(out.glob("gap_anchor-*.json"))
    assert len(files) == 1
    rec = json.loads(files[0].read_text())
    assert rec["benchmark"] == "gap_anchor" and "machine" in rec and rec["gap"]["rev"]
    assert "-O3" in rec["gap"]["build"]["flags"] and "-fopenmp" in rec["gap"]["build"]["flags"]
    s, = rec["scales"]
    assert s["scale"] == 10 and len(s["roots"]) == 2 and len(s["nedge"]) == 2 and min(s["nedge"]) > 0
    # GAP's parents are not needed: its per-root times are (positive, one per trial), and both GTEPS figures
    assert [len(t) for t in s["gap"]["times"]] == [1, 1] and min(min(t) for t in s["gap"]["times"]) > 0
    assert [len(t) for t in s["dbfs"]["times"]] == [1, 1] and min(min(t) for t in s["dbfs"]["times"]) > 0
    assert s["gap"]["hmean_teps"] > 0 and s["dbfs"]["hmean_teps"] > 0
    assert s["gap"]["hmean_teps"] == pytest.approx(gap_anchor.hmean_teps(s["nedge"], s["gap"]["median"]))
    assert s["dbfs_over_gap"] == pytest.approx(s["dbfs"]["hmean_teps"] / s["gap"]["hmean_teps"])
    assert s["gap_verify_first_root"] == ["PASS"]

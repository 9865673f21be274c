"""Source holds contracts, docs hold history: no issue references and no GPU model names in dbfs/.

Measurements, issue numbers and machine names belong in docs/ (docs/BENCHMARKS.md and the
module's own doc). Measurements in general are hard to tell from contract numbers by a regex, so
only the two mechanical cases are checked here, in every ``dbfs/**/*.py`` and ``*.cu`` file.
"""
import re
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "dbfs"

#: "issue #20", "issues 19", "(#21)", a bare "#21"; not CUDA directives (``#define``), hex colors
#: in strings (``"#999"``, ``color:#999``), ``# noqa`` or Sphinx's ``#:`` comments
ISSUE_REF = re.compile(r"(?i)\bissues? #?\d+\b|\(#\d+\b|(?<![\w\"'=:&#/])#\d{2,}\b(?![\w%;])")
#: GPU models: the machine something ran on is history, not a contract
GPU_MODEL = re.compile(r"(?i)\b(?:[AHPV]100|H200|GH200|B200|Titan ?X)\b")


def _sources():
    return sorted(p for ext in ("*.py", "*.cu") for p in PKG.rglob(ext) if "__pycache__" not in p.parts)


def _hits(pattern):
    out = []
    for path in _sources():
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            m = pattern.search(line)
            if m:
                out.append(f"{path.relative_to(PKG.parent)}:{i}: {m.group(0)!r} in {line.strip()[:120]}")
    return out


@pytest.mark.parametrize("text", ["(issue #20: never the OOM killer)", "see Issue 36", "Monitoring (#21)",
                                  "the fix of #35 item 2", "# noted in #19."])
def test_issue_pattern_finds_references(text):
    assert ISSUE_REF.search(text), text


@pytest.mark.parametrize("text", ["#define WARP 32", "#include <cstdint>", "#pragma unroll 4",
                                  'stroke="#999"', "color:#999;", "x = 1  # noqa: E501", "#: 2**26 rows a chunk",
                                  "uint32 #  bits", "tissue 12"])
def test_issue_pattern_skips_code(text):
    assert not ISSUE_REF.search(text), text


@pytest.mark.parametrize("text", ["SCALE 30 on one H200", "an H100 box", "Titan X", "P100", "a100"])
def test_gpu_pattern_finds_models(text):
    assert GPU_MODEL.search(text), text


def test_sources_exist():
    names = {p.name for p in _sources()}
    assert "pipeline.py" in names and any(n.endswith(".cu") for n in names), sorted(names)[:20]


def test_no_issue_references_in_source():
    hits = _hits(ISSUE_REF)
    assert not hits, "issue references belong in docs/, not in source:\n" + "\n".join(hits)


def test_no_gpu_model_names_in_source():
    hits = _hits(GPU_MODEL)
    assert not hits, "machine names belong in docs/ (BENCHMARKS.md), not in source:\n" + "\n".join(hits)

"""Source holds contracts, docs hold history: no issue numbers, machine names or measured results in dbfs/.

Contract: every ``dbfs/**/*.py`` and ``dbfs/**/*.cu`` file (code, comments and docstrings) is free of
- issue references: "#35", "issue 35", "(#12)";
- machine names, the context of a measurement: GPU models ("H100", "A100"), the lent machine kinds
  ("nvidia-h200-x2"), core counts ("2-core", "on 2 cores"), "dev VM";
- measured results: throughputs ("644 GTEPS", "0.29 GB/s"), speed ratios ("1.79x", "2x faster"),
  gains and losses ("10% faster", "(-8%)", "3% at SCALE 30"), a time after a measuring verb ("took
  117 s", "costs about 1 ms"), a time per search or level ("1 ms a search", "2-3 ms searches"), a
  time read to two decimals ("1.44 ms"), energies ("40 J"), a quantity right after "measured",
  "observed" or "took", a time compared ("instead of 90 ms"), and "A/B" stories.
They live in docs/ (docs/BENCHMARKS.md, its "Moved from source comments" section, and the module's
own doc); a source comment states the rule and may point there without the number ("a generous
bound over the longest build measured (docs/DISTRIBUTED.md)").

Method: each file's lines, stripped of their comment markers (``#``, ``#:``, ``//``, ``*``), are
joined with newlines so that a sentence that wraps is read whole; each rule is a regular expression
over that text, and a hit is reported as file:line (the line where it starts). Numbers that are
contracts do not match: constants and sizes ("1 << 28", "40 B per entry", "a 64 MiB margin"), bounds
and limits ("within 2x", "wait 600 s", "at most 2**32", "85% of its free memory"), specification facts
("SCALE 30", "edgefactor 16", "64 search keys", "3.0.1 TEPS"), citations ("SC'12", "2012, p. 5"),
units in parameter docs ("bytes per vertex") and format strings ("{:.4f} GTEPS", "{t * 1e3:.2f} ms").

Exceptions: :data:`_ALLOWED` (a mention that is a genuine non-measurement fact, with its reason) and
:data:`_PENDING` (hits in files another change is rewriting now: their count per file may only fall).

Reference: Graph 500 Benchmark 1 specification 3.0.1 (SCALE, edgefactor 16 and the 64 search keys
are facts of the benchmark, not measurements), https://graph500.org/?page_id=12.
"""
import bisect
import re
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "dbfs"

#: "issue #20", "issues 19", "(#21)", a bare "#21"; not CUDA directives (``#define``), hex colors
#: in strings (``"#999"``, ``color:#999``), ``# noqa`` or Sphinx's ``#:`` comments
ISSUE_REF = re.compile(r"(?i)\bissues?\s+#?\d+\b|\(#\d+\b|(?<![\w\"'=:&#/])#\d{2,}\b(?![\w%;])")
#: the machine something ran on is history, not a contract
GPU_MODEL = re.compile(r"(?i)\b(?:[AHPV]100|H200|GH200|B200|L40S?|Titan ?X|DGX|MI[123]\d0X?|RTX ?\d{4})\b")
MACHINE = re.compile(GPU_MODEL.pattern + r"|(?i:\bnvidia-h\w*)|(?i:\b\d+-core\b|\bon\s+\d+\s+cores\b)|\bdev VM\b")

# a number as prose writes one: not a format spec ("{:.2f}"), not part of a word, a version ("3.0.1")
# or an expression's operand ("1e3 ms" is not prose either way)
_NUM = r"(?<![\w.{:%$/*])~?\d+(?:,\d{3})*(?:\.\d+)?(?![.\d])"
_TIME = r"(?:ns|us|µs|ms|s|secs?|seconds?|mins?|minutes?|hours?)"
_BYTES = r"(?:[KMGT]i?B|B|bytes)"
_CMP = r"(?:faster|slower|quicker|fewer|more|less|higher|lower|better|worse|speed-?up|overhead)"
# the words between a verb and its number, within one sentence; a bound or a limit ends the search
_BOUND = r"at most|up to|within|than|limit|timeout|deadline|bound|every|after|wait|interval|poll"
_GAP = rf"(?:(?!{_BOUND})(?:[^.;]|\.(?=\w))){{0,80}}?"
_NEAR = r"(?:[^.;:()]|\.(?=\w)){0,60}?"

#: rule name -> the pattern of a measured result
MEASURE = {
    "throughput": _NUM + r"\s?(?:[KMGT]?TEPS|[KMGT]i?B/s|[KMGT]?b(?:it)?/s|(?:[KMG]\s?)?edges/s)(?![\w/])",
    "ratio": r"(?<![\w.])\d+\.\d+[x×](?!\w)|" + _NUM + rf"\s?(?:[x×]|times)\s+{_CMP}\b",
    "gain": _NUM + rf"\s?%\s+{_CMP}\b|\([+\-−]\d+(?:\.\d+)?\s?%\)|\b(?:faster|slower|quicker|saves?|saved|gains?|"
            r"dropped|drops|rose|fell|improved|regress\w*)\s+(?:by\s+)?(?:about\s+)?" + _NUM + r"\s?%|"
            + _NUM + r"\s?%\s+(?:at|for|on|of)\s+SCALE\s+\d+|SCALE\s+\d+\s*[:,]\s*(?:about\s+|~)?" + _NUM + r"\s?%",
    "timing": r"(?i)\b(?:took|takes|take|taking|ran|runs|spent|spends|lasted|lasts|costs?|costing|adds?|added|"
              r"saves?|saved)\b" + _GAP + _NUM + rf"\s?{_TIME}\b",
    "per-step time": _NUM + r"\s?(?:ns|us|µs|ms)\s?(?:/|per\s|an?\s|)(?:\w+\s){0,2}?"
                            r"(?:levels?|search(?:es)?|roots?|edges?|calls?|pass(?:es)?|chunks?|steps?)\b",
    "reading": r"(?<![\w.])\d+\.\d{2,}\s?(?:ns|us|µs|ms)\b|\b(?:instead of|against|versus|vs\.?|now)\s+(?:about\s+|~)?"
               + _NUM + rf"\s?{_TIME}\b",
    "energy": _NUM + r"\s?(?:W|kW|J|kJ|Wh|kWh)(?![\w/])",
    "measured": r"(?i)\b(?:measured|observed|took)\b" + _NEAR + _NUM
                + rf"\s?(?:%|[x×](?!\w)|{_TIME}\b|[KMGT]?TEPS\b|W\b|{_BYTES}\b)",
    "A/B story": r"\bA/B\b",
}
RULES = {"issue reference": ISSUE_REF, "machine name": MACHINE, **{k: re.compile(v) for k, v in MEASURE.items()}}

#: (file, the matched text) -> why it is a fact, not a measurement. Keep it short; an entry that no
#: longer matches fails :func:`test_allowlist_entries_still_match`
_ALLOWED: dict = {}

#: TEMPORARY: file -> hits, in the files another change is rewriting now (their owner fixes them; the
#: count may only fall, and an entry goes once its file is clean). None of them had a hit when this was
#: written: dbfs/bfs/dask/{gpu_nccl,gpu_search,gpu_part,worker,built,nccl,bsp,client,graphs,mesh,codec}.py,
#: dbfs/kernel1/{passes_gpu,placed_gpu}.py, dbfs/bfs/kernels/bfs.cu, dbfs/backends/dask.py,
#: dbfs/monitor/*, dbfs/report/*, dbfs/bfs/cpu/*
_PENDING: dict = {}

_MARKER = re.compile(r"^\s*(?:#:?|//+|/?\*+)?\s?")


def _sources():
    return sorted(p for ext in ("*.py", "*.cu") for p in PKG.rglob(ext) if "__pycache__" not in p.parts)


def _scan(text: str):
    """(line, rule, matched text, the line) per hit in ``text``."""
    raw = text.splitlines()
    lines = [_MARKER.sub("", s) for s in raw]
    joined, starts = "\n".join(lines), [0]
    for s in lines[:-1]:
        starts.append(starts[-1] + len(s) + 1)
    out = []
    for name, rx in RULES.items():
        for m in rx.finditer(joined):
            i = bisect.bisect_right(starts, m.start())
            out.append((i, name, m.group(0).replace("\n", " "), raw[i - 1].strip()))
    return sorted(out)


def _hits():
    """file -> its hits as "file:line: [rule] 'text' in line", the allowed ones left out."""
    out = {}
    for path in _sources():
        rel = str(path.relative_to(PKG.parent))
        for i, name, text, line in _scan(path.read_text(encoding="utf-8")):
            if (rel, text) not in _ALLOWED:
                out.setdefault(rel, []).append(f"{rel}:{i}: [{name}] {text!r} in {line[:120]}")
    return out


@pytest.mark.parametrize("text", ["(issue #20: never the OOM killer)", "see Issue 36", "Monitoring (#21)",
                                  "the fix of #35 item 2", "# noted in #19.", "moved here by issue\n36"])
def test_issue_pattern_finds_references(text):
    assert ISSUE_REF.search(text), text


@pytest.mark.parametrize("text", ["#define WARP 32", "#include <cstdint>", "#pragma unroll 4",
                                  'stroke="#999"', "color:#999;", "x = 1  # noqa: E501", "#: 2**26 rows a chunk",
                                  "uint32 #  bits", "tissue 12"])
def test_issue_pattern_skips_code(text):
    assert not ISSUE_REF.search(text), text


@pytest.mark.parametrize("text", ["SCALE 30 on one H200", "an H100 box", "Titan X", "P100", "a100",
                                  "kind nvidia-h100-x2", "on the 2-core machine", "measured on 2 cores", "0.4-1.0 ms on 16 cores",
                                  "the shared dev VM"])
def test_machine_pattern_finds_machines(text):
    assert MACHINE.search(text), text


@pytest.mark.parametrize("text", ["SCALE 26: 644 GTEPS", "reads at 0.29 GB/s", "the build took 117 s",
                                  "degree 1.79x the plain CSR", "1.2-1.5x faster claims", "2x faster",
                                  "measured 35% slower", "about 10% faster", "0.852 (-8%)", "about 3% at SCALE 30",
                                  "its page faults took about 1.2 ms of a search", "cost ~0.1 ms of a",
                                  "a search at SCALE 26 takes 3 ms", "a dependent load measured slower (level 2:\n"
                                  "1.44 ms against 1.29 ms)", "about 1 ms a search a worker", "(SCALE 20: 2-3 ms "
                                  "searches)", "took 1 s instead of 90 ms", "read 40 J in 9 ms",
                                  "measured ~20 KiB stored", "a validation took 27.0 GiB over",
                                  "SCALE 22 / 24 / 26 = 133 / 216 / 353 GTEPS", "in-process A/B at SCALE 20",
                                  "the seconds the task may take (about 130 s)"])
def test_measurement_patterns_find_results(text):
    assert _scan(text), text


@pytest.mark.parametrize("text", ["_MAX_CHUNK = 1 << 28", "BUILD_TIMEOUT = 3600.0", "about 40 B per entry",
                                  "device bytes per vertex", "plus a 64 MiB margin", "within 2x of that",
                                  "(processes and jobs 1, wait 600 s).", "did not all start within 120 s",
                                  "default: 85% of its free memory", "exceeded 95% memory budget",
                                  "SCALE 30, edgefactor 16", "Graph500 uses 64 search keys", "The 3.0.1 TEPS edge count.",
                                  "Beamer, Asanovic, Patterson, SC'12", "Bader et al. 2012, p. 5",
                                  'say(f"{t * 1e3:.2f} ms, {n / t / 1e9:.3f} GTEPS")', '("GTEPS", "{:.4f}")',
                                  "MTEPS/W = (TEPS / 1e6) / mean watts", "a size such as 4GiB",
                                  "the timed seconds are measured on the workers from a start barrier",
                                  "a margin over the measured peak RSS: docs/KERNEL1.md) and 4 GiB for the process",
                                  "a generous bound over the longest build measured (docs/DISTRIBUTED.md)",
                                  "grid2d scale 1 is 2 x 1: one edge", "threads per worker, e.g. 4 cores each", "the task may take at most 3600 s",
                                  "SCALE 26 needs about 16 + 1 + 8 + 11 GB", "costs n bits, within 2x"])
def test_measurement_patterns_skip_contracts(text):
    assert not _scan(text), _scan(text)


def test_sources_exist():
    names = {p.name for p in _sources()}
    assert "pipeline.py" in names and any(n.endswith(".cu") for n in names), sorted(names)[:20]


def test_allowlist_entries_still_match():
    found = {(str(p.relative_to(PKG.parent)), text) for p in _sources()
             for _, _, text, _ in _scan(p.read_text(encoding="utf-8"))}
    stale = [k for k in _ALLOWED if k not in found]
    assert not stale, f"_ALLOWED entries that no longer match anything (remove them): {stale}"


def test_no_history_in_source():
    hits = _hits()
    bad = [h for f, hs in hits.items() if f not in _PENDING for h in hs]
    assert not bad, ("measurements, issue numbers and machine names belong in docs/ (docs/BENCHMARKS.md), not in "
                     "source; state the rule and point to the doc instead:\n" + "\n".join(bad))


def test_pending_hits_only_fall():
    hits = _hits()
    pending = [h for f in _PENDING for h in hits.get(f, [])]
    print("\n".join(["hits in files being rewritten (_PENDING):"] + pending))
    grew = {f: (len(hits.get(f, [])), n) for f, n in _PENDING.items() if len(hits.get(f, [])) > n}
    fell = {f: (len(hits.get(f, [])), n) for f, n in _PENDING.items() if len(hits.get(f, [])) < n}
    assert not grew, f"hits grew (file: (now, allowed)): {grew}\n" + "\n".join(pending)
    assert not fell, f"hits fell: lower their _PENDING counts (file: (now, allowed)): {fell}"

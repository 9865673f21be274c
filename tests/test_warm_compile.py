"""Honest Graph500 stage times on a first run: Numba compiles before the timed stages, not inside them.

`dbfs run --scale 12` in a subprocess, on the default LocalCluster of two worker processes: generation
and Kernel 1 run on the workers, the searches and validations in the run's own process, and every one of
them would otherwise compile (or load) its kernels inside its timer. The default-suite test runs with
Numba's usual cache; the slow ones start from an empty NUMBA_CACHE_DIR and an empty datasets root (a fresh
clone's first run, about a minute of compiling on 2 cores) and run again on the cache it wrote.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.distributed

DBFS = [sys.executable, "-m", "dbfs.cli"]


def _run(tmp: Path, cache: Path | None, datasets: str, out: str) -> tuple[dict, str, str]:
    """``dbfs run --scale 12`` on 2 worker processes with NUMBA_CACHE_DIR=cache (None: Numba's usual cache):
    (JSON record, stdout, stderr)."""
    env = dict(os.environ)
    if cache is not None:
        env["NUMBA_CACHE_DIR"] = str(cache)
    res = subprocess.run([*DBFS, "run", "--scale", "12", "--roots", "8", "--workers", "2",
                          "--datasets", str(tmp / datasets), "--json", str(tmp / out)],
                         env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads((tmp / out).read_text()), res.stdout, res.stderr


def _block_value(stdout: str, key: str) -> float:
    """A value of the Graph500 output block (``key:`` padded to column 33)."""
    line = next(line for line in stdout.splitlines() if line.startswith(key + ":"))
    return float(line.split(":", 1)[1].replace("!", ""))


def _ready_line(stderr: str, stage: str) -> str:
    return next(line for line in stderr.splitlines() if f"Numba kernels of {stage} ready in" in line)


def test_run_reports_compile_time_apart_from_the_stages(tmp_path):
    """The kernels of generation and Kernel 1 are loaded on both workers before those stages start their
    timers (said on stderr), those of the searches and validation in the run's process; the seconds are the
    JSON's compile_time, in none of the Graph500 times. At SCALE 12 the work of generation and Kernel 1 is
    tens of milliseconds (about 0.03 s and 0.1 s on a loaded 2-core VM): the 3 s bound leaves a wide margin
    for a busy machine (this test does not control whether the cache was warm, so it bounds no compile)."""
    record, stdout, stderr = _run(tmp_path, None, "datasets", "r.json")
    for stage in ("generation", "Kernel 1"):
        assert _ready_line(stderr, stage).endswith("(here and on 2 workers)"), stderr
    assert "Numba kernels of the searches and validation ready in" in stderr
    assert record["compile_time"] > 0 and record["compile_time"] == pytest.approx(record["stages"]["compile"])
    assert _block_value(stdout, "graph_generation") + _block_value(stdout, "construction_time") < 3.0


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """The first run on an empty Numba cache (kept for the module: it is the expensive part)."""
    tmp = tmp_path_factory.mktemp("warm")
    cache = tmp / "numba-cache"
    cache.mkdir()
    record, stdout, stderr = _run(tmp, cache, "datasets", "first.json")
    return tmp, cache, record, stdout, stderr


@pytest.mark.slow
def test_first_run_times_the_work_not_the_compiler(first_run):
    """graph_generation and construction_time hold the work only; the compiling is compile_time.

    At SCALE 12 the work is 65,536 edges generated and one CSR built: tens of milliseconds (about 0.03 s and
    0.1 s measured on a loaded 2-core VM), while compiling the kernels of these stages takes 10-30 s there
    (compiled inside the timers, they read 10-40 s). 3 s leaves a 20x margin for a slow or busy machine and
    still fails any stage that compiles inside its timer; the compile time itself must be reported, and it
    dwarfs the work (a ratio with a wide margin, so no absolute compile time is assumed)."""
    _, _, record, stdout, stderr = first_run
    gen, k1 = _block_value(stdout, "graph_generation"), _block_value(stdout, "construction_time")
    assert gen == pytest.approx(record["generation_time"], rel=1e-4)
    assert k1 == pytest.approx(record["construction_time"], rel=1e-4)
    assert gen + k1 < 3.0, (gen, k1, stderr[-2000:])
    compile_time = record["compile_time"]
    assert compile_time == pytest.approx(record["stages"]["compile"])
    assert compile_time > 5 * (gen + k1), (compile_time, gen, k1)
    assert "Numba kernels of generation ready in" in stderr and "Numba kernels of Kernel 1 ready in" in stderr
    assert record["stages"]["generate"] < 3.0 and record["stages"]["kernel1"] < 3.0, record["stages"]
    assert max(s["validate_time"] for s in record["searches"]) < 3.0, "no validation compiles its kernels"


@pytest.mark.slow
def test_workers_load_the_kernels_the_first_run_cached(first_run):
    """The generation and Kernel 1 kernels were loaded on both workers before their stages (said on stderr),
    from the cache the run wrote into NUMBA_CACHE_DIR (index files of each stage's kernels); a second run on
    another datasets root reads that cache: its compile_time is a fraction of the first's (reading a cached
    kernel is tens of times faster than compiling it: the 1/2 bound is wide), its stage times stay small."""
    tmp, cache, record, _, stderr = first_run
    for stage in ("generation", "Kernel 1"):
        assert _ready_line(stderr, stage).endswith("(here and on 2 workers)"), stderr
    index = {p.name for p in cache.rglob("*.nbi")}
    for kernel in ("graph500._kron_range", "kernels._count_keys", "cpu._edge_pass", "roots._mark_incident"):
        assert any(name.startswith(kernel + "-") for name in index), (kernel, sorted(index))
    again, stdout, _ = _run(tmp, cache, "datasets-2", "second.json")
    assert again["compile_time"] < record["compile_time"] / 2, (again["compile_time"], record["compile_time"])
    assert _block_value(stdout, "graph_generation") + _block_value(stdout, "construction_time") < 3.0

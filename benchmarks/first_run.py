"""README's command on a fresh install: `dbfs run` from an empty Numba cache, trees side by side.

    python benchmarks/first_run.py --scale 16 --trees /path/to/base /path/to/tree --reps 2

For each repetition and each tree (a checkout of dbfs, put first on ``PYTHONPATH``, before what it held;
the first tree is the one the others are compared with), ``dbfs run --scale S`` in a subprocess started from
an empty directory with an empty ``NUMBA_CACHE_DIR`` and an empty datasets root, as a fresh clone's first
run: its wall seconds and the JSON's ``compile_time`` (the Numba kernels loaded before the timed stages).
Prints per tree the median wall and compile time and their ratios to the first tree's; writes
``benchmarks/results/first_run-<stamp>.json``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import dbfs_run, write_record  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=int, default=16)
    ap.add_argument("--roots", type=int, default=64)
    ap.add_argument("--trees", nargs="+", default=[str(Path(__file__).resolve().parents[1])])
    ap.add_argument("--reps", type=int, default=1)
    a = ap.parse_args(argv)

    trees = [str(Path(t).resolve()) for t in a.trees]
    runs = {t: [] for t in trees}
    here = os.getcwd()
    for rep in range(a.reps):
        for t in trees:
            with tempfile.TemporaryDirectory(prefix="dbfs-first-") as tmp:
                os.chdir(tmp)           # `python -m` puts the working directory first on sys.path
                try:
                    path = os.pathsep.join([t] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
                    rec, wall = dbfs_run(a.scale, a.roots, Path(tmp) / "datasets", Path(tmp) / "run.json",
                                         env={"NUMBA_CACHE_DIR": str(Path(tmp) / "numba"), "PYTHONPATH": path})
                finally:
                    os.chdir(here)
            runs[t].append({"wall_s": wall, "compile_s": rec["compile_time"],
                            "harmonic_mean_teps": rec.get("harmonic_mean_TEPS")})
            print(f"rep {rep + 1} {t}: wall {wall:.1f} s, compile {rec['compile_time']:.1f} s", flush=True)
    med = {t: {k: statistics.median(r[k] for r in runs[t]) for k in ("wall_s", "compile_s")} for t in trees}
    base = med[trees[0]]
    print(f"SCALE {a.scale}, empty Numba cache, median of {a.reps}:")
    for t in trees:
        m = med[t]
        print(f"  {t}: wall {m['wall_s']:.1f} s ({m['wall_s'] / base['wall_s']:.2f}x), compile "
              f"{m['compile_s']:.1f} s ({m['compile_s'] / base['compile_s']:.2f}x)")
    write_record("first_run", {"scale": a.scale, "roots": a.roots, "trees": trees, "runs": runs, "median": med})


if __name__ == "__main__":
    main()

"""README's run command against other flags, each end to end as a user runs it.

Each configuration (a set of ``dbfs run`` flags, ``""`` for README's command;
the first is the baseline) runs ``dbfs run --scale S --roots R FLAGS`` once in
a fresh datasets root of its own, so its wall time holds everything a user
waits for: generation, Kernel 1, the searches, validation and the process's
start. The script prints, per configuration, the stages (from the run's
JSON), Graph500's harmonic-mean TEPS and the wall, then each one's ratios to
the baseline, and writes one record to ``benchmarks/results/flags_compare-<tag>-<stamp>.json``.

    python benchmarks/flags_compare.py --scale 26 --config "" --config "--backend gpu" \
        --config "--cluster local-gpu --backend dask"
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.common import dbfs_run, write_record  # noqa: E402


def _row(scale, roots, flags, tmp) -> dict:
    datasets = Path(tmp) / "datasets"
    try:
        rec, wall = dbfs_run(scale, roots, datasets, Path(tmp) / "run.json", flags)
    finally:
        shutil.rmtree(datasets, ignore_errors=True)          # room on disk for the next configuration
    g5, cfg = rec["graph500"], rec.get("config", {})
    row = {"flags": flags, "wall_s": wall, "stages": rec.get("stages"), "validated": rec.get("validated"),
           "construction_time": rec["construction_time"], "harmonic_mean_TEPS": g5["bfs  harmonic_mean_TEPS"],
           "median_TEPS": g5["bfs  median_TEPS"], "variant": cfg.get("variant"), "relabel": cfg.get("relabel")}
    stages = "  ".join(f"{k} {v:.2f}" for k, v in (row["stages"] or {}).items() if v >= 0.005)
    print(f"  dbfs run {flags or '(README)'}: hmean {row['harmonic_mean_TEPS'] / 1e9:9.3f} GTEPS  "
          f"K1 {row['construction_time']:7.2f} s  wall {wall:7.1f} s  [{stages}]", flush=True)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=int, default=26)
    ap.add_argument("--roots", type=int, default=64)
    ap.add_argument("--config", action="append", required=True,
                    help="dbfs run flags of one configuration; the first is the baseline")
    ap.add_argument("--tag", default="")
    args = ap.parse_args(argv)
    rows, path = [], None
    with tempfile.TemporaryDirectory(prefix="dbfs-flags-") as tmp:
        for flags in args.config:
            rows.append(_row(args.scale, args.roots, flags, tmp))
            base = rows[0]
            rows[-1]["over_baseline"] = {k: rows[-1][k] / base[k] for k in ("harmonic_mean_TEPS", "wall_s",
                                                                             "construction_time") if base[k]}
            path = write_record(f"flags_compare{('-' + args.tag) if args.tag else ''}",   # kept if cut off
                                {"scale": args.scale, "roots": args.roots, "runs": rows}, path=path)
    for r in rows[1:]:
        o = r["over_baseline"]
        print(f"{r['flags'] or '(README)'} / {rows[0]['flags'] or '(README)'}: TEPS {o['harmonic_mean_TEPS']:.3g}x  "
              f"wall {o['wall_s']:.3f}x  Kernel 1 {o.get('construction_time', float('nan')):.3f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The plain CSR against the degree-relabelled one, side by side, end to end through ``dbfs run``.

Each configuration (a set of ``dbfs run`` flags: backend, cluster, partitions)
runs ``--relabel none`` and ``--relabel degree`` alternately, ``--rounds``
times each, on one dataset generated once for it (its own datasets root), in one process tree on one
machine; every run writes its JSON record, from which this script takes the
harmonic-mean TEPS, the median TEPS, Kernel 1's ``construction_time``, the
run's wall time and, with ``--energy``, MTEPS/W. It prints, per
configuration, degree / none ratios of the medians over the rounds, and
writes one record to ``benchmarks/results/relabel_default-<stamp>.json``.

    python benchmarks/relabel_default.py --scale 20 --roots 16 --config "--backend cpu"
    python benchmarks/relabel_default.py --scale 26 --config "--backend gpu --energy" \
        --config "--cluster local-gpu --backend dask"
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.common import dbfs_run, write_record  # noqa: E402

_KEYS = ("harmonic_mean_TEPS", "median_TEPS", "construction_time", "wall_s", "MTEPS_per_W")


def _run(scale, flags, relabel, roots, datasets, tmp) -> dict:
    rec, wall = dbfs_run(scale, roots, datasets, Path(tmp) / "run.json", f"--relabel {relabel} {flags}")
    g5 = rec["graph500"]
    row = {"relabel": relabel, "wall_s": wall, "construction_time": rec["construction_time"],
           "harmonic_mean_TEPS": g5["bfs  harmonic_mean_TEPS"], "median_TEPS": g5["bfs  median_TEPS"],
           "validated": rec.get("validated"), "stages": rec.get("stages"),
           "variant": rec.get("config", {}).get("variant")}
    if "MTEPS_per_W" in g5:
        row["MTEPS_per_W"] = g5["MTEPS_per_W"]
    print(f"  {relabel:6s} hmean {row['harmonic_mean_TEPS'] / 1e9:8.3f} GTEPS  K1 {row['construction_time']:7.2f} s"
          f"  wall {wall:6.1f} s" + (f"  {row['MTEPS_per_W']:7.1f} MTEPS/W" if "MTEPS_per_W" in row else ""),
          flush=True)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=int, default=20)
    ap.add_argument("--roots", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--config", action="append", required=True, help="dbfs run flags of one configuration")
    ap.add_argument("--datasets", default=None, help="datasets root (default: a temporary folder)")
    ap.add_argument("--tag", default="", help="added to the record's name (e.g. the machine)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="dbfs-relabel-") as tmp:
        configs = []
        for i, flags in enumerate(args.config):
            datasets = Path(args.datasets or Path(tmp) / f"datasets-{i}")   # a configuration's own stored variants
            print(f"dbfs run --scale {args.scale} {flags}", flush=True)
            rows = [_run(args.scale, flags, rl, args.roots, datasets, tmp)
                    for _ in range(args.rounds) for rl in ("none", "degree")]
            med = {rl: {k: statistics.median(r[k] for r in rows if r["relabel"] == rl)
                        for k in _KEYS if all(k in r for r in rows)} for rl in ("none", "degree")}
            ratio = {k: med["degree"][k] / med["none"][k] for k in med["none"] if med["none"][k]}
            print("  degree / none: " + "  ".join(f"{k} {v:.3f}x" for k, v in ratio.items()), flush=True)
            configs.append({"flags": flags, "runs": rows, "median": med, "degree_over_none": ratio})
            if not args.datasets:
                shutil.rmtree(datasets, ignore_errors=True)                     # room for the next one
        write_record(f"relabel_default{('-' + args.tag) if args.tag else ''}",
                     {"scale": args.scale, "roots": args.roots, "rounds": args.rounds, "configs": configs})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

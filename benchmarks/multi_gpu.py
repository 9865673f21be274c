"""One GPU against G GPU workers, end to end through ``dbfs run``, on one dataset in one call.

Runs ``dbfs run --scale S --roots R --backend gpu`` (one GPU) and then
``dbfs run --scale S --roots R --cluster local-gpu --backend dask --partitions P``
for each P given (the box's GPU workers) on the same datasets folder (the
first run generates and stores the graph, the others reuse it), each
``--rounds`` times alternately. P = 1: one partition, the relabelled CSR built
in the GPU worker's memory (the default); with ``--stored-p1`` also the plain
variant a ``--relabel none`` one-GPU run stored, read onto the worker. P > 1:
the plain partitions (``--relabel none``, the default); with ``--relabel-too``
also the partitions relabelled within themselves (``--relabel degree``).
Compares, from the JSON records: Kernel 1 (``construction_time``), validation per search,
harmonic-mean TEPS of the searches, the run's wall time, and the dask run's
per-level overhead (level time less the slowest worker's kernel time, median
and p90 over all levels of all searches). Prints the ratios (dask / gpu) and
writes ``benchmarks/results/multi_gpu-<stamp>.json``.

    python benchmarks/multi_gpu.py --scale 26 --roots 16 --partitions 1 2
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.common import dbfs_run, generate_virtual, level_medians, write_record  # noqa: E402


def _run(args, flags, datasets, tmp, label, env=None) -> dict:
    rec, wall = dbfs_run(args.scale, args.roots, datasets, Path(tmp) / f"{label}.json", flags, env)
    vt = [s["validate_time"] for s in rec["searches"] if s.get("validate_time") is not None]
    levels = [lv for s in rec["searches"] for lv in (s.get("levels") or [])]
    over = [lv["overhead"] for lv in levels if "overhead" in lv]
    row = {"label": label, "flags": flags, "wall_s": wall, "stages": rec.get("stages"),
           "construction_time": rec["construction_time"], "load_time": rec.get("load_time"),
           "harmonic_mean_TEPS": rec["graph500"]["bfs  harmonic_mean_TEPS"],
           "validate_per_search": sum(vt) / len(vt) if vt else None,
           "valid": sum(bool(s.get("valid")) for s in rec["searches"]), "searches": len(rec["searches"]),
           "level_overhead_median": float(np.median(over)) if over else None,
           "level_overhead_p90": float(np.percentile(over, 90)) if over else None,
           "load_steps": rec.get("config", {}).get("load_steps"),
           "workers_read": [{"read_s": w.get("read_s"), "prepare_s": w.get("prepare_s"),
                             "device_bytes": w.get("device_bytes"), "edge_rows_read": w.get("edge_rows_read")}
                            for w in rec.get("config", {}).get("workers") or []],
           "levels_first_search": [{k: lv.get(k) for k in ("level", "direction", "frontier", "edges", "time",
                                                         "kernel", "overhead", "rounds", "workers")}
                                    for lv in (rec["searches"][0].get("levels") or [])] if rec["searches"] else [],
           "per_worker_level_median": level_medians(rec["searches"]),
           "describe": {k: v for k, v in rec.get("config", {}).items()
                        if k in ("workers", "frontier_sharing", "level_exchange", "nccl_off")}}
    print(f"  {label:5s} K1 {row['construction_time']:7.2f} s  validate/search "
          f"{(row['validate_per_search'] or 0):6.3f} s  hmean {row['harmonic_mean_TEPS'] / 1e9:8.2f} GTEPS  "
          f"wall {wall:6.1f} s  valid {row['valid']}/{row['searches']}"
          + (f"  level overhead median {row['level_overhead_median'] * 1e6:.0f} us" if over else "")
          + (f"  [{row['describe'].get('level_exchange')}]" if row["describe"].get("level_exchange") else ""),
          flush=True)
    for w in row["workers_read"]:                   # a stored partition read onto a worker: its rate
        if w["read_s"]:
            print(f"    worker read {w['read_s']:.2f} s, prepare {w['prepare_s'] or 0:.2f} s, "
                  f"{(w['device_bytes'] or 0) / w['read_s'] / 1e9:.2f} GB/s of device bytes, "
                  f"{w.get('edge_rows_read') or 0:,} edge rows read", flush=True)
    if row["load_steps"]:
        print("    load steps: " + ", ".join(f"{k} {v:.2f} s" for k, v in row["load_steps"].items()), flush=True)
    for lv in row["levels_first_search"]:           # where the first search's time went, level by level
        ws = " ".join(f"{w['kernel'] * 1e6:.0f}/{w['exchange'] * 1e6:.0f}"
                      + (f"/{w['issue'] * 1e6:.0f}" if w.get("issue") is not None else "")
                      for w in lv.get("workers") or [])
        print(f"    level {lv['level']:2d} {lv['direction']} frontier {lv['frontier']:>10,} "
              f"time {lv['time'] * 1e6:7.0f} us" + (f"  kernel {lv['kernel'] * 1e6:6.0f} us" if lv.get("kernel")
                                                   is not None else "")
              + (f"  worker kernel/exchange[/issue] us {ws}" if ws else ""), flush=True)
    for d, m in row["per_worker_level_median"].items():
        print(f"    {d} levels, medians a worker: level {m['level'] * 1e6:.0f} us, kernel {m['kernel'] * 1e6:.0f}, "
              f"exchange {m['exchange'] * 1e6:.0f}" + (f", issue {m['issue'] * 1e6:.0f}" if m["issue"] is not None
                                                       else "") + f" (n {m['n']})", flush=True)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=int, default=26)
    ap.add_argument("--roots", type=int, default=16)
    ap.add_argument("--partitions", type=int, nargs="+", default=[2], help="P of each dask run")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--flags", default="", help="more dbfs run flags for both runs")
    ap.add_argument("--tag", default="")
    ap.add_argument("--ipc-too", action="store_true",
                    help="also run each P > 1 with DBFS_NCCL=off (the TCP mesh and CUDA IPC instead of NCCL)")
    ap.add_argument("--stored-p1", action="store_true",
                    help="also run --backend gpu with --relabel none (its Kernel 1 stores the plain CSR) and P = 1 "
                         "with --relabel none (the GPU worker reads that stored CSR)")
    ap.add_argument("--relabel-too", action="store_true", help="also run each P > 1 with --relabel degree")
    ap.add_argument("--virtual", action="store_true",
                    help="generate the dataset first with --edges virtual (regenerated on demand, nothing stored: "
                         "what a SCALE 28 run needs on an 80 GB device)")
    args = ap.parse_args(argv)
    configs = {"gpu": (f"--backend gpu {args.flags}", None)}
    if args.stored_p1:      # one GPU on the plain CSR, which its Kernel 1 stores for the P = 1 read below
        configs["gpu-plain"] = (f"--backend gpu --relabel none {args.flags}", None)
    for P in args.partitions:
        flags = f"--cluster local-gpu --backend dask --partitions {P} {args.flags}"
        configs[f"p{P}"] = (flags + " --relabel none", None)       # the plain partitions (auto: degree)
        if args.stored_p1 and P == 1:       # the plain CSR stored by Kernel 1, then read onto the GPU worker
            configs["p1-stored"] = (flags + " --relabel none", None)
        if args.ipc_too and P > 1:
            configs[f"p{P}-ipc"] = (flags + " --relabel none", {"DBFS_NCCL": "off"})
        if args.relabel_too and P > 1:
            configs[f"p{P}-deg"] = (flags + " --relabel degree", None)
    kind = f"multi_gpu{('-' + args.tag) if args.tag else ''}"
    head = {"scale": args.scale, "roots": args.roots, "partitions": args.partitions}
    rows, path = [], None
    with tempfile.TemporaryDirectory(prefix="dbfs-mgpu-") as tmp:
        if args.virtual:
            generate_virtual(args.scale, Path(tmp) / "datasets")
        for _ in range(args.rounds):
            for k in configs:
                rows.append(_run(args, configs[k][0], Path(tmp) / "datasets", tmp, k, configs[k][1]))
                path = write_record(kind, {**head, "runs": rows}, path=path)   # a run cut at its limit keeps these
    med = {k: {m: statistics.median(r[m] for r in rows if r["label"] == k)
               for m in ("construction_time", "harmonic_mean_TEPS", "validate_per_search", "wall_s")
               if all(r[m] is not None for r in rows if r["label"] == k)} for k in configs}
    ratio = {k: {m: med[k][m] / med["gpu"][m] for m in med["gpu"] if m in med[k] and med["gpu"][m]}
             for k in configs if k != "gpu"}
    for k, r in ratio.items():
        print(f"dask {k} / gpu (one GPU): " + "  ".join(f"{m} {v:.3f}x" for m, v in r.items()))
    write_record(kind, {**head, "runs": rows, "median": med, "dask_over_gpu": ratio}, path=path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

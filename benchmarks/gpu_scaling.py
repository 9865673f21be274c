"""Strong scaling on one GPU box: the same graph and roots on 1, 2, ... G GPU workers, each stage's time.

    python3 benchmarks/gpu_scaling.py --scale 30 --roots 16 --gpus 1 2 4 --datasets /tmp/ds30

For each G of ``--gpus`` runs ``dbfs run --scale S --roots R --cluster local-gpu --backend dask
--partitions G --relabel degree`` with ``CUDA_VISIBLE_DEVICES`` set to the first G GPUs (one worker and one
partition a GPU; at G = 1 the CSR is built in the worker's memory and split between device and host memory
when it does not fit), all on one datasets folder (the first run generates the graph, the others reuse it;
the roots are the Graph500 keys of that graph, the same in every run). Prints per run the stages (generation,
Kernel 1, validation, searches), the harmonic mean and the per-level medians a worker (kernel, exchange,
host issuing), then each run against G = 1: searches (harmonic mean over the roots every run searched),
Kernel 1, validation per search and the stages' sum. ``--virtual`` generates the graph first with a virtual
list (nothing stored; else the first run stores it where the disk has room, and each record's
``config.edges`` says which). Writes ``benchmarks/results/gpu_scaling-<stamp>.json``
(kept up to date after every run, so a call cut at its limit keeps what finished), and each run's whole
record beside it (``...-g<G>.json``: every search's levels and validation time).

``--from-records G=FILE ...`` prints the same table from ``dbfs run --json`` records instead (runs cut
before the end included: their validated searches count), e.g. the committed SCALE 30 pair:

    python benchmarks/gpu_scaling.py --from-records \
        1=benchmarks/results/run-dask-s30-p1-deg-degreelow-cut230s-h200x4-ed5c7c0-20261127.json \
        4=benchmarks/results/run-dask-s30-p4-deg-h200x4-ed5c7c0-20261127.json
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.common import dbfs_run, generate_virtual, level_medians, write_record  # noqa: E402


def summary(rec: dict) -> dict:
    """One run's numbers from its ``dbfs run --json`` record (complete or not)."""
    searches = rec.get("searches") or []
    vt = [s["validate_time"] for s in searches if s.get("validate_time") is not None]
    return {"complete": bool(rec.get("complete", True)), "stages": rec.get("stages") or {},
            "edges": (rec.get("config") or {}).get("edges"),
            "construction_time": rec.get("construction_time"),
            "times": {int(s["root"]): float(s["time"]) for s in searches},
            "nedge": {int(s["root"]): int(s["nedge"]) for s in searches},
            "valid": sum(bool(s.get("valid")) for s in searches), "searches": len(searches),
            "validate_per_search": float(np.mean(vt)) if vt else None, "levels": level_medians(searches),
            "workers": [{k: w.get(k) for k in ("worker", "partitions", "device_bytes", "host_bytes",
                                                "peak_device_bytes", "peak_host_rss_bytes")}
                        for w in (rec.get("config") or {}).get("workers") or []]}


def keep_run(src: Path, record: Path, g: int) -> Path:
    """The G-GPU run's whole ``dbfs run --json`` record (every search's levels and validation time) beside the
    summary ``record``, as ``<record stem>-g<G>.json``."""
    dst = record.with_name(f"{record.stem}-g{g}.json")
    shutil.copyfile(src, dst)
    return dst


def hmean_teps(run: dict, roots) -> float:
    """Harmonic-mean TEPS of ``run`` over ``roots``: their edges over their total time."""
    return sum(run["nedge"][r] for r in roots) / sum(run["times"][r] for r in roots)


def table(runs: dict) -> dict:
    """Each G's numbers against the smallest G's, the searches over the roots every run searched."""
    common = sorted(set.intersection(*(set(r["times"]) for r in runs.values()))) if runs else []
    base = runs[min(runs)]
    out = {"roots": len(common), "runs": {}}
    for g, r in sorted(runs.items()):
        row = {"hmean_teps": hmean_teps(r, common) if common else None,
               "kernel1_s": r["construction_time"], "validate_per_search_s": r["validate_per_search"],
               "stages_s": sum(r["stages"].values()), "valid": f"{r['valid']}/{r['searches']}"}
        if g != min(runs):
            row["over_base"] = {"searches": row["hmean_teps"] / out["runs"][min(runs)]["hmean_teps"] if common
                                else None,
                                "kernel1": r["construction_time"] / base["construction_time"],
                                "validate_per_search": (r["validate_per_search"] / base["validate_per_search"]
                                                        if r["validate_per_search"] and base["validate_per_search"]
                                                        else None)}
        out["runs"][g] = row
    return out


def show(runs: dict, t: dict) -> None:
    print(f"searches compared over the {t['roots']} roots every run searched")
    for g, row in t["runs"].items():
        r = runs[g]
        st = ", ".join(f"{k} {v:.1f} s" for k, v in r["stages"].items())
        hm = f"{row['hmean_teps'] / 1e9:9.1f} GTEPS" if row["hmean_teps"] else "    -"
        print(f"G = {g}: {hm}  Kernel 1 {row['kernel1_s']:.1f} s  validation "
              f"{(row['validate_per_search_s'] or 0):.2f} s a search  valid {row['valid']}"
              f"{'' if r['complete'] else ' (run cut before its end)'}"
              f"{'' if r.get('edges') is None else ', list ' + r['edges']}\n    stages: {st}")
        for d, m in r["levels"].items():
            print(f"    {d} levels, medians a worker: " + ", ".join(f"{k} {m[k] * 1e6:.0f} us" for k in
                                                                    ("kernel", "exchange", "issue", "level")
                                                                    if m[k] is not None))
        for w in r["workers"]:
            if w.get("peak_device_bytes") or w.get("peak_host_rss_bytes"):
                print(f"    worker {w['worker']}: peak device {(w.get('peak_device_bytes') or 0) / 2**30:.1f} GiB, "
                      f"peak host RSS {(w.get('peak_host_rss_bytes') or 0) / 2**30:.1f} GiB")
        if "over_base" in row:
            ob = row["over_base"]
            print(f"    against G = {min(t['runs'])}: " + "  ".join(f"{k} {v:.2f}x" for k, v in ob.items()
                                                              if v is not None))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=int, default=26)
    ap.add_argument("--roots", type=int, default=16)
    ap.add_argument("--gpus", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--datasets", default=None, help="the datasets folder every run shares (default: a temporary one)")
    ap.add_argument("--flags", default="", help="more dbfs run flags for every run")
    ap.add_argument("--tag", default="")
    ap.add_argument("--virtual", action="store_true",
                    help="generate the graph first with --edges virtual (nothing stored; without it the first run "
                         "stores the list where the disk has room)")
    ap.add_argument("--from-records", nargs="+", metavar="G=FILE", default=None,
                    help="print the table from dbfs run --json records (G the GPUs of each) and run nothing")
    a = ap.parse_args(argv)
    if a.from_records:
        runs = {}
        for item in a.from_records:
            g, _, f = item.partition("=")
            if not f or not g.isdigit():
                ap.error(f"--from-records takes G=FILE, not {item!r}")
            runs[int(g)] = summary(json.loads(Path(f).read_text()))
        show(runs, table(runs))
        return 0
    kind = f"gpu_scaling{('-' + a.tag) if a.tag else ''}"
    runs, path = {}, None
    with tempfile.TemporaryDirectory(prefix="dbfs-scaling-") as tmp:
        ds = Path(a.datasets) if a.datasets else Path(tmp) / "datasets"
        if a.virtual:
            generate_virtual(a.scale, ds)
        for g in a.gpus:
            flags = f"--cluster local-gpu --backend dask --partitions {g} --relabel degree {a.flags}"
            rec, wall = dbfs_run(a.scale, a.roots, ds, Path(tmp) / f"g{g}.json", flags,
                                 {"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(g))})
            runs[g] = {**summary(rec), "wall_s": wall}
            t = table(runs)
            path = write_record(kind, {"scale": a.scale, "roots": a.roots, "gpus": a.gpus, "flags": a.flags,
                                       "runs": {str(k): v for k, v in runs.items()},
                                       "table": {**t, "runs": {str(k): v for k, v in t["runs"].items()}}},
                                path=path)
            keep_run(Path(tmp) / f"g{g}.json", path, g)
    show(runs, table(runs))
    print("record:", path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

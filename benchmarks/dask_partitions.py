"""Per-level kernel time of a CPU Dask worker against the number of partitions it holds.

    python benchmarks/dask_partitions.py --scale 18 --parts 1 2 16 64 --workers 1 --threads 2

Question: does a level's work over many partitions of one worker run as one
parallel pass, or does it grow with the partitions the worker holds? For
one Graph500 Kronecker graph (edgefactor 16) and each P of ``--parts``
(block partitioning, P partitions spread over ``--workers`` worker processes
of ``--threads`` threads), ``--reps`` rounds over ``--roots`` search keys
of the dask search; just before each P's cluster starts, the same rounds of
the single-process ``do`` (this process, all cores, ``stats=True``), so
drift on a shared machine hits both alike while a running cluster's
scheduler (a thread of this process) does not slow the single process.
Per root, level and P: the median over the rounds of the slowest worker's
kernel seconds (``level_stats[i]["kernel"]``) and of the single-process
level time.

Printed: per level (first root, then every root summed by direction), the
kernel ms of each P, its ratio to P = 1 and to the single process measured
next to it; and the level counts and frontier sizes, which must agree for
every P. The JSON record (``dask_partitions-<stamp>.json``) keeps every time.

Top-level imports stay light: Dask's worker processes re-import this script.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

_QUIET = 0.05           # pause before each timed search (the other side's threads stop spinning)


def _med(xs):
    return statistics.median(xs) if xs else float("nan")


def run(scale, parts, workers, threads, n_roots, reps, datasets):
    from dbfs import kernel1, store
    import dbfs.bfs.dask as D
    from dbfs.bfs import get_algorithm
    from dbfs.cluster import client_for
    from dbfs.roots import graph500_roots
    from dbfs.spec import GraphSpec

    spec = GraphSpec.make("kronecker", scale)
    ds, _ = store.generate(spec, root=datasets, client=None, quiet=True)
    edges = ds.edges()[:]
    roots = [int(r) for r in graph500_roots(edges, scale, 2, 3, n=n_roots, n_vertices=ds.n_vertices)]
    del edges
    kernel1.build_partitioned(ds.path, P=1, client=None, progress=False)
    g = kernel1.load_csr(ds.path, kernel1.variant_name(1))
    fn = get_algorithm("do", "cpu")
    fn(g, roots[0])                                                   # warm-up (JIT)
    rec = {"scale": scale, "roots": roots, "reps": reps, "workers": workers, "threads": threads, "configs": []}
    for P in parts:
        kernel1.build_partitioned(ds.path, P=P, client=None, progress=False)
        kern = {r: [] for r in roots}      # per root: per round, per level kernel s (slowest worker)
        cpu = {r: [] for r in roots}       # per root: per round, per level single-process s
        shape, cpu_shape = {}, {}
        secs = {r: [] for r in roots}
        cpu_secs = {r: [] for r in roots}
        for _ in range(reps):              # the single process, no cluster running
            for r in roots:
                time.sleep(_QUIET)
                t0 = time.perf_counter()
                _, lv = fn(g, r, stats=True)
                cpu_secs[r].append(time.perf_counter() - t0)
                cpu[r].append([x["time"] for x in lv])
                cpu_shape[r] = ([x["direction"] for x in lv], [x["frontier"] for x in lv])
        with client_for(n_workers=workers, threads_per_worker=threads, quiet=True) as client:
            dg = D.load_distributed(client, ds.path, kernel1.variant_name(P))
            D.search(dg, roots[0])[0].release()                       # warm-up
            for _ in range(reps):
                for r in roots:
                    time.sleep(_QUIET)
                    res, sec, lst = D.search(dg, r, stats=True)
                    res.release()
                    secs[r].append(sec)
                    kern[r].append([x["kernel"] for x in lst])
                    shape[r] = ([x["direction"] for x in lst], [x["frontier"] for x in lst]) + cpu_shape[r]
            dg.close()
        row = {"P": P, "roots": {}}
        for r in roots:
            nl = len(kern[r][0])
            row["roots"][str(r)] = {
                "directions": shape[r][0], "frontiers": shape[r][1],
                "cpu_directions": shape[r][2], "cpu_frontiers": shape[r][3],
                "kernel_s": [_med([k[i] for k in kern[r]]) for i in range(nl)],
                "cpu_level_s": [_med([c[i] for c in cpu[r] if i < len(c)]) for i in range(nl)],
                "search_s": _med(secs[r]), "cpu_search_s": _med(cpu_secs[r])}
        rec["configs"].append(row)
        print(f"P={P} done", file=sys.stderr)
    return rec


def report(rec):
    cfgs = rec["configs"]
    base = cfgs[0]
    print(f"SCALE {rec['scale']}: {rec['workers']} worker(s) x {rec['threads']} thread(s); kernel ms per level "
          f"(median of {rec['reps']} rounds, slowest worker); r1 = / P={base['P']}, rc = / single-process level "
          f"(timed just before that P's cluster)")
    for r in rec["roots"]:
        b = base["roots"][str(r)]
        same = all(c["roots"][str(r)]["directions"] == b["directions"] and
                   c["roots"][str(r)]["frontiers"] == b["frontiers"] and
                   c["roots"][str(r)]["cpu_frontiers"] == b["frontiers"] for c in cfgs)
        print(f"\nroot {r}: levels {len(b['directions'])}, directions/frontiers equal for every P and the single "
              f"process: {same}")
        head = f"{'lv':>3} {'dir':>3} {'frontier':>9} {'cpu ms':>8}"
        for c in cfgs:
            head += f" | P={c['P']:<3} ms {'r1':>6} {'rc':>6}"
        print(head)
        for i, (d, f) in enumerate(zip(b["directions"], b["frontiers"])):
            line = f"{i:>3} {d:>3} {f:>9} {1e3 * b['cpu_level_s'][i]:8.3f}"
            for c in cfgs:
                x = c["roots"][str(r)]
                k = x["kernel_s"][i]
                line += (f" | {1e3 * k:9.3f} {k / b['kernel_s'][i]:6.2f} {k / x['cpu_level_s'][i]:6.2f}")
            print(line)
    print("\nall roots, kernel ms summed by direction (ratio to P=1, ratio to the single process's levels); search ms")
    def total(c, key, d):
        return sum(x[key][i] for x in c["roots"].values() for i, dd in enumerate(x["directions"]) if dd == d)

    for c in cfgs:
        parts = []
        for d in ("td", "bu"):
            k, k1, cp = total(c, "kernel_s", d), total(base, "kernel_s", d), total(c, "cpu_level_s", d)
            r1 = k / k1 if k1 else float("nan")
            rc = k / cp if cp else float("nan")
            parts.append(f"{d} {1e3 * k:8.2f} ({r1:5.2f}, {rc:5.2f})")
        s = sum(x["search_s"] for x in c["roots"].values())
        cs = sum(x["cpu_search_s"] for x in c["roots"].values())
        print(f"P={c['P']:<3} " + "  ".join(parts) + f"  search {1e3 * s:8.2f} vs single {1e3 * cs:8.2f} "
              f"({s / cs:5.2f})")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--scale", type=int, default=18)
    ap.add_argument("--parts", type=int, nargs="+", default=[1, 2, 16, 64], help="P values (the first: the base)")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--threads", type=int, default=max(1, len(os.sched_getaffinity(0))))
    ap.add_argument("--roots", type=int, default=4)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--datasets", default=None, help="dataset root (default $DBFS_DATASETS or a temp dir)")
    ap.add_argument("--out", default=None, help="results directory (default benchmarks/results)")
    args = ap.parse_args(argv)
    from benchmarks.common import write_record

    datasets = args.datasets or os.environ.get("DBFS_DATASETS")
    tmp = None
    if not datasets:
        tmp = tempfile.TemporaryDirectory(prefix="dbfs-bench-")
        datasets = tmp.name
    rec = {"params": vars(args), "loadavg_start": os.getloadavg()}
    rec.update(run(args.scale, args.parts, args.workers, args.threads, args.roots, args.reps, datasets))
    rec["loadavg_end"] = os.getloadavg()
    write_record("dask_partitions", rec, args.out)
    report(rec)
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()

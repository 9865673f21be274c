"""Per-level profile of the CPU ``do`` search with cold caches, as Graph500 runs it.

    python -m benchmarks.cpu_levels [--scale 20] [--roots 8] [--reps 5] [--evict-mb 640]

Builds the Graph500 graph in memory (dbfs generator and Kernel 1), takes its
first ``--roots`` search keys, then ``--reps`` rounds over them: before each
search a pass over an ``--evict-mb`` buffer pushes the graph out of the
caches, as the validation between two searches of ``dbfs run`` does (without
it a repeated search finds its graph in the shared L3 and runs faster than
in a real run). Each search is ``dbfs.bfs.bfs(graph, root,
stats=True)``; the table gives, per root, the median total time and the
median time of each level (``td``/``bu`` and its time in ms), so a change
to a step shows where it lands. The JSON record keeps every time.

This is the tool for tuning the CPU steps on the 2-core machine: compare two
versions by running it on each (the machine is shared: trust differences
that repeat across runs, not a single run's).
"""
from __future__ import annotations

import argparse
import time

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=int, default=20)
    ap.add_argument("--roots", type=int, default=8)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--evict-mb", type=int, default=640, help="buffer swept before each search (MiB)")
    ap.add_argument("--algorithm", default="do")
    args = ap.parse_args()

    from benchmarks.common import write_record
    from dbfs.bfs import bfs, prepare
    from dbfs.generate.graph500 import kronecker_edges
    from dbfs.kernel1 import build_csr
    from dbfs.roots import graph500_roots

    edges = kronecker_edges(args.scale)
    roots = graph500_roots(edges, args.scale, n=args.roots).tolist()
    graph = prepare(build_csr(edges, n_vertices=1 << args.scale))
    del edges
    evict = np.ones(args.evict_mb << 17, np.int64)
    bfs(graph, roots[0], algorithm=args.algorithm)  # warm-up (JIT, helper structures)
    runs = {r: [] for r in roots}
    for _ in range(args.reps):
        for r in roots:
            evict += 1
            t0 = time.perf_counter()
            res = bfs(graph, r, algorithm=args.algorithm, stats=True)
            total = time.perf_counter() - t0
            runs[r].append({"total": total, "levels": [(s["direction"], s["time"]) for s in res.level_stats]})
            res = None
    rows = []
    print(f"SCALE {args.scale}, {args.algorithm}, {args.reps} cold searches per root; ms")
    for r in roots:
        tot = float(np.median([x["total"] for x in runs[r]]))
        nlev = min(len(x["levels"]) for x in runs[r])
        lev = [(runs[r][0]["levels"][i][0], float(np.median([x["levels"][i][1] for x in runs[r]])))
               for i in range(nlev)]
        rows.append({"root": r, "median_total": tot, "median_levels": lev})
        outside = tot - sum(t for _, t in lev)
        print(f"root {r:>9} {1e3 * tot:7.2f}  outside levels {1e3 * outside:5.2f} | "
              + " ".join(f"{d}{1e3 * t:.2f}" for d, t in lev))
    mean = float(np.mean([x["median_total"] for x in rows]))
    print(f"mean of the per-root medians: {1e3 * mean:.3f} ms")
    write_record("cpu_levels", {"params": vars(args), "rows": rows,
                                "runs": {str(r): v for r, v in runs.items()}})


if __name__ == "__main__":
    main()

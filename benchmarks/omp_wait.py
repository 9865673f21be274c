"""What OpenMP's wait policy costs the single-process CPU search: ``OMP_WAIT_POLICY=PASSIVE`` against the default.

    python benchmarks/omp_wait.py [--scale 20] [--roots 16] [--reps 5] [--rounds 3]

Each round runs the same search loop (``dbfs.bfs`` ``do`` over the Graph500 roots of a Kronecker graph,
``--reps`` times each, after two untimed searches) in two fresh processes, one with the variable unset
(libgomp's default: idle threads spin a little, then sleep) and one with ``PASSIVE`` (they sleep at once,
and every parallel loop wakes them), alternating which goes first. Dask workers whose threads may exceed
the cores run with ``PASSIVE`` (:func:`dbfs.cluster.worker_env`); this measures what that costs a
search where they do not. Prints the median per round and the ratio; writes
``benchmarks/results/omp_wait-<stamp>.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import write_record  # noqa: E402

_CHILD = r"""
import json, sys, time
from dbfs.bfs import bfs, prepare
from dbfs.generate.graph500 import kronecker_edges
from dbfs.kernel1 import build_csr
from dbfs.roots import graph500_roots
S, n, reps = (int(x) for x in sys.argv[1:4])
e = kronecker_edges(S)
g = prepare(build_csr(e, n_vertices=1 << S))
roots = [int(r) for r in graph500_roots(e, S, n=n, n_vertices=1 << S)]
for r in roots[:2]:
    bfs(g, r)
ts = []
for _ in range(reps):
    for r in roots:
        t = time.perf_counter()
        bfs(g, r)
        ts.append(time.perf_counter() - t)
print(json.dumps(ts))
"""


def _run(policy: str | None, scale: int, roots: int, reps: int) -> list:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if policy is not None:
        env["OMP_WAIT_POLICY"] = policy
    out = subprocess.run([sys.executable, "-c", _CHILD, str(scale), str(roots), str(reps)], env=env,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=int, default=20)
    ap.add_argument("--roots", type=int, default=16)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args(argv)
    rounds = []
    for i in range(a.rounds):
        order = (None, "PASSIVE") if i % 2 == 0 else ("PASSIVE", None)
        got = {p: _run(p, a.scale, a.roots, a.reps) for p in order}
        med = {("default" if p is None else p): statistics.median(t) for p, t in got.items()}
        rounds.append({"order": [("default" if p is None else p) for p in order], "median_s": med,
                       "times_s": {("default" if p is None else p): t for p, t in got.items()}})
        print(f"round {i + 1}: default {1e3 * med['default']:.3f} ms, PASSIVE {1e3 * med['PASSIVE']:.3f} ms "
              f"({med['PASSIVE'] / med['default']:.2f}x)")
    rec = {"scale": a.scale, "roots": a.roots, "reps": a.reps, "threads": os.environ.get("NUMBA_NUM_THREADS"),
           "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
           "rounds": rounds}
    print("record:", write_record("omp_wait", rec))


if __name__ == "__main__":
    main()

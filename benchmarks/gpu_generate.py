"""GPU Kronecker generator throughput (what a virtual SCALE 30 edge list costs every time it is read).

Times ``kronecker_edges_gpu`` on one range of a SCALE graph (device synchronised around each call, median of
``--reps``) for each ``edges_per_thread`` given, with the shipped kernel and, with ``--base DIR``, the
kernel of another tree (``DIR/dbfs/generate/kronecker.cu``, e.g. the commit before a change), alternating,
in one process; checks every variant's bytes against the first (and a slice against the CPU generator).
Prints G edges/s and ratios against the first variant at the first ``--ept``; writes a ``gpu_generate``
record (benchmarks/results or $DBFS_RESULTS).

    python benchmarks/gpu_generate.py --scale 31 --edges 2147483648 --ept 64 --base ../base-tree
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import cupy as cp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import dbfs.generate.gpu as G  # noqa: E402
from benchmarks.common import dbfs_commit, write_record  # noqa: E402
from dbfs.generate.graph500 import kronecker_edges  # noqa: E402


def _variant(src: str):
    mod = cp.RawModule(code=src)
    return mod.get_function("kron_edges")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", type=int, default=30)
    ap.add_argument("--edges", type=int, default=1 << 30)
    ap.add_argument("--ept", type=int, nargs="+", default=[16, 32, 64, 128])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--base", type=Path, help="a tree whose dbfs/generate/kronecker.cu is timed beside the shipped")
    a = ap.parse_args(argv)
    kernels = {}
    if a.base is not None:
        kernels["base"] = _variant((a.base / "dbfs" / "generate" / "kronecker.cu").read_text())
    kernels["shipped"] = _variant(G._KERNEL.read_text())
    start = (16 << a.scale) // 3
    stop = start + a.edges
    ref = None
    times = {}
    for rep in range(a.reps + 1):
        for name, fn in kernels.items():
            for ept in a.ept:
                G._kernel = lambda fn=fn: fn
                cp.cuda.Device().synchronize()
                t0 = time.perf_counter()
                out = G.kronecker_edges_gpu(a.scale, 16, 2, 3, start, stop, edges_per_thread=ept)
                cp.cuda.Device().synchronize()
                t = time.perf_counter() - t0
                if ref is None:
                    ref = out
                    cpu = kronecker_edges(a.scale, 16, 2, 3, start, start + 4096)
                    assert np.array_equal(cp.asnumpy(out[:4096]), cpu), "GPU rows differ from the CPU generator"
                elif rep == 0:
                    assert bool((out == ref).all()), f"{name} ept={ept}: bytes differ"
                if rep:                       # the first round compiles and checks
                    times.setdefault((name, ept), []).append(t)
                del out
    first = next(iter(kernels))
    base = statistics.median(times[(first, a.ept[0])])
    rows = []
    for (name, ept), ts in sorted(times.items()):
        med = statistics.median(ts)
        rows.append({"kernel": name, "ept": ept, "seconds": med, "gedges_per_s": a.edges / med / 1e9,
                     f"vs_{first}_ept{a.ept[0]}": base / med})
        print(f"{name:>8} ept {ept:>4}: {a.edges / med / 1e9:6.2f} G edges/s  "
              f"{base / med:5.2f}x {first}/ept{a.ept[0]}", flush=True)
    rec = {"base": str(a.base) if a.base else None, "scale": a.scale, "edges": a.edges, "start": start,
           "reps": a.reps, "commit": dbfs_commit(),
           "device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "rows": rows}
    print("record:", write_record("gpu_generate", rec))


if __name__ == "__main__":
    main()

"""Kernel 1 in passes (dbfs.kernel1.passes) against the one-pass build, in the same run.

What it measures, per SCALE and edge storage (stored zarr chunks, or virtual:
regenerated on every read), each through the dataset's one read interface
(``Dataset.edges()``):

- one pass: ``build_csr(ds.edges()[:], N)`` (the whole list read, then built);
- passes: ``build_csr_passes(ds.edges(), N, memory_budget=B)`` with ``B`` the
  smallest budget whose plan has at most ``k`` passes, for each ``k`` in
  ``--passes``;

median wall seconds of ``--repeat`` runs after a JIT warm-up, the ratio
passes / one pass, and, in one further run under tracemalloc, the peak bytes
each build allocated (the one-pass build: list + its working arrays; the
passes: the largest pass, resident degree prefix included) against the
plan's bound. Every build's bytes are compared to the one-pass build's.

    python benchmarks/kernel1_passes.py --scales 16 18 --passes 1 2 4 8

Writes ``benchmarks/results/kernel1_passes-<UTC stamp>.json``.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import median_time, write_record  # noqa: E402
from dbfs import kernel1, store  # noqa: E402
from dbfs.kernel1.passes import build_csr_passes, min_budget  # noqa: E402
from dbfs.spec import GraphSpec  # noqa: E402


def peak_of(fn):
    """(result, peak bytes traced while fn ran, largest per-pass peak reported by its hook)."""
    passes = []
    cur = {}

    def hook(ev, k, info):
        if ev == "start":
            tracemalloc.reset_peak()
            cur[k] = tracemalloc.get_traced_memory()[0]
        else:
            passes.append(tracemalloc.get_traced_memory()[1] - cur[k] + (8 * (n_hook[0] + 1) if k >= 0 else 0))

    n_hook = [0]
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    try:
        out = fn(hook, n_hook)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return out, peak, max(passes, default=0)


def one_scale(scale, storage, passes_list, repeat, root):
    ds, _ = store.generate(GraphSpec.make(scale=scale), root / f"s{scale}-{storage}", chunk_edges=1 << 18,
                           quiet=True, edges=storage)
    n, arr = ds.n_vertices, ds.edges()
    ref = kernel1.build_csr(arr[:], n)                                  # warm-up and reference
    e = arr[:].astype(np.int64)
    e = e[e[:, 0] != e[:, 1]]
    raw_ptr = np.concatenate([[0], np.cumsum(np.bincount(e.ravel(), minlength=n))]).astype(np.int64)
    del e
    t_one, all_one = median_time(lambda: kernel1.build_csr(ds.edges()[:], n), repeat)
    _, peak_one, _ = peak_of(lambda hook, nh: kernel1.build_csr(ds.edges()[:], n))
    rows = []
    for k in passes_list:
        budget = min_budget(raw_ptr, arr.chunks[0], arr.dtype.itemsize, k)
        g = build_csr_passes(ds.edges(), n, memory_budget=budget)
        same = g.indptr.tobytes() == ref.indptr.tobytes() and g.indices.tobytes() == ref.indices.tobytes()
        t, all_t = median_time(lambda: build_csr_passes(ds.edges(), n, memory_budget=budget), repeat)

        def measured(hook, nh):
            nh[0] = n
            return build_csr_passes(ds.edges(), n, memory_budget=budget, on_pass=hook)

        _, peak, pass_peak = peak_of(measured)
        info = g.meta["passes"]
        rows.append({"target_passes": k, "passes": info["count"], "budget": budget,
                     "peak_planned": info["peak_planned"], "measured_pass_peak": pass_peak,
                     "measured_build_peak_with_output": peak, "seconds": t, "all_seconds": all_t,
                     "ratio_to_one_pass": t / t_one, "same_bytes": same})
        print(f"SCALE {scale} {storage:7s} passes {info['count']:3d}  budget {budget / 2**20:8.2f} MiB  "
              f"pass peak {pass_peak / 2**20:8.2f} MiB (plan {info['peak_planned'] / 2**20:8.2f})  "
              f"{t:7.3f} s  x{t / t_one:6.2f} one pass  same bytes {same}", flush=True)
    print(f"SCALE {scale} {storage:7s} one pass {t_one:.3f} s, peak {peak_one / 2**20:.2f} MiB", flush=True)
    return {"scale": scale, "storage": storage, "n_edges": ds.n_edges, "nnz": int(ref.indices.size),
            "one_pass_seconds": t_one, "one_pass_all_seconds": all_one, "one_pass_peak": peak_one, "passes": rows}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scales", type=int, nargs="+", default=[16, 18])
    ap.add_argument("--storage", nargs="+", default=["stored", "virtual"], choices=["stored", "virtual"])
    ap.add_argument("--passes", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        runs = [one_scale(s, st, args.passes, args.repeat, Path(tmp)) for s in args.scales for st in args.storage]
    write_record("kernel1_passes", {"args": vars(args), "runs": runs})


if __name__ == "__main__":
    main()

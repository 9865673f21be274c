"""GPU benchmark: Graph500 TEPS of every GPU BFS algorithm, GPU generation and GPU Kernel 1.

Per SCALE (default 22 24 26; edgefactor 16, seeds 2 and 3), all on one GPU:

- generation: ``kronecker_edges_gpu`` (device synchronised before and after
  the clock; kernels compiled by a SCALE 10 warm-up first), ``--reps`` times;
- Kernel 1: ``build_csr_gpu`` from the device edge list, CSR left on the
  device (``to_host=False``), ``--reps`` times (every time is recorded, the
  table shows the minimum: the first run at SCALE 26 also pays CuPy's
  one-time compilation of its kernels for arrays of 2**31 elements, seen as
  9.3 s against 0.58 s on an H100);
- search keys: the Graph500 3.0.1 rule (``dbfs.roots``' candidate stream;
  a candidate is eligible when it has a non-self-loop edge, i.e. CSR degree
  > 0, which is what ``dbfs.roots.graph500_roots`` checks on the edge list;
  both are compared at SCALE <= ``--check-roots-max``);
- per algorithm: one untimed warm-up search, then one timed search per key
  (``dbfs.bfs.gpu.search_device``: the clock stops when the parent array is
  written on the device), nedge per key by the 3.0.1 rule counted on the
  device (``count_nedge``), Graph500 TEPS statistics (``dbfs.report.stats``); the
  first key of each algorithm is validated on the CPU (``dbfs.validate``)
  up to ``--validate-max-scale``; one more untimed search records the
  per-level statistics of the first key;
- ``--host-scales``: the same searches with the CSR in mapped pinned host
  memory (``device_memory_limit=0``), for graphs larger than the GPU.

New scales are not started once ``--time-budget`` seconds have passed.
Published anchors (docs/PERFORMANCE.md): Titan X 132 GTEPS at SCALE 26,
P100 200-330 GTEPS at SCALE 25-27, cuGraph about 31 GTEPS at SCALE 26.

Writes ``gpu-<stamp>.json`` under ``$DBFS_RESULTS`` or benchmarks/results
(``benchmarks.common.write_record``) and prints a short table last.

    python benchmarks/gpu.py --scales 22 24 26
"""
from __future__ import annotations

import argparse
import gc
import sys
import time
import traceback
from functools import partial

import numpy as np

ANCHORS_GTEPS = {"titan_x_s26": 132, "p100_s25_27": [200, 330], "cugraph_s26": 31}


def _sync():
    import cupy as cp

    cp.cuda.Device().synchronize()


def _free():
    import cupy as cp

    gc.collect()
    cp.get_default_memory_pool().free_all_blocks()
    cp.get_default_pinned_memory_pool().free_all_blocks()


def _timed(fn):
    _sync()
    t0 = time.perf_counter()
    out = fn()
    _sync()
    return out, time.perf_counter() - t0


def roots_by_degree(indptr, scale, n=64, seed1=2, seed2=3):
    """Graph500 search keys (dbfs.roots.select_roots, the reference's rule)
    with eligibility read from the CSR degrees on the device."""
    import cupy as cp

    from dbfs.roots import select_roots

    def has_neighbour(cands):
        c = cp.asarray(cands)
        return cp.asnumpy((indptr[c + 1] - indptr[c]) > 0)

    return select_roots(1 << scale, seed1, seed2, n, has_neighbour)


def parse_variant(text: str) -> dict:
    """'alpha=5,beta=18' or 'policy=change_state' -> options of the do algorithm."""
    out = {}
    for item in filter(None, text.split(",")):
        key, _, val = item.partition("=")
        try:
            out[key.strip()] = float(val)
        except ValueError:
            out[key.strip()] = val.strip()
    return out


def labels(args):
    """(label, algorithm, options) of every measured configuration."""
    return [(a, a, {}) for a in args.algorithms] + [(f"do[{v}]", "do", parse_variant(v)) for v in args.do_variants]


def bench_algorithms(graph, edges_d, roots, scale, configs, args, opts=None, edges_host=None):
    """Timed searches of every (label, algorithm, options) over ``roots``; returns {label: record}."""
    import cupy as cp

    from dbfs.bfs import gpu
    from dbfs.report import teps_stats

    out = {}
    for label, algo, extra in configs:
        run_opts = {**(opts or {}), **extra}
        rec = {"algorithm": algo, "opts": dict(run_opts)}
        try:
            gpu.search_device(graph, int(roots[0]), algo, **run_opts)            # warm-up
            times, nedges = [], []
            keys = roots[:args.harish_roots] if algo == "harish" and scale >= 24 else roots
            rec["n_roots"] = int(len(keys))
            for r in keys:
                parent, secs, _ = gpu.search_device(graph, int(r), algo, **run_opts)
                times.append(secs)
                nedges.append(gpu.count_nedge(edges_d, parent))
                del parent
            st = teps_stats(times, nedges)
            rec.update({"times_s": times, "nedges": nedges, "teps": st,
                        "harmonic_mean_gteps": st["harmonic_mean"] / 1e9,
                        "median_time_ms": float(np.median(times)) * 1e3})
            parent, _, levels = gpu.search_device(graph, int(roots[0]), algo, stats=True, **run_opts)
            rec["levels_first_root"] = levels
            if edges_host is not None and scale <= args.validate_max_scale and not extra:
                from dbfs.validate import validate

                t0 = time.perf_counter()
                v = validate(edges_host, int(roots[0]), cp.asnumpy(parent), graph.n_vertices)
                rec["validated_first_root"] = {"ok": bool(v.ok), "nedge": int(v.nedge),
                                               "summary": v.summary(), "seconds": time.perf_counter() - t0,
                                               "nedge_matches_device": int(v.nedge) == int(nedges[0])}
            del parent
        except Exception as exc:   # record and go on with the next algorithm
            rec["error"] = f"{type(exc).__name__}: {exc}"
            rec["traceback"] = traceback.format_exc()
        out[label] = rec
        line = f"  SCALE {scale} {label:22s}"
        if "error" in rec:
            line += f" ERROR {rec['error']}"
        else:
            line += (f" hmean {rec['harmonic_mean_gteps']:8.2f} GTEPS  median {rec['median_time_ms']:8.3f} ms")
            if "validated_first_root" in rec:
                line += f"  valid={rec['validated_first_root']['ok']}"
        print(line, flush=True)
    return out


def bench_scale(scale, args, host_mode=False):
    import cupy as cp

    from dbfs.generate.gpu import kronecker_edges_gpu
    from dbfs.kernel1.gpu import build_csr_gpu

    rec = {"scale": scale, "edgefactor": 16, "n_vertices": 1 << scale, "n_edges": 16 << scale,
           "host_memory_mode": host_mode}
    gen_times, k1_times = [], []
    edges = graph = None
    for _ in range(args.reps):
        edges = graph = None
        _free()
        edges, t = _timed(partial(kronecker_edges_gpu, scale))
        gen_times.append(t)
    rec["generation_s"] = gen_times
    for _ in range(args.reps):
        graph = None
        _free()
        graph, t = _timed(partial(build_csr_gpu, edges, n_vertices=1 << scale, to_host=host_mode))
        k1_times.append(t)
    rec["kernel1_s"] = k1_times
    rec["nnz"] = int(graph.nnz)
    print(f"SCALE {scale}: generation {min(gen_times):.3f} s, Kernel 1 {min(k1_times):.3f} s, nnz {rec['nnz']}",
          flush=True)
    indptr_d = graph.meta["gpu_csr"][0]
    roots = roots_by_degree(indptr_d, scale, args.roots)
    rec["roots"] = roots.tolist()
    edges_host = None
    if scale <= args.validate_max_scale or scale <= args.check_roots_max:
        edges_host = cp.asnumpy(edges)
    if edges_host is not None and scale <= args.check_roots_max:
        from dbfs.roots import graph500_roots

        rec["roots_match_dbfs_roots"] = bool(np.array_equal(graph500_roots(edges_host, scale, n=args.roots), roots))
    opts = {}
    configs = labels(args)
    if host_mode:
        graph.meta.pop("gpu_csr", None)
        _free()
        opts["device_memory_limit"] = 0
        configs = [c for c in configs if c[0] in args.host_algorithms]
        roots = roots[:args.host_roots]
    rec["algorithms"] = bench_algorithms(graph, edges, roots, scale, configs, args, opts, edges_host)
    del edges, graph, edges_host
    _free()
    return rec


def _write_partial(record, out_dir):
    import json
    import os
    from pathlib import Path

    from benchmarks.common import RESULTS

    out = Path(out_dir or os.environ.get("DBFS_RESULTS") or RESULTS)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu-partial.json").write_text(json.dumps(record, indent=1, default=float))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--scales", type=int, nargs="*", default=[22, 24, 26], help="SCALEs with the CSR on the GPU")
    ap.add_argument("--host-scales", type=int, nargs="*", default=[],
                    help="SCALEs with the CSR in mapped pinned host memory")
    ap.add_argument("--host-algorithms", nargs="+", default=["do", "td"],
                    help="configurations measured in host-memory mode")
    ap.add_argument("--host-roots", type=int, default=16, help="search keys in host-memory mode")
    ap.add_argument("--algorithms", nargs="+", default=["do", "td", "bu", "harish"], help="GPU algorithms")
    ap.add_argument("--do-variants", nargs="*", default=["alpha=5,beta=18", "alpha=50,beta=18", "alpha=15,beta=60",
                                                         "policy=change_state"],
                    help="extra do configurations (policy options), measured like the algorithms")
    ap.add_argument("--roots", type=int, default=64, help="search keys per SCALE")
    ap.add_argument("--harish-roots", type=int, default=8,
                    help="keys for the quadratic harish baseline at SCALE >= 24 (a hub level takes ~0.5 s)")
    ap.add_argument("--reps", type=int, default=2, help="repetitions of generation and Kernel 1 (all recorded)")
    ap.add_argument("--validate-max-scale", type=int, default=26, help="validate the first key up to this SCALE")
    ap.add_argument("--check-roots-max", type=int, default=22,
                    help="compare the keys with dbfs.roots.graph500_roots up to this SCALE")
    ap.add_argument("--time-budget", type=float, default=420.0, help="seconds after which no new SCALE starts")
    ap.add_argument("--out", default=None, help="directory for the JSON record (default $DBFS_RESULTS or results/)")
    args = ap.parse_args(argv)

    import cupy as cp

    from benchmarks.common import write_record
    from dbfs.generate.gpu import kronecker_edges_gpu
    from dbfs.kernel1.gpu import build_csr_gpu

    t_start = time.perf_counter()
    props = cp.cuda.runtime.getDeviceProperties(0)
    device = {"name": props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"]),
              "total_memory": int(props["totalGlobalMem"]), "sm_count": int(props["multiProcessorCount"]),
              "cupy": cp.__version__, "cuda_runtime": cp.cuda.runtime.runtimeGetVersion(),
              "driver": cp.cuda.runtime.driverGetVersion()}
    # warm-up: compile every kernel outside the timed regions
    from dbfs.bfs import gpu

    e = kronecker_edges_gpu(10)
    g = build_csr_gpu(e, n_vertices=1 << 10)
    for algo in args.algorithms:
        gpu.search_device(g, 0, algo)
    del e, g
    record = {"device": device, "args": vars(args), "anchors_gteps": ANCHORS_GTEPS, "runs": [], "skipped": []}
    plan = [(s, False) for s in args.scales] + [(s, True) for s in args.host_scales]
    for scale, host in plan:
        if time.perf_counter() - t_start > args.time_budget:
            record["skipped"].append({"scale": scale, "host_memory_mode": host, "why": "time budget"})
            print(f"SCALE {scale}{' (host memory)' if host else ''}: skipped (time budget)", flush=True)
            continue
        try:
            record["runs"].append(bench_scale(scale, args, host))
        except Exception as exc:
            record["runs"].append({"scale": scale, "host_memory_mode": host,
                                   "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()})
            print(f"SCALE {scale}: ERROR {type(exc).__name__}: {exc}", flush=True)
            _free()
        record["elapsed_s"] = time.perf_counter() - t_start
        _write_partial(record, args.out)      # survives a kill; the final record is written once below
    path = write_record("gpu", record, args.out)
    # short table last
    print(f"\n{device['name']}, {device['sm_count']} SMs; harmonic-mean GTEPS over {args.roots} keys")
    print(f"{'SCALE':>5} {'mode':>6} {'gen s':>7} {'K1 s':>7} " + " ".join(f"{a:>9}" for a in args.algorithms))
    extra = [lab for lab, _, _ in labels(args)[len(args.algorithms):]]
    for run in record["runs"]:
        if "error" in run:
            print(f"{run['scale']:>5} ERROR {run['error']}")
            continue
        cells = []
        for a in args.algorithms:
            r = run["algorithms"].get(a, {})
            cells.append(f"{r['harmonic_mean_gteps']:9.2f}" if "harmonic_mean_gteps" in r
                         else f"{'err' if r else '-':>9}")
        print(f"{run['scale']:>5} {'host' if run['host_memory_mode'] else 'device':>6} "
              f"{min(run['generation_s']):7.3f} {min(run['kernel1_s']):7.3f} " + " ".join(cells))
        for lab in extra:
            r = run["algorithms"].get(lab, {})
            if "harmonic_mean_gteps" in r:
                print(f"{'':>29}{lab}: {r['harmonic_mean_gteps']:.2f}")
    print(f"record: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""GPU BFS with the adjacency split between device and pinned host memory (issue #20 item 3).

One Graph500 Kronecker graph is generated and built on the device; then the
same roots are searched (``do``) with the whole adjacency on the device
(the peer, same run) and with only a fraction of its entries there, the
rest read zero-copy from mapped pinned host memory, for three placements:

- ``scrambled``: the first rows of Graph500's scrambled ids (degree-blind);
- ``hubs``: the highest-degree rows (ids relabelled by descending degree,
  the split a prefix: Totem / Kolganov's "most-accessed part in fast memory");
- ``low``: the lowest-degree rows (same relabelling, the split a suffix).

Prints harmonic-mean GTEPS and the ratio to the all-device search of the same
graph; writes a ``gpu_split`` record (benchmarks/results or $DBFS_RESULTS).
Every search's nedge is counted on the device; one search per configuration
is validated against the input edges.

    python benchmarks/gpu_split.py --scale 26 --roots 16 --fractions 0.75 0.5 0.25 0
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import cupy as cp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import dbfs_commit, write_record  # noqa: E402
from dbfs.bfs import gpu  # noqa: E402
from dbfs.generate.gpu import kronecker_edges_gpu  # noqa: E402
from dbfs.graph import CSRGraph  # noqa: E402
from dbfs.kernel1.gpu import build_csr_gpu  # noqa: E402
from dbfs.report.stats import teps_stats  # noqa: E402
from dbfs.roots import select_roots  # noqa: E402
from dbfs.roots import eligible_gpu  # noqa: E402
from dbfs.validate.gpu import validate_gpu  # noqa: E402


def _host_graph(g, perm=None, iperm=None):
    ip = g.indptr if isinstance(g.indptr, np.ndarray) else cp.asnumpy(g.indptr)
    ix = g.indices if isinstance(g.indices, np.ndarray) else cp.asnumpy(g.indices)
    return CSRGraph(ip, ix, g.n_vertices, perm=perm, iperm=iperm)


def _searches(graph, roots, edges, limit, order):
    graph.meta.pop("gpu", None)
    cp.get_default_memory_pool().free_all_blocks()
    opts = {"device_memory_limit": limit, "split_order": order}
    gpu.search_device(graph, int(roots[0]), "do", **opts)          # placement, hub table, compile
    times, nedges, ok = [], [], None
    for i, r in enumerate(roots):
        parent, t, _ = gpu.search_device(graph, int(r), "do", **opts)
        times.append(t)
        nedges.append(gpu.count_nedge(edges, parent))
        if i == 0:
            ok = bool(validate_gpu(edges, graph.to_internal(int(r)), parent, levels=False).ok)
        del parent
    pl = dict(graph.meta["gpu"].placement)
    graph.meta.pop("gpu", None)
    return teps_stats(times, nedges)["harmonic_mean"], pl, ok


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", type=int, default=24)
    ap.add_argument("--roots", type=int, default=16)
    ap.add_argument("--fractions", type=float, nargs="+", default=[0.75, 0.5, 0.25, 0.0])
    ap.add_argument("--placements", nargs="+", default=["scrambled", "hubs", "low"])
    a = ap.parse_args(argv)
    n, m = 1 << a.scale, 16 << a.scale
    t0 = time.perf_counter()
    edges = kronecker_edges_gpu(a.scale, 16, 2, 3, 0, m)
    g = build_csr_gpu(edges, n_vertices=n, to_host=True)
    roots = select_roots(n, 2, 3, a.roots, lambda c: eligible_gpu(edges, c))
    base = _host_graph(g)
    del g
    graphs = {"scrambled": (base, edges, "prefix")}
    if {"hubs", "low"} & set(a.placements):
        deg = np.diff(base.indptr)
        perm = np.argsort(-deg, kind="stable")                    # new id -> old id (descending degree)
        iperm = np.empty(n, np.int64)
        iperm[perm] = np.arange(n)
        e2 = cp.asarray(iperm)[edges]                            # the same graph in degree order
        g2 = build_csr_gpu(e2, n_vertices=n, to_host=True)
        rel = _host_graph(g2, perm=perm, iperm=iperm)
        del g2
        graphs["hubs"] = (rel, e2, "prefix")
        graphs["low"] = (rel, e2, "suffix")
    print(f"SCALE {a.scale}: graph ready in {time.perf_counter() - t0:.1f} s, nnz {base.nnz:,}", flush=True)
    ip_bytes = base.indptr.nbytes
    ix_bytes = base.indices.nbytes
    rows = []
    ref = {}
    for name in ["scrambled"] + [p for p in a.placements if p != "scrambled"]:
        graph, e, order = graphs[name]
        key = "relabelled" if name != "scrambled" else "scrambled"
        if key not in ref:
            ref[key], _, ok = _searches(graph, roots, e, None, "prefix")
            rows.append({"placement": key, "fraction": 1.0, "gteps": ref[key] / 1e9, "ratio": 1.0, "valid": ok})
            print(f"{key:>10} all on device: {ref[key] / 1e9:8.2f} GTEPS valid={ok}", flush=True)
        for f in a.fractions:
            hm, pl, ok = _searches(graph, roots, e, ip_bytes + int(f * ix_bytes), order)
            rows.append({"placement": name, "fraction": f, "gteps": hm / 1e9, "ratio": hm / ref[key],
                         "valid": ok, "split": pl})
            print(f"{name:>10} {pl['device_fraction']:5.0%} on device ({pl['mode']}): {hm / 1e9:8.2f} GTEPS, "
                  f"{hm / ref[key]:.3f}x all-device, valid={ok}", flush=True)
    rec = {"scale": a.scale, "roots": len(roots), "commit": dbfs_commit(),
           "device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "nnz": int(base.nnz), "rows": rows}
    print("record:", write_record("gpu_split", rec))


if __name__ == "__main__":
    main()

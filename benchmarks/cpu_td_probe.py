"""The distributed CPU level loop in one process against the single-process ``do``: where a level's kernels lose.

    python benchmarks/cpu_td_probe.py --scale 20 --partitions 2 --roots 8

Loads the stored block variant ``p<P>-block`` of a Graph500 graph as ONE worker would hold all P
partitions, and runs the workers' level loop (:func:`dbfs.bfs.dask.search.bsp._bsp_levels` with a
local mesh: no exchange, no cluster) and the single-process ``do`` on the same roots with the same
threads, one after the other per root. Prints per root the level times of both (the first root level
by level), the top-down and bottom-up totals a search, and the row-table kernels' milliseconds a search
(``td_rows`` claims, ``split_claims``, ``split_sorted`` or ``bucket_claims``, ``absorb_bits``,
``absorb_rows``, ``bu_rows``, ...). What is left between the two is the partitioned kernels' own cost,
the cluster's exchange and noise being out of it. Writes ``benchmarks/results/cpu_td_probe-<stamp>.json``.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import TD_INSIDE, dbfs_commit, install_step_timers, write_record  # noqa: E402

_KERNELS = ["td_rows", "bucket_claims", "split_claims", "split_sorted", "absorb_bits", "mark_pairs", "bu_rows",
            "absorb_rows", "copy_rows", "or_rows"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=int, default=20)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--roots", type=int, default=8)
    ap.add_argument("--alpha", type=float, nargs="*", default=[None],
                    help="Beamer's alpha of the partitioned loop, one run each (default: dbfs's)")
    a = ap.parse_args(argv)

    import numpy as np

    from dbfs import kernel1, store
    from dbfs.bfs import bfs, prepare
    from dbfs.bfs.dask.layout.worker import _global_degrees, _load_part, _local_degrees, _prepare_part
    from dbfs.bfs.dask.mesh.transport import _LocalMesh
    from dbfs.bfs.dask.search import bsp
    from dbfs.partition import Partitioning
    from dbfs.roots import graph500_roots
    from dbfs.spec import GraphSpec

    P = a.partitions
    with tempfile.TemporaryDirectory(prefix="dbfs-tdprobe-") as tmp:
        ds, _ = store.generate(GraphSpec.make("kronecker", a.scale), root=Path(tmp), quiet=True)
        kernel1.build_partitioned(ds.path, P=P, progress=False)
        var = kernel1.variant_name(P, "block")
        parts = [_load_part(ds.path, var, rk) for rk in range(P)]
        deg = _global_degrees(Partitioning(ds.n_vertices, P, "block"), *[_local_degrees(p) for p in parts])
        parts = [_prepare_part(p, deg) for p in parts]
        edges = np.asarray(ds.edges()[:])
    roots = [int(r) for r in graph500_roots(edges, a.scale, n=a.roots + 1, n_vertices=ds.n_vertices)]
    g = prepare(kernel1.build_csr(edges, n_vertices=ds.n_vertices))
    del edges
    plugin = types.SimpleNamespace(scratch={}, grown={}, level_listeners=[], shms={})
    nnz = int(sum(int(p.indptr[-1]) for p in parts))
    stats = install_step_timers({"dbfs.bfs.dask.search.bsp": _KERNELS, **TD_INSIDE})     # the steps this tree has
    for alpha in a.alpha:     # one pass over the roots each
        pol = {"policy": "beamer", "alpha": alpha, "beta": None, "unexplored": "gap", "tail": "cost"}

        def dist(r):
            return bsp._bsp_levels(_LocalMesh(), 0, [list(range(P))], parts, r, "do", pol, nnz, plugin, None)

        dist(roots[0])                                   # the kernels loaded, the buffers grown
        bfs(g, roots[0], algorithm="do")
        stats.clear()                                    # the warm-up's calls not counted
        rows, first = [], []
        for r in roots[1:]:
            out = dist(r)
            t0 = time.perf_counter()
            one = bfs(g, r, algorithm="do", stats=True)
            one_s = time.perf_counter() - t0
            side = {d: (sum(x["time"] for x in out["records"] if x["direction"] == d),
                        sum(x["time"] for x in one.level_stats if x["direction"] == d)) for d in ("td", "bu")}
            rows.append({"root": r, "dist_s": out["seconds"], "one_s": one_s, "td_s": side["td"],
                         "bu_s": side["bu"]})
            if not first:
                first = [(x["level"], x["direction"], x["frontier"], x["time"], y["time"])
                         for x, y in zip(out["records"], one.level_stats)]
        n = len(rows)
        for lv, d, fr, t1, t2 in first:
            print(f"  level {lv} {d} frontier {fr:>9,}: partitioned {1e6 * t1:8.0f} us | one process "
                  f"{1e6 * t2:8.0f} us")
        med = {k: statistics.median(x[k] for x in rows) for k in ("dist_s", "one_s")}
        td = [sum(x["td_s"][i] for x in rows) / n for i in (0, 1)]
        bu = [sum(x["bu_s"][i] for x in rows) / n for i in (0, 1)]
        print(f"SCALE {a.scale}, P = {P} on one worker, alpha {alpha or 'default'}: Kernel 2 median "
              f"{1e3 * med['dist_s']:.2f} ms, one process "
              f"{1e3 * med['one_s']:.2f} ms ({med['one_s'] / med['dist_s']:.3f}x); top-down levels {1e3 * td[0]:.3f} / "
              f"{1e3 * td[1]:.3f} ms a search, bottom-up {1e3 * bu[0]:.3f} / {1e3 * bu[1]:.3f}")
        kern = {k.split(".")[-1]: {"calls_per_search": c / n, "ms_per_search": 1e3 * t / n}
                for k, (c, t) in stats.items()}
        for k, v in sorted(kern.items(), key=lambda kv: -kv[1]["ms_per_search"]):
            print(f"  {k:16s} {v['calls_per_search']:6.2f}/search {v['ms_per_search']:8.3f} ms/search")
        rec = {"scale": a.scale, "partitions": P, "alpha": alpha, "roots": n, "commit": dbfs_commit(), "rows": rows,
               "median_dist_s": med["dist_s"], "median_one_s": med["one_s"], "kernels": kern,
               "first_root_levels": first}
        print("record:", write_record("cpu_td_probe", rec))


if __name__ == "__main__":
    main()

"""Distributed searches one call each against batches in one task a worker (``search_many``), same run.

Each :func:`dbfs.bfs.dask.search` is one scheduler round trip (the search tasks, their summaries, the
parents' futures); :func:`dbfs.bfs.dask.search_many` sends a batch of roots as one task a mesh worker.
On one LocalCluster (``--workers`` processes) with the stored variant ``p<P>-block`` loaded, this times
the client's wall per search for ``--roots`` searches one call each and in batches of each ``--batches``
size (alternating, ``--reps`` times, the best kept), beside the workers' own Kernel 2 seconds (which a
batch must not change), and checks that every batch gives the one-call parents. Prints the ratios and
writes benchmarks/results/dask_search_batch-<stamp>.json.

    python benchmarks/dask_search_batch.py --scale 16 --roots 64 --workers 2 --partitions 2
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import dbfs_commit, write_record  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=int, default=16)
    ap.add_argument("--roots", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--batches", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--reps", type=int, default=2)
    a = ap.parse_args(argv)

    import numpy as np

    import dbfs.bfs.dask as D
    from dbfs import kernel1, store
    from dbfs.cluster import client_for
    from dbfs.roots import graph500_roots
    from dbfs.spec import GraphSpec

    with tempfile.TemporaryDirectory(prefix="dbfs-batch-") as tmp, \
            client_for(n_workers=a.workers, threads_per_worker=1, quiet=True) as client:
        ds, _ = store.generate(GraphSpec.make("kronecker", a.scale), root=Path(tmp), quiet=True)
        kernel1.build_partitioned(ds.path, P=a.partitions, client=client, progress=False)
        variant = kernel1.variant_name(a.partitions, "block")
        roots = [int(r) for r in graph500_roots(ds.edges(), a.scale, n=a.roots, n_vertices=ds.n_vertices)]
        with D.load_distributed(client, ds.path, variant) as dg:
            D.search(dg, roots[0])                      # warm-up
            ref = {}

            def one_by_one():
                out = []
                for r in roots:
                    res, sec, _ = D.search(dg, r, stats=False)
                    ref.setdefault(r, D.gather_parent(res))
                    res.release()
                    out.append(sec)
                return out

            def batched(k):
                def go():
                    out = []
                    for i in range(0, len(roots), k):
                        for res, sec, _ in D.search_many(dg, roots[i:i + k], stats=False):
                            if res.root in (roots[0], roots[-1]):
                                assert np.array_equal(D.gather_parent(res), ref[res.root]), res.root
                            res.release()
                            out.append(sec)
                    return out
                return go

            best = {}
            for _ in range(a.reps):
                for label, fn in [("one call a search", one_by_one)] + [(f"batches of {k}", batched(k))
                                                                        for k in a.batches]:
                    t0 = time.perf_counter()
                    secs = fn()
                    wall = (time.perf_counter() - t0) / len(roots)
                    if label not in best or wall < best[label]["wall_per_search_s"]:
                        best[label] = {"wall_per_search_s": wall, "worker_seconds_median": statistics.median(secs)}
    base = best["one call a search"]["wall_per_search_s"]
    rows = []
    for label, b in best.items():
        rows.append({"mode": label, **b, "wall_ratio": b["wall_per_search_s"] / base})
        print(f"{label:>20}: {1e3 * b['wall_per_search_s']:8.2f} ms a search on the client "
              f"({b['wall_per_search_s'] / base:.3f}x), workers' median {1e3 * b['worker_seconds_median']:.2f} ms")
    rec = {"scale": a.scale, "roots": len(roots), "workers": a.workers, "partitions": a.partitions,
           "commit": dbfs_commit(), "rows": rows}
    print("record:", write_record("dask_search_batch", rec))


if __name__ == "__main__":
    main()

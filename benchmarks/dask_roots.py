"""Graph500 root sampling for ``--backend dask``: eligibility from the partitions' rows vs a pass over the edges.

Graph500 section 6 samples the search keys among vertices with a non-self-loop edge. The streamed
check (``dbfs.roots.eligible``) reads the whole input edge list on the client for every batch of
candidates (a virtual list is regenerated on the CPU); ``dbfs.bfs.dask.eligible_distributed`` asks the
workers whether the candidates' CSR rows are empty (a relabelled variant's ids mapped through its
``perm`` on a worker). Both give the same keys (checked here); the ratio is the time of the streamed
selection over the row-based one, in the same run, on one LocalCluster (``--workers`` processes) with
the stored variant ``p<P>-block`` loaded. Writes benchmarks/results/dask_roots-<stamp>.json.

    python benchmarks/dask_roots.py --scale 22 --roots 64 --workers 2 --partitions 2
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import write_record  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", type=int, default=22)
    ap.add_argument("--roots", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args(argv)
    from dbfs import kernel1, store
    from dbfs.bfs import dask as D
    from dbfs.cluster import client_for
    from dbfs.roots import eligible, select_roots
    from dbfs.spec import GraphSpec

    rec = {"args": vars(a), "streamed_s": [], "rows_s": []}
    with tempfile.TemporaryDirectory(prefix="dbfs-roots-") as d, \
            client_for(n_workers=a.workers, threads_per_worker=1, quiet=True) as client:
        ds, _ = store.generate(GraphSpec.make("kronecker", a.scale), root=d, client=client, quiet=True)
        v = kernel1.build_partitioned(ds.path, P=a.partitions, client=client, progress=False)["variant"]
        with D.load_distributed(client, ds.path, v) as dg:
            for _ in range(a.reps):
                t0 = time.perf_counter()
                streamed = select_roots(ds.n_vertices, 2, 3, a.roots, lambda c: eligible(ds.edges(), c))
                rec["streamed_s"].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                rows = select_roots(ds.n_vertices, 2, 3, a.roots, lambda c: D.eligible_distributed(dg, c))
                rec["rows_s"].append(time.perf_counter() - t0)
                assert streamed.tolist() == rows.tolist(), "the two selections differ"
        rec["edges"] = ds.n_edges
    rec["ratio"] = min(rec["streamed_s"]) / min(rec["rows_s"])
    write_record("dask_roots", rec)
    print(f"SCALE {a.scale}, {a.roots} roots: streamed {min(rec['streamed_s']):.3f} s, from the rows "
          f"{min(rec['rows_s']):.4f} s: {rec['ratio']:.1f}x (best of {a.reps}, same keys)")


if __name__ == "__main__":
    main()

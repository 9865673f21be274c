"""Generator throughput and generate-to-zarr wall time.

    python benchmarks/generate.py [--scales 20 22] [--zarr-scale 22]

Prints edges/s of ``kronecker_edges`` with 1 and 2 Numba threads at each
SCALE (median of 3 after a warm-up), and the wall time of ``dbfs generate``'s
stage (edges to zarr on the default LocalCluster, worker processes x 1
thread), and writes a JSON record to benchmarks/results/. Peer: the
Graph500 3.0.1 reference generator, ~3.3 M edges/s with 2 MPI ranks on the
2-core machine (PERFORMANCE.md; C code, not vendored here).
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
import time

REFERENCE_2RANKS_EDGES_PER_S = 3.3e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scales", type=int, nargs="+", default=[20, 22])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--zarr-scale", type=int, default=22)
    args = ap.parse_args()

    import numba

    from benchmarks.common import median_time, write_record
    from dbfs.generate.graph500 import kronecker_edges

    kronecker_edges(8)  # JIT warm-up
    rows = []
    for scale in args.scales:
        m = 16 << scale
        for th in args.threads:
            numba.set_num_threads(th)
            t, all_t = median_time(lambda: kronecker_edges(scale))
            rows.append({"scale": scale, "threads": th, "edges": m, "seconds": t, "all_seconds": all_t,
                         "edges_per_s": m / t, "vs_reference_2ranks": m / t / REFERENCE_2RANKS_EDGES_PER_S})
            print(f"SCALE {scale} threads {th}: {m / t / 1e6:7.2f} M edges/s  "
                  f"({m / t / REFERENCE_2RANKS_EDGES_PER_S:.1f}x reference, 2 ranks)")
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)

    from dbfs import store
    from dbfs.cluster import client_for
    from dbfs.spec import GraphSpec

    zarr_rec = None
    if args.zarr_scale:
        root = tempfile.mkdtemp(prefix="dbfs-bench-")
        try:
            t0 = time.perf_counter()
            with client_for(None) as client:
                t_cluster = time.perf_counter() - t0
                spec = GraphSpec.make(scale=args.zarr_scale)
                # warm the workers' JIT on a tiny graph first
                store.generate(GraphSpec.make(scale=8), root, client=client, quiet=True)
                t1 = time.perf_counter()
                ds, _ = store.generate(spec, root, client=client, quiet=True)
                wall = time.perf_counter() - t1
            size = store.info(ds.name, root)["size_bytes"]
            zarr_rec = {"scale": args.zarr_scale, "edges": ds.n_edges, "wall_seconds": wall,
                        "cluster_start_seconds": t_cluster, "edges_per_s": ds.n_edges / wall,
                        "size_bytes": size, "workers": "LocalCluster default (1 process per core x 1 thread)"}
            print(f"generate-to-zarr SCALE {args.zarr_scale}: {wall:.1f} s wall "
                  f"({ds.n_edges / wall / 1e6:.1f} M edges/s, {size / 2**20:.0f} MiB on disk; "
                  f"cluster start {t_cluster:.1f} s)")
        finally:
            shutil.rmtree(root, ignore_errors=True)
    write_record("generate", {"generator": rows, "generate_to_zarr": zarr_rec,
                              "peer": {"graph500_reference_2ranks_edges_per_s": REFERENCE_2RANKS_EDGES_PER_S}})


if __name__ == "__main__":
    main()

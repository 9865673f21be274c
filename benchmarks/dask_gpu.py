"""GPU workers in the dask backend against ``--backend gpu`` and CPU-only dask (one device call).

Part ``one`` (SCALE --scale, default 26): harmonic-mean TEPS of the
single-process GPU search (``dbfs.bfs.gpu.search_device``) and of the dask
backend on ONE GPU worker (dask-cuda LocalCUDACluster) with P = 1 and P = 4,
over the same roots, searches interleaved root by root; the ratio
dask/gpu is the Dask path's cost (issue #19: >= 0.85 at P = 1).

Part ``hetero`` (SCALE --hscale): P = --hparts block partitions; the GPU
worker's budget (``--device-memory-limit``) holds about half the CSR, the
rest goes to CPU workers (--cpu-workers x --cpu-threads); placements
``block`` and ``random`` (the plain variant) and ``degree`` / ``degree-low``
(the ``--relabel degree`` variant: degree classes) against a CPU-only
LocalCluster of the same CPU worker shape plus one more worker (the GPU
worker's cores).

nedge per root is counted on the device from the input edges
(``count_nedge``, Graph500's rule); every dask search's nedge is checked
against it on the workers' parents. Prints ratios; writes
benchmarks/results/dask_gpu-<stamp>.json (or $DBFS_RESULTS).

    python benchmarks/dask_gpu.py --scale 26 --roots 16 --hscale 25
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import write_record  # noqa: E402


def _say(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _hmean(times, nedges):
    return float(1.0 / np.mean(np.asarray(times) / np.asarray(nedges, float)))


def _dataset(scale, root, parts):
    from dbfs import kernel1, store
    from dbfs.roots import graph500_roots
    from dbfs.spec import GraphSpec

    t0 = time.perf_counter()
    ds, _ = store.generate(GraphSpec.make("kronecker", scale), root=root, client=None, quiet=True, backend="gpu")
    _say(f"SCALE {scale}: generated in {time.perf_counter() - t0:.1f} s")
    for P in parts:
        t0 = time.perf_counter()
        kernel1.build_partitioned(ds.path, P=P, client=None, progress=False)
        _say(f"SCALE {scale}: Kernel 1 p{P} in {time.perf_counter() - t0:.1f} s")
    edges = ds.edges()[:]
    return ds, edges


def _nedges(edges, parents):
    import cupy as cp

    from dbfs.bfs.gpu import count_nedge

    e = cp.asarray(edges)
    out = [count_nedge(e, p) for p in parents]
    del e
    return out


def _dask_times(client, ds, variant, roots, nedge, **kw):
    import dbfs.bfs.dask as D

    dg = D.load_distributed(client, ds.path, variant, **kw)
    _say(f"  loaded {variant} in {dg.load_time:.1f} s: {[(w['kind'], w['partitions']) for w in dg.workers_table()]}")
    res, _, _ = D.search(dg, roots[0])          # warm-up
    res.release()
    times, lv, levels = [], None, []
    for k, r in enumerate(roots):
        res, sec, lst = D.search(dg, r, stats=True)
        levels.append([{x: y for x, y in v.items() if x != "workers"} for v in lst])
        if k == 0:
            vd = D.validate_distributed(client, ds.path, dg, res, r)
            assert vd.ok and vd.nedge == nedge[k], (vd.summary(), nedge[k])
            lv = lst
        times.append(sec)
        res.release()
    table = dg.workers_table()
    dg.close()
    slow = int(np.argmax(times))
    _say(f"  slowest search: root {roots[slow]} {times[slow] * 1e3:.1f} ms, levels "
         f"{[(v['direction'], v['frontier'], round(v['time'] * 1e3, 2)) for v in levels[slow]]}")
    return times, lv, table


def part_one(scale, n_roots, root_dir):
    from dbfs import kernel1
    from dbfs.bfs.gpu import search_device
    from dbfs.cluster import client_for
    from dbfs.roots import graph500_roots

    ds, edges = _dataset(scale, root_dir, (1, 4))
    roots = [int(r) for r in graph500_roots(edges, scale, 2, 3, n=n_roots, n_vertices=ds.n_vertices)]
    g = kernel1.load_csr(ds.path, kernel1.variant_name(1))
    search_device(g, roots[0])
    rec_lv = search_device(g, roots[0], stats=True)[2]
    gtimes, parents = [], []
    for r in roots:
        p, sec, _ = search_device(g, r)
        gtimes.append(sec)
        parents.append(p)
    nedge = _nedges(edges, parents)
    del parents, g
    import cupy as cp

    cp.get_default_memory_pool().free_all_blocks()
    rec = {"scale": scale, "roots": roots, "nedge": nedge, "gpu_times": gtimes,
           "gpu_hmean_teps": _hmean(gtimes, nedge), "gpu_first_levels": rec_lv}
    _say(f"SCALE {scale}: --backend gpu {rec['gpu_hmean_teps'] / 1e9:.1f} GTEPS")
    prof = Path(root_dir) / "one.yaml"
    prof.write_text("type: local-gpu\nthreads_per_gpu_worker: 8\ncpu_workers: 0\n")
    with client_for(profile=str(prof), quiet=True) as client:
        for P in (1, 4):
            t, lv, table = _dask_times(client, ds, kernel1.variant_name(P), roots, nedge)
            h = _hmean(t, nedge)
            rec[f"dask_gpu_p{P}"] = {"times": t, "hmean_teps": h, "ratio_vs_gpu": h / rec["gpu_hmean_teps"],
                                     "first_levels": lv, "workers": table}
            _say(f"SCALE {scale}: dask, one GPU worker, P={P}: {h / 1e9:.1f} GTEPS = "
                 f"{h / rec['gpu_hmean_teps']:.3f}x --backend gpu")
    return rec


def part_hetero(scale, n_roots, parts, cpu_workers, cpu_threads, root_dir):
    from dbfs import kernel1
    from dbfs.bfs.dask.gpu_part import worker_bytes
    from dbfs.bfs.gpu import search_device
    from dbfs.cluster import client_for
    from dbfs.roots import graph500_roots

    ds, edges = _dataset(scale, root_dir, (1, parts))
    t0 = time.perf_counter()
    kernel1.build_partitioned(ds.path, P=parts, relabel="degree", client=None, progress=False,
                              memory_budget=24 * ds.n_vertices + (1 << 30))
    _say(f"SCALE {scale}: Kernel 1 p{parts}-deg in {time.perf_counter() - t0:.1f} s")
    roots = [int(r) for r in graph500_roots(edges, scale, 2, 3, n=n_roots, n_vertices=ds.n_vertices)]
    g = kernel1.load_csr(ds.path, kernel1.variant_name(1))
    nedge = _nedges(edges, [search_device(g, r)[0] for r in roots])
    csr_bytes = int(g.indptr.nbytes + g.indices.nbytes)
    del g
    import cupy as cp

    cp.get_default_memory_pool().free_all_blocks()
    variant = kernel1.variant_name(parts)
    rec = {"scale": scale, "P": parts, "roots": roots, "nedge": nedge, "csr_bytes": csr_bytes,
           "cpu_workers": cpu_workers, "cpu_threads": cpu_threads}
    with client_for(n_workers=cpu_workers + 1, threads_per_worker=cpu_threads, quiet=True) as client:
        t, lv, table = _dask_times(client, ds, variant, roots, nedge)
        rec["cpu_only"] = {"times": t, "hmean_teps": _hmean(t, nedge), "workers": table, "first_levels": lv}
        _say(f"SCALE {scale}: CPU-only dask {cpu_workers + 1}x{cpu_threads}: {rec['cpu_only']['hmean_teps'] / 1e9:.2f}"
             f" GTEPS")
    prof = Path(root_dir) / "het.yaml"
    prof.write_text(f"type: local-gpu\nthreads_per_gpu_worker: {cpu_threads}\ncpu_workers: {cpu_workers}\n"
                    f"cpu_threads: {cpu_threads}\n")
    # at most half the CSR on the GPU: a partition's device bytes are ~1.3x its CSR share (hub, per-search arrays)
    limit = worker_bytes(ds.n_vertices) + int(0.5 * 1.3 * csr_bytes)
    rec["device_memory_limit"] = limit
    with client_for(profile=str(prof), quiet=True) as client:
        for placement in ("block", "random", "degree", "degree-low"):
            v = variant if not placement.startswith("degree") else kernel1.variant_name(parts, "block", True, "degree")
            t, lv, table = _dask_times(client, ds, v, roots, nedge, placement=placement,
                                       device_memory_limit=limit)
            h = _hmean(t, nedge)
            rec[placement] = {"times": t, "hmean_teps": h, "ratio_vs_cpu_only": h / rec["cpu_only"]["hmean_teps"],
                              "workers": table, "first_levels": lv}
            _say(f"SCALE {scale}: GPU+CPU {placement}: {h / 1e9:.2f} GTEPS = "
                 f"{h / rec['cpu_only']['hmean_teps']:.2f}x CPU-only; split {table}")
    return rec


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", type=int, default=26)
    ap.add_argument("--roots", type=int, default=16)
    ap.add_argument("--hscale", type=int, default=0, help="SCALE of the heterogeneous part (0: skip)")
    ap.add_argument("--hparts", type=int, default=8)
    ap.add_argument("--cpu-workers", type=int, default=3)
    ap.add_argument("--cpu-threads", type=int, default=4)
    ap.add_argument("--skip-one", action="store_true")
    a = ap.parse_args(argv)
    rec = {"args": vars(a)}
    with tempfile.TemporaryDirectory(prefix="dbfs-dgpu-") as d:
        if not a.skip_one:
            rec["one"] = part_one(a.scale, a.roots, Path(d) / "one")
        if a.hscale:
            rec["hetero"] = part_hetero(a.hscale, a.roots, a.hparts, a.cpu_workers, a.cpu_threads, Path(d) / "het")
    write_record("dask_gpu", rec)
    if "one" in rec:
        print(f"one GPU worker vs --backend gpu (SCALE {a.scale}): P=1 {rec['one']['dask_gpu_p1']['ratio_vs_gpu']:.3f}x,"
              f" P=4 {rec['one']['dask_gpu_p4']['ratio_vs_gpu']:.3f}x")
    if "hetero" in rec:
        h = rec["hetero"]
        print(f"GPU+CPU vs CPU-only (SCALE {a.hscale}): " + ", ".join(
            f"{k} {h[k]['ratio_vs_cpu_only']:.2f}x" for k in ("block", "random", "degree", "degree-low")))


if __name__ == "__main__":
    main()

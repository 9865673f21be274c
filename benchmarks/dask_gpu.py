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
against it on the workers' parents.

Part ``two`` (``--two ROUNDS``, same dataset): two GPU workers on the one
GPU (the second started by hand), P = 2 and 4: the frontier bitmaps shared
device to device through CUDA IPC (:mod:`dbfs.bfs.dask.ipc`) against host
staging through the mesh (``shared_memory=False``), alternated; ratio of
medians. Prints ratios; writes
benchmarks/results/dask_gpu-<stamp>.json (or $DBFS_RESULTS).

    python benchmarks/dask_gpu.py --scale 26 --roots 16 --hscale 25
    python benchmarks/dask_gpu.py --scale 24 --roots 16 --skip-one --two 3
    python benchmarks/dask_gpu.py --scale 26 --roots 16 --rounds 3
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


def gpu_reference(scale, n_roots, root_dir, parts):
    """The dataset (block variants ``parts``), its roots, nedge and the ``--backend gpu`` times."""
    from dbfs import kernel1
    from dbfs.bfs.gpu import search_device
    from dbfs.roots import graph500_roots

    ds, edges = _dataset(scale, root_dir, parts)
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
    return ds, rec


def part_one(ds, ref, root_dir, rounds):
    """One GPU worker, P = 1 (``rounds`` times, each against a fresh pass of ``--backend gpu``
    over the same roots in this process) and P = 4, against ``--backend gpu``."""
    from dbfs import kernel1
    from dbfs.bfs.gpu import search_device
    from dbfs.cluster import client_for

    roots, nedge, rec = ref["roots"], ref["nedge"], {}
    prof = Path(root_dir) / "one.yaml"
    prof.write_text("type: local-gpu\nthreads_per_gpu_worker: 8\ncpu_workers: 0\n")
    g = kernel1.load_csr(ds.path, kernel1.variant_name(1)) if rounds > 1 else None
    with client_for(profile=str(prof), quiet=True) as client:
        for P in [1] * rounds + [4]:
            gpu_h = ref["gpu_hmean_teps"]
            if P == 1 and g is not None:
                gpu_h = _hmean([search_device(g, r)[1] for r in roots], nedge)
            t, lv, table = _dask_times(client, ds, kernel1.variant_name(P), roots, nedge)
            h = _hmean(t, nedge)
            r = rec.setdefault(f"dask_gpu_p{P}", {"times": [], "hmean_teps": [], "gpu_hmean_teps": [],
                                                   "ratios": []})
            r["times"].append(t)
            r["hmean_teps"].append(h)
            r["gpu_hmean_teps"].append(gpu_h)
            r["ratios"].append(h / gpu_h)
            r["first_levels"], r["workers"] = lv, table
            _say(f"SCALE {ref['scale']}: dask, one GPU worker, P={P}: {h / 1e9:.1f} GTEPS = "
                 f"{h / gpu_h:.3f}x --backend gpu ({gpu_h / 1e9:.1f} GTEPS)")
    for r in rec.values():
        r["ratio_vs_gpu"] = min(r["ratios"])
    return rec


def part_two(ds, ref, root_dir, rounds):
    """Two GPU workers on one GPU (the second started by hand: dask-cuda refuses two per device),
    P = 2 and 4: the shared device frontier (CUDA IPC) against host staging, alternated ``rounds`` times."""
    import os
    import subprocess

    from dbfs import kernel1
    from dbfs.cluster import client_for

    roots, nedge, rec = ref["roots"], ref["nedge"], {}
    prof = Path(root_dir) / "two.yaml"
    prof.write_text("type: local-gpu\nthreads_per_gpu_worker: 8\ncpu_workers: 0\n")
    with client_for(profile=str(prof), quiet=True) as client:
        n0 = len(client.scheduler_info(n_workers=-1)["workers"])
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]}
        proc = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", client.scheduler.address,
                                 "--resources", "GPU=1", "--nthreads", "8", "--host", "127.0.0.1",
                                 "--no-dashboard", "--name", "gpu-second"],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            client.wait_for_workers(n0 + 1, timeout=120)
            for P in (2, 4):
                for k in range(rounds):
                    for mode, shared in (("ipc", None), ("host", False)):
                        t, lv, table = _dask_times(client, ds, kernel1.variant_name(P), roots, nedge,
                                                   shared_memory=shared)
                        r = rec.setdefault(f"p{P}_{mode}", {"times": [], "hmean_teps": []})
                        r["times"].append(t)
                        r["hmean_teps"].append(_hmean(t, nedge))
                        r["first_levels"], r["workers"] = lv, table
                        _say(f"SCALE {ref['scale']}: two GPU workers, P={P}, {mode}: "
                             f"{r['hmean_teps'][-1] / 1e9:.1f} GTEPS")
                ipc, host = (statistics.median(rec[f"p{P}_{m}"]["hmean_teps"]) for m in ("ipc", "host"))
                rec[f"p{P}_ipc_vs_host"] = ipc / host
                _say(f"SCALE {ref['scale']}: two GPU workers, P={P}: CUDA IPC {ipc / host:.3f}x host staging")
        finally:
            proc.terminate()
            proc.wait(30)
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
    ap.add_argument("--rounds", type=int, default=1, help="P = 1 measurements of part one (the worst is reported)")
    ap.add_argument("--two", type=int, default=0, help="rounds of the two-GPU-worker IPC/host A/B (0: skip)")
    a = ap.parse_args(argv)
    rec = {"args": vars(a)}
    with tempfile.TemporaryDirectory(prefix="dbfs-dgpu-") as d:
        if not a.skip_one or a.two:
            ds, ref = gpu_reference(a.scale, a.roots, Path(d) / "one", (1, 2, 4) if a.two else (1, 4))
            rec["one"] = ref
            if not a.skip_one:
                ref.update(part_one(ds, ref, Path(d) / "one", a.rounds))
            if a.two:
                rec["two"] = part_two(ds, ref, Path(d) / "one", a.two)
        if a.hscale:
            rec["hetero"] = part_hetero(a.hscale, a.roots, a.hparts, a.cpu_workers, a.cpu_threads, Path(d) / "het")
    write_record("dask_gpu", rec)
    if "two" in rec:
        print(f"two GPU workers on one GPU (SCALE {a.scale}): CUDA IPC vs host staging: "
              f"P=2 {rec['two']['p2_ipc_vs_host']:.3f}x, P=4 {rec['two']['p4_ipc_vs_host']:.3f}x")
    if "dask_gpu_p1" in rec.get("one", {}):
        print(f"one GPU worker vs --backend gpu (SCALE {a.scale}): P=1 {rec['one']['dask_gpu_p1']['ratio_vs_gpu']:.3f}x"
              f" (worst of {a.rounds}: {', '.join(f'{x:.3f}' for x in rec['one']['dask_gpu_p1']['ratios'])}),"
              f" P=4 {rec['one']['dask_gpu_p4']['ratio_vs_gpu']:.3f}x")
    if "hetero" in rec:
        h = rec["hetero"]
        print(f"GPU+CPU vs CPU-only (SCALE {a.hscale}): " + ", ".join(
            f"{k} {h[k]['ratio_vs_cpu_only']:.2f}x" for k in ("block", "random", "degree", "degree-low")))


if __name__ == "__main__":
    main()

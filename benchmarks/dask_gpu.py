"""GPU workers in the dask backend against ``--backend gpu`` and CPU-only dask (one device call).

Part ``one`` (SCALE --scale, default 26): harmonic-mean TEPS of the
single-process GPU search (``dbfs.bfs.gpu.search_device``) and of the dask
backend on ONE GPU worker (dask-cuda LocalCUDACluster) with P = 1 and P = 4,
over the same roots, searches interleaved root by root; the ratio
dask/gpu is the Dask path's cost (issue #19: >= 0.85 at P = 1).

Part ``hetero`` (SCALE --hscale): P = --hparts block partitions, one variant
at a time (built with its scratch in /dev/shm when it has room, measured,
removed: a 64 GiB disk holds SCALE 27's edges and one variant). Placements
``block`` and ``random`` on the plain variant, ``degree`` / ``degree-low`` on
the ``--relabel degree`` one; each gets the largest
``--device-memory-limit`` under which its own first fit gives the GPU at
most half the CSR's entries (recorded with the GPU's ranks and share). The
cluster is one GPU worker (--gpu-threads) and --cpu-workers x --cpu-threads;
the baselines are CPU-only LocalClusters of the --bases shapes on the same
variant, the best of them the ratios' denominator. The reference parents
(for nedge) come from a device CSR built in memory (``build_placed``).

nedge per root is counted on the device from the input edges
(``count_nedge``, Graph500's rule); every dask search's nedge is checked
against it on the workers' parents.

Part ``two`` (``--two ROUNDS``, same dataset): two GPU workers on the one
GPU (the second started by hand), P = 2 and 4: the frontier bitmaps shared
device to device through CUDA IPC (:mod:`dbfs.bfs.dask.mesh.ipc`) against host
staging through the mesh (``shared_memory=False``), alternated; ratio of
medians.

Part ``built`` (``--built ROUNDS``, same dataset, ``--built-parts P``): two
GPU workers on the one GPU, P partitions built from the edges on the workers
(``build_distributed``) against the CPU out-of-core Kernel 1 into zarr plus
``load_distributed``, alternated: seconds from the edge list to a searchable
graph and the searches' TEPS. Prints ratios; writes
benchmarks/results/dask_gpu-<stamp>.json (or $DBFS_RESULTS).

    python benchmarks/dask_gpu.py --scale 26 --roots 16 --hscale 25
    python benchmarks/dask_gpu.py --skip-one --hscale 27 --hparts 16 --cpu-workers 1 --cpu-threads 12 \
        --bases 4x4,1x16 --placements degree,degree-low
    python benchmarks/dask_gpu.py --scale 24 --roots 16 --skip-one --two 3
    python benchmarks/dask_gpu.py --scale 24 --roots 16 --skip-one --built 2
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
from dbfs.workers_info import workers_info  # noqa: E402


def _say(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _hmean(times, nedges):
    return float(1.0 / np.mean(np.asarray(times) / np.asarray(nedges, float)))


def _dataset(scale, root, parts):
    from dbfs import kernel1, store
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


def _dask_times(client, ds, variant, roots, nedge, dg=None, **kw):
    """(times, first levels, workers table) of searches from ``roots`` on ``variant`` loaded (or on ``dg``)."""
    import dbfs.bfs.dask as D

    dg = dg or D.load_distributed(client, ds.path, variant, **kw)
    _say(f"  loaded {dg.variant} ({dg.source}) in {dg.load_time:.1f} s: "
         f"{[(w['kind'], w['partitions']) for w in dg.workers_table()]}")
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


class _SecondGpuWorker:
    """A second GPU worker on the first visible GPU, started by hand (dask-cuda refuses two per device)."""

    def __init__(self, client):
        self.client = client

    def __enter__(self):
        import os
        import subprocess

        n0 = len(workers_info(self.client))
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]}
        self.proc = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker",
                                      self.client.scheduler.address, "--resources", "GPU=1", "--nthreads", "8",
                                      "--host", "127.0.0.1", "--no-dashboard", "--name", "gpu-second"],
                                     env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.client.wait_for_workers(n0 + 1, timeout=120)
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.wait(30)


def part_built(ds, ref, root_dir, P, rounds):
    """Two GPU workers on one GPU, P partitions: built from the edges on the workers (``build_distributed``)
    against the stored variant (the CPU out-of-core Kernel 1 into zarr, then ``load_distributed``), alternated
    ``rounds`` times: seconds from edges to a searchable graph, and search TEPS."""
    import dbfs.bfs.dask as D
    from dbfs import kernel1
    from dbfs.bfs.dask.layout.placement import gpu_workers
    from dbfs.cluster import client_for

    roots, nedge = ref["roots"], ref["nedge"]
    t0 = time.perf_counter()
    kernel1.build_partitioned(ds.path, P=P, client=None, progress=False, force=True)
    rec = {"P": P, "zarr_kernel1_s": time.perf_counter() - t0, "zarr": [], "edges": []}
    _say(f"SCALE {ref['scale']}: CPU Kernel 1 into zarr p{P} in {rec['zarr_kernel1_s']:.1f} s")
    prof = Path(root_dir) / "built.yaml"
    prof.write_text("type: local-gpu\nthreads_per_gpu_worker: 8\ncpu_workers: 0\n")
    with client_for(profile=str(prof), quiet=True) as client, _SecondGpuWorker(client):
        gpus = gpu_workers(client)
        for _ in range(rounds):
            for how in ("zarr", "edges"):
                t0 = time.perf_counter()
                dg = D.load_distributed(client, ds.path, kernel1.variant_name(P), workers=gpus) if how == "zarr" \
                    else D.build_distributed(client, ds.path, P, workers=gpus)
                ready = time.perf_counter() - t0
                t, lv, table = _dask_times(client, ds, None, roots, nedge, dg=dg)
                rec[how].append({"ready_s": ready, "times": t, "hmean_teps": _hmean(t, nedge), "workers": table})
                _say(f"SCALE {ref['scale']}: two GPU workers, P={P}, {how}: ready in {ready:.1f} s, "
                     f"{rec[how][-1]['hmean_teps'] / 1e9:.1f} GTEPS")
    z_ready = statistics.median(r["ready_s"] for r in rec["zarr"])
    e_ready = statistics.median(r["ready_s"] for r in rec["edges"])
    rec["ready_ratio"] = (rec["zarr_kernel1_s"] + z_ready) / e_ready
    rec["teps_ratio"] = statistics.median(r["hmean_teps"] for r in rec["edges"]) / \
        statistics.median(r["hmean_teps"] for r in rec["zarr"])
    return rec


def part_two(ds, ref, root_dir, rounds):
    """Two GPU workers on one GPU (the second started by hand: dask-cuda refuses two per device),
    P = 2 and 4: the shared device frontier (CUDA IPC) against host staging, alternated ``rounds`` times."""
    from dbfs import kernel1
    from dbfs.cluster import client_for

    roots, nedge, rec = ref["roots"], ref["nedge"], {}
    prof = Path(root_dir) / "two.yaml"
    prof.write_text("type: local-gpu\nthreads_per_gpu_worker: 8\ncpu_workers: 0\n")
    with client_for(profile=str(prof), quiet=True) as client, _SecondGpuWorker(client):
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
    return rec


def _scratch_dir(choice, ds):
    """Where Kernel 1 puts its scratch: ``auto`` is /dev/shm when it has room for the bound (no disk for the
    buckets: SCALE 27's 49 GiB of scratch beside a 64 GiB disk's edge list and CSR), else beside the variant."""
    import shutil

    from dbfs.graph import id_dtype
    from dbfs.kernel1.partitioned import scratch_bytes

    if choice != "auto":
        return None if choice == "beside" else choice
    isz = np.dtype(id_dtype(ds.n_vertices)).itemsize
    need = sum(scratch_bytes(ds.n_edges, ds.n_vertices, isz, isz))
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and shutil.disk_usage(shm).free > 1.1 * need else None


def _gpu_half_limit(attrs, n, policy, most=0.5):
    """The largest ``--device-memory-limit`` whose placement (the policy's real first fit, one GPU worker)
    gives the GPU at most ``most`` of the edges -> (limit, GPU ranks, their share of the entries)."""
    from dbfs.bfs.dask.layout.assign import assign
    from dbfs.bfs.dask.layout.gpu_part import ranks_device_bytes, worker_bytes
    from dbfs.partition import Partitioning

    P, nnz = int(attrs["P"]), [int(x) for x in attrs["nnz"]]
    pb = ranks_device_bytes(Partitioning(n, P, attrs["partitioning"]), nnz)
    kinds = {"gpu": "gpu", "cpu": "cpu"}
    best = (0, [], 0.0)
    for k in range(1, 401):                         # budgets 0.25% .. 100% of every rank's bytes
        budget = sum(pb) * k // 400
        owner, _ = assign(policy, P, kinds, pb, {"gpu": budget})
        ranks = sorted(r for r in range(P) if owner[r] == "gpu")
        share = sum(nnz[r] for r in ranks) / sum(nnz)
        if share <= most and share >= best[2]:
            best = (worker_bytes(n) + budget, ranks, share)
    return best


def part_hetero(scale, n_roots, parts, cpu_workers, cpu_threads, gpu_threads, bases, placements, scratch,
                root_dir, rec, save):
    """Heterogeneous placements against CPU-only LocalClusters (shapes ``bases``, e.g. [(4, 4), (1, 16)]) on one
    dataset, one variant at a time (built, measured, removed: a SCALE 27 box's disk holds the edges and one),
    filling ``rec`` and calling ``save()`` after each measurement (a run cut short keeps what it measured)."""
    import shutil

    import cupy as cp

    from dbfs import kernel1, store
    from dbfs.bfs.gpu import search_device
    from dbfs.cluster import client_for
    from dbfs.roots import graph500_roots
    from dbfs.spec import GraphSpec
    from dbfs.kernel1.build_placed import build_placed

    t0 = time.perf_counter()
    ds, _ = store.generate(GraphSpec.make("kronecker", scale), root=root_dir, client=None, quiet=True, backend="gpu")
    _say(f"SCALE {scale}: generated in {time.perf_counter() - t0:.1f} s")
    edges = ds.edges()[:]
    roots = [int(r) for r in graph500_roots(edges, scale, 2, 3, n=n_roots, n_vertices=ds.n_vertices)]
    build_placed(ds, quiet=True)                    # the reference: Kernel 1 on the device, not stored
    g = ds.memo.pop("graph")
    search_device(g, roots[0])
    found = [search_device(g, r) for r in roots]
    del g
    nedge = _nedges(edges, [p for p, _, _ in found])
    gtimes = [sec for _, sec, _ in found]
    del found, edges
    cp.get_default_memory_pool().free_all_blocks()
    rec.update({"scale": scale, "P": parts, "roots": roots, "nedge": nedge, "cpu_workers": cpu_workers,
                "cpu_threads": cpu_threads, "gpu_threads": gpu_threads, "bases": [f"{w}x{t}" for w, t in bases],
                "gpu_times": gtimes, "gpu_hmean_teps": _hmean(gtimes, nedge)})
    scratch = _scratch_dir(scratch, ds)
    rec["scratch"] = scratch
    _say(f"SCALE {scale}: reference parents on the device; Kernel 1 scratch: {scratch or 'beside the variant'}")
    prof = Path(root_dir) / "het.yaml"
    prof.write_text(f"type: local-gpu\nthreads_per_gpu_worker: {gpu_threads}\ncpu_workers: {cpu_workers}\n"
                    f"cpu_threads: {cpu_threads}\n")
    groups = [("none", [p for p in placements if not p.startswith("degree")]),
              ("degree", [p for p in placements if p.startswith("degree")])]
    for relabel, pls in groups:
        if not pls:
            continue
        t0 = time.perf_counter()
        budget = 24 * ds.n_vertices + (1 << 30) if relabel == "degree" else None
        attrs = kernel1.build_partitioned(ds.path, P=parts, relabel=relabel, client=None, progress=False,
                                          memory_budget=budget, scratch=scratch)
        v = attrs["variant"]
        _say(f"SCALE {scale}: Kernel 1 {v} in {time.perf_counter() - t0:.1f} s")
        for w, t in bases:
            with client_for(n_workers=w, threads_per_worker=t, quiet=True) as client:
                tm, lv, table = _dask_times(client, ds, v, roots, nedge)
            key = f"cpu_only_{w}x{t}_{v}"
            rec[key] = {"times": tm, "hmean_teps": _hmean(tm, nedge), "workers": table, "first_levels": lv}
            _say(f"SCALE {scale}: CPU-only dask {w}x{t} on {v}: {rec[key]['hmean_teps'] / 1e9:.2f} GTEPS")
            save()
        with client_for(profile=str(prof), quiet=True) as client:
            for placement in pls:
                limit, ranks, share = _gpu_half_limit(attrs, ds.n_vertices, placement)
                tm, lv, table = _dask_times(client, ds, v, roots, nedge, placement=placement,
                                            device_memory_limit=limit)
                rec[placement] = {"variant": v, "times": tm, "hmean_teps": _hmean(tm, nedge), "workers": table,
                                  "first_levels": lv, "device_memory_limit": limit, "gpu_ranks": ranks,
                                  "gpu_edge_share": share}
                _say(f"SCALE {scale}: GPU+CPU {placement}: {rec[placement]['hmean_teps'] / 1e9:.2f} GTEPS, GPU holds "
                     f"{share:.1%} of the entries (ranks {ranks}); split {table}")
                save()
        shutil.rmtree(ds.path / "csr" / v)
    base = max((k for k in rec if k.startswith("cpu_only_")), key=lambda k: rec[k]["hmean_teps"])
    rec["best_cpu_only"] = base
    for placement in placements:
        rec[placement]["ratio_vs_cpu_only"] = rec[placement]["hmean_teps"] / rec[base]["hmean_teps"]
    return rec


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", type=int, default=26)
    ap.add_argument("--roots", type=int, default=16)
    ap.add_argument("--hscale", type=int, default=0, help="SCALE of the heterogeneous part (0: skip)")
    ap.add_argument("--hparts", type=int, default=8)
    ap.add_argument("--cpu-workers", type=int, default=3, help="CPU workers beside the GPU worker (hetero)")
    ap.add_argument("--cpu-threads", type=int, default=4)
    ap.add_argument("--gpu-threads", type=int, default=4, help="threads of the hetero GPU worker")
    ap.add_argument("--bases", default="4x4", help="CPU-only cluster shapes WORKERSxTHREADS, comma separated "
                    "(the best is the ratios' denominator)")
    ap.add_argument("--placements", default="block,random,degree,degree-low")
    ap.add_argument("--scratch", default="auto", help="Kernel 1 scratch: auto (/dev/shm if it has room), "
                    "beside, or a directory")
    ap.add_argument("--skip-one", action="store_true")
    ap.add_argument("--rounds", type=int, default=1, help="P = 1 measurements of part one (the worst is reported)")
    ap.add_argument("--two", type=int, default=0, help="rounds of the two-GPU-worker IPC/host A/B (0: skip)")
    ap.add_argument("--built", type=int, default=0, help="rounds of the two-GPU-worker built/stored A/B (0: skip)")
    ap.add_argument("--built-parts", type=int, default=2)
    a = ap.parse_args(argv)
    rec, where = {"args": vars(a)}, []

    def save():
        where[:] = [write_record("dask_gpu", rec, path=where[0] if where else None)]

    with tempfile.TemporaryDirectory(prefix="dbfs-dgpu-") as d:
        if not a.skip_one or a.two or a.built:
            ds, ref = gpu_reference(a.scale, a.roots, Path(d) / "one", (1, 2, 4) if a.two else (1, 4))
            rec["one"] = ref
            if not a.skip_one:
                ref.update(part_one(ds, ref, Path(d) / "one", a.rounds))
            if a.two:
                rec["two"] = part_two(ds, ref, Path(d) / "one", a.two)
            if a.built:
                rec["built"] = part_built(ds, ref, Path(d) / "one", a.built_parts, a.built)
        if a.hscale:
            bases = [tuple(int(x) for x in b.split("x")) for b in a.bases.split(",")]
            rec["hetero"] = {}
            part_hetero(a.hscale, a.roots, a.hparts, a.cpu_workers, a.cpu_threads, a.gpu_threads, bases,
                        a.placements.split(","), a.scratch, Path(d) / "het", rec["hetero"], save)
    save()
    if "two" in rec:
        print(f"two GPU workers on one GPU (SCALE {a.scale}): CUDA IPC vs host staging: "
              f"P=2 {rec['two']['p2_ipc_vs_host']:.3f}x, P=4 {rec['two']['p4_ipc_vs_host']:.3f}x")
    if "built" in rec:
        b = rec["built"]
        print(f"two GPU workers on one GPU (SCALE {a.scale}), P={b['P']}: built on the workers vs CPU Kernel 1 into "
              f"zarr + load: {b['ready_ratio']:.2f}x faster to a searchable graph, TEPS {b['teps_ratio']:.3f}x")
    if "dask_gpu_p1" in rec.get("one", {}):
        print(f"one GPU worker vs --backend gpu (SCALE {a.scale}): P=1 {rec['one']['dask_gpu_p1']['ratio_vs_gpu']:.3f}x"
              f" (worst of {a.rounds}: {', '.join(f'{x:.3f}' for x in rec['one']['dask_gpu_p1']['ratios'])}),"
              f" P=4 {rec['one']['dask_gpu_p4']['ratio_vs_gpu']:.3f}x")
    if "hetero" in rec:
        h = rec["hetero"]
        print(f"GPU+CPU vs CPU-only {h['best_cpu_only']} (SCALE {a.hscale}): " + ", ".join(
            f"{k} {h[k]['ratio_vs_cpu_only']:.2f}x" for k in a.placements.split(",")))


if __name__ == "__main__":
    main()

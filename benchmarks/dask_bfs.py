"""Distributed BFS benchmark: per-level overhead and TEPS of ``--backend dask``.

Two parts, both in one JSON record (``benchmarks/results/dask_bfs-<stamp>.json``):

1. ``exchange`` (skip with ``--no-exchange``): the cost of driving one BSP
   level on Dask, four ways, with tiny data (a 1 kB all-to-all plus a count
   all-gather per level, W worker processes x 1 thread, one partition each):

   - ``client-loop``: per level the client submits W pinned tasks, each
     depending on all W outputs of the level before, and gathers them;
   - ``chained``: the same tasks submitted ``--levels`` levels ahead (the
     client is not in the loop; a lower bound for a task-based BFS, which
     needs a second task level per BFS level to agree on the counts);
   - ``mesh-dask``: one long-running task per worker, messages through
     distributed's comm layer (``transport="dask"`` of dbfs.bfs.dask);
   - ``mesh-tcp-threads``: the same loop over the authenticated TCP mesh
     with a reader thread per peer;
   - ``mesh-tcp``: the same loop over the authenticated TCP mesh, selectors
     (the default).

   Each mesh round sends the same binary frames as the BFS level loop (a
   rank list plus a 128-word slice, then the counts frame).

2. ``bfs``: for each SCALE in ``--scales`` (Graph500 Kronecker, edgefactor
   16) and each ``PxW`` in ``--configs`` (P partitions on W worker processes
   of cores/W threads): ``--reps`` rounds over ``--roots`` Graph500 search
   keys, each dask search timed right after the single-process ``do`` (this
   process, all cores, timed as ``--backend cpu`` times it: the garbage
   collector off) on the same root, so drift on a shared machine hits both
   alike (with a 50 ms pause before each, so the other side's OpenMP
   threads have stopped spinning); per root the median of the rounds. Reported: harmonic-mean
   TEPS (Graph500 count) of both and their ratio, median time and wall time,
   per-level overhead (``overhead`` of the level records: time not in
   per-partition compute) as mean / median / p90 / max over all levels,
   load and mesh times, and the first round's per-level records of both
   (``first_round``; the single-process ones from an extra search). A warm-up
   search per config is validated with ``validate_distributed`` and must
   agree with the serial nedge. Before any cluster starts, the same rounds
   of the single process ALONE (``cpu_do_alone``, and each config's
   ``ratio_vs_cpu_do_alone``): the rate a user's one process gets on an idle
   host, against which a slower ``do`` beside the cluster's idle workers
   shows what the cluster costs the other processes of its host.

3. ``stalls`` (``--stalls N``): the first run on a fresh clone, as a new
   user makes it: a child process with an EMPTY Numba cache directory
   (``NUMBA_CACHE_DIR``; a fresh clone has no ``.nbi``/``.nbc`` files)
   starts a LocalCluster of P workers (``--stall-config PxW``) and drives
   the dask backend as ``dbfs run`` does (load, one untimed warm-up
   search, then N searches from the Graph500 keys, each followed by its
   nedge count), per SCALE in ``--scales``. Recorded per search: the
   Graph500 seconds (measured on the workers) and the client's wall time
   around the search call; summarised as median, max and max / median.

    python benchmarks/dask_bfs.py --scales 18
    python benchmarks/dask_bfs.py --scales 24 26 --configs 1x1 4x4 8x8 16x16 --roots 16
    python benchmarks/dask_bfs.py --scales 16 --no-exchange --no-bfs --stalls 100

Top-level imports stay light: Dask's worker processes re-import this script.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dbfs.workers_info import workers_info  # noqa: E402


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


# ----------------------------------------------------------------- exchange
def _lvl_task(i, *prev):
    s = 0
    for c, _ in prev:
        s += c
    return (s + i, np.zeros(128, np.int64))


def _mesh_loop(mesh_id, widx, W, levels):
    from dbfs.bfs.dask.mesh.frames import COUNTS, FRONT, START
    from dbfs.bfs.dask.mesh.plugin import get_plugin

    mesh = get_plugin().meshes[(mesh_id, widx)]
    peers = [j for j in range(W) if j != widx]
    payload = np.zeros(128, np.int64)
    mesh.exchange(START, {j: [(0,)] for j in peers})                                           # barrier
    times = []
    for _ in range(levels):
        t = time.perf_counter()
        mesh.exchange(FRONT, {j: [(widx,), payload] for j in peers})                             # data all-to-all
        mesh.exchange(COUNTS, {j: [(1, 2, 3), (0.0,)] for j in peers})                            # counts
        times.append(time.perf_counter() - t)
    return times


def bench_exchange(workers_list, levels, reps=3):
    from dbfs.bfs.dask import close_mesh, open_mesh
    from dbfs.cluster import client_for

    out = []
    for W in workers_list:
        with client_for(n_workers=W, threads_per_worker=1, quiet=True) as client:
            ws = sorted(workers_info(client))
            row = {"W": W}
            # client in the loop
            per = []
            for _ in range(reps):
                prev = []
                t0 = time.perf_counter()
                for _lv in range(levels):
                    futs = [client.submit(_lvl_task, i, *prev, workers=[w], allow_other_workers=False, pure=False)
                            for i, w in enumerate(ws)]
                    client.gather(futs)
                    prev = futs
                per.append((time.perf_counter() - t0) / levels)
            row["client-loop_ms"] = 1e3 * statistics.median(per)
            # chained ahead
            per = []
            for _ in range(reps):
                prev = []
                t0 = time.perf_counter()
                for _lv in range(levels):
                    prev = [client.submit(_lvl_task, i, *prev, workers=[w], allow_other_workers=False, pure=False)
                            for i, w in enumerate(ws)]
                client.gather(prev)
                per.append((time.perf_counter() - t0) / levels)
            row["chained_ms"] = 1e3 * statistics.median(per)
            # persistent loops on both meshes
            for transport in ("dask", "tcp-threads", "tcp"):
                mid = open_mesh(client, ws, transport)
                per = []
                for _ in range(reps):
                    futs = [client.submit(_mesh_loop, mid, i, W, levels, workers=[w], allow_other_workers=False,
                                          pure=False) for i, w in enumerate(ws)]
                    times = client.gather(futs)[0]
                    per.append(statistics.median(times))
                close_mesh(client, mid, ws)
                row[f"mesh-{transport}_ms"] = 1e3 * statistics.median(per)
            out.append(row)
            print(f"exchange W={W}: " + "  ".join(f"{k} {v:.3f}" for k, v in row.items() if k != "W"),
                  file=sys.stderr)
    return out


# ---------------------------------------------------------------------- bfs
# pause before each timed search: OpenMP threads of the process that ran last
# spin-wait for a while after their parallel region and would steal the cores
_QUIET = 0.05


def _timed(fn, *args):
    """``fn(*args)`` timed as ``--backend cpu`` times its searches (:func:`dbfs.bfs.timing.collector_paused`:
    the garbage collector off): (seconds, result)."""
    from dbfs.bfs.timing import collector_paused

    with collector_paused():
        t0 = time.perf_counter()
        out = fn(*args)
        return time.perf_counter() - t0, out


def _worker_cpus(dask_worker=None) -> list:
    """(client.run) the CPUs this worker process may run on (its binding, dbfs.cluster.binding)."""
    from dbfs.cluster.binding import usable_cpus

    return usable_cpus()


def bench_scale(scale, configs, n_roots, reps, datasets, transport, alpha=None, worker_env=None):
    """Per config: start its cluster, then for ``reps`` rounds over the roots
    time the single-process do and the dask search back to back (drift on a
    shared machine hits both alike); per root the median of the rounds.
    ``worker_env`` (a dict) is set after this process's first search: its
    OpenMP runtime has read its environment by then, so the values reach the
    workers started next and not the single process."""
    from benchmarks.common import do_validated, hmean_teps, stage
    from dbfs import kernel1, store
    from dbfs.bfs import get_algorithm
    import dbfs.bfs.dask as D
    from dbfs.cluster import client_for
    from dbfs.roots import graph500_roots
    from dbfs.spec import GraphSpec

    cores = _cores()
    spec = GraphSpec.make("kronecker", scale)
    stage("dask_bfs", f"SCALE {scale}: the edge list (generated unless stored)")
    ds, _ = store.generate(spec, root=datasets, client=None, quiet=True)
    edges = ds.edges()[:]
    roots = [int(r) for r in graph500_roots(edges, scale, 2, 3, n=n_roots, n_vertices=ds.n_vertices)]
    rec = {"scale": scale, "n_vertices": ds.n_vertices, "n_edges": ds.n_edges, "roots": roots, "reps": reps}

    stage("dask_bfs", f"SCALE {scale}: Kernel 1 of the single process (P = 1)")
    kernel1.build_partitioned(ds.path, P=1, client=None, progress=False)
    g = kernel1.load_csr(ds.path, kernel1.variant_name(1))
    fn = get_algorithm("do", "cpu")
    fn(g, roots[0])                                                   # warm-up (JIT)
    os.environ.update(worker_env or {})
    rec["worker_env"] = [f"{k}={v}" for k, v in (worker_env or {}).items()]
    stage("dask_bfs", f"SCALE {scale}: the single process's {len(roots)} searches, validated in batches")
    nedges, levels = do_validated(fn, g, edges, roots, ds.n_vertices)
    rec["nedge"] = nedges
    rec["do_levels"] = levels              # the single process's level steps a search
    # the single process alone, no cluster up: its rate beside the workers' idle processes (the rounds below)
    # is the ratio's reference, and a gap between the two is the cluster's cost to a process on its host
    stage("dask_bfs", f"SCALE {scale}: the single process alone, {reps} rounds")
    alone = [[] for _ in roots]
    for _ in range(reps):
        for k, r in enumerate(roots):
            time.sleep(_QUIET)
            alone[k].append(_timed(fn, g, r)[0])
    alone_med = [statistics.median(x) for x in alone]
    rec["cpu_do_alone"] = {"times": alone_med, "all_times": alone, "hmean_teps": hmean_teps(alone_med, nedges)}
    rec["dask"] = []
    for cfg in configs:
        shape, _, flag = cfg.partition(":")
        P, W = (int(x) for x in shape.split("x"))
        tpw = max(1, cores // W)
        prof = None
        if flag == "bind":          # each worker bound to cores of its own (dbfs.cluster.binding's A/B)
            prof = Path(datasets) / "bind.yaml"
            prof.write_text("type: local\nbind_cores: true\n")
        stage("dask_bfs", f"SCALE {scale} {cfg}: Kernel 1 (P = {P})")
        kernel1.build_partitioned(ds.path, P=P, client=None, progress=False)
        stage("dask_bfs", f"SCALE {scale} {cfg}: {W} workers x {tpw} threads, the partitions loaded")
        with client_for(n_workers=W, threads_per_worker=tpw, quiet=True,
                        profile=str(prof) if prof else None) as client:
            dg = D.load_distributed(client, ds.path, kernel1.variant_name(P), transport=transport,
                                    shared_memory=False if flag == "noshm" else None)
            res, _, _ = D.search(dg, roots[0], alpha=alpha)          # warm-up (JIT on the workers)
            vd = D.validate_distributed(client, ds.path, dg, res, roots[0])
            assert vd.ok and vd.nedge == nedges[0], vd.summary()
            res.release()
            cpu_t = [[] for _ in roots]
            secs = [[] for _ in roots]
            walls, ovs, per_root = [], [], []
            for rep in range(reps):
                stage("dask_bfs", f"SCALE {scale} {cfg}: round {rep + 1} of {reps}")
                for k, r in enumerate(roots):
                    time.sleep(_QUIET)
                    t_cpu = _timed(fn, g, r)[0]
                    cpu_t[k].append(t_cpu)
                    time.sleep(_QUIET)
                    res, sec, lst = D.search(dg, r, stats=True, alpha=alpha)
                    secs[k].append(sec)
                    walls.append(res.wall)
                    ovs += [x["overhead"] for x in lst]
                    if rep == 0:       # per-level times of the single-process do: one more (untimed) search
                        time.sleep(_QUIET)      # the workers' threads quiet first, as before the timed one
                        cpu_lv = fn(g, r, stats=True)[1]
                        per_root.append({"root": r, "seconds": sec, "cpu_do_seconds": t_cpu, "levels": lst,
                                         "cpu_do_levels": [{k2: x[k2] for k2 in ("level", "direction", "time")}
                                                           for x in cpu_lv]})
                    res.release()
            cpu_med = [statistics.median(x) for x in cpu_t]
            sec_med = [statistics.median(x) for x in secs]
            row = {"config": cfg, "P": P, "workers": W, "threads_per_worker": tpw, "transport": transport,
                   "shared_frontier": dg.shm or "on",
                   "load_time_s": dg.load_time, "mesh_time_s": dg.mesh_time,
                   "part_load_times_s": [dg.part_load_times[i] for i in range(P)],
                   "times": sec_med, "all_times": secs, "cpu_do_times": cpu_med,
                   "median_s": statistics.median(sec_med), "cpu_do_median_s": statistics.median(cpu_med),
                   "median_wall_s": statistics.median(walls), "hmean_teps": hmean_teps(sec_med, nedges),
                   "cpu_do_hmean_teps": hmean_teps(cpu_med, nedges),
                   "overhead_ms": {"mean": 1e3 * float(np.mean(ovs)), "median": 1e3 * float(np.median(ovs)),
                                   "p90": 1e3 * float(np.percentile(ovs, 90)), "max": 1e3 * float(np.max(ovs))},
                   "levels_per_search": len(per_root[0]["levels"]), "first_search_levels": per_root[0]["levels"],
                   "first_round": per_root}
            row["ratio_vs_cpu_do"] = row["hmean_teps"] / row["cpu_do_hmean_teps"]
            row["ratio_vs_cpu_do_alone"] = row["hmean_teps"] / rec["cpu_do_alone"]["hmean_teps"]
            row["worker_cpus"] = {str(k): v for k, v in client.run(_worker_cpus).items()}
            dg.close()
        rec["dask"].append(row)
        print(f"SCALE {scale}: dask {cfg} {row['hmean_teps'] / 1e6:.1f} MTEPS vs cpu do "
              f"{row['cpu_do_hmean_teps'] / 1e6:.1f}, overhead/level {row['overhead_ms']['median']:.3f} ms median",
              file=sys.stderr)
    return rec


# ------------------------------------------------------------------- stalls
def _stall_child(scale, n_roots, config, datasets):
    """(child process, fresh Numba cache) the searches of a dask run; prints one JSON line."""
    import json

    from dbfs.backends import RunConfig
    from dbfs.cluster import client_for
    from dbfs.pipeline import open_backend
    from dbfs.spec import GraphSpec

    P, W = (int(x) for x in config.split("x"))
    cfg = RunConfig(backend="dask", partitions=P, n_roots=n_roots, validate=False, quiet=True)
    with client_for(n_workers=W, threads_per_worker=max(1, _cores() // W), quiet=True) as client:
        b, ds, variant, _ = open_backend(GraphSpec.make("kronecker", scale), datasets, cfg, client)
        try:
            roots = [int(r) for r in b.roots(n_roots)]
            b.search(roots[0])                                            # the run's untimed warm-up search
            seconds, walls, nedges = [], [], []
            for r in roots:
                t0 = time.perf_counter()
                seconds.append(b.search(r))
                walls.append(time.perf_counter() - t0)
                nedges.append(b.nedge(r))
            load = b.load_time
        finally:
            b.close()
    print(json.dumps({"roots": roots, "seconds": seconds, "wall": walls, "nedge": nedges, "load_time_s": load}))


def _spread(xs) -> dict:
    med = statistics.median(xs)
    return {"median_ms": 1e3 * med, "max_ms": 1e3 * max(xs), "max_over_median": max(xs) / med,
            "argmax": int(np.argmax(xs))}


def bench_stalls(scales, n_roots, config, datasets):
    """Per SCALE: a child process with an empty Numba cache runs the searches (see the module docstring)."""
    import json
    import subprocess

    out = []
    for scale in scales:
        with tempfile.TemporaryDirectory(prefix="dbfs-numba-") as cache:
            env = dict(os.environ, NUMBA_CACHE_DIR=cache)
            p = subprocess.run([sys.executable, __file__, "--stall-child", str(scale), str(n_roots), config,
                                datasets], env=env, capture_output=True, text=True, check=False)
        if p.returncode:
            raise SystemExit(f"stall child failed:\n{p.stderr[-3000:]}")
        r = json.loads(p.stdout.strip().splitlines()[-1])
        row = {"scale": scale, "config": config, "searches": len(r["seconds"]), "numba_cache": "empty",
               "load_time_s": r.pop("load_time_s"), "seconds": _spread(r["seconds"]), "wall": _spread(r["wall"]),
               "per_search": r}
        out.append(row)
        print(f"SCALE {scale} {config}: {row['searches']} searches, median {row['seconds']['median_ms']:.2f} ms, "
              f"max {row['seconds']['max_ms']:.2f} ms ({row['seconds']['max_over_median']:.1f}x); wall median "
              f"{row['wall']['median_ms']:.2f} ms, max {row['wall']['max_ms']:.2f} ms "
              f"({row['wall']['max_over_median']:.1f}x)", file=sys.stderr)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--scales", type=int, nargs="*", default=[18], help="SCALEs of the BFS part")
    ap.add_argument("--configs", nargs="+", default=["1x1", "2x2", "4x2", "4x4"],
                    help="PxW: P partitions on W worker processes (cores/W threads each); "
                         "PxW:noshm sends bottom-up frontier slices through the mesh instead of /dev/shm; "
                         "PxW:bind binds each worker to cores of its own")
    ap.add_argument("--roots", type=int, default=8, help="search keys per SCALE")
    ap.add_argument("--reps", type=int, default=3, help="rounds over the roots (median per root)")
    ap.add_argument("--transport", default="tcp", choices=["tcp", "tcp-threads", "dask"],
                    help="mesh of the BFS part")
    ap.add_argument("--exchange-workers", type=int, nargs="*", default=[2, 4], help="W values of the exchange part")
    ap.add_argument("--levels", type=int, default=50, help="levels per exchange measurement")
    ap.add_argument("--no-exchange", action="store_true", help="skip the exchange part")
    ap.add_argument("--alpha", type=float, default=None,
                    help="Beamer's alpha of the partitioned searches (default: dbfs's for the workers' kind)")
    ap.add_argument("--worker-env", nargs="*", default=[], metavar="KEY=VALUE",
                    help="environment of the workers only (e.g. OMP_WAIT_POLICY=PASSIVE), set after the single "
                         "process's OpenMP runtime has started")
    ap.add_argument("--no-bfs", action="store_true", help="skip the bfs part")
    ap.add_argument("--stalls", type=int, default=0, metavar="N",
                    help="stalls part: N searches per SCALE on a fresh Numba cache (0: skip)")
    ap.add_argument("--stall-config", default="2x2", help="PxW of the stalls part")
    ap.add_argument("--stall-child", nargs=4, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--datasets", default=None, help="dataset root (default $DBFS_DATASETS or a temp dir)")
    ap.add_argument("--out", default=None, help="results directory (default benchmarks/results)")
    args = ap.parse_args(argv)
    worker_env = {}
    for kv in args.worker_env:
        key, eq, val = kv.partition("=")
        if not (eq and key):
            ap.error(f"--worker-env {kv!r}: pass KEY=VALUE")
        worker_env[key] = val
    for cfg in args.configs:
        shape, _, flag = cfg.partition(":")
        if flag not in ("", "noshm", "bind") or len(shape.split("x")) != 2:
            ap.error(f"--configs {cfg!r}: pass PxW, PxW:noshm or PxW:bind")
    if args.stall_child:
        scale, n_roots, config, datasets = args.stall_child
        return _stall_child(int(scale), int(n_roots), config, datasets)

    from benchmarks.common import write_record

    record = {"params": vars(args), "cores": _cores(), "loadavg_start": os.getloadavg(),
              "note": "shared machine: loadavg_start/loadavg_end say how busy it was"}
    if not args.no_exchange:
        record["exchange"] = bench_exchange(args.exchange_workers, args.levels)
    tmp = None
    datasets = args.datasets or os.environ.get("DBFS_DATASETS")
    if not datasets and args.scales:
        tmp = tempfile.TemporaryDirectory(prefix="dbfs-bench-")
        datasets = tmp.name
    record["bfs"] = [] if args.no_bfs else [bench_scale(s, args.configs, args.roots, args.reps, datasets,
                                                        args.transport, args.alpha, worker_env)
                                            for s in args.scales]
    if args.stalls:
        record["stalls"] = bench_stalls(args.scales, args.stalls, args.stall_config, datasets)
    record["loadavg_end"] = os.getloadavg()
    write_record("dask_bfs", record, args.out)

    if record.get("exchange"):
        print("per-level cost of driving a BSP level (ms, median)")
        print(f"{'W':>3} {'client-loop':>12} {'chained':>9} {'mesh-dask':>10} {'mesh-tcp-threads':>17} "
              f"{'mesh-tcp':>9}")
        for r in record["exchange"]:
            print(f"{r['W']:>3} {r['client-loop_ms']:>12.2f} {r['chained_ms']:>9.2f} {r['mesh-dask_ms']:>10.3f} "
                  f"{r['mesh-tcp-threads_ms']:>17.3f} {r['mesh-tcp_ms']:>9.3f}")
    for s in record["bfs"]:
        print(f"\nSCALE {s['scale']} ({len(s['roots'])} roots x {s['reps']} rounds, cpu do timed next to each search)")
        print(f"single process alone (no cluster up): {s['cpu_do_alone']['hmean_teps'] / 1e6:.1f} MTEPS")
        print(f"{'PxW':>5} {'MTEPS':>8} {'cpu do':>8} {'ratio':>6} {'/alone':>6} {'med ms':>8} {'wall ms':>8} "
              f"{'levels':>6} {'ovh med':>8} {'ovh p90':>8} {'load s':>7}")
        for d in s["dask"]:
            print(f"{d['config']:>5} {d['hmean_teps'] / 1e6:8.1f} {d['cpu_do_hmean_teps'] / 1e6:8.1f} "
                  f"{d['ratio_vs_cpu_do']:6.2f} {d['ratio_vs_cpu_do_alone']:6.2f} "
                  f"{1e3 * d['median_s']:8.2f} {1e3 * d['median_wall_s']:8.2f} "
                  f"{d['levels_per_search']:6d} {d['overhead_ms']['median']:8.3f} {d['overhead_ms']['p90']:8.3f} "
                  f"{d['load_time_s']:7.2f}")
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()

"""Host seconds of each step of the NCCL level loop on G GPU workers (where a level's time goes).

Wraps the steps of :class:`dbfs.bfs.dask.search.gpu_nccl._NcclSearch`, the NCCL calls of
:class:`dbfs.bfs.dask.mesh.nccl._Comm` and the event marks in a timer on every worker
(``client.run``), runs ``--roots`` searches of a Kronecker graph built on the workers
(P = G, one a GPU: ``--gpus``, default 2), and prints per step: calls per level, mean host microseconds
per call and per level, next to the mean level time. A step's host time includes any wait it makes (a
``_read`` waits for the collectives before it); the rest of a level is the loop's own
Python. Needs G GPUs and dask-cuda.

    python benchmarks/nccl_level_profile.py --scale 22 --roots 8 [--relabel degree] [--batch] [--gpus 4]

``_bsp_levels`` is one search on a worker (its setup, levels and parents); with ``--batch`` the
searches go as one batch (:func:`dbfs.bfs.dask.search_many`), as the pipeline runs them.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import install_step_timers, take_step_timers  # noqa: E402

_STEPS = {
    "dbfs.bfs.dask.search.bsp": ["_bsp_levels"],
    "dbfs.bfs.dask.search.gpu_search:_GpuSearch": ["__init__"],
    "dbfs.bfs.dask.search.gpu_nccl:_NcclSearch": ["__init__", "td_level", "bu_level", "to_bitmaps", "to_queues", "_claim",
                                           "_absorb_dev", "_read", "_capped", "_exchange_bitmap", "_bu_steps",
                                           "_td_exact", "_td_tiny", "_tiny_calls", "_send_frontier", "_totals",
                                           "_zero_counters", "start", "visit_root", "parents"],
    # the module functions gpu_nccl calls by the names it imported
    "dbfs.bfs.dask.search.gpu_nccl": ["send_slices", "or_slices", "zero_peer_slices", "td_dense", "dense"],
    "dbfs.bfs.dask.search.level_graph:_Replays": ["run", "load_params"],
    "dbfs.bfs.dask.mesh.nccl:_Comm": ["send", "recv", "allreduce", "allgather", "check"],
    "dbfs.bfs.dask.mesh.nccl:_Timeline": ["mark", "settle", "begin"],
    "dbfs.bfs.dask.search.gpu_search": ["expand"],
    "dbfs.bfs.policy:BeamerPolicy": ["next"],
}



def _set_spin(on: bool, dask_worker=None) -> bool:
    """(client.run) how this worker's NCCL levels wait for the device (gpu_nccl.SPIN)."""
    from dbfs.bfs.dask.search import gpu_nccl

    gpu_nccl.SPIN = bool(on)
    return gpu_nccl.SPIN


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=int, default=22)
    ap.add_argument("--roots", type=int, default=8)
    ap.add_argument("--relabel", default="none")
    ap.add_argument("--out", default="")
    ap.add_argument("--batch", action="store_true", help="search the roots as one batch (search_many)")
    ap.add_argument("--no-spin", action="store_true", help="levels wait for the device by a blocking synchronize "
                                                           "(gpu_nccl.SPIN False), not by polling")
    ap.add_argument("--gpus", type=int, default=2, help="GPU workers, one partition each")
    args = ap.parse_args(argv)
    if args.gpus < 2:
        ap.error("--gpus: at least 2 (an NCCL mesh)")

    import numpy as np

    import dbfs.bfs.dask as D
    from dbfs import store
    from dbfs.cluster import client_for
    from dbfs.spec import GraphSpec

    with tempfile.TemporaryDirectory(prefix="dbfs-prof-") as tmp:
        if args.scale > 22:     # the edges regenerated on the devices (as the multi-GPU benchmark's)
            subprocess.run([sys.executable, "-m", "dbfs.cli", "generate", "--scale", str(args.scale), "--edges", "virtual",
                            "--backend", "gpu", "--datasets", tmp], check=True)
            ds = store.open_dataset(GraphSpec.make("kronecker", args.scale).name, Path(tmp))
        else:
            ds, _ = store.generate(GraphSpec.make("kronecker", args.scale), root=Path(tmp), client=None, quiet=True)
        prof = Path(tmp) / "gpu2.yaml"
        gpus = ", ".join(str(g) for g in range(args.gpus))
        prof.write_text(f"type: local-gpu\ngpus: [{gpus}]\nthreads_per_gpu_worker: 2\ncpu_workers: 0\n")
        with client_for(profile=str(prof), quiet=True) as client:
            client.wait_for_workers(args.gpus, timeout=120)
            with D.build_distributed(client, ds.path, args.gpus, relabel=args.relabel) as dg:
                print(f"mesh: {dg.frontier_sharing}, S{args.scale}, relabel {args.relabel}", flush=True)
                cands = np.random.default_rng(0).integers(0, ds.n_vertices, 8 * args.roots + 64)
                roots = [int(r) for r in cands[D.eligible_distributed(dg, cands)][:args.roots + 1]]
                client.run(_set_spin, not args.no_spin)
                D.search(dg, roots[0])                       # warm-up
                client.run(install_step_timers, _STEPS)
                client.run(take_step_timers)
                levels, wall, timed = 0, 0.0, 0.0
                t0 = time.perf_counter()
                if args.batch:          # one task a worker for the batch (the pipeline's way)
                    got = D.search_many(dg, roots[1:], stats=True)
                else:
                    got = [D.search(dg, r, stats=True) for r in roots[1:]]
                client_s = time.perf_counter() - t0
                by_level = {}
                for res, sec, lst in got:
                    for x in lst:
                        by_level.setdefault(x["level"], []).append(x)
                    levels += len(lst)
                    wall += sum(x["time"] for x in lst)
                    timed += sec
                    res.release()
                got = client.run(take_step_timers)
    n = len(roots) - 1
    report = {"scale": args.scale, "roots": args.roots, "relabel": args.relabel, "batch": args.batch, "gpus": args.gpus,
              "spin": not args.no_spin,
              "levels": levels, "level_us": 1e6 * wall / max(levels, 1), "workers": {},
              "client_ms_per_search": 1e3 * client_s / n, "timed_ms_per_search": 1e3 * timed / n}
    print(f"{levels} levels, mean level {report['level_us']:.1f} us; per search: {report['client_ms_per_search']:.2f} "
          f"ms on the client, {report['timed_ms_per_search']:.2f} ms timed on the workers "
          f"({'one batch' if args.batch else 'one call a search'})")
    report["by_level"] = {}
    for lv, xs in sorted(by_level.items()):
        med = {k: float(np.median([x[k] for x in xs])) for k in ("time", "kernel", "overhead", "exchange")}
        dirs = sorted({x["direction"] for x in xs})
        report["by_level"][lv] = {"searches": len(xs), "directions": dirs, **med}
        print(f"  level {lv} ({'/'.join(dirs)}, {len(xs)} searches): median time {1e6 * med['time']:.0f} us, kernel "
              f"{1e6 * med['kernel']:.0f}, exchange {1e6 * med['exchange']:.0f}, overhead {1e6 * med['overhead']:.0f}")
    for w, st in sorted(got.items()):
        print(f"worker {w}")
        rows = sorted(st.items(), key=lambda kv: -kv[1][1])
        report["workers"][w] = {k: {"calls": n, "us_per_call": 1e6 * s / max(n, 1), "us_per_level": 1e6 * s / levels}
                                for k, (n, s) in rows}
        for k, (n, s) in rows:
            print(f"  {k:32s} {n / levels:6.2f}/level {1e6 * s / max(n, 1):9.1f} us/call {1e6 * s / levels:9.1f} us/level")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Host seconds of each step of the NCCL level loop on G GPU workers (where a level's time goes); an A/B of the
bottom-up frontier copied during the search.

Wraps the steps of :class:`dbfs.bfs.dask.search.gpu_nccl._NcclSearch`, the NCCL calls of
:class:`dbfs.bfs.dask.mesh.nccl._Comm` and the event marks in a timer on every worker
(``client.run``), runs ``--roots`` searches of a Kronecker graph built on the workers
(P = G, one a GPU: ``--gpus``, default 2), and prints per step: calls per level, mean host microseconds
per call and per level, next to the mean level time. A step's host time includes any wait it makes (a
``_read`` waits for the collectives before it); the rest of a level is the loop's own
Python. Needs G GPUs and dask-cuda.

    python benchmarks/nccl_level_profile.py --scale 22 --roots 8 [--relabel degree] [--batch]

``--overlap auto off --reps 3`` (no step timers then) runs the same roots on the same partitions with each
setting of :data:`dbfs.bfs.dask.search.gpu_overlap.FORCE` in turn (auto: the search's rule; off: no bottom-up
level's frontier copied during its search; on: every one; ``on:16``: with ``CHUNKS`` 16), ``--reps`` times,
alternating, and prints each
setting's mean search and its bottom-up and top-down levels' medians (time, kernel, exchange).

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
    "dbfs.bfs.dask.search.gpu_nccl": ["send_slices", "or_slices", "zero_peer_slices", "td_dense", "dense",
                                      "bu_overlap", "map_peers"],
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


_FORCE = {"auto": None, "first": None, "on": True, "off": False, "flagged": True}


def _setting(arg: str):
    """``MODE[:CHUNKS]``, checked."""
    mode, _, chunks = arg.partition(":")
    if mode not in _FORCE or (chunks and not chunks.isdigit()):
        raise argparse.ArgumentTypeError(f"--overlap takes {', '.join(_FORCE)}, each with an optional :CHUNKS, "
                                         f"not {arg!r}")
    return arg


def _set_overlap(arg, dask_worker=None):
    """(client.run) whether this worker's bottom-up levels copy their frontier during the search
    (gpu_overlap.FORCE) and in how many ranges (gpu_overlap.CHUNKS)."""
    from dbfs.bfs.dask.search import gpu_overlap

    mode, _, chunks = arg.partition(":")
    gpu_overlap.FORCE = _FORCE[mode]
    gpu_overlap.CHAIN = mode != "first"
    gpu_overlap.COPIES = mode != "flagged"
    if chunks:
        gpu_overlap.CHUNKS = int(chunks)
    return arg


def _regs(vid, dask_worker=None):
    """(client.run) registers a thread of bu_step and bu_step_signal for id type ``vid`` (C)."""
    from dbfs.bfs.gpu import _kernels

    k = _kernels(vid)
    return {n: int(k[n].num_regs) for n in ("bu_step", "bu_step_signal")}


def _trace(on: bool, dask_worker=None):
    """(client.run) start (``on``) or take this worker's overlapped levels' timings (gpu_overlap.TRACE)."""
    from dbfs.bfs.dask.search import gpu_overlap

    got, gpu_overlap.TRACE = gpu_overlap.TRACE, ([] if on else None)
    return got


def _ab(client, dg, roots, settings, reps, batch):
    """Each overlap setting's searches of ``roots``, ``reps`` rounds alternating; per setting the mean search
    and the medians of its bottom-up and top-down levels, microseconds."""
    import numpy as np

    import dbfs.bfs.dask as D

    runs = {k: {"ms": [], "bu": [], "td": [], "levels": {}} for k in settings}
    for r in range(reps):
        for k in settings:
            client.run(_set_overlap, k)
            got = D.search_many(dg, roots, stats=True) if batch else [D.search(dg, x, stats=True) for x in roots]
            for res, sec, lst in got:
                runs[k]["ms"].append(1e3 * sec)
                for x in lst:
                    runs[k][x["direction"]].append((x["time"], x["kernel"], x["exchange"]))
                    runs[k]["levels"].setdefault(f'{x["level"]}{x["direction"]}', []).append(
                        (x["time"], x["kernel"], x["exchange"], x["discovered"]))
                res.release()
            print(f"  round {r} {k}: {np.mean(runs[k]['ms'][-len(roots):]):.3f} ms a search", flush=True)
    out = {}
    for k, v in runs.items():
        out[k] = {"ms_per_search": float(np.mean(v["ms"])), "searches": len(v["ms"])}
        for d in ("bu", "td"):
            a = np.asarray(v[d]).reshape(-1, 3)
            out[k][d] = {"levels": int(a.shape[0]),
                         **{n: float(1e6 * np.median(a[:, i])) if a.shape[0] else 0.0
                            for i, n in enumerate(("time_us", "kernel_us", "exchange_us"))},
                         "sum_ms": float(1e3 * a[:, 0].sum())}
        out[k]["by_level"] = {lv: {"n": len(xs), **{n: float(np.median([x[i] for x in xs]) * (1e6 if i < 3 else 1))
                                                  for i, n in enumerate(("time_us", "kernel_us", "exchange_us",
                                                                         "discovered"))}}
                              for lv, xs in sorted(v["levels"].items(), key=lambda kv: (int(kv[0][:-2]), kv[0]))}
        print(f"{k}: {out[k]['ms_per_search']:.3f} ms a search over {out[k]['searches']}; bottom-up levels "
              f"{out[k]['bu']['levels']}, median {out[k]['bu']['time_us']:.0f} us (kernel {out[k]['bu']['kernel_us']:.0f}, "
              f"exchange {out[k]['bu']['exchange_us']:.0f}), sum {out[k]['bu']['sum_ms']:.1f} ms; top-down median "
              f"{out[k]['td']['time_us']:.0f} us")
    for lv in out[settings[0]]["by_level"]:
        print(f"  level {lv:5s} " + "; ".join(
            f"{k} {d['time_us']:.0f} ({d['kernel_us']:.0f}/{d['exchange_us']:.0f}) us"
            for k in settings for d in [out[k]["by_level"].get(lv)] if d) +
            f"; {out[settings[0]]['by_level'][lv]['discovered']:.0f} new, {out[settings[0]]['by_level'][lv]['n']} searches")
    regs = client.run(_regs, "int")
    print(f"  registers a thread: {regs}")
    out["registers"] = regs
    client.run(_set_overlap, "on")            # where an overlapped level's copies ran, against its kernel
    client.run(_trace, True)
    D.search(dg, roots[0])
    for w, rows in client.run(_trace, False).items():
        big = sorted(rows, key=lambda t: -t[0])[:3]
        out.setdefault("trace", {})[w] = big
        for t in big:
            print(f"  {w}: kernel ends {t[0]:.3f} ms; ranges' (copy starts, copy ends) "
                  + " ".join(f"({a:.3f}, {b:.3f})" for a, b in zip(t[1::2], t[2::2])))
    base = out[settings[-1]]["ms_per_search"]
    for k in settings[:-1]:
        print(f"{k} against {settings[-1]}: {base / out[k]['ms_per_search']:.3f}x the searches' speed")
    return out


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
    ap.add_argument("--overlap", nargs="+", type=_setting, default=None,
                    help="A/B of the bottom-up frontier copied during the search: each setting (auto, on, off, each "
                         "with an optional :CHUNKS) in turn, no step timers")
    ap.add_argument("--reps", type=int, default=1, help="rounds of the --overlap settings")
    ap.add_argument("--mode", type=_setting, default="auto", help="the one overlap setting of a profile with step "
                                                                   "timers (as --overlap's)")
    args = ap.parse_args(argv)
    if args.reps != 1 and not args.overlap:
        ap.error("--reps applies to --overlap only")
    if args.mode != "auto" and args.overlap:
        ap.error("--mode applies to a profile with step timers, not to --overlap's A/B")

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
                if args.overlap:
                    report = {"scale": args.scale, "roots": args.roots, "relabel": args.relabel, "gpus": args.gpus,
                              "batch": args.batch, "reps": args.reps,
                              "overlap": _ab(client, dg, roots[1:], args.overlap, args.reps, args.batch)}
                    if args.out:
                        Path(args.out).write_text(json.dumps(report, indent=1))
                    return 0
                client.run(_set_overlap, args.mode)
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
    report = {"scale": args.scale, "roots": args.roots, "relabel": args.relabel, "batch": args.batch,
              "spin": not args.no_spin, "mode": args.mode,
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

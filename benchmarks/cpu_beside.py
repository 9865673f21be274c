"""The single-process CPU search beside a Dask cluster of the same host: alone, beside idle workers, right after
a partitioned search, and after the cluster closed.

    python benchmarks/cpu_beside.py --scale 24 --config 4x4 --roots 16 --reps 3

Why: ``benchmarks/dask_bfs.py`` times the single process's ``do`` next to each partitioned search, in one
process that also drives the cluster. On 64 cores that ``do`` ran 3-4 times slower than the same process alone
(docs/BENCHMARKS.md), which makes the ratio #38 asks for meaningless until the cause is known. This script
separates the suspects, one condition after another on the same CSR and roots (after one warm-up search):

- ``alone``: no cluster yet;
- ``idle``: a LocalCluster of ``P`` workers x ``T`` threads up, its partitions loaded and searched once, then
  left alone for ``--settle`` seconds;
- ``after-search``: each ``do`` started ``--quiet`` seconds after a partitioned search of the same root ends
  (what ``dask_bfs.py`` does);
- ``closed``: the cluster shut down.

Per condition, each search timed twice in turn, as ``--backend cpu`` times it (``backend``: the garbage
collector off, :func:`dbfs.bfs.timing.collector_paused`) and with the GIL switch interval lowered to the
workers' 50 us too (``switch``: a LocalCluster's scheduler runs in this process, and with Python's 5 ms
interval a thread of it that took the GIL keeps it that long each time the search wants it back): the
median time a root over ``--reps`` rounds, the harmonic-mean TEPS (Graph500 count, the edges from one
batched validation of the alone searches), the first root's per-level times (one more, untimed ``stats``
search), and, summed over the timed ``do`` windows only, the CPU seconds the cluster's processes (this
process's children: nannies, workers) used and this process's involuntary context switches (psutil).
CPU seconds of the cluster inside the windows say its processes ran beside the ``do``; context switches
say the ``do``'s threads were descheduled. One JSON record (``cpu_beside-<stamp>.json``).

Top-level imports stay light: Dask's worker processes re-import this script.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's descendants that are alive now."""
    import psutil

    total = 0.0
    for c in psutil.Process().children(recursive=True):
        try:
            t = c.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system
    return total


def _window(fn, g, r, rule):
    """Time ``fn(g, r)`` inside the context ``rule()``; returns (seconds, the cluster's CPU seconds meanwhile,
    this process's involuntary context switches meanwhile)."""
    import psutil

    me = psutil.Process()
    c0, x0 = _children_cpu(), me.num_ctx_switches().involuntary
    with rule():
        t0 = time.perf_counter()
        fn(g, r)
        t = time.perf_counter() - t0
    return t, _children_cpu() - c0, me.num_ctx_switches().involuntary - x0


@contextlib.contextmanager
def _switch_lowered():
    """The backends' timing rule (:func:`dbfs.bfs.timing.collector_paused`: the collector off) with the GIL
    switch interval at the workers' search value (50 us, :mod:`dbfs.bfs.dask.search.bsp`) inside the block."""
    from dbfs.bfs.dask.search.bsp import SEARCH_SWITCH_S
    from dbfs.bfs.timing import collector_paused

    switch = sys.getswitchinterval()
    sys.setswitchinterval(SEARCH_SWITCH_S)
    try:
        with collector_paused():
            yield
    finally:
        sys.setswitchinterval(switch)


def _condition(name, fn, g, roots, nedge, reps, quiet, before=None):
    """Rounds of ``fn`` over ``roots`` (``before(root)`` first, then ``quiet`` seconds, then the timed
    search), each search timed twice in turn: as ``--backend cpu`` times it (``backend``: the collector off,
    :func:`dbfs.bfs.timing.collector_paused`) and with the GIL switch interval lowered too (``switch``); returns
    the condition's record."""
    from benchmarks.common import hmean_teps, stage
    from dbfs.bfs.timing import collector_paused

    stage("cpu_beside", f"{name}: {reps} rounds of {len(roots)} searches, each timed two ways")
    out = {"condition": name}
    rules = {"backend": collector_paused, "switch": _switch_lowered}
    times = {k: [[] for _ in roots] for k in rules}
    cpu = dict.fromkeys(rules, 0.0)
    ctx = dict.fromkeys(rules, 0)
    for _ in range(reps):
        for k, r in enumerate(roots):
            for how, rule in rules.items():
                if before is not None:
                    before(r)
                time.sleep(quiet)
                t, c, x = _window(fn, g, r, rule)
                times[how][k].append(t)
                cpu[how] += c
                ctx[how] += x
    for how, rule in rules.items():
        if before is not None:
            before(roots[0])
        time.sleep(quiet)
        with rule():
            levels = [{"direction": x["direction"], "time": x["time"]} for x in fn(g, roots[0], stats=True)[1]]
        med = [statistics.median(x) for x in times[how]]
        out[how] = {"times": med, "all_times": times[how], "median_s": statistics.median(med),
                    "hmean_teps": hmean_teps(med, nedge),
                    "cluster_cpu_s": cpu[how], "involuntary_switches": int(ctx[how]), "first_root_levels": levels}
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=int, default=20)
    ap.add_argument("--config", default="2x2", help="PxW: P partitions on W workers (cores / W threads each)")
    ap.add_argument("--roots", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quiet", type=float, default=0.05, help="seconds before each timed do (dask_bfs.py's)")
    ap.add_argument("--settle", type=float, default=1.0, help="seconds the idle cluster is left before 'idle'")
    ap.add_argument("--datasets", default=None, help="dataset root (default: a temporary directory)")
    ap.add_argument("--out", default=None, help="results directory (default benchmarks/results)")
    a = ap.parse_args(argv)
    shape = a.config.split("x")
    if len(shape) != 2 or not all(x.isdigit() and int(x) > 0 for x in shape):
        ap.error(f"--config {a.config!r}: give PxW, e.g. 4x4")
    P, W = (int(x) for x in shape)

    import tempfile

    from benchmarks.common import do_validated, stage, write_record
    from dbfs import kernel1, store
    import dbfs.bfs.dask as D
    from dbfs.bfs import get_algorithm
    from dbfs.cluster import client_for
    from dbfs.roots import graph500_roots
    from dbfs.spec import GraphSpec

    tmp = None if a.datasets else tempfile.TemporaryDirectory(prefix="dbfs-beside-")
    root_dir = a.datasets or tmp.name
    cores = len(os.sched_getaffinity(0))
    spec = GraphSpec.make("kronecker", a.scale)
    stage("cpu_beside", f"SCALE {a.scale}: the edge list, Kernel 1 (P = 1 and {P})")
    ds, _ = store.generate(spec, root=root_dir, client=None, quiet=True)
    edges = ds.edges()[:]
    roots = [int(r) for r in graph500_roots(edges, a.scale, 2, 3, n=a.roots, n_vertices=ds.n_vertices)]
    kernel1.build_partitioned(ds.path, P=1, client=None, progress=False)
    kernel1.build_partitioned(ds.path, P=P, client=None, progress=False)
    g = kernel1.load_csr(ds.path, kernel1.variant_name(1))
    fn = get_algorithm("do", "cpu")
    fn(g, roots[0])                                                   # warm-up (JIT)
    nedge = do_validated(fn, g, edges, roots, ds.n_vertices)[0]
    del edges
    conds = [_condition("alone", fn, g, roots, nedge, a.reps, a.quiet)]
    with client_for(n_workers=W, threads_per_worker=max(1, cores // W), quiet=True) as client:
        dg = D.load_distributed(client, ds.path, kernel1.variant_name(P))
        D.search(dg, roots[0])[0].release()                          # warm-up (JIT on the workers)
        time.sleep(a.settle)
        conds.append(_condition("idle", fn, g, roots, nedge, a.reps, a.quiet))

        def searched(r):
            D.search(dg, r)[0].release()

        conds.append(_condition("after-search", fn, g, roots, nedge, a.reps, a.quiet, before=searched))
        dg.close()
    conds.append(_condition("closed", fn, g, roots, nedge, a.reps, a.quiet))
    rec = {"params": vars(a), "cores": cores, "workers": W, "threads_per_worker": max(1, cores // W),
           "n_vertices": ds.n_vertices, "roots": roots, "nedge": nedge, "conditions": conds}
    path = write_record("cpu_beside", rec, a.out)
    print(f"SCALE {a.scale}, {a.roots} roots x {a.reps} rounds, cluster {P} partitions on {W} workers x "
          f"{max(1, cores // W)} threads; record {path}")
    print(f"{'condition':>13} {'timed':>6} {'GTEPS':>7} {'med ms':>8} {'cluster cpu s':>14} {'invol. sw':>10}  "
          f"first root's levels (ms)")
    for c in conds:
        for how in ("backend", "switch"):
            x = c[how]
            lv = " ".join(f"{y['direction']}:{1e3 * y['time']:.2f}" for y in x["first_root_levels"])
            print(f"{c['condition']:>13} {how:>6} {x['hmean_teps'] / 1e9:7.3f} {1e3 * x['median_s']:8.2f} "
                  f"{x['cluster_cpu_s']:14.3f} {x['involuntary_switches']:10d}  {lv}")
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    main()

"""A/B: what publishing level records to the dbfs dashboard page costs the distributed search.

One LocalCluster (W worker processes), one loaded partitioned graph, the same
Graph500 roots searched in both modes, in the same run:

- ``on``: dbfs.monitor installed as a run installs it (scheduler plugin + the
  workers' LevelPublisher, whose listener queues one event per level per worker);
- ``off``: the LevelPublisher unregistered (its teardown takes the listener out
  of the level seam), so the level loop calls no listener.

Each of ``--reps`` rounds searches every root in both modes, the order of the
modes alternating round by round (ABBA...), so drift hits both alike. Per root
the median over rounds of the Graph500 seconds (measured on the workers) and of
the client's wall time around the search. Printed and recorded: harmonic-mean
TEPS of each mode and the ratio on/off, the median per-level time, and the
number of level records the scheduler received in the ``on`` searches (it must
equal levels x workers: the monitor did publish). ``--aa`` keeps publishing on
in both modes: an A/A control whose ratio shows the noise of the machine.
``--direct`` adds a third mode, the naive publisher (one ``Worker.log_event``
per level from the search thread), to show why the LevelPublisher buffers.

    python benchmarks/monitor_ab.py --scale 16 --roots 16 --reps 5

Record: ``benchmarks/results/monitor_ab-<stamp>.json``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _hmean(seconds, nedges):
    return len(seconds) / sum(t / m for t, m in zip(seconds, nedges))


def _level_records(dask_scheduler=None):
    """Level records the dbfs scheduler plugin accepted so far (every worker's)."""
    return dask_scheduler.plugins["dbfs-monitor"].totals["level_records"]


def _direct(level, ranks, record):
    """The naive publisher (``--direct``): one ``Worker.log_event`` per level, from the search thread."""
    from distributed import get_worker

    from dbfs.monitor.events import TOPIC, level_record, levels_event

    w = get_worker()
    w.log_event(TOPIC, levels_event([level_record(record)], str(w.address)))


def _set_direct(on, dask_worker=None):
    """(client.run) attach or detach the naive publisher (kept on the worker: each call arrives pickled anew)."""
    ls = dask_worker.plugins["dbfs-mesh"].level_listeners
    fn = getattr(dask_worker, "_dbfs_direct", None)
    if fn is None:
        fn = dask_worker._dbfs_direct = _direct
    if on and fn not in ls:
        ls.append(fn)
    elif not on and fn in ls:
        ls.remove(fn)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=int, default=16)
    ap.add_argument("--roots", type=int, default=16)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--datasets", default=None)
    ap.add_argument("--tag", default="")
    ap.add_argument("--direct", action="store_true",
                    help="a third mode, 'direct': one Worker.log_event per level from the search thread")
    ap.add_argument("--aa", action="store_true",
                    help="A/A control: publishing stays on in both modes (the ratio then shows the noise)")
    a = ap.parse_args(argv)

    import dbfs.bfs.dask as D
    from benchmarks.common import write_record
    from dbfs import kernel1, store
    from dbfs.cluster import client_for
    from dbfs.monitor import install
    from dbfs.monitor.events import LevelPublisher
    from dbfs.roots import graph500_roots
    from dbfs.spec import GraphSpec

    tmp = tempfile.TemporaryDirectory() if a.datasets is None else None
    datasets = a.datasets or tmp.name
    spec = GraphSpec.make("kronecker", a.scale)
    ds, _ = store.generate(spec, root=datasets, client=None, quiet=True)
    roots = [int(r) for r in graph500_roots(ds.edges()[:], a.scale, 2, 3, n=a.roots, n_vertices=ds.n_vertices)]
    W = a.workers
    kernel1.build_partitioned(ds.path, P=W, client=None, progress=False)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    with client_for(n_workers=W, threads_per_worker=max(1, cores // W), quiet=True) as client:
        dg = D.load_distributed(client, ds.path, kernel1.variant_name(W))
        install(client, quiet=True)

        state = {"on": True}

        def mode(on):
            on = on or a.aa
            if on and not state["on"]:
                client.register_plugin(LevelPublisher())
            elif state["on"] and not on:
                client.unregister_worker_plugin(LevelPublisher.name)
            state["on"] = on

        nedges = []
        for r in roots:                                   # warm-up and the edge counts (validated)
            res, _, _ = D.search(dg, r)
            v = D.validate_distributed(client, ds.path, dg, res, r)
            assert v.ok, v.summary()
            nedges.append(v.nedge)
            res.release()
        modes = ["on", "off"] + (["direct"] if a.direct else [])
        secs = {m: [[] for _ in roots] for m in modes}
        walls = {m: [[] for _ in roots] for m in modes}
        level_t = {m: [] for m in modes}
        n_levels_on, events_on = 0, 0
        for rep in range(a.reps):
            for m in (modes if rep % 2 == 0 else modes[::-1]):
                mode(m == "on")
                if a.direct:
                    client.run(_set_direct, m == "direct")
                before = client.run_on_scheduler(_level_records)
                for k, r in enumerate(roots):
                    t0 = time.perf_counter()
                    res, sec, lst = D.search(dg, r, stats=True)
                    walls[m][k].append(time.perf_counter() - t0)
                    secs[m][k].append(sec)
                    level_t[m] += [x["time"] for x in lst]
                    if m == "on":
                        n_levels_on += len(lst)
                    res.release()
                time.sleep(0.2)                           # the last events reach the scheduler
                if m == "on":
                    events_on += client.run_on_scheduler(_level_records) - before
        dg.close()
    med = {m: [statistics.median(x) for x in secs[m]] for m in secs}
    wmed = {m: [statistics.median(x) for x in walls[m]] for m in walls}
    rec = {"aa_control": a.aa, "scale": a.scale, "roots": roots, "nedge": nedges, "reps": a.reps, "workers": W,
           "threads_per_worker": max(1, cores // W), "tag": a.tag,
           "hmean_teps": {m: _hmean(med[m], nedges) for m in med},
           "median_search_s": {m: statistics.median(med[m]) for m in med},
           "median_wall_s": {m: statistics.median(wmed[m]) for m in wmed},
           "median_level_ms": {m: 1e3 * statistics.median(level_t[m]) for m in level_t},
           "levels_on": n_levels_on, "level_records_on": events_on, "times": med, "walls": wmed}
    rec["ratio_on_off"] = rec["hmean_teps"]["on"] / rec["hmean_teps"]["off"]
    if a.direct:
        rec["ratio_direct_off"] = rec["hmean_teps"]["direct"] / rec["hmean_teps"]["off"]
    rec["ratio_wall_on_off"] = rec["median_wall_s"]["on"] / rec["median_wall_s"]["off"]
    assert events_on == n_levels_on * W, (events_on, n_levels_on, W)
    print(("A/A control (publishing in both modes): " if a.aa else "") + f"SCALE {a.scale}, {len(roots)} roots x {a.reps} rounds, {W} workers: harmonic-mean TEPS "
          f"publishing on {rec['hmean_teps']['on'] / 1e6:.2f} M / off {rec['hmean_teps']['off'] / 1e6:.2f} M = "
          f"ratio {rec['ratio_on_off']:.3f}; median level {rec['median_level_ms']['on']:.3f} / "
          f"{rec['median_level_ms']['off']:.3f} ms; median wall ratio {rec['ratio_wall_on_off']:.3f}; "
          f"{events_on} level records for {n_levels_on} levels x {W} workers"
          + (f"; direct (log_event per level) / off {rec['ratio_direct_off']:.3f}" if a.direct else ""))
    write_record("monitor_ab" + (f"-{a.tag}" if a.tag else ""), rec)
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()

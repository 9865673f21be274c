"""Step by step and worker by worker, where the distributed CPU search's levels go, beside one process.

Wraps every CPU worker's top-down and bottom-up level (``_Search.td_level`` and ``_Search.bu_level`` of
:mod:`dbfs.bfs.dask.search.bsp`), the steps they call (the row-table and claim kernels, one host's shared
claims and frontier, the mesh's exchanges by kind) and the steps inside ``td_rows``
(:data:`benchmarks.common.TD_INSIDE`) in host timers (``client.run``),
each step's seconds joined to the level that spent them. Runs ``--roots`` searches of a Kronecker graph
on ``--workers`` CPU worker processes of ``--threads`` threads (P = workers, the stored block variant)
after one warm-up search, then the single-process ``do`` on the same roots in this process (its default
threads), level by level (the median of three runs). Prints each hub level (at least 10^6 frontier
edges): its direction, frontier and edges, its time on the cluster and in one process, and its top steps'
milliseconds on each worker; then the levels by direction and class (hub; mid: over 16384 edges; small)
with their summed times; the steps summed over every level of each direction (the mean over the workers);
and the searches' median. A direction switch's conversion just before a level (``to_queues``,
``to_bitmaps``) counts in that level as ``pre:``. ``--json PATH`` writes the raw record there (:func:`benchmarks.common.write_record`).

The single process's level times are taken with ``stats=True``, which may add per-level bookkeeping
that the timed Kernel 2 runs of ``benchmarks/dask_bfs.py`` do not have: compare whole searches with
``dask_bfs.py``.

    python benchmarks/cpu_hub_levels.py --scale 24 --roots 16 --workers 4 --threads 4
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import TD_INSIDE, cpu_mesh, cpu_mesh_args, install_step_timers, write_record  # noqa: E402

HUB, MID = 10**6, 16384         # frontier edges of a hub level (at least), of a mid one (over)
TOP = 10                        # steps printed per hub level

#: the steps a level calls (the exchanges are timed by kind, :func:`install_level_timers`)
STEPS = {
    "dbfs.bfs.dask.search.bsp": ["td_rows", "split_claims", "split_sorted", "absorb_bits", "mark_pairs",
                                 "absorb_rows", "bitmap_to_queue", "claims_in", "take_bits", "fill_box",
                                 "box_pairs", "or_claims", "take_peers", "by_bits", "_grown", "_chunks",
                                 "bu_rows", "or_rows", "copy_rows", "_shm_collect", "_or_into", "_or_slice",
                                 "queue_to_bitmap"],
    "dbfs.bfs.dask.search.bsp:_Search": ["to_queues", "to_bitmaps", "_absorb", "_td_take_shared", "_boxed",
                                         "_pairs", "_unpacked", "_packed", "_counts_round", "_publish",
                                         "_coded_slices", "_or_coded"],
    "dbfs.bfs.cpu.rowclaims": ["_split_serial", "_split_par", "_absorb_serial", "_absorb_par", "_absorb_bits",
                               "_take_bits", "_sorted_bounds", "_sorted_pairs"],
    **TD_INSIDE,
}


def install_level_timers(dask_worker=None):
    """(``client.run``) :func:`install_step_timers` of :data:`STEPS` on this worker, the mesh's exchanges
    timed by kind, and a timer around each level that moves the steps' totals since the level began into
    the level's record (search, level, direction, seconds, kernel seconds, steps: label -> [calls,
    seconds]); a direction switch's conversion just before the level counts as ``pre:`` its label.
    :func:`take_levels` takes the records."""
    import functools

    from dbfs.bfs.dask.mesh.frames import KIND_NAMES
    from dbfs.bfs.dask.mesh.transport import _Timed
    from dbfs.bfs.dask.search.bsp import _Search

    install_step_timers(STEPS, dask_worker)
    steps, levels, searches, at = dask_worker._dbfs_prof, [], [-1], [0]
    dask_worker._dbfs_levels = levels
    start, exchange = _Search.start, _Timed.exchange
    switches = ("_Search.to_queues", "_Search.to_bitmaps")

    @functools.wraps(start)
    def timed_start(self, root):
        searches[0] += 1
        at[0] = 0
        return start(self, root)

    @functools.wraps(exchange)
    def timed_exchange(self, kind, out):
        t = time.perf_counter()
        try:
            return exchange(self, kind, out)
        finally:
            s = steps.setdefault(f"exchange[{KIND_NAMES.get(kind, kind)}]", [0, 0.0])
            s[0] += 1
            s[1] += time.perf_counter() - t

    def timed(direction, step):
        @functools.wraps(step)
        def timed_level(self, *args):
            pre = {f"pre:{k}": steps[k] for k in switches if k in steps}
            steps.clear()               # the steps between searches, or since the last level
            steps.update(pre)
            kt = args[-1]
            t = time.perf_counter()
            out = step(self, *args)
            if direction == "td" and args[0] != at[0]:
                raise RuntimeError(f"top-down level {args[0]} counted as level {at[0]}")
            levels.append({"search": searches[0], "level": at[0], "direction": direction,
                           "worker": self.widx, "seconds": time.perf_counter() - t, "kernel": out[1] - kt,
                           "steps": {k: list(v) for k, v in steps.items()}})
            at[0] += 1
            steps.clear()
            return out
        return timed_level

    _Search.start, _Timed.exchange = timed_start, timed_exchange
    _Search.td_level, _Search.bu_level = timed("td", _Search.td_level), timed("bu", _Search.bu_level)
    return True


def take_levels(dask_worker=None) -> list:
    """(``client.run``) this worker's level records (top-down and bottom-up) since the last take."""
    out = list(dask_worker._dbfs_levels)
    dask_worker._dbfs_levels.clear()
    return out


def _class(edges: int) -> str:
    return "hub" if edges >= HUB else "mid" if edges > MID else "small"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cpu_mesh_args(ap)
    ap.add_argument("--json", metavar="PATH", help="write the raw record to PATH")
    a = ap.parse_args(argv)

    import numpy as np

    import dbfs.bfs.dask as D
    from dbfs import kernel1
    from dbfs.bfs import bfs, prepare

    with cpu_mesh(a, "dbfs-hub-") as (client, dg, edges, n_vertices, roots):
        D.search(dg, roots[0])                          # warm-up (and the kernels loaded)
        client.run(install_level_timers)
        got = D.search_many(dg, roots[1:], stats=True)
        recs = [r for rs in client.run(take_levels).values() for r in rs]
    g = prepare(kernel1.build_csr(edges, n_vertices=n_vertices))
    bfs(g, roots[0], algorithm="do")
    one = []                                            # per search, per level: the median seconds
    for r in roots[1:]:
        runs = [bfs(g, r, algorithm="do", stats=True).level_stats for _ in range(3)]
        one.append([float(np.median([x[i]["time"] for x in runs])) for i in range(len(runs[0]))])

    levels = [[{k: x[k] for k in ("frontier", "direction", "edges", "time")} for x in lv] for _, _, lv in got]
    secs = [s for _, s, _ in got]
    by_level = defaultdict(dict)                        # (search, level) -> worker -> label -> seconds
    for r in recs:
        by_level[r["search"], r["level"]][r["worker"]] = {"level": r["seconds"], "level kernel": r["kernel"],
                                                          **{k: s for k, (_, s) in r["steps"].items()}}
    workers = sorted({r["worker"] for r in recs})
    print(f"S{a.scale}, {a.workers} workers x {a.threads} thread(s), P = {a.workers}, {len(got)} searches")
    classes = {(d, c): [0, 0.0, 0.0] for d in ("td", "bu") for c in ("hub", "mid", "small")}
    totals = {d: defaultdict(float) for d in ("td", "bu")}      # label -> seconds, summed over workers
    for (si, lv), ws in sorted(by_level.items()):
        x = levels[si][lv]
        o = one[si][lv] if lv < len(one[si]) else float("nan")
        c = classes[x["direction"], _class(x["edges"])]
        c[0] += 1
        c[1] += x["time"]
        c[2] += o
        for st in ws.values():
            for k, s in st.items():
                totals[x["direction"]][k] += s
        if x["edges"] >= HUB:
            print(f"search {si} level {lv} {x['direction']} frontier {x['frontier']:,} edges {x['edges']:,}: "
                  f"dask {1e3 * x['time']:.2f} ms, one process {1e3 * o:.2f} ms")
            print(f"    {'ms':34s} " + " ".join(f"{'w' + str(w):>8s}" for w in workers))
            keys = sorted({k for st in ws.values() for k in st},
                          key=lambda k: -max(st.get(k, 0.0) for st in ws.values()))
            for k in keys[:TOP]:
                print(f"    {k:34s} " + " ".join(f"{1e3 * ws.get(w, {}).get(k, 0.0):8.2f}" for w in workers))
    print(f"levels by direction and class (hub: >= {HUB:,} edges, mid: > {MID:,}):")
    print(f"  {'class':10s} {'n':>5s} {'dask ms':>9s} {'one-process ms':>15s}")
    for (d, c), (n, t, o) in classes.items():
        print(f"  {d + ' ' + c:10s} {n:5d} {1e3 * t:9.1f} {1e3 * o:15.1f}")
    for d, tot in totals.items():
        print(f"steps over every {'top-down' if d == 'td' else 'bottom-up'} level (mean over the workers, ms):")
        for k, s in sorted(tot.items(), key=lambda kv: -kv[1]):
            print(f"  {k:34s} {1e3 * s / max(1, len(workers)):9.2f}")
    print(f"searches: median {1e3 * float(np.median(secs)):.2f} ms (Kernel 2 on the cluster)")
    if a.json:
        write_record("cpu_hub_levels", {"params": vars(a), "roots": roots[1:], "levels": levels,
                                        "workers": recs, "one_process": one, "searches": secs}, path=a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Host seconds of each step of a CPU worker's level loop (where a distributed CPU level's time goes).

Wraps the steps of :mod:`dbfs.bfs.dask.search.bsp` (the row-table kernels it calls, its absorb, the mesh
exchange) in a timer on every worker (``client.run``), runs ``--roots`` searches of a Kronecker graph
on ``--workers`` CPU worker processes of ``--threads`` threads (P = workers, the stored block variant),
and prints per step: calls per search and milliseconds per search, beside the searches' own Kernel 2
time and the single-process ``do`` on the same roots in this process (``--threads`` threads), level by
level for the first root. The issue it serves: a partitioned CPU search should cost about what one
process costs (docs/BENCHMARKS.md).

    python benchmarks/cpu_level_profile.py --scale 20 --roots 8 --workers 2 --threads 1
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import TD_INSIDE, cpu_mesh, cpu_mesh_args, install_step_timers, take_step_timers  # noqa: E402

_STEPS = {
    "dbfs.bfs.dask.search.bsp": ["td_rows", "split_claims", "split_sorted", "absorb_bits", "mark_pairs", "bu_rows",
                                 "absorb_rows", "copy_rows", "or_rows", "bitmap_to_queue", "queue_to_bitmap",
                                 # one host's shared frontier and claims (mesh/shm.py, mesh/shm_claims.py)
                                 "or_claims", "take_peers", "take_bits", "claims_in", "fill_box", "box_pairs",
                                 "_shm_collect"],
    "dbfs.bfs.dask.search.bsp:_Search": ["td_level", "bu_level", "to_bitmaps", "to_queues", "_absorb", "start",
                                         "visit_root", "parents", "__init__", "_td_take_shared", "_boxed", "_pairs",
                                         "_counts_round", "_publish"],
    **TD_INSIDE,
}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cpu_mesh_args(ap)
    a = ap.parse_args(argv)

    import numpy as np

    import dbfs.bfs.dask as D
    from dbfs import kernel1
    from dbfs.bfs import bfs, prepare

    with cpu_mesh(a, "dbfs-cpuprof-") as (client, dg, edges, n_vertices, roots):
        g = prepare(kernel1.build_csr(edges, n_vertices=n_vertices))
        D.search(dg, roots[0])                      # warm-up (and the kernels loaded)
        bfs(g, roots[0], algorithm="do")
        client.run(install_step_timers, _STEPS)
        client.run(take_step_timers)
        got = D.search_many(dg, roots[1:], stats=True)
        prof = client.run(take_step_timers)
        single, one_s = [], []
        for r in roots[1:]:
            t0 = time.perf_counter()
            single.append(bfs(g, r, algorithm="do", stats=True))
            one_s.append(time.perf_counter() - t0)
    n = len(roots) - 1
    secs = [s for _, s, _ in got]
    print(f"S{a.scale}, {a.workers} workers x {a.threads} thread(s), P = {a.workers}: Kernel 2 median "
          f"{1e3 * float(np.median(secs)):.2f} ms; one process (this one): "
          f"{1e3 * float(np.median(one_s)):.2f} ms")
    first, one = got[0][2], single[0].level_stats
    for lv, x in enumerate(first):
        ws = " ".join(f"{1e6 * w['kernel']:.0f}/{1e6 * w['exchange']:.0f}" for w in x.get("workers") or [])
        print(f"  level {lv} {x['direction']} frontier {x['frontier']:>9,} edges {x['edges']:>10,}: "
              f"{1e6 * x['time']:8.0f} us (worker kernel/exchange us {ws}); one process "
              f"{1e6 * one[lv]['time']:8.0f} us")
    for w, st in sorted(prof.items()):
        print(f"worker {w}")
        for k, (c, s) in sorted(st.items(), key=lambda kv: -kv[1][1]):
            print(f"  {k:28s} {c / n:7.2f}/search {1e3 * s / n:9.3f} ms/search")
    return 0


if __name__ == "__main__":
    sys.exit(main())

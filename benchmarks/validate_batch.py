"""CPU validation one search at a time against batches over one read of the edges, same searches, same run.

    python -m benchmarks.validate_batch [--scale 20] [--roots 8] [--batches 1 2 4 8] [--reps 3]

Builds the Graph500 graph in memory (dbfs generator and Kernel 1), searches
its first ``--roots`` search keys, then times, ``--reps`` times each (the
best kept): :func:`dbfs.validate.validate` of every search one at a time
(what ``--backend cpu`` did), and :func:`dbfs.validate.batch_cpu.validate_many_cpu`
over the same searches in batches of each ``--batches`` size, each with the
compact table (one-byte levels, 4-byte parents) and the wide one. Prints the
seconds a search and each batch size's speed-up over one at a time; every
result must be valid and equal (ok, nedge) across the two. Then the largest
batch again with its pass's prefetch off, the levels alone (the chain walk,
one thread, against the parallel rounds) and a search's table column alone
(two strided NumPy assignments against the kernel), same searches. Writes
``benchmarks/results/validate_batch-<stamp>.json``.
"""
from __future__ import annotations

import argparse
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=int, default=20)
    ap.add_argument("--roots", type=int, default=8)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8, 12])
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()

    from benchmarks.common import write_record
    from dbfs.bfs import bfs, prepare
    from dbfs.generate.graph500 import kronecker_edges
    from dbfs.kernel1 import build_csr
    from dbfs.roots import graph500_roots
    from dbfs.validate import validate
    from dbfs.validate import batch_cpu
    from dbfs.validate.batch_cpu import validate_many_cpu

    edges = kronecker_edges(args.scale)
    n = 1 << args.scale
    roots = graph500_roots(edges, args.scale, n=args.roots).tolist()
    graph = prepare(build_csr(edges, n_vertices=n))
    searches = [(r, bfs(graph, r, algorithm="do").parent) for r in roots]
    del graph
    validate(edges[:3], 0, searches[0][1][:3] * 0)              # the kernels loaded before any clock
    validate_many_cpu(edges[:3], [(0, searches[0][1][:3] * 0)] * 2)

    def best(fn):
        out = None
        for _ in range(args.reps):
            t0 = time.perf_counter()
            res = fn()
            dt = time.perf_counter() - t0
            out = (dt, res) if out is None or dt < out[0] else out
        return out

    t1, want = best(lambda: [validate(edges, r, p, n_vertices=n) for r, p in searches])
    assert all(v.ok for v in want)
    rows = [{"batch": 0, "seconds_a_search": t1 / len(searches)}]
    print(f"SCALE {args.scale}, {len(searches)} searches, best of {args.reps}: one at a time "
          f"{1e3 * t1 / len(searches):.1f} ms a search")
    for k in args.batches:
        for compact in (True, False):       # one-byte levels and 4-byte parents, against the (n, K, 2) table
            batch_cpu.COMPACT = compact
            tk, got = best(lambda: [v for i in range(0, len(searches), k)
                                    for v in validate_many_cpu(edges, searches[i:i + k], n_vertices=n)])
            assert [(v.ok, v.nedge) for v in got] == [(v.ok, v.nedge) for v in want], "a batch disagrees"
            rows.append({"batch": k, "compact": compact, "seconds_a_search": tk / len(searches), "speedup": t1 / tk})
            print(f"  batches of {k}, {'compact' if compact else 'wide'} table: {1e3 * tk / len(searches):.1f} ms "
                  f"a search, {t1 / tk:.2f}x one at a time")
        batch_cpu.COMPACT = True
    k = args.batches[-1]                        # the largest batch again, its pass without the prefetch
    ahead = batch_cpu.PREFETCH_AHEAD
    batch_cpu.PREFETCH_AHEAD = 0
    t0k, got = best(lambda: [v for i in range(0, len(searches), k)
                             for v in validate_many_cpu(edges, searches[i:i + k], n_vertices=n)])
    batch_cpu.PREFETCH_AHEAD = ahead
    assert [(v.ok, v.nedge) for v in got] == [(v.ok, v.nedge) for v in want], "no prefetch disagrees"
    with_prefetch = next(r["seconds_a_search"] for r in rows if r["batch"] == k and r.get("compact"))
    rows.append({"batch": k, "compact": True, "prefetch_ahead": 0, "seconds_a_search": t0k / len(searches)})
    print(f"  batches of {k} without the pass's prefetch: {1e3 * t0k / len(searches):.1f} ms a search "
          f"(the prefetch {t0k / len(searches) / with_prefetch:.2f}x)")
    levels = _levels_ab(searches, best)
    print(f"  levels of a search: chain walk alone {1e3 * levels['walk']:.1f} ms, parallel rounds then the walk "
          f"{1e3 * levels['rounds']:.1f} ms ({levels['walk'] / levels['rounds']:.2f}x)")
    fill = _fill_ab(searches, best)
    print(f"  a search's table column: two strided NumPy assignments {1e3 * fill['numpy']:.1f} ms, the kernel "
          f"{1e3 * fill['kernel']:.1f} ms ({fill['numpy'] / fill['kernel']:.2f}x)")
    print("record:", write_record("validate_batch", {"params": vars(args), "rows": rows, "levels": levels,
                                                     "fill": fill}))


def _fill_ab(searches, best) -> dict:
    """Seconds a search of writing its (level, parent) column of a batch's table: NumPy's two strided
    assignments (the method before the kernel) against :func:`dbfs.validate.batch_cpu._fill_column`."""
    import numpy as np

    from dbfs.validate.batch_cpu import SearchTable, _fill_column
    from dbfs.validate.cpu import _levels_from_chains

    cols = [(_levels_from_chains(p, r)[0], np.asarray(p, np.int64)) for r, p in searches]
    a, b = SearchTable(len(cols[0][1]), len(cols)), SearchTable(len(cols[0][1]), len(cols))
    _fill_column(b.levs[:3], b.pars[:3], 0, cols[0][0][:3], cols[0][1][:3])

    def numpy_fill():
        for s, (lev, par) in enumerate(cols):
            a.levs[:, s] = lev
            a.pars[:, s] = par

    tn, _ = best(numpy_fill)
    tk, _ = best(lambda: [_fill_column(b.levs, b.pars, s, lev, par) for s, (lev, par) in enumerate(cols)])
    assert np.array_equal(a.levs, b.levs) and np.array_equal(a.pars, b.pars), "the kernel's table differs from NumPy's"
    return {"numpy": tn / len(cols), "kernel": tk / len(cols)}


def _levels_ab(searches, best) -> dict:
    """Seconds a search of the validator's levels: the chain walk alone (one thread, one pointer chased at a
    time: the method before the rounds) against the parallel rounds plus the walk of what they leave."""
    import numpy as np

    from dbfs.validate.cpu import UNSET, _chain_walk, _levels_from_chains

    def walk(parent, root):
        lev = np.where(parent < 0, -1, UNSET).astype(np.int64)
        lev[root] = 0
        _chain_walk(parent, lev, np.zeros(len(parent), np.int8))
        return lev

    walk(searches[0][1][:3] * 0, 0)
    _levels_from_chains(searches[0][1][:3] * 0, 0)
    tw, a = best(lambda: [walk(p, r) for r, p in searches])
    tr, b = best(lambda: [_levels_from_chains(p, r)[0] for r, p in searches])
    assert all(np.array_equal(x, y) for x, y in zip(a, b)), "the rounds' levels differ from the walk's"
    return {"walk": tw / len(searches), "rounds": tr / len(searches)}


if __name__ == "__main__":
    main()

"""How many claims a partitioned top-down level makes for each vertex it discovers, by the level's own sets.

    python benchmarks/td_duplicates.py --scale 18 --partitions 2 4 --roots 8

A CPU worker's top-down claims test only its own visited bitmap, so a vertex bordering frontier
vertices of several workers is claimed once by each of them (its owner keeps one). This counts it
exactly, without a cluster: per root, per top-down-sized level (frontier edges >= ``--min-edges``), the
frontier F and the visited set V before it from a sequential search's levels, worker w's frontier
F_w (block partitions of P), and ``claims = sum_w |N(F_w) - V|`` against ``discovered = |N(F) - V|``.
Prints each level and the ratio over all of them per P; writes
``benchmarks/results/td_duplicates-<stamp>.json``.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import write_record  # noqa: E402


def level_claims(indptr, indices, levels, level: int, P: int) -> tuple:
    """(claims over P block workers, discovered) of the top-down level from ``level``'s vertices."""
    n = levels.shape[0]
    front = np.flatnonzero(levels == level)
    seen = (levels >= 0) & (levels <= level)
    owner = front * P // n
    union = np.zeros(n, bool)
    claims = 0
    for w in range(P):
        fw = front[owner == w]
        if not fw.size:
            continue
        starts, stops = indptr[fw], indptr[fw + 1]
        idx = np.repeat(starts - np.concatenate([[0], np.cumsum(stops - starts)[:-1]]), stops - starts) + \
            np.arange(int((stops - starts).sum()))
        mine = np.zeros(n, bool)
        mine[indices[idx]] = True
        mine &= ~seen
        claims += int(mine.sum())
        union |= mine
    return claims, int(union.sum())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=int, default=18)
    ap.add_argument("--partitions", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--roots", type=int, default=8)
    ap.add_argument("--min-edges", type=int, default=100_000, help="frontier edges of a level counted")
    a = ap.parse_args(argv)

    from dbfs import kernel1
    from dbfs.bfs import bfs
    from dbfs.generate import kronecker_edges
    from dbfs.roots import graph500_roots

    n = 1 << a.scale
    edges = kronecker_edges(a.scale)
    g = kernel1.build_csr(edges, n)
    roots = [int(r) for r in graph500_roots(edges, a.scale, n=a.roots, n_vertices=n)]
    levels = {r: bfs(g, r, "seq-csr", levels=True).levels for r in roots}
    rows, totals = [], {}
    for P in a.partitions:
        c_all = d_all = 0
        for r in roots:
            lv = levels[r]
            for L in range(int(lv.max())):
                front = np.flatnonzero(lv == L)
                E = int((g.indptr[front + 1] - g.indptr[front]).sum())
                if E < a.min_edges:
                    continue
                c, d = level_claims(g.indptr, g.indices, lv, L, P)
                rows.append({"P": P, "root": r, "level": L, "frontier": int(front.size), "edges": E, "claims": c,
                             "discovered": d})
                c_all, d_all = c_all + c, d_all + d
                print(f"P={P} root {r} level {L}: frontier {front.size:,}, {E:,} edges, {c:,} claims for "
                      f"{d:,} discovered ({c / max(d, 1):.2f})")
        totals[P] = c_all / max(d_all, 1)
        print(f"P={P}: {totals[P]:.2f} claims a discovered vertex over these levels")
    write_record("td_duplicates", {"scale": a.scale, "roots": roots, "min_edges": a.min_edges, "levels": rows,
                                   "claims_per_discovered": {str(k): v for k, v in totals.items()}})


if __name__ == "__main__":
    main()

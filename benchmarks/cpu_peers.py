"""dbfs CPU Kernel 2 against Python BFS peers, same graphs, same roots, one process.

    python benchmarks/cpu_peers.py [--scales 18 20] [--roots 16] [--algorithms do td spmv]

For each SCALE: the Graph500 graph and its search keys (dbfs generator, bit-exact),
dbfs's CSR (in-memory Kernel 1), then for every root each contender runs one
search (after one warm-up search each) and is timed around its call only,
with Python's garbage collector off inside the timer (as ``timeit`` does)
and the previous result freed before the clock starts (rebinding the result
inside the timer freed the last one there: at SCALE 20 the first dbfs
search, which freed networkx's 262K-entry predecessor dict from SCALE 18,
took 40-45 ms instead of 4):

- dbfs ``do``, ``td``, ``spmv`` (``dbfs.bfs.bfs``, Numba),
- scipy ``csgraph.breadth_first_order`` on the same CSR (directed=True: the
  CSR is already symmetric), returning predecessors; ``scipy`` gets csgraph's
  own types (float64 data, int32 indptr: no conversion inside the call, its
  best case), ``scipy-int8`` an int8 matrix with int64 indptr, which csgraph
  converts on every call (what the earlier records measured), and
  ``scipy-undirected`` csgraph's call for an undirected graph
  (``directed=False``, which walks each row and its transpose's: a
  transpose per call): the form the recorded 0.023 / 0.017 GTEPS at SCALE
  18 / 20 matches, the scipy figure the issue's 60x target was set from,
- igraph ``Graph.bfs`` (graph built from the deduplicated undirected edges),
- python-graphblas (SuiteSparse:GraphBLAS), direction-optimizing as LAGraph
  does it: push ``q' A`` (vxm) while the frontier is small, pull ``A q``
  (mxv, masked by the complement of the visited set, so SuiteSparse uses
  its dot-product method over the unvisited rows) while it is large
  (frontier > n/32 and growing: pull; < n/64 and shrinking: push; the best
  of 8/16/32/64 x 64 tried on the 2-core machine). ``graphblas`` uses the
  ``any_secondi`` / ``any_firstj`` semirings (any parent: early exit in the
  pull), ``graphblas-min`` the ``min_*`` ones (parent = smallest id in the
  frontier, the issue's "min-parent BFS"), ``graphblas-push`` never pulls
  (it lands near the recorded 0.097-0.113 GTEPS). The earlier records' loop
  (``min_firsti`` vxm only) was push-only and its parents fail validation
  (a parent cycle at SCALE 16): ``firsti`` is not the frontier vertex in vxm),
- networkx ``bfs_predecessors`` (SCALE <= 18, first 2 roots only: it is slow).

Every contender's result is converted to a parent array and checked with
``dbfs.validate`` (outside the timer), every root: a peer that does not
produce a valid BFS tree is flagged INVALID in the table and the record. TEPS use the Graph500
nedge of each root (from dbfs.validate on dbfs's ``do`` parent; nedge
depends only on the root's component). The table prints
harmonic-mean GTEPS and the ratio dbfs/peer, and the JSON record in
benchmarks/results/ keeps every time. Recorded peers on the 2-core machine
(PERFORMANCE.md): GAP 1.10 GTEPS and Graph500 omp-csr 0.94 at SCALE 20.
"""
from __future__ import annotations

import argparse
import gc
import time

import numpy as np

GAP_GTEPS = {16: 1.54, 18: 1.29, 20: 1.10, 22: 0.96}
OMP_CSR_GTEPS = {16: 1.16, 18: 0.96, 20: 0.94}


def hmean(teps):
    teps = np.asarray(teps, dtype=float)
    return len(teps) / np.sum(1.0 / teps)


def _from_pred(root, pred):
    """Predecessor array with negative 'none' codes -> Graph500 parent (root -> root, unreached -> -1)."""
    p = np.where(np.asarray(pred) < 0, -1, pred).astype(np.int64)
    p[root] = root
    return p


def gb_bfs(M, n, root, push, pull, to_pull=32, to_push=64):
    """Direction-optimizing BFS with python-graphblas; returns the parent Vector.

    ``push``/``pull``: semirings for ``q @ M`` (vxm: ``*_secondi`` gives the
    frontier row) and ``M @ q`` (mxv: ``*_firstj`` gives the frontier column).
    Pull while the frontier holds > n/to_pull vertices and grew; push again
    once it holds < n/to_push and shrank; ``to_pull=0``: push only."""
    import graphblas as gb

    parents = gb.Vector(gb.dtypes.INT64, n)
    parents[root] = root
    q = gb.Vector(gb.dtypes.INT64, n)
    q[root] = root
    use_pull, last = False, 0
    while q.nvals:
        nq = q.nvals
        if not use_pull and nq > last and nq * to_pull > n:
            use_pull = True
        elif use_pull and nq < last and nq * to_push < n:
            use_pull = False
        last = nq
        q(~parents.S, replace=True) << (pull(M @ q) if use_pull else push(q @ M))
        parents(q.S) << q
    return parents


def peers(graph, edges_undirected):
    """name -> (search(root), parent(root, search result) -> int64 array) for each available peer."""
    out = {}
    n = graph.n_vertices
    try:
        import scipy.sparse as sp
        from scipy.sparse.csgraph import breadth_first_order

        # float64 data and int32 indptr are csgraph's own types (no conversion per call): scipy at its best
        A = sp.csr_matrix((np.ones(graph.nnz, np.float64), graph.indices, graph.indptr.astype(np.int32)),
                          shape=(n, n))
        A8 = sp.csr_matrix((np.ones(graph.nnz, np.int8), graph.indices, graph.indptr), shape=(n, n))
        sp_parent = lambda r, res: _from_pred(r, res[1])      # noqa: E731
        out["scipy"] = (lambda r: breadth_first_order(A, r, directed=True, return_predecessors=True), sp_parent)
        out["scipy-int8"] = (lambda r: breadth_first_order(A8, r, directed=True, return_predecessors=True),
                             sp_parent)
        # as for any undirected graph: the form the recorded 0.017 GTEPS (SCALE 20) matches
        out["scipy-undirected"] = (lambda r: breadth_first_order(A, r, directed=False, return_predecessors=True),
                                   sp_parent)
    except ImportError:
        pass
    try:
        import igraph

        G = igraph.Graph(n=n, edges=edges_undirected, directed=False)
        out["igraph"] = (lambda r: G.bfs(r), lambda r, res: _from_pred(r, res[2]))
    except ImportError:
        pass
    try:
        import graphblas as gb
        from graphblas.semiring import ss

        u, v = edges_undirected[:, 0], edges_undirected[:, 1]
        M = gb.Matrix.from_coo(np.concatenate([u, v]), np.concatenate([v, u]), True, nrows=n, ncols=n)

        def gb_parent(r, vec):
            p = np.full(n, -1, np.int64)
            idx, vals = vec.to_coo()
            p[idx] = vals
            return p

        out["graphblas"] = (lambda r: gb_bfs(M, n, r, ss.any_secondi, ss.any_firstj), gb_parent)
        out["graphblas-min"] = (lambda r: gb_bfs(M, n, r, ss.min_secondi, ss.min_firstj), gb_parent)
        # push only (no pull): the form the recorded 0.097-0.113 GTEPS matches, for reference
        out["graphblas-push"] = (lambda r: gb_bfs(M, n, r, ss.any_secondi, ss.any_firstj, to_pull=0), gb_parent)
    except ImportError:
        pass
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scales", type=int, nargs="+", default=[18, 20])
    ap.add_argument("--roots", type=int, default=16)
    ap.add_argument("--algorithms", nargs="+", default=["do", "td", "spmv"])
    args = ap.parse_args()

    from benchmarks.common import write_record
    from dbfs.bfs import bfs
    from dbfs.bfs.timing import collector_paused
    from dbfs.generate.graph500 import kronecker_edges
    from dbfs.kernel1 import build_csr
    from dbfs.roots import graph500_roots
    from dbfs.validate import validate

    records = []
    for scale in args.scales:
        edges = kronecker_edges(scale)
        roots = graph500_roots(edges, scale, n=args.roots).tolist()
        graph = build_csr(edges, n_vertices=1 << scale)
        rows = np.repeat(np.arange(graph.n_vertices), np.diff(graph.indptr))
        keep = rows < graph.indices
        und = np.stack([rows[keep], graph.indices[keep].astype(np.int64)], axis=1)
        nedge = {}
        for r in roots:
            p = bfs(graph, r, algorithm="do").parent
            v = validate(edges, r, p)
            assert v.ok, v.summary()
            nedge[r] = v.nedge
        contenders = {f"dbfs-{a}": ((lambda a: lambda r: bfs(graph, r, algorithm=a))(a),
                                    lambda r, res: res.parent) for a in args.algorithms}
        contenders.update(peers(graph, und))
        if scale <= 18:
            try:
                import networkx as nx

                NG = nx.Graph()
                NG.add_nodes_from(range(graph.n_vertices))
                NG.add_edges_from(und.tolist())

                def nx_parent(r, pred):
                    p = np.full(graph.n_vertices, -1, np.int64)
                    p[np.fromiter(pred.keys(), np.int64)] = np.fromiter(pred.values(), np.int64)
                    p[r] = r
                    return p

                contenders["networkx"] = (lambda r: dict(nx.bfs_predecessors(NG, r)), nx_parent)
            except ImportError:
                pass
        res = {}
        for name, (fn, to_parent) in contenders.items():
            use = roots[:2] if name == "networkx" else roots
            fn(use[0])  # warm-up
            times, bad = [], []
            for r in use:
                gc.collect()
                with collector_paused():   # as timeit does: no collector pause inside any contender's timer
                    t0 = time.perf_counter()
                    out = fn(r)
                    times.append(time.perf_counter() - t0)
                v = validate(edges, r, to_parent(r, out))
                out = None   # freed here, not inside the next call's timer
                if not v.ok:
                    bad.append(f"root {r}: {v.summary()}")
            teps = [nedge[r] / t for r, t in zip(use, times)]
            res[name] = {"roots": use, "times": times, "hmean_teps": hmean(teps), "valid": not bad,
                         "n_invalid": len(bad), "invalid": bad[:3]}
        base = res["dbfs-do"]["hmean_teps"]
        print(f"\nSCALE {scale}: {graph.n_vertices:,} vertices, {edges.shape[0]:,} tuples, {len(roots)} roots")
        print(f"{'contender':<16} {'GTEPS (hmean)':>14} {'dbfs-do / it':>13}")
        for name, r in res.items():
            flag = "" if r["valid"] else f"   INVALID parents ({r['n_invalid']} roots): {r['invalid'][0]}"
            print(f"{name:<16} {r['hmean_teps'] / 1e9:>14.4f} {base / r['hmean_teps']:>13.2f}{flag}")
        for label, table in (("GAP (recorded)", GAP_GTEPS), ("omp-csr (rec.)", OMP_CSR_GTEPS)):
            if scale in table:
                print(f"{label:<16} {table[scale]:>14.4f} {base / (table[scale] * 1e9):>13.2f}")
        records.append({"scale": scale, "n_roots": len(roots), "nedge": nedge, "results": res,
                        "ratios_dbfs_do_over": {k: base / v["hmean_teps"] for k, v in res.items()},
                        "recorded_peers_gteps": {"gap": GAP_GTEPS.get(scale), "omp_csr": OMP_CSR_GTEPS.get(scale)}})
        contenders = NG = None   # free this SCALE's peer structures (millions of networkx objects)
    write_record("cpu_peers", {"scales": records})


if __name__ == "__main__":
    main()

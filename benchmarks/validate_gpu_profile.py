"""Where a GPU validation batch's time goes: each search's vertex rules and levels, and the edge sweep.

    python benchmarks/validate_gpu_profile.py --scale 26 --roots 16 --batches 1 4 16

Generates the Graph500 edges on the device, builds the CSR there and searches
``--roots`` search keys (``do``), then validates those searches with
:func:`dbfs.validate.gpu.validate_many_gpu`'s own steps in batches of each
``--batches`` size, timing on the device (events): ``fold`` (per search: the
vertex rules, the levels by sweeps, the search's column of the batch table),
``sweep`` (the fused edge kernel over every chunk of the edge list held on
the device), and ``regen`` (one regeneration of the edge list, chunk by chunk,
as a virtual dataset's validation makes it). Prints milliseconds a search for
each and writes ``benchmarks/results/validate_gpu_profile-<stamp>.json``.
Every search must validate.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import cupy as cp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.common import dbfs_commit, write_record  # noqa: E402
from dbfs.bfs import gpu  # noqa: E402
from dbfs.generate.gpu import kronecker_edges_gpu  # noqa: E402
from dbfs.kernel1.gpu import build_csr_gpu  # noqa: E402
from dbfs.roots import select_roots  # noqa: E402
from dbfs.spec import GraphSpec  # noqa: E402
from dbfs.roots import eligible_gpu  # noqa: E402
from dbfs.store.virtual import device_rows  # noqa: E402
from dbfs.validate.gpu import DEVICE_EDGE_ROWS, _Batch, _fold, _sweep, _width  # noqa: E402


def _ms(fn) -> float:
    a, b = cp.cuda.Event(), cp.cuda.Event()
    a.record()
    fn()
    b.record()
    b.synchronize()
    return cp.cuda.get_elapsed_time(a, b)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", type=int, default=24)
    ap.add_argument("--roots", type=int, default=16)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16])
    a = ap.parse_args(argv)
    n, m = 1 << a.scale, 16 << a.scale
    edges = kronecker_edges_gpu(a.scale, 16, 2, 3, 0, m)
    g = build_csr_gpu(edges, n_vertices=n)
    edges = edges.astype(cp.uint32)         # the stored (and regenerated) dtype of a Graph500 list this size
    cp.get_default_memory_pool().free_all_blocks()
    roots = select_roots(n, 2, 3, a.roots, lambda c: eligible_gpu(edges, c))
    parents = []
    for r in roots:
        p, _, _ = gpu.search_device(g, int(r), "do", stats=True)
        parents.append((int(r), p))
    spec = GraphSpec.make("kronecker", a.scale)
    regen = _ms(lambda: [device_rows(spec, s, min(s + DEVICE_EDGE_ROWS, m), edges.dtype)
                         for s in range(0, m, DEVICE_EDGE_ROWS)])
    rows = []
    for k in a.batches:
        fold = sweep = 0.0
        ok = True
        for i in range(0, len(parents), k):
            group = parents[i:i + k]
            batch = _Batch(cp, n, len(group), _width(n))
            got = []
            fold += _ms(lambda: got.extend(_fold(cp, batch, r, p, n) for r, p in group))
            sweep += _ms(lambda: _sweep(cp, edges, batch, DEVICE_EDGE_ROWS))
            for s, chain in got:
                bad = batch.failures(s) + list(chain)
                ok &= not bad and not bool(((batch.lev(s) > 0) & ~batch.found[s]).any())
            batch = None
        q = len(parents)
        rows.append({"batch": k, "fold_ms": fold / q, "sweep_ms": sweep / q, "regen_ms": regen * -(-q // k) / q,
                     "valid": bool(ok)})
        print(f"batch {k:3d}: fold {fold / q:8.2f} ms/search  sweep {sweep / q:8.2f} ms/search  "
              f"regen {regen * -(-q // k) / q:8.2f} ms/search  valid={ok}", flush=True)
    print(f"one regeneration of the {m:,} edges: {regen:.1f} ms")
    rec = {"scale": a.scale, "roots": len(roots), "commit": dbfs_commit(), "regen_ms": regen,
           "device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "rows": rows}
    print("record:", write_record("validate_gpu_profile", rec))


if __name__ == "__main__":
    main()

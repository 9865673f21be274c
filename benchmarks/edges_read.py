"""A stored edge list read whole and checked (what the CPU backend's load stage does for validation): one hash pass
against two, the same run, alternating.

    python benchmarks/edges_read.py --scale 22 --reps 5

``one pass`` is ``Dataset.edges()[:]`` (:class:`dbfs.store.integrity.CheckedArray`: the chunk digests it checks
add up to the edges' checksum part); ``two passes`` is the same read with the digests checked and then the
whole list hashed again for ``edges_checksum`` (what that read did before). ``plain read`` is the zarr read
alone (decode, no check), the floor. Prints the medians and the ratio; writes
``benchmarks/results/edges_read-<stamp>.json``. The dataset is generated in ``--datasets`` when missing.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.common import dbfs_commit, write_record  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=int, default=20)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--datasets", default="datasets")
    a = ap.parse_args(argv)

    from dbfs import store
    from dbfs.checksum import combine, partial_checksum
    from dbfs.spec import GraphSpec

    ds, _ = store.generate(GraphSpec.make(scale=a.scale), a.datasets, quiet=True, edges="stored")

    def one():
        return ds.edges()[:]

    def two():
        arr = ds.edges()
        out = arr.raw[:]
        arr.check_digests(0, out)
        if combine([partial_checksum(out, 0)]) != arr.checksum:
            raise SystemExit("checksum mismatch")
        return out

    def plain():
        return ds.edges().raw[:]

    runs = {"one pass": [], "two passes": [], "plain read": []}
    for fn in (one, two, plain):
        fn()                                            # page cache and compiled kernels warm
    for _ in range(a.reps):
        for name, fn in (("one pass", one), ("two passes", two), ("plain read", plain)):
            t0 = time.perf_counter()
            fn()
            runs[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in runs.items()}
    for k, v in med.items():
        print(f"{k:11s} {v:.3f} s (median of {a.reps})")
    print(f"one pass / two passes: {med['one pass'] / med['two passes']:.3f}; "
          f"one pass / plain read: {med['one pass'] / med['plain read']:.3f}")
    write_record("edges_read", {"scale": a.scale, "reps": a.reps, "edges": ds.n_edges, "commit": dbfs_commit(),
                                "runs": runs, "median": med})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

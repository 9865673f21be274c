"""What stored-data integrity costs Kernel 1 (issue #22: target <= 5%), A/B in one process.

Modes, alternating (forward, then reversed order each repetition) after one
warm-up build each, every build ``build_partitioned(..., P, force=True)`` of
the same Kronecker spec with the threaded scheduler:

- ``on``: the shipped code (every edge chunk read through its crc32c, the
  edges' checksum parts computed in the bucket phase and compared with the
  generation's ``edges_checksum``, every CSR chunk written with crc32c);
- ``off``: a copy of the dataset whose edges were written zstd-only (no crc
  to check on read), the CSR written zstd-only, the checksum parts stubbed
  (``partial_checksum`` returns 0, the comparison skipped);
- ``crc`` / ``sum``: ``off`` with one of the two checks back.

Prints the median ``construction_time`` per mode and its ratio to ``off``;
writes benchmarks/results/integrity_ab-<stamp>.json (or $DBFS_RESULTS).

    python benchmarks/integrity_ab.py --scale 22 --reps 6 [--modes off on crc sum]
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import write_record  # noqa: E402


def _zstd_only(level=None):
    from zarr.codecs import ZstdCodec

    from dbfs.store import integrity

    return [ZstdCodec(level=level if level is not None else integrity._ZSTD_LEVEL)]


@contextlib.contextmanager
def _mode(crc: bool, total: bool):
    """Switch the crc32c codec (writes) and the checksum (bucket phase) off where asked."""
    import dbfs.checksum as C
    import dbfs.kernel1.csr_store as CS
    import dbfs.kernel1.partitioned as KP

    saved = (KP.codecs, CS.compressors, C.partial_checksum, KP._check_sum)
    try:
        if not crc:
            KP.codecs = CS.compressors = _zstd_only
        if not total:
            C.partial_checksum = lambda block, start: 0
            KP._check_sum = lambda *a, **k: None
        yield
    finally:
        KP.codecs, CS.compressors, C.partial_checksum, KP._check_sum = saved


def _datasets(scale, root: Path):
    """The dataset as shipped (crc32c edges) and a zstd-only copy of the same spec."""
    from dbfs import store
    from dbfs.spec import GraphSpec
    import dbfs.store.write as W

    spec = GraphSpec.make("kronecker", scale)
    on, _ = store.generate(spec, root=root / "on", client=None, quiet=True)
    saved = W.compressors
    W.compressors = _zstd_only
    try:
        off, _ = store.generate(spec, root=root / "off", client=None, quiet=True)
    finally:
        W.compressors = saved
    return on, off


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", type=int, default=20)
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--partitions", "-P", type=int, default=1)
    ap.add_argument("--modes", nargs="+", default=["off", "on", "crc", "sum"])
    ap.add_argument("--tag", default="")
    a = ap.parse_args(argv)
    from dbfs import kernel1

    flags = {"off": (False, False), "on": (True, True), "crc": (True, False), "sum": (False, True)}
    times = {m: [] for m in a.modes}
    with tempfile.TemporaryDirectory(prefix="dbfs-intab-") as d:
        on, off = _datasets(a.scale, Path(d))

        def build(m):
            crc, total = flags[m]
            ds = on if crc else off          # the edges' crc is read only where it was written
            with _mode(crc, total):
                t0 = time.perf_counter()
                attrs = kernel1.build_partitioned(ds.path, P=a.partitions, client=None, progress=False, force=True)
                wall = time.perf_counter() - t0
            return float(attrs.get("construction_time", wall))

        for m in a.modes:
            build(m)                          # warm-up (Numba JIT, page cache)
        for rep in range(a.reps):
            for m in (a.modes if rep % 2 == 0 else list(reversed(a.modes))):
                times[m].append(build(m))
            print(f"rep {rep + 1}/{a.reps}: " + ", ".join(f"{m} {times[m][-1]:.3f} s" for m in a.modes),
                  file=sys.stderr, flush=True)
    med = {m: statistics.median(v) for m, v in times.items()}
    base = med.get("off")
    rec = {"scale": a.scale, "partitions": a.partitions, "reps": a.reps, "times": times, "median_s": med,
           "ratio_vs_off": {m: med[m] / base for m in med} if base else None}
    write_record("integrity_ab" + (f"-{a.tag}" if a.tag else ""), rec)
    print(f"SCALE {a.scale}, P={a.partitions}, {a.reps} reps: " + ", ".join(
        f"{m} {med[m]:.3f} s" + (f" ({med[m] / base:.3f}x)" if base else "") for m in a.modes))


if __name__ == "__main__":
    main()

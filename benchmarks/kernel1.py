"""Kernel 1 benchmark: dbfs build times side by side with GAP's published build.

What it measures, per SCALE (edgefactor 16):

- in-memory ``build_csr`` (edges in RAM -> CSRGraph): median of 3 after a JIT
  warm-up, for dedupe=True (the Graph500/GAP setting);
- zarr-to-zarr ``build_partitioned`` (edges in a zarr group -> CSR variant in
  zarr, threaded scheduler): one run per P in ``--partitions``, its
  ``construction_time`` attribute (end to end).

Peers are not rerun here (C++ cannot be vendored): GAP's build on the 2-core
dev machine took 0.49 s at SCALE 20 and 2.5 s at SCALE 22; on the GPU
machine's host CPU with 16 threads 1.9 / 8.3 / 43 s at SCALE 22 / 24 / 26
(docs/PERFORMANCE.md). ``--peer`` picks the table matching the machine; the
ratio dbfs / GAP is reported where a peer number exists. GAP was measured on
the H100 machine's host; the GPU machine may be an H200 host with another CPU.

Input: ``dbfs.generate.graph500.kronecker_edges(scale)`` when present, else a
block-seeded Numba R-MAT with Graph500's initiator (A, B, C) = (0.57, 0.19,
0.19) and a scrambled vertex numbering (same degree skew, not the bit-exact
Graph500 stream).

Writes ``benchmarks/results/kernel1-<host>[-<tag>]-<date>.json`` and prints a
table. The dev machine is shared: compare runs taken side by side only.

    python benchmarks/kernel1.py --scales 16 18 20
    NUMBA_NUM_THREADS=2 taskset -c 0,1 python benchmarks/kernel1.py --scales 20 22 --tag 2cpus
    python benchmarks/kernel1.py --scales 22 24 --peer gap-gpuhost-16 --tag 16cpus   # GPU host
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

# GAP's build (Kernel 1) times, docs/PERFORMANCE.md: on the 2-core dev machine, and on the GPU
# machine's host CPU with 16 threads. Compare only with runs on the matching machine.
PEERS = {
    "gap-2core": {"scales": {20: 0.49, 22: 2.5}, "source": "GAP converter, 2-core machine (docs/PERFORMANCE.md)"},
    "gap-gpuhost-16": {"scales": {22: 1.9, 24: 8.3, 26: 43.0},
                       "source": "GAP, GPU machine's host CPU, 16 threads (docs/PERFORMANCE.md)"},
}
GAP_BUILD_S = PEERS["gap-2core"]["scales"]


def _rmat_fallback(scale: int, edgefactor: int = 16, seed: int = 2):
    from numba import njit, prange

    @njit(parallel=True, cache=False)
    def gen(scale, m, seed, out):
        nblk = (m + 65535) // 65536
        for blk in prange(nblk):
            np.random.seed(seed * 1000003 + blk)
            for i in range(blk * 65536, min(m, (blk + 1) * 65536)):
                u = 0
                v = 0
                for _ in range(scale):
                    x = np.random.random()
                    u <<= 1
                    v <<= 1
                    if x < 0.57:
                        pass
                    elif x < 0.76:
                        v |= 1
                    elif x < 0.95:
                        u |= 1
                    else:
                        u |= 1
                        v |= 1
                out[i, 0] = u
                out[i, 1] = v

    m = edgefactor << scale
    out = np.empty((m, 2), np.int64)
    gen(scale, m, seed, out)
    scramble = np.random.default_rng(seed).permutation(1 << scale)
    return scramble[out]


def make_edges(scale: int):
    """(edges int64 (M, 2), generator name)."""
    try:
        from dbfs.generate.graph500 import kronecker_edges
    except ImportError:
        return _rmat_fallback(scale), "rmat-fallback (0.57, 0.19, 0.19), scrambled"
    return np.asarray(kronecker_edges(scale)), "dbfs.generate.graph500.kronecker_edges"


def write_dataset(path: Path, edges: np.ndarray, n_vertices: int, chunk_rows: int = 1 << 20):
    import zarr
    from zarr.codecs import ZstdCodec

    g = zarr.open_group(str(path), mode="w")
    dt = np.uint32 if n_vertices <= 2**32 else np.int64
    g.create_array("edges", data=edges.astype(dt), chunks=(chunk_rows, 2), compressors=[ZstdCodec(level=1)])
    g.attrs.update({"n_vertices": int(n_vertices), "n_edges": int(edges.shape[0]), "complete": True})


def bench_scale(scale: int, partitions, reps: int = 3, zarr_build: bool = True, peer=None):
    from dbfs.kernel1 import build_csr, build_partitioned

    peer = GAP_BUILD_S if peer is None else peer
    t0 = time.perf_counter()
    edges, gen_name = make_edges(scale)
    t_gen = time.perf_counter() - t0
    n = 1 << scale
    build_csr(edges[: 1 << 12], n_vertices=n)            # JIT warm-up
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        g = build_csr(edges, n_vertices=n)
        times.append(time.perf_counter() - t0)
    rec = {
        "scale": scale, "edgefactor": 16, "n_vertices": n, "n_edges": int(edges.shape[0]),
        "generator": gen_name, "generate_s": t_gen, "nnz": g.nnz,
        "build_csr_s": times, "build_csr_median_s": statistics.median(times),
    }
    del g
    if scale in peer:
        rec["gap_build_s"] = peer[scale]
        rec["ratio_build_csr_vs_gap"] = rec["build_csr_median_s"] / peer[scale]
    if zarr_build:
        rec["build_partitioned"] = []
        with tempfile.TemporaryDirectory(prefix="dbfs-k1-") as tmp:
            warm = Path(tmp) / "warm"                      # JIT / cache load, same dtypes
            write_dataset(warm, edges[:4096], n)
            for P in partitions:
                build_partitioned(warm, P=P, progress=False)
            ds = Path(tmp) / f"bench-s{scale}"
            write_dataset(ds, edges, n)
            del edges
            for P in partitions:
                a = build_partitioned(ds, P=P, progress=False)
                r = {"P": P, "construction_time_s": a["construction_time"], "phase_times": a["phase_times"],
                     "tasks": a["tasks"], "nnz_total": a["nnz_total"]}
                if scale in peer:
                    r["ratio_vs_gap"] = a["construction_time"] / peer[scale]
                rec["build_partitioned"].append(r)
    return rec


def machine_info():
    import importlib

    import numba

    import dbfs

    info = {
        "host": socket.gethostname(), "platform": platform.platform(), "processor": platform.processor(),
        "cpu_count": os.cpu_count(), "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
        else os.cpu_count(), "numba_threads": numba.config.NUMBA_NUM_THREADS,
        "python": sys.version.split()[0], "numpy": np.__version__, "numba": numba.__version__, "dbfs": dbfs.__version__,
    }
    for mod in ("dask", "zarr"):            # absent on the GPU machine: --no-zarr runs without them
        try:
            info[mod] = importlib.import_module(mod).__version__
        except ImportError:
            info[mod] = None
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu_model"] = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), None)
    except OSError:
        pass
    return info


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--scales", type=int, nargs="+", default=[20, 22], help="SCALEs to run")
    ap.add_argument("--partitions", type=int, nargs="+", default=[1, 4], help="P values for build_partitioned")
    ap.add_argument("--reps", type=int, default=3, help="timed repetitions of build_csr (median reported)")
    ap.add_argument("--no-zarr", action="store_true", help="skip the zarr-to-zarr build")
    ap.add_argument("--peer", choices=sorted(PEERS), default="gap-2core",
                    help="which measured GAP build times to compare with (match the machine)")
    ap.add_argument("--tag", default="", help="added to the result file name, e.g. 2threads")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results",
                    help="directory for the JSON record")
    args = ap.parse_args(argv)

    record = {"benchmark": "kernel1", "tag": args.tag, "date": _dt.datetime.now().isoformat(timespec="seconds"),
              "machine": machine_info(), "peer": {"name": args.peer, "gap_build_s": PEERS[args.peer]["scales"],
                                                  "source": PEERS[args.peer]["source"]},
              "runs": []}
    for s in args.scales:
        rec = bench_scale(s, args.partitions, args.reps, not args.no_zarr, PEERS[args.peer]["scales"])
        record["runs"].append(rec)
        gap = rec.get("gap_build_s")
        line = f"SCALE {s:2d}: build_csr {rec['build_csr_median_s']:.3f} s"
        if gap:
            line += f" (GAP {gap:.2f} s, ratio {rec['ratio_build_csr_vs_gap']:.2f})"
        for r in rec.get("build_partitioned", []):
            line += f" | zarr P={r['P']} {r['construction_time_s']:.2f} s"
        print(line, flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    tag = f"-{args.tag}" if args.tag else ""
    path = args.out / f"kernel1-{socket.gethostname()}{tag}-{_dt.date.today().isoformat()}.json"
    with open(path, "w") as f:
        json.dump(record, f, indent=1, default=str)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

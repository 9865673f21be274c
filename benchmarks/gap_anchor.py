"""GAP's ``bfs`` against dbfs's single-process ``do``: the same graph, the same roots, the same cores.

    python benchmarks/gap_anchor.py --gap-src /path/to/gapbs [--gap-rev HASH] [--scales 20 22] [--roots 16]
        [--trials 3] [--threads K] [--datasets DIR] [--out DIR]

The outside anchor for dbfs's CPU numbers: the GAP Benchmark Suite's direction-optimizing BFS, built here
from its public source (``--gap-src``, a gapbs checkout; nothing of it is copied into this repository)
and run on the graph that ``dbfs run --backend cpu`` searches. For each SCALE:

1. GAP's ``bfs`` is built once per run: the source tree is copied to a temporary directory (the given
   one is never written) and its own Makefile runs ``make -B bfs`` there (``g++ -std=c++11 -O3 -Wall
   -fopenmp``, or ``$CXX``); the compile line make printed and the compiler's version go to the record;
2. the Graph500 Kronecker graph (edgefactor 16, seeds 2 and 3) is generated into the dbfs store
   (``--datasets``, default ``$DBFS_DATASETS`` or a temporary directory) and its Kernel 1 CSR built and
   loaded as the CPU backend loads it: variant ``variant_name(1)``, one partition, duplicates and
   self-loops dropped, symmetric, NOT relabelled (the CPU backend's default variant), so the CSR's ids
   are the Graph500 ids and the search keys need no mapping;
3. that CSR is written as GAP's serialized graph (``.sg``, :func:`write_sg`, the layout of gapbs
   ``src/writer.h`` ``WriteSerializedGraph`` / ``src/reader.h`` ``ReadSerializedGraph``: a one-byte
   directed flag (0), the number of adjacency entries and of vertices as int64, ``N + 1`` int64 offsets,
   the int32 neighbours; an undirected graph writes its out-arrays only). GAP's NodeID is int32, so
   SCALE 31 and above are refused. Every GAP run's "Graph has N nodes and M undirected edges" line is
   checked against the CSR;
4. the Graph500 search keys (``dbfs.roots.graph500_roots``, the reference's order); per root, GAP
   (``bfs -f graph.sg -r ROOT -n TRIALS``, ``OMP_NUM_THREADS=K``, one process per root: its graph read is
   outside its "Trial Time") and dbfs (``dbfs.bfs`` ``do``, ``backend="cpu"``, ``stats=True``,
   ``original=False``: the call ``CpuBackend.search`` times, Numba's threads set to K; the garbage
   collector paused inside the timer; TRIALS searches after one untimed warm-up search per SCALE) take
   turns, the side that goes first alternating from root to root, with a 50 ms pause before each side;
   per root, each side's median over its trials;
5. TEPS: the Graph500 count of that search (input tuples, self-loops excepted, inside the root's
   component: ``nedge`` of ``dbfs.validate`` on dbfs's parents, which validate every root) over the
   median time; per SCALE the harmonic mean over the roots of each side and dbfs / GAP.

GAP's own parents are not validated in the timed runs (``-v`` would add its serial verifier to every
trial); one extra, untimed ``-n 1 -v`` run on the first root per SCALE records its verdict
(``--no-gap-verify`` skips it). ``--threads K`` below the usable cores pins this process, and so GAP's,
to the first K of them. GAP prints its trial times to 10 us (``%3.5lf``): a time that rounds to zero ends
the run (use a larger SCALE).

Printed per SCALE: GAP's and dbfs's harmonic-mean GTEPS and dbfs / GAP. One JSON record,
``benchmarks/results/gap_anchor[-TAG]-<stamp>.json`` (``$DBFS_RESULTS`` or ``--out`` elsewhere), rewritten
after each SCALE: machine, GAP's revision (``--gap-rev``, else ``git -C`` of a checkout, else
"unknown"), its build line, every trial time of both sides per root and the nedge of each root.

Reference: S. Beamer, K. Asanovic, D. Patterson, "The GAP Benchmark Suite", arXiv:1508.03619, 2015
(https://github.com/sbeamer/gapbs, BSD licence); Graph 500 Benchmark 1 specification 3.0.1 (search
keys, TEPS), https://graph500.org/?page_id=12.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.common import write_record  # noqa: E402

#: GAP's NodeID (and SGID) is int32: 2**31 vertices at most
MAX_SCALE = 30
#: what a GAP run may take (its graph read included) before the benchmark gives up on it
GAP_TIMEOUT_S = 1800
_TRIAL = re.compile(r"^Trial Time:\s+([0-9.]+)\s*$", re.M)
_STATS = re.compile(r"^Graph has (\d+) nodes and (\d+) (un)?directed edges", re.M)
_VERIFY = re.compile(r"^Verification:\s+(\S+)", re.M)


def fail(msg: str):
    """End the benchmark with a one-line error."""
    raise SystemExit(f"gap_anchor: {msg}")


def write_sg(path, indptr, indices) -> int:
    """Write an undirected (symmetric) CSR as GAP's serialized graph ``.sg`` (gapbs ``src/writer.h``).

    Layout, native byte order, no padding: ``bool directed`` (one byte, 0), ``int64 num_edges`` (the
    adjacency entries written: both directions of every edge), ``int64 num_nodes``, ``int64
    offsets[num_nodes + 1]``, ``int32 neighbours[num_edges]``; a directed graph would add its in-arrays,
    an undirected one writes its out-arrays only. GAP reads ``num_edges / 2`` undirected edges.

    Parameters
    ----------
    path : path-like
    indptr : array-like of int
        ``N + 1`` row offsets, ``indptr[0] == 0``, non-decreasing.
    indices : array-like of int
        ``indptr[-1]`` neighbour ids in ``[0, N)``.

    Returns
    -------
    int
        The bytes written.
    """
    indptr = np.asarray(indptr)
    indices = np.asarray(indices)
    n = indptr.shape[0] - 1
    if indptr.ndim != 1 or n < 0 or indices.ndim != 1:
        fail("write_sg needs 1-D indptr (N + 1 offsets) and indices")
    if n >= 1 << 31:
        fail(f"{n:,} vertices do not fit GAP's int32 NodeID (2**31 - 1 at most)")
    nnz = indices.shape[0]
    if int(indptr[0]) != 0 or int(indptr[-1]) != nnz or (n and np.any(np.diff(indptr) < 0)):
        fail(f"write_sg: indptr must rise from 0 to len(indices) = {nnz:,}")
    if nnz and (int(indices.min()) < 0 or int(indices.max()) >= n):
        fail(f"write_sg: a neighbour id lies outside [0, {n:,})")
    with open(path, "wb") as f:
        f.write(b"\x00")                                           # directed = false
        f.write(np.array([nnz, n], dtype=np.int64).tobytes())
        f.write(np.ascontiguousarray(indptr, dtype=np.int64).data)
        f.write(np.ascontiguousarray(indices, dtype=np.int32).data)
    return 1 + 16 + 8 * (n + 1) + 4 * nnz


def parse_gap(text: str) -> dict:
    """GAP ``bfs`` stdout -> ``trial_times`` (seconds, in order), ``nodes`` and ``edges`` (its "Graph has"
    line; edges undirected, None where absent), ``directed`` and ``verification`` (PASS/FAIL per trial)."""
    m = _STATS.search(text)
    return {"trial_times": [float(t) for t in _TRIAL.findall(text)],
            "nodes": int(m.group(1)) if m else None, "edges": int(m.group(2)) if m else None,
            "directed": (m.group(3) is None) if m else None, "verification": _VERIFY.findall(text)}


def gap_revision(src: Path, given: str | None) -> str:
    """``given``, else the HEAD commit of ``src`` when it is the top of a git checkout, else "unknown"."""
    if given:
        return given
    try:
        top = subprocess.run(["git", "-C", str(src), "rev-parse", "--show-toplevel"], capture_output=True,
                             text=True, timeout=10)
        if top.returncode == 0 and Path(top.stdout.strip()).resolve() == src.resolve():
            head = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True,
                                  timeout=10)
            if head.returncode == 0 and head.stdout.strip():
                return head.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown"


def check_gap_src(src: Path) -> str:
    """The compiler GAP's Makefile will run; a one-line error when the source, make or the compiler is missing."""
    if not src.is_dir():
        fail(f"--gap-src {src} is not a directory (a gapbs checkout)")
    if not (src / "Makefile").is_file():
        fail(f"no Makefile in --gap-src {src} (a gapbs checkout has one at its top)")
    if not (src / "src" / "bfs.cc").is_file():
        fail(f"no src/bfs.cc in --gap-src {src} (a gapbs checkout has one)")
    if shutil.which("make") is None:
        fail("no make on PATH (GAP's Makefile builds bfs)")
    cxx = os.environ.get("CXX") or "g++"
    if shutil.which(cxx.split()[0]) is None:
        fail(f"no {cxx} on PATH (GAP's Makefile compiles bfs with it: install g++ or set CXX)")
    return cxx


def build_gap(src, work) -> tuple:
    """(path of GAP's ``bfs``, build info): ``make -B bfs`` with GAP's Makefile in a copy of ``src`` under
    ``work``."""
    src = Path(src)
    cxx = check_gap_src(src)
    tree = Path(work) / "gapbs"
    shutil.copytree(src, tree, ignore=shutil.ignore_patterns(".git"))
    t0 = time.perf_counter()
    p = subprocess.run(["make", "-B", "bfs"], cwd=tree, capture_output=True, text=True)
    if p.returncode != 0 or not (tree / "bfs").is_file():
        last = (p.stderr.strip().splitlines() or p.stdout.strip().splitlines() or ["no output"])[-1]
        fail(f"make bfs failed in a copy of {src} (exit {p.returncode}): {last}")
    ver = subprocess.run([cxx.split()[0], "--version"], capture_output=True, text=True)
    lines = [ln.strip() for ln in p.stdout.splitlines() if "bfs.cc" in ln]
    command = lines[-1] if lines else ""
    flags = [w for w in command.split()[1:] if w.startswith("-") and w != "-o"]
    return tree / "bfs", {"command": command or "make -B bfs", "flags": flags, "make": "make -B bfs",
                          "compiler": (ver.stdout.splitlines() or ["?"])[0], "seconds": time.perf_counter() - t0}


def run_gap(binary, sg, root: int, trials: int, threads: int, verify: bool = False) -> dict:
    """One GAP ``bfs`` process: ``trials`` searches from ``root`` of graph ``sg`` (:func:`parse_gap`'s dict)."""
    cmd = [str(binary), "-f", str(sg), "-r", str(int(root)), "-n", str(int(trials))] + (["-v"] if verify else [])
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=GAP_TIMEOUT_S,
                           env={**os.environ, "OMP_NUM_THREADS": str(threads)})
    except subprocess.TimeoutExpired:
        fail(f"{' '.join(cmd)} ran past {GAP_TIMEOUT_S} s")
    out = parse_gap(p.stdout)
    if p.returncode != 0 or len(out["trial_times"]) != trials:
        last = (p.stdout.strip().splitlines() or p.stderr.strip().splitlines() or ["no output"])[-1]
        fail(f"{' '.join(cmd)} exited {p.returncode} with {len(out['trial_times'])} of {trials} trial times: {last}")
    return out


def hmean_teps(nedge, times) -> float:
    """Harmonic mean of ``nedge[i] / times[i]``."""
    return len(times) / sum(t / e for e, t in zip(nedge, times))


def set_threads(k: int) -> list:
    """K threads for this process's Numba kernels and GAP's OpenMP; fewer than the usable cores pins this
    process (and its children) to the first K of them. Returns the cpus it may run on."""
    cpus = sorted(os.sched_getaffinity(0))
    if k < len(cpus):
        cpus = cpus[:k]
        os.sched_setaffinity(0, cpus)
    os.environ["OMP_NUM_THREADS"] = str(k)
    if "numba" not in sys.modules:                 # read when numba loads
        os.environ["NUMBA_NUM_THREADS"] = str(k)
    return cpus


def _pause():
    time.sleep(0.05)       # the other side's threads stop spinning before this side's clock


def time_dbfs(search, root: int, trials: int) -> tuple:
    """(seconds of ``trials`` searches from ``root``, the last search's result)."""
    from dbfs.bfs import collector_paused  # deferred: numba (its thread count is set first)

    times, res = [], None
    for _ in range(trials):
        res = None                          # the previous parents freed before the clock
        with collector_paused():
            t0 = time.perf_counter()
            res = search(root)
            times.append(time.perf_counter() - t0)
    return times, res


def graph_for(scale: int, datasets) -> tuple:
    """(stored dataset, its edges in memory, the CPU backend's CSR: variant_name(1), not relabelled)."""
    from dbfs import kernel1, store  # deferred: numba (its thread count is set first)
    from dbfs.bfs import prepare
    from dbfs.spec import GraphSpec

    ds, _ = store.generate(GraphSpec.make("kronecker", scale), root=datasets, client=None, quiet=True)
    kernel1.build_partitioned(ds.path, P=1, client=None, progress=False)
    g = kernel1.load_csr(ds.path, kernel1.variant_name(1))
    if g.meta.get("relabel", "none") != "none":
        fail(f"the stored variant {kernel1.variant_name(1)} is relabelled: GAP would need mapped roots")
    return ds, ds.edges()[:], prepare(g)


def bench_scale(scale: int, gap_bin, args, work: Path) -> dict:
    """One SCALE: GAP and dbfs on the same CSR and roots (the module docstring's steps 2-5)."""
    from dbfs.bfs import bfs  # deferred: numba (its thread count is set first)
    from dbfs.kernel1 import variant_name
    from dbfs.roots import graph500_roots
    from dbfs.validate import validate

    ds, edges, g = graph_for(scale, args.datasets)
    n, nnz = g.n_vertices, int(g.indices.shape[0])
    roots = [int(r) for r in graph500_roots(edges, scale, n=args.roots, n_vertices=n)]
    sg = work / f"kron-s{scale}.sg"
    t0 = time.perf_counter()
    sg_bytes = write_sg(sg, g.indptr, g.indices)
    sg_seconds = time.perf_counter() - t0
    print(f"SCALE {scale}: {n:,} vertices, {nnz // 2:,} undirected edges ({ds.n_edges:,} tuples), {len(roots)} "
          f"roots; {sg.name} {sg_bytes / 2**20:.1f} MiB", file=sys.stderr, flush=True)

    def search(r):
        return bfs(g, r, algorithm="do", backend="cpu", stats=True, original=False)

    search(roots[0])                                                   # warm-up: kernels loaded, pages touched
    verify = None
    if not args.no_gap_verify:
        verify = run_gap(gap_bin, sg, roots[0], 1, args.threads, verify=True)["verification"]
        if verify != ["PASS"]:
            print(f"gap_anchor: GAP's verifier said {verify} for root {roots[0]}", file=sys.stderr)
    gap_t, dbfs_t, nedge, order = [], [], [], []
    for i, r in enumerate(roots):
        sides = ("gap", "dbfs") if i % 2 == 0 else ("dbfs", "gap")
        order.append(sides[0])
        for side in sides:
            _pause()
            if side == "gap":
                out = run_gap(gap_bin, sg, r, args.trials, args.threads)
                if (out["nodes"], out["edges"], out["directed"]) != (n, nnz // 2, False):
                    fail(f"GAP read {out['nodes']} nodes, {out['edges']} edges, directed {out['directed']} from "
                         f"{sg.name}; the CSR has {n} vertices and {nnz // 2} undirected edges")
                gap_t.append(out["trial_times"])
            else:
                times, res = time_dbfs(search, r, args.trials)
                dbfs_t.append(times)
        v = validate(edges, r, g.to_original(res.parent), n_vertices=n)
        if not v.ok:
            fail(f"dbfs's search from root {r} at SCALE {scale} failed validation: {v.summary()}")
        nedge.append(int(v.nedge))
    sg.unlink()
    gap_med = [statistics.median(t) for t in gap_t]
    dbfs_med = [statistics.median(t) for t in dbfs_t]
    if min(gap_med) <= 0:
        fail(f"GAP's median trial time of a root at SCALE {scale} is below its printed resolution (10 us): "
             f"use a larger SCALE")
    gap_teps, dbfs_teps = hmean_teps(nedge, gap_med), hmean_teps(nedge, dbfs_med)
    return {"scale": scale, "n_vertices": n, "n_tuples": int(ds.n_edges), "adjacency_entries": nnz,
            "variant": variant_name(1), "relabel": "none", "sg_bytes": sg_bytes, "sg_write_seconds": sg_seconds,
            "roots": roots, "nedge": nedge, "first": order, "gap_verify_first_root": verify,
            "gap": {"times": gap_t, "median": gap_med, "hmean_teps": gap_teps},
            "dbfs": {"call": 'bfs(g, root, algorithm="do", backend="cpu", stats=True, original=False)',
                     "times": dbfs_t, "median": dbfs_med, "hmean_teps": dbfs_teps},
            "dbfs_over_gap": dbfs_teps / gap_teps}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gap-src", required=True, help="a gapbs checkout (its Makefile and src/)")
    ap.add_argument("--gap-rev", default=None, help="GAP's commit (default: git -C GAP_SRC, else 'unknown')")
    ap.add_argument("--scales", type=int, nargs="+", default=[20])
    ap.add_argument("--roots", type=int, default=16, help="Graph500 search keys per SCALE")
    ap.add_argument("--trials", type=int, default=3, help="searches per root and side (the median is kept)")
    ap.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS of GAP and Numba threads of dbfs "
                                                               "(default: every usable core)")
    ap.add_argument("--datasets", default=None, help="dbfs datasets root (default $DBFS_DATASETS or a temp dir)")
    ap.add_argument("--out", default=None, help="results directory (default $DBFS_RESULTS or benchmarks/results)")
    ap.add_argument("--tag", default="", help="added to the record's name (e.g. the machine)")
    ap.add_argument("--no-gap-verify", action="store_true", help="skip GAP's untimed -v run on the first root")
    args = ap.parse_args(argv)
    bad = [s for s in args.scales if not 1 <= s <= MAX_SCALE]
    if bad:
        fail(f"SCALE {bad[0]} is outside 1..{MAX_SCALE}: GAP's NodeID is int32 (2**31 - 1 vertices at most)")
    usable = len(os.sched_getaffinity(0))
    args.threads = usable if args.threads is None else args.threads
    for name in ("roots", "trials", "threads"):
        if getattr(args, name) < 1:
            fail(f"--{name} must be >= 1")
    if args.threads > usable:
        fail(f"--threads {args.threads} exceeds the {usable} usable cores")
    args.gap_src = Path(args.gap_src)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    check_gap_src(args.gap_src)                            # before anything is set or generated
    cpus = set_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="dbfs-gap-") as tmp:
        work = Path(tmp)
        args.datasets = args.datasets or os.environ.get("DBFS_DATASETS") or str(work / "datasets")
        gap_bin, build = build_gap(args.gap_src, work)
        import numba  # deferred: its thread count is set first (set_threads)

        numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
        record = {"gap": {"src": str(args.gap_src.resolve()), "rev": gap_revision(args.gap_src, args.gap_rev),
                          "build": build, "flags": f"-n {args.trials} -r ROOT -f graph.sg"},
                  "threads": args.threads, "cpus": cpus, "numba_threads": numba.get_num_threads(),
                  "n_roots": args.roots, "trials": args.trials, "loadavg_start": os.getloadavg(), "scales": []}
        path = None
        for scale in args.scales:
            rec = bench_scale(scale, gap_bin, args, work)
            record["scales"].append(rec)
            record["loadavg_end"] = os.getloadavg()
            path = write_record(f"gap_anchor{('-' + args.tag) if args.tag else ''}", record, args.out, path)
            print(f"SCALE {scale}: GAP {rec['gap']['hmean_teps'] / 1e9:.4f} GTEPS, dbfs do "
                  f"{rec['dbfs']['hmean_teps'] / 1e9:.4f} GTEPS, dbfs/GAP {rec['dbfs_over_gap']:.2f} "
                  f"(harmonic means over {len(rec['roots'])} roots, median of {args.trials} trials each, "
                  f"{args.threads} threads)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""In-process A/B of the CPU search: a git commit's kernels against the working tree's.

    python -m benchmarks.cpu_ab --base COMMIT [--scale 20] [--roots 16] [--reps 5]
                                [--algorithm do] [--evict-mb 640] [--hold]

On a shared machine two runs of one benchmark differ by more than most
changes to a step gain, so separate runs cannot rank two versions.
This script loads the CPU kernels as they are at ``--base`` (``git show``:
the package ``dbfs/bfs/cpu/``, or the single module ``dbfs/bfs/cpu.py`` of
commits before the split) next to the working tree's, builds the Graph500 graph once (dbfs generator
and Kernel 1; each version gets its own ``CSRGraph`` over the same arrays,
so per-graph helpers do not leak between them) and times both versions'
``--algorithm`` on the same roots in one process, alternating which goes
first, each search after a sweep over an ``--evict-mb`` buffer (cold
caches, as between the searches of ``dbfs run``) with the garbage
collector paused (each search's parents dropped before the next; with
``--hold`` validated and kept through it, as a user's loop does), after
one untimed search per root and version (so the comparison is of the
steps, not of when a version loads its kernels).
Both versions' parents are validated for the first root.
It prints per-root medians and the geometric mean of the per-root
base/new ratios (> 1: the working tree is faster); the JSON record keeps
every time. Numba compiles both versions into a fresh cache directory, so
the first minute is compilation.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_CACHE = tempfile.mkdtemp(prefix="dbfs-ab-numba-")
os.environ["NUMBA_CACHE_DIR"] = _CACHE   # before Numba loads: a module loaded from a file caches badly

import numpy as np  # noqa: E402


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout


def _show(root: Path, commit: str, f: str) -> str:
    """File ``f`` at ``commit``: a commit of the repository at ``root``, or a folder holding a commit's tree
    (``git archive COMMIT | tar -x -C DIR``, for a machine without the repository)."""
    return (Path(commit) / f).read_text() if Path(commit).is_dir() else _git(root, "show", f"{commit}:{f}")


def _ls(root: Path, commit: str, sub: str) -> list:
    """The ``.py`` files under folder ``sub`` at ``commit`` (as :func:`_show`), repository-relative."""
    if Path(commit).is_dir():
        return [str(p.relative_to(commit)) for p in sorted((Path(commit) / sub).rglob("*.py"))]
    return [f for f in _git(root, "ls-tree", "-r", "--name-only", commit, "--", sub).split() if f.endswith(".py")]


def _load_package(root: Path, commit: str, files: list):
    """The package ``dbfs/bfs/cpu/`` at ``commit`` (its modules import one
    another relatively), imported under a name of its own."""
    import importlib

    name = f"dbfs_ab_cpu_{commit.replace('/', '_').replace('-', '_').replace('.', '_')}"
    for f in files:
        dest = Path(_CACHE) / name / Path(f).relative_to("dbfs/bfs/cpu")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(_show(root, commit, f))
    sys.path.insert(0, _CACHE)
    try:
        mod = importlib.import_module(name)
    finally:
        sys.path.remove(_CACHE)
    return dict(mod.ALGORITHMS), mod


def _load_module(root: Path, commit: str):
    """The single module ``dbfs/bfs/cpu.py`` at ``commit`` (before the split),
    its ``@register`` decorators collected instead of registered."""
    import importlib.util

    import dbfs.bfs as pkg

    path = Path(_CACHE) / f"cpu_{commit.replace('/', '_')}.py"
    path.write_text(_show(root, commit, "dbfs/bfs/cpu.py"))
    found, real = {}, getattr(pkg, "register", None)

    def collect(name, backend="cpu"):
        def deco(fn):
            found[name] = fn
            return fn
        return deco

    pkg.register = collect
    try:
        spec = importlib.util.spec_from_file_location(f"dbfs_ab_{path.stem}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        if real is None:
            del pkg.register
        else:
            pkg.register = real
    return found, mod


def load_version(commit: str):
    """({algorithm name: search function}, module) of the CPU kernels at
    ``commit``, loaded beside the working tree's; nothing of the working
    tree's ``dbfs.bfs`` is changed."""
    import dbfs.bfs as pkg

    root = Path(pkg.__file__).resolve().parents[2]
    try:
        files = _ls(root, commit, "dbfs/bfs/cpu/")
        if files:
            return _load_package(root, commit, files)
        return _load_module(root, commit)
    except subprocess.CalledProcessError as e:
        sys.exit(f"cpu_ab: cannot read the CPU kernels at {commit!r}: {e.stderr.strip()}; pass a commit of this "
                 "repository")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="git commit whose CPU kernels (dbfs/bfs/cpu/) are the A side, "
                    "or a folder holding that commit's tree (git archive), where git is not at hand")
    ap.add_argument("--scale", type=int, default=20)
    ap.add_argument("--roots", type=int, default=16)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--algorithm", default="do")
    ap.add_argument("--evict-mb", type=int, default=640, help="buffer swept before each search (MiB)")
    ap.add_argument("--hold", action="store_true",
                    help="validate every search and keep its parents alive through the version's next "
                         "search, as a `p = bfs(g, r); validate(edges, r, p)` loop does (default: drop them)")
    args = ap.parse_args()

    from benchmarks.common import write_record
    from dbfs.bfs import cpu
    from dbfs.bfs.timing import collector_paused
    from dbfs.generate.graph500 import kronecker_edges
    from dbfs.graph import CSRGraph
    from dbfs.kernel1 import build_csr
    from dbfs.roots import graph500_roots
    from dbfs.validate import validate

    base_fns, base_mod = load_version(args.base)
    if args.algorithm not in base_fns:
        sys.exit(f"cpu_ab: {args.base} has no CPU algorithm {args.algorithm!r}: use one of {sorted(base_fns)}")
    if args.algorithm not in cpu.ALGORITHMS:
        sys.exit(f"cpu_ab: the working tree has no CPU algorithm {args.algorithm!r}: use one of "
                 f"{list(cpu.ALGORITHMS)}")
    edges = kronecker_edges(args.scale)
    roots = graph500_roots(edges, args.scale, n=args.roots).tolist()
    g = build_csr(edges, n_vertices=1 << args.scale)
    sides = {}
    for name, mod, fn in (("base", base_mod, base_fns[args.algorithm]),
                          ("new", cpu, cpu.ALGORITHMS[args.algorithm])):
        graph = CSRGraph(g.indptr, g.indices, g.n_vertices)
        if hasattr(mod, "prepare"):
            mod.prepare(graph)
        parent, _ = fn(graph, roots[0])                  # warm-up (compile, helpers)
        v = validate(edges, roots[0], parent)
        if not v.ok:
            sys.exit(f"cpu_ab: the {name} side's parents fail validation: {v.summary()}")
        sides[name] = (fn, graph)
    if not args.hold:
        del edges
    for fn, graph in sides.values():                     # every root once, untimed: a version without
        for r in roots:                                  # warm_kernels compiles some kernels on later roots
            fn(graph, r)
    evict = np.ones(args.evict_mb << 17, np.int64)
    times = {k: {r: [] for r in roots} for k in sides}
    held = dict.fromkeys(sides)
    for rep in range(args.reps):
        for i, r in enumerate(roots):
            order = list(sides) if (rep + i) % 2 == 0 else list(sides)[::-1]
            for k in order:
                fn, graph = sides[k]
                evict += 1
                with collector_paused():
                    t0 = time.perf_counter()
                    parent, _ = fn(graph, r)
                    times[k][r].append(time.perf_counter() - t0)
                if args.hold:
                    held[k] = parent
                    if not validate(edges, r, parent).ok:
                        sys.exit(f"cpu_ab: the {k} side's parents from root {r} fail validation")
                parent = None
    med = {k: {r: float(np.median(times[k][r])) for r in roots} for k in sides}
    ratio = {r: med["base"][r] / med["new"][r] for r in roots}
    geo = float(np.exp(np.mean(np.log(list(ratio.values())))))
    print(f"SCALE {args.scale}, {args.algorithm}, {len(roots)} roots x {args.reps}, cold, alternating; "
          f"base = {args.base}, new = working tree" + ("; validated, previous parents held" if args.hold else ""))
    print(f"{'root':>9} {'base ms':>9} {'new ms':>9} {'base/new':>9}")
    for r in roots:
        print(f"{r:>9} {1e3 * med['base'][r]:9.3f} {1e3 * med['new'][r]:9.3f} {ratio[r]:9.3f}")
    means = {k: float(np.mean(list(med[k].values()))) for k in sides}
    print(f"mean of the per-root medians: base {1e3 * means['base']:.3f} ms, new {1e3 * means['new']:.3f} ms; "
          f"geometric mean of base/new {geo:.3f}")
    write_record("cpu_ab", {"params": vars(args), "roots": roots, "median_ms": {k: [1e3 * med[k][r] for r in roots]
                                                                              for k in sides},
                            "mean_of_medians_ms": {k: 1e3 * v for k, v in means.items()}, "geo_base_over_new": geo,
                            "times": {k: {str(r): v for r, v in t.items()} for k, t in times.items()}})


if __name__ == "__main__":
    main()

"""Kernel 2: breadth-first search, one call for every backend and algorithm.

Contract::

    bfs(graph, root, algorithm="do", backend="cpu", stats=False, levels=False, **opts)
        -> BFSResult(parent, levels, level_stats, ...)

- ``graph``: a :class:`dbfs.graph.CSRGraph` (Kernel 1 output).
- ``root``: an ORIGINAL vertex id, ``0 <= root < graph.n_vertices``.
- ``parent``: int64, one entry per vertex in ORIGINAL ids, ``parent[root] ==
  root``, ``-1`` for unreached vertices; any valid BFS tree (Graph500 section
  8), except ``spmv`` whose parent is the smallest-id neighbour one level up
  (deterministic).
- ``levels``: None, or (``levels=True``) the int64 depth of every vertex in
  original ids, -1 for unreached; computed from ``parent`` after the search.
- ``level_stats``: None unless ``stats=True``; then one dict per level:
  ``level``, ``direction`` ('td' or 'bu'), ``frontier`` (vertices expanded),
  ``edges`` (adjacency entries examined), ``discovered`` (vertices reached at
  the next level) and ``time`` (seconds, the level as seen from Python).

:func:`prepare` builds the per-graph helper structures a backend keeps in
``graph.meta`` (Kernel-1 data) ahead of the first search.

Backends register algorithms with :func:`register`; ``cpu``
(:mod:`dbfs.bfs.cpu`, Numba) is imported with this package and ``gpu``
(:mod:`dbfs.bfs.gpu`, CuPy) on first use. A backend function has the
signature ``fn(graph, root_internal, stats=False, **opts) -> (parent_internal,
level_stats_list)``; this module maps ids, checks arguments and wraps results.
The harness times :func:`bfs` (or the backend function); kernels never time
themselves except per level behind ``stats``.
"""
from __future__ import annotations

import contextlib
import functools
import gc
import importlib
import inspect
from dataclasses import dataclass, field

import numpy as np

from dbfs.errors import DbfsError
from dbfs.graph import CSRGraph

__all__ = ["ALGORITHMS", "BFSResult", "bfs", "get_algorithm", "prepare", "register"]

_REGISTRY: dict[tuple[str, str], object] = {}
#: backend name -> names of the algorithms registered so far (cpu is always loaded)
ALGORITHMS: dict[str, list[str]] = {}

_GPU_HINT = "backend gpu needs cupy and a CUDA GPU: pip install -e .[gpu]"


@dataclass
class BFSResult:
    parent: np.ndarray
    levels: np.ndarray | None = None
    level_stats: list | None = None
    root: int = -1
    algorithm: str = ""
    backend: str = ""
    opts: dict = field(default_factory=dict)


def register(name: str, backend: str = "cpu"):
    """Decorator: make ``fn`` the implementation of ``algorithm=name`` on ``backend``."""

    def deco(fn):
        _REGISTRY[(backend, name)] = fn
        names = ALGORITHMS.setdefault(backend, [])
        if name not in names:
            names.append(name)
        return fn

    return deco


def _load_backend(backend: str) -> None:
    if backend == "cpu":
        importlib.import_module("dbfs.bfs.cpu")
    elif backend == "gpu":
        try:
            importlib.import_module("dbfs.bfs.gpu")
        except ImportError as exc:
            raise DbfsError(_GPU_HINT) from exc
    else:
        raise DbfsError(f"unknown BFS backend {backend!r}: use 'cpu' or 'gpu'")


def get_algorithm(algorithm: str = "do", backend: str = "cpu"):
    """The registered backend function for (backend, algorithm)."""
    if (backend, algorithm) not in _REGISTRY:
        _load_backend(backend)
    try:
        return _REGISTRY[(backend, algorithm)]
    except KeyError:
        known = ", ".join(ALGORITHMS.get(backend, [])) or "none"
        raise DbfsError(f"unknown BFS algorithm {algorithm!r} for backend {backend}: use one of {known}") from None


@functools.lru_cache(maxsize=None)
def _option_names(fn) -> tuple:
    """The options an algorithm accepts (its parameters but graph, root,
    stats), cached: ``inspect.signature`` per search cost ~0.1 ms of a
    SCALE 20 search's 5 ms."""
    return tuple(p for p in inspect.signature(fn).parameters if p not in ("graph", "root", "stats"))


def _check_opts(fn, algorithm, opts):
    if not opts:
        return
    allowed = list(_option_names(fn))
    bad = sorted(k for k in opts if k not in allowed)
    if bad:
        raise DbfsError(f"algorithm {algorithm!r} has no option(s) {bad}: use {allowed or 'none'}")


def prepare(graph: CSRGraph, backend: str = "cpu") -> CSRGraph:
    """Build the backend's per-graph helper structures now (they are Kernel-1
    data: call this inside the construction timer; otherwise the first
    search, the untimed warm-up in a Graph500 run, builds them)."""
    _load_backend(backend)
    mod = importlib.import_module(f"dbfs.bfs.{backend}")
    hook = getattr(mod, "prepare", None)
    return hook(graph) if hook is not None else graph


@contextlib.contextmanager
def collector_paused():
    """Python's garbage collector off inside the block (as ``timeit`` does
    around its timer), restored after: a collection of unrelated objects
    (10+ ms with Numba's objects loaded) is not part of a search."""
    on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if on:
            gc.enable()


def check_root_id(root, n) -> int:
    """``int(root)``, or DbfsError unless it is a vertex id in [0, n) (every backend)."""
    n = int(n)
    try:
        r = int(root)
    except (TypeError, ValueError):
        raise DbfsError(f"root {root!r} is not an integer vertex id: pass 0 <= root < {n}") from None
    if not 0 <= r < n:
        raise DbfsError(f"root {r} is out of range for a graph of {n} vertices: pass 0 <= root < {n}")
    return r


def bfs(graph: CSRGraph, root: int, algorithm: str = "do", backend: str = "cpu",
        stats: bool = False, levels: bool = False, **opts) -> BFSResult:
    """Search ``graph`` from ``root``; see the module docstring for the contract."""
    fn = get_algorithm(algorithm, backend)
    _check_opts(fn, algorithm, opts)
    r = check_root_id(root, graph.n_vertices)
    parent_int, rec = fn(graph, graph.to_internal(r), stats=stats, **opts)
    parent = graph.to_original(parent_int)
    lev = None
    if levels:
        from dbfs.bfs.cpu import levels_from_parent

        lev = levels_from_parent(np.asarray(parent), r)
    return BFSResult(parent=parent, levels=lev, level_stats=rec if stats else None, root=r,
                     algorithm=algorithm, backend=backend, opts=dict(opts))


_load_backend("cpu")

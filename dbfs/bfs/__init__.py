"""Kernel 2: breadth-first search of an in-memory graph, one call for every
single-process backend and algorithm.

Contract::

    bfs(graph, root, algorithm="do", backend="cpu", stats=False, levels=False, **opts)
        -> BFSResult(parent, levels, level_stats, ...)

- ``graph``: a :class:`dbfs.graph.CSRGraph` (Kernel 1 output).
- ``root``: an ORIGINAL vertex id, ``0 <= root < graph.n_vertices``.
- ``parent``: int64, one entry per vertex in ORIGINAL ids, ``parent[root] ==
  root``, ``-1`` for unreached vertices; any valid BFS tree (Graph500 3.0.1,
  section 8), except ``spmv`` whose parent is the smallest-id neighbour one
  level up (deterministic).
- ``levels``: None, or (``levels=True``) the int64 depth of every vertex in
  original ids, -1 for unreached; computed from ``parent`` after the search.
- ``level_stats``: None unless ``stats=True``; then one dict per level:
  ``level``, ``direction`` ('td' or 'bu'), ``frontier`` (vertices expanded),
  ``edges`` (adjacency entries examined), ``discovered`` (vertices reached at
  the next level) and ``time`` (seconds, the level as seen from Python).

Kernel modules: ``cpu`` (:mod:`dbfs.bfs.cpu`, Numba) and ``gpu``
(:mod:`dbfs.bfs.gpu`, CuPy, imported on first use). Each exposes
``ALGORITHMS``, a dict ``name -> fn(graph, root_internal, stats=False, **opts)
-> (parent_internal, level_stats)``, and optionally ``prepare(graph)``; this
module maps ids, checks arguments and wraps results, as the Graph500
reference's driver wraps ``run_bfs``. The harness times :func:`bfs` (or the
kernel function); kernels never time themselves except per level behind
``stats``. The multi-worker search is :mod:`dbfs.bfs.dask`; the run-level
backend contract (load, prepare, search, validate, close) is
:mod:`dbfs.backends`.

``dbfs.bfs`` is this package and callable as :func:`bfs` (so the public
``dbfs.bfs(...)`` is the same object however the package was imported).
"""
from __future__ import annotations

import functools
import importlib
import inspect
import sys as _sys
import types as _types
from dataclasses import dataclass, field

import numpy as np

from dbfs.bfs.cpu import levels_from_parent
from dbfs.bfs.timing import collector_paused
from dbfs.errors import DbfsError
from dbfs.graph import CSRGraph, check_root_id

__all__ = ["BFSResult", "bfs", "get_algorithm", "algorithm_names", "prepare", "check_root_id",
           "collector_paused", "KERNEL_MODULES", "GPU_HINT"]

#: single-process kernel modules by backend name
KERNEL_MODULES = {"cpu": "dbfs.bfs.cpu", "gpu": "dbfs.bfs.gpu"}
GPU_HINT = "backend gpu needs cupy and a CUDA GPU: pip install -e '.[gpu]'"


@dataclass
class BFSResult:
    parent: np.ndarray
    levels: np.ndarray | None = None
    level_stats: list | None = None
    root: int = -1
    algorithm: str = ""
    backend: str = ""
    opts: dict = field(default_factory=dict)


def _kernels(backend: str):
    """The kernel module of ``backend`` (a one-line DbfsError when it cannot load)."""
    if backend not in KERNEL_MODULES:
        raise DbfsError(f"unknown BFS backend {backend!r} for an in-memory graph: use one of "
                        f"{', '.join(KERNEL_MODULES)} (the dask backend searches stored partitions: dbfs.bfs.dask)")
    try:
        return importlib.import_module(KERNEL_MODULES[backend])
    except ImportError as exc:
        if backend == "gpu":
            raise DbfsError(GPU_HINT) from exc
        raise


def algorithm_names(backend: str = "cpu") -> list:
    """The algorithms ``backend``'s kernel module provides, in its order."""
    return list(_kernels(backend).ALGORITHMS)


def get_algorithm(algorithm: str = "do", backend: str = "cpu"):
    """The kernel function for (backend, algorithm)."""
    table = _kernels(backend).ALGORITHMS
    try:
        return table[algorithm]
    except KeyError:
        raise DbfsError(f"unknown BFS algorithm {algorithm!r} for backend {backend}: use one of "
                        f"{', '.join(table)}") from None


@functools.lru_cache(maxsize=None)
def _option_names(fn) -> tuple:
    """The options an algorithm accepts (its parameters but graph, root,
    stats), cached: ``inspect.signature`` is not free inside a timed search."""
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
    hook = getattr(_kernels(backend), "prepare", None)
    return hook(graph) if hook is not None else graph


def bfs(graph: CSRGraph, root: int, algorithm: str = "do", backend: str = "cpu",
        stats: bool = False, levels: bool = False, original: bool = True, **opts) -> BFSResult:
    """Search ``graph`` from ``root``.

    Parameters
    ----------
    graph : CSRGraph
        Kernel 1 output (:func:`dbfs.build_csr` or a stored variant).
    root : int
        Search key, an original vertex id.
    algorithm : str
        One of :func:`algorithm_names` (``backend``).
    backend : {"cpu", "gpu"}
        Kernel module.
    stats, levels : bool
        Per-level records; per-vertex depths.
    original : bool
        Parents over original ids (default). False: over the graph's internal ids (a relabelled
        graph's, for a caller that maps them with ``graph.to_original`` after its clock, as the GPU
        and dask backends do); not with ``levels``.
    **opts
        Algorithm options (e.g. ``alpha``, ``beta`` of ``do``).

    Returns
    -------
    BFSResult
        See the module docstring for the encoding.

    Raises
    ------
    dbfs.errors.ArgumentError
        (a ValueError) when ``root`` is not an integer (a str, float or bool is never coerced; NumPy
        integers are fine) or not in ``[0, graph.n_vertices)``.
    DbfsError
        An unknown algorithm, backend or option.
    """
    fn = get_algorithm(algorithm, backend)
    _check_opts(fn, algorithm, opts)
    r = check_root_id(root, graph.n_vertices)
    if levels and not original:
        raise DbfsError("bfs(levels=True) needs the parents over original ids: drop original=False")
    parent_int, rec = fn(graph, graph.to_internal(r), stats=stats, **opts)
    parent = graph.to_original(parent_int) if original else parent_int
    lev = None
    if levels:
        lev = levels_from_parent(np.asarray(parent), r)
    return BFSResult(parent=parent, levels=lev, level_stats=rec if stats else None, root=r,
                     algorithm=algorithm, backend=backend, opts=dict(opts))


class _CallableModule(_types.ModuleType):
    """This package, callable as :func:`bfs` (the public ``dbfs.bfs``)."""

    def __call__(self, *args, **kwargs):
        return bfs(*args, **kwargs)


_sys.modules[__name__].__class__ = _CallableModule

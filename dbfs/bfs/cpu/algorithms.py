"""The CPU BFS algorithms (Numba kernels, driven level by level from Python).

Contract: ``ALGORITHMS`` maps each algorithm name to a search function
``fn(graph, root, stats=False, **opts) -> (parent, level_stats)``:
``graph`` a :class:`dbfs.graph.CSRGraph`, ``root`` an INTERNAL vertex id,
``parent`` an int64 array over internal ids (``parent[root] == root``, -1
for unreached; any valid BFS tree, Graph500 3.0.1 section 8, except
``spmv``'s deterministic min-id tree) and ``level_stats`` a list of
per-level dicts (``level``, ``direction``, ``frontier``, ``edges``,
``discovered``, ``time``), empty unless ``stats``. :func:`prepare` builds
the per-graph helpers (Kernel-1 data) ahead of the first search. Only
per-level work happens in Python; every per-vertex and per-edge loop is
compiled. Searches never time themselves except per level behind
``stats``.

Algorithms, in ``ALGORITHMS`` order:

- ``seq-list``: Graph500 2.x ``seq-list``, a sequential queue BFS walking
  linked adjacency lists threaded through the edge list
  (:mod:`dbfs.bfs.cpu.sequential`).
- ``seq-csr``: sequential queue BFS on the CSR (Graph500 2.x ``seq-csr``).
- ``td``: parallel top-down, one :func:`~dbfs.bfs.cpu.topdown.td_step` per
  level.
- ``bu``: parallel bottom-up, one :func:`~dbfs.bfs.cpu.bottomup.bu_step`
  per level (frontier bitmap).
- ``do``: direction-optimizing (Beamer, Asanovic and Patterson, SC'12),
  ``td_step`` or ``bu_step`` chosen per level by :mod:`dbfs.bfs.policy`
  (``policy="beamer"`` with GAP's ``alpha=15, beta=18`` by default, or
  ``policy="change_state"``, the growing/shrinking rule of Yasui, Fujisawa
  and Goto, IEEE BigData 2013).
- ``spmv``: linear-algebra BFS over the (min, select-index) semiring, push
  or pull per level as GraphBLAS does (Yang, Buluc and Owens, ICPP'18), with
  the same policies; ``parent[v]`` is the smallest internal id among v's
  neighbours in the previous level (:mod:`dbfs.bfs.cpu.semiring`).

Method: ``do`` and ``spmv`` share one loop (``_hybrid``) that keeps the
frontier in one representation at a time, a queue for top-down/push and a
bitmap for bottom-up/pull, and sums the new frontier's degrees (``m_f``)
only as far as the policy's next decision needs.

Encoding: bitmaps are int64 words, bit ``v & 63`` of word ``v >> 6``; the
``visited`` bitmap holds the vertices reached so far, those without edges
and the padding bits, and is exact at every level boundary. ``td``, ``bu``
and ``do`` also search a graph whose ``indices`` is a
:class:`~dbfs.bfs.cpu.adjacency.SplitAdjacency` (the GPU's device/host
split simulated in host memory, :func:`~dbfs.bfs.cpu.adjacency.split_graph`)
with the same per-level counts; the others refuse it in one line.
"""
from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from dbfs.bfs.policy import BU, TD, policy_from

from .adjacency import whole_adjacency
from .bottomup import bu_step
from .buffers import _fill_unreached, _scratch_bitmaps, parent_array
from .frontier import bitmap_degrees, bitmap_to_queue, frontier_edges, queue_to_bitmap
from .graph_aux import _deg, _rows_sorted, hub_neighbours, multi_edge_bitmap, start_visited
from .semiring import min_parent_fixup, spmv_pull_step
from .sequential import _seq_csr_levels, _seq_list_levels, seq_list_structure
from .topdown import td_step
from .warmup import warm_kernels

__all__ = ["ALGORITHMS", "bottom_up", "direction_optimizing", "prepare", "seq_csr", "seq_list", "spmv",
           "top_down"]


def _level_record(level, direction, n_f, edges, t0, discovered):
    """One ``level_stats`` entry, timed from ``t0``."""
    return {"level": level, "direction": direction, "frontier": int(n_f),
            "edges": int(edges), "discovered": int(discovered), "time": time.perf_counter() - t0}


def _seq_driver(step, args, graph, root, stats):
    """A sequential search: ``step`` (a ``_seq_*_levels`` kernel) over all
    levels at once, or one level per call with ``stats``."""
    n = graph.n_vertices
    parent = parent_array(graph)
    parent[root] = root
    queue = np.empty(n, np.int64)
    queue[0] = root
    lv_n = np.empty(max(n, 1), np.int64)
    lv_e = np.empty(max(n, 1), np.int64)
    if not stats:
        step(*args, parent, queue, 0, 1, n + 1, lv_n, lv_e)
        return parent, []
    rec = []
    head, tail, level = 0, 1, 0
    while head < tail:
        t0 = time.perf_counter()
        old_tail = tail
        head, tail, _ = step(*args, parent, queue, head, tail, 1, lv_n, lv_e)
        rec.append(_level_record(level, TD, lv_n[0], lv_e[0], t0, tail - old_tail))
        level += 1
    return parent, rec


def seq_csr(graph, root, stats=False):
    """Sequential queue BFS on the CSR (Graph500 2.x ``seq-csr``).

    Parameters
    ----------
    graph : CSRGraph
        Kernel 1 output.
    root : int
        Internal id of the search key.
    stats : bool
        Record one dict per level.

    Returns
    -------
    parent : ndarray of int64
        Over internal ids, ``parent[root] == root``, -1 unreached.
    level_stats : list of dict
        Empty unless ``stats``.
    """
    return _seq_driver(_seq_csr_levels, (graph.indptr, whole_adjacency(graph, "seq-csr")), graph, root, stats)


def seq_list(graph, root, stats=False):
    """Graph500 2.x ``seq-list``: queue BFS over linked lists of the edge list.

    Parameters
    ----------
    graph : CSRGraph
        Kernel 1 output.
    root : int
        Internal id of the search key.
    stats : bool
        Record one dict per level.

    Returns
    -------
    parent : ndarray of int64
        Over internal ids, ``parent[root] == root``, -1 unreached.
    level_stats : list of dict
        Empty unless ``stats``.
    """
    whole_adjacency(graph, "seq-list")
    head_of, next_of, ends = seq_list_structure(graph)
    return _seq_driver(_seq_list_levels, (head_of, next_of, ends), graph, root, stats)


def top_down(graph, root, stats=False):
    """Parallel top-down BFS: one ``td_step`` per level.

    Parameters
    ----------
    graph : CSRGraph
        Kernel 1 output.
    root : int
        Internal id of the search key.
    stats : bool
        Record one dict per level.

    Returns
    -------
    parent : ndarray of int64
        Over internal ids, ``parent[root] == root``, -1 unreached.
    level_stats : list of dict
        Empty unless ``stats``.
    """
    indptr, indices = graph.indptr, graph.indices
    warm_kernels(indptr, indices)
    parent = parent_array(graph)
    parent[root] = root
    visited = start_visited(graph, root)
    queue = np.array([root], dtype=np.int64)
    rec = []
    level = 0
    while queue.shape[0]:
        t0 = time.perf_counter()
        n_f = queue.shape[0]
        queue, examined = td_step(indptr, indices, 0, queue, parent, visited)
        if stats:
            rec.append(_level_record(level, TD, n_f, examined, t0, queue.shape[0]))
        level += 1
    return parent, rec


def bottom_up(graph, root, stats=False):
    """Parallel bottom-up BFS: one ``bu_step`` per level (frontier bitmap).

    Parameters
    ----------
    graph : CSRGraph
        Kernel 1 output.
    root : int
        Internal id of the search key.
    stats : bool
        Record one dict per level.

    Returns
    -------
    parent : ndarray of int64
        Over internal ids, ``parent[root] == root``, -1 unreached.
    level_stats : list of dict
        Empty unless ``stats``.
    """
    indptr, indices, n = graph.indptr, graph.indices, graph.n_vertices
    warm_kernels(indptr, indices)
    parent = parent_array(graph, fill=False)   # the first bu_step writes the -1s
    parent[root] = root
    hub = hub_neighbours(graph)
    multi = multi_edge_bitmap(graph)
    visited, front, nxt = _scratch_bitmaps(n)
    start_visited(graph, root, visited)
    no_edge = graph.meta["_no_edge_bitmap"]
    front.fill(0)
    front[root >> 6] |= np.int64(1) << (root & 63)
    rec = []
    n_f, level = 1, 0
    while n_f:
        t0 = time.perf_counter()
        awake, examined, _, _ = bu_step(indptr, indices, 0, front, parent, visited, nxt, hub, no_edge, multi,
                                        level == 0, False)
        if stats:
            rec.append(_level_record(level, BU, n_f, examined, t0, awake))
        front, nxt = nxt, front
        n_f = awake
        level += 1
    parent[root] = root                 # an isolated root is in no_edge: level 0's -1s covered it
    return parent, rec


def _hybrid(graph, root, stats, pol, semiring):
    """Direction-optimizing loop shared by ``do`` (any parent) and ``spmv``
    (min-id parent). The frontier lives in one representation at a time:
    a queue for top-down/push, a bitmap for bottom-up/pull; a top-down
    level of ``do`` whose new frontier is large leaves it as a bitmap (the
    next level is then usually bottom-up) and converts only if it is not.
    The new frontier's degree sum (m_f) is summed only as far as the
    policy's next decision needs (:meth:`~dbfs.bfs.policy.BeamerPolicy.m_f_cap`);
    after a ``do`` bottom-up level m_u is the step's exact count of the
    edges of the vertices left unvisited."""
    indptr, indices, n = graph.indptr, graph.indices, graph.n_vertices
    warm_kernels(indptr, indices)
    rows_sorted = False
    if semiring:
        rows_sorted = graph.meta.get("_rows_sorted")
        if rows_sorted is None:
            rows_sorted = bool(_rows_sorted(indptr, indices))
            graph.meta["_rows_sorted"] = rows_sorted
    hub = None if semiring else hub_neighbours(graph)
    multi = None if semiring else multi_edge_bitmap(graph)
    # do: the first bottom-up level writes the -1s (bu_step's ``fill``)
    need_fill = not semiring
    parent = parent_array(graph, fill=not need_fill)
    parent[root] = root
    visited, front, nxt = _scratch_bitmaps(n)
    start_visited(graph, root, visited)   # exact at every level boundary
    no_edge = graph.meta["_no_edge_bitmap"]
    queue = np.array([root], dtype=np.int64)
    have_queue = True  # else the frontier is in `front`
    n_f = 1
    m_f = _deg(indptr, root)
    m_u = int(indptr[-1]) - m_f
    pol.start(n)
    rec = []
    level = 0
    while n_f:
        t0 = time.perf_counter()
        d = pol.next(n_f, m_f, m_u)
        if d == TD:
            if not have_queue:
                queue = bitmap_to_queue(front, 0)
                have_queue = True
            if semiring:
                queue_to_bitmap(queue, 0, front)
            new_q, examined = td_step(indptr, indices, 0, queue, parent, visited, None if semiring else front)
            # the degree sum stops early once the policy's decision is known
            # (m_u is then inexact until the bottom-up level that follows)
            cap = pol.m_f_cap(None, m_u)
            if new_q is None:           # a large frontier, left in `front`
                have_queue = False
                new_n, new_m = bitmap_degrees(front, indptr, cap)
            else:
                if semiring:
                    examined += min_parent_fixup(indptr, 0, indices, new_q, front, parent, rows_sorted)
                queue = new_q
                new_n = queue.shape[0]
                new_m = frontier_edges(indptr, 0, queue, cap) if new_n else 0
            m_u -= new_m
        else:
            if have_queue:
                queue_to_bitmap(queue, 0, front)
                have_queue = False
            if semiring:
                new_n, examined, new_m = spmv_pull_step(indptr, indices, 0, front, parent, visited,
                                                        nxt, rows_sorted)
                m_u -= new_m
            else:
                new_n, examined, _, m_u = bu_step(indptr, indices, 0, front, parent, visited, nxt, hub,
                                                  no_edge, multi, need_fill, False)
                need_fill = False
                # the new frontier's degree sum only when the policy reads it
                cap = pol.m_f_cap(new_n, m_u) if new_n else None
                new_m = 0 if cap is None else bitmap_degrees(nxt, indptr, cap)[1]
            front, nxt = nxt, front
        if stats:
            rec.append(_level_record(level, d, n_f, examined, t0, new_n))
        n_f, m_f = new_n, new_m
        level += 1
    if need_fill:                       # no bottom-up level ran
        _fill_unreached(parent, visited, no_edge)
    parent[root] = root                 # an isolated root is in no_edge: the -1s covered it
    return parent, rec


def direction_optimizing(graph, root, stats=False, policy="beamer", alpha=None, beta=None,
                         unexplored="gap", tail="cost"):
    """Direction-optimizing BFS (Beamer et al., SC'12): ``td_step`` or
    ``bu_step`` per level, chosen by a policy of :mod:`dbfs.bfs.policy`.

    Parameters
    ----------
    graph : CSRGraph
        Kernel 1 output.
    root : int
        Internal id of the search key.
    stats : bool
        Record one dict per level.
    policy : {"beamer", "change_state"}
        Direction rule (:mod:`dbfs.bfs.policy`).
    alpha, beta : float or None
        The rule's parameters; None: the policy's defaults.
    unexplored, tail : str
        Beamer's variants (``"gap"``/``"exact"``, ``"cost"``/``"gap"``);
        ignored by ``change_state``.

    Returns
    -------
    parent : ndarray of int64
        Over internal ids, ``parent[root] == root``, -1 unreached.
    level_stats : list of dict
        Empty unless ``stats``.
    """
    return _hybrid(graph, root, stats, policy_from(policy, alpha, beta, unexplored, tail), semiring=False)


def spmv(graph, root, stats=False, policy="beamer", alpha=None, beta=None, unexplored="gap", tail="cost"):
    """Linear-algebra BFS over (min, select-index), deterministic parents.

    Push (SpMSpV) or pull (SpMV) chosen per level by the same policies as
    ``do`` (Yang, Buluc and Owens, ICPP'18); ``parent[v]`` is the smallest
    internal id among v's neighbours one level up.

    Parameters
    ----------
    graph : CSRGraph
        Kernel 1 output.
    root : int
        Internal id of the search key.
    stats : bool
        Record one dict per level.
    policy : {"beamer", "change_state"}
        Direction rule (:mod:`dbfs.bfs.policy`).
    alpha, beta : float or None
        The rule's parameters; None: the policy's defaults.
    unexplored, tail : str
        Beamer's variants (``"gap"``/``"exact"``, ``"cost"``/``"gap"``);
        ignored by ``change_state``.

    Returns
    -------
    parent : ndarray of int64
        Over internal ids, ``parent[root] == root``, -1 unreached.
    level_stats : list of dict
        Empty unless ``stats``.
    """
    whole_adjacency(graph, "spmv")
    return _hybrid(graph, root, stats, policy_from(policy, alpha, beta, unexplored, tail), semiring=True)


def prepare(graph):
    """Build the per-graph helpers the searches would otherwise build on
    their first call (hub neighbours, multi-edge and no-edge bitmaps, row
    order).

    They are Kernel-1 data: call this inside the construction timer. (The
    search kernels are loaded by the first search,
    :func:`~dbfs.bfs.cpu.warmup.warm_kernels`: not Kernel-1 work.)

    Parameters
    ----------
    graph : CSRGraph
        Its ``meta`` receives the helpers.

    Returns
    -------
    CSRGraph
        ``graph``.
    """
    hub_neighbours(graph)
    multi_edge_bitmap(graph)
    if graph.n_vertices:
        start_visited(graph, 0)
    if "_rows_sorted" not in graph.meta:
        graph.meta["_rows_sorted"] = bool(_rows_sorted(graph.indptr, graph.indices))
    return graph


#: algorithm name -> search function, in the order :func:`dbfs.bfs.algorithm_names` lists them
ALGORITHMS: dict[str, Callable] = {
    "seq-list": seq_list,
    "seq-csr": seq_csr,
    "td": top_down,
    "bu": bottom_up,
    "do": direction_optimizing,
    "spmv": spmv,
}

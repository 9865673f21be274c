"""Sequential queue BFS kernels of the CPU backend (Graph500 2.x
``seq-csr`` and ``seq-list``) and the levels implied by a parent array.

Contract:

- ``_seq_csr_levels`` / ``_seq_list_levels`` run up to ``max_levels``
  levels of a queue BFS from ``queue[head:tail]`` and return the new
  ``(head, tail, levels run)``, writing each level's frontier size and
  edges examined into ``lv_n``/``lv_e`` from index 0; ``parent`` (-1
  unreached) is read and written.
- :func:`seq_list_structure`: the seq-list linked lists of a graph
  (Kernel-1 data, cached in ``graph.meta["_seq_list"]``).
- :func:`levels_from_parent`: the BFS depth of every vertex implied by a
  VALID parent array.

Method: the Graph500 reference code's sequential searches (``seq-csr``,
``seq-list`` of Graph500 2.x): a FIFO queue, one pass per level. seq-list
walks singly linked adjacency lists threaded through the edge list, as that
reference's ``make_graph_data_structure`` builds them.

Encoding: seq-list lists are ``head[v]`` (first half-edge of v, -1 none)
and ``next[k]`` over half-edges ``k``; half-edge ``k`` is tuple ``k >> 1``
seen from its endpoint ``k & 1``, so its other end is ``ends[k >> 1, 1 -
(k & 1)]``. The tuples are ``graph.meta["edges"]`` (the Kernel 1 input,
mapped to internal ids) when it is there, else the CSR's undirected edges
(each ``u < v`` entry once); self-loops and out-of-range tuples are left
out of the lists.
"""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(nogil=True, cache=True)
def _seq_csr_levels(indptr, indices, parent, queue, head, tail, max_levels, lv_n, lv_e):
    """Run up to max_levels levels of a queue BFS; queue[head:tail] is the
    current frontier. Records frontier size / edges per level into lv_n/lv_e
    (from index 0). Returns (new head, new tail, levels run)."""
    done = 0
    while head < tail and done < max_levels:
        end = tail
        ecount = 0
        lv_n[done] = end - head
        while head < end:
            u = queue[head]
            head += 1
            s = indptr[u]
            e = indptr[u + 1]
            ecount += e - s
            for j in range(s, e):
                v = indices[j]
                if parent[v] < 0:
                    parent[v] = u
                    queue[tail] = v
                    tail += 1
        lv_e[done] = ecount
        done += 1
    return head, tail, done


@njit(nogil=True, cache=True)
def _seq_list_levels(head_of, next_of, ends, parent, queue, head, tail, max_levels, lv_n, lv_e):
    """Graph500 2.x seq-list: walk the linked half-edge list of each queued
    vertex; half-edge k is tuple k >> 1 seen from endpoint k & 1."""
    done = 0
    while head < tail and done < max_levels:
        end = tail
        ecount = 0
        lv_n[done] = end - head
        while head < end:
            u = queue[head]
            head += 1
            k = head_of[u]
            while k >= 0:
                v = ends[k >> 1, 1 - (k & 1)]
                ecount += 1
                if parent[v] < 0:
                    parent[v] = u
                    queue[tail] = v
                    tail += 1
                k = next_of[k]
        lv_e[done] = ecount
        done += 1
    return head, tail, done


@njit(nogil=True, cache=True)
def _build_seq_list(ends, n):
    """head/next over the tuples (Graph500 2.x seq-list make_graph_data_structure):
    self-loops and out-of-range tuples are left out of the lists."""
    m = ends.shape[0]
    head_of = np.full(n, -1, np.int64)
    next_of = np.full(2 * m, -1, np.int64)
    for k in range(m):
        i = ends[k, 0]
        j = ends[k, 1]
        if i < 0 or j < 0 or i >= n or j >= n or i == j:
            continue
        next_of[2 * k] = head_of[i]
        head_of[i] = 2 * k
        next_of[2 * k + 1] = head_of[j]
        head_of[j] = 2 * k + 1
    return head_of, next_of


def seq_list_structure(graph):
    """The seq-list linked lists of a graph, over internal ids.

    Built once per graph (Kernel-1 data) and cached in
    ``graph.meta["_seq_list"]``; the encoding is in the module docstring.

    Parameters
    ----------
    graph : CSRGraph
        Its ``meta["edges"]`` (the Kernel 1 input) is used when present.

    Returns
    -------
    head : ndarray of int64
        First half-edge of each vertex, -1 for none.
    next : ndarray of int64
        Next half-edge of the same vertex, -1 at the end.
    ends : ndarray of int64, shape (M, 2)
        The tuples, internal ids.
    """
    cached = graph.meta.get("_seq_list")
    if cached is not None:
        return cached
    edges = graph.meta.get("edges")
    if edges is not None:
        ends = np.ascontiguousarray(np.asarray(edges), dtype=np.int64)
        if graph.iperm is not None:
            ends = np.asarray(graph.iperm, dtype=np.int64)[ends]
    else:
        rows = np.repeat(np.arange(graph.n_vertices, dtype=np.int64), np.diff(graph.indptr))
        cols = np.asarray(graph.indices, dtype=np.int64)
        keep = rows < cols
        ends = np.ascontiguousarray(np.stack([rows[keep], cols[keep]], axis=1))
    head_of, next_of = _build_seq_list(ends, graph.n_vertices)
    graph.meta["_seq_list"] = (head_of, next_of, ends)
    return graph.meta["_seq_list"]


@njit(nogil=True, cache=True)
def levels_from_parent(parent, root):
    """BFS levels implied by a VALID parent array.

    Parameters
    ----------
    parent : ndarray of int64
        A valid BFS tree (-1 where unreached, ``parent[root] == root``).
    root : int
        The search key.

    Returns
    -------
    ndarray of int64
        Depth of every vertex, 0 at ``root``, -1 where unreached.
    """
    n = parent.shape[0]
    lev = np.full(n, -1, np.int64)
    lev[root] = 0
    stack = np.empty(n, np.int64)
    for v in range(n):
        if parent[v] < 0 or lev[v] >= 0:
            continue
        sp = 0
        x = v
        while lev[x] < 0 and sp < n:
            stack[sp] = x
            sp += 1
            x = parent[x]
        d = lev[x]
        while sp > 0:
            sp -= 1
            d += 1
            lev[stack[sp]] = d
    return lev

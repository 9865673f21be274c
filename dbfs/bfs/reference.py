"""The executable spec: a tiny NumPy BFS, the oracle for every backend's tests.

``bfs_levels(edges, root, n_vertices=None) -> levels`` takes the Graph500
INPUT edge list (int (M, 2), self-loops and duplicates allowed) and returns
int64 BFS depths (-1 unreached, 0 at root); ``Oracle(edges, n).levels(root)``
does the same with the adjacency built once for many roots. ``min_parents(edges, levels)``
gives the parent each vertex would get from the smallest-id neighbour one
level up (the ``spmv`` rule). Written for clarity, level-synchronous, one
NumPy expression per step; no Numba, nothing shared with the kernels.
"""
from __future__ import annotations

import numpy as np


def _adjacency(edges, n):
    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    e = e[e[:, 0] != e[:, 1]]
    src = np.concatenate([e[:, 0], e[:, 1]])
    dst = np.concatenate([e[:, 1], e[:, 0]])
    order = np.argsort(src, kind="stable")
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=indptr[1:])
    return indptr, dst[order]


class Oracle:
    """The adjacency of an edge list, built once, for many searches."""

    def __init__(self, edges, n_vertices=None):
        e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
        self.n = int(n_vertices) if n_vertices is not None else (int(e.max()) + 1 if e.size else 0)
        self.indptr, self.adj = _adjacency(e, self.n)

    def levels(self, root):
        """int64 BFS depth of every vertex from root, -1 if unreached."""
        indptr, adj = self.indptr, self.adj
        levels = np.full(self.n, -1, np.int64)
        levels[root] = 0
        frontier = np.array([root], np.int64)
        depth = 0
        while frontier.size:
            starts, ends = indptr[frontier], indptr[frontier + 1]
            lengths = ends - starts
            # positions of every neighbour of every frontier vertex
            pos = np.repeat(starts - np.cumsum(lengths) + lengths, lengths) + np.arange(lengths.sum())
            nbrs = adj[pos]
            nbrs = nbrs[levels[nbrs] < 0]
            depth += 1
            levels[nbrs] = depth
            frontier = np.flatnonzero(levels == depth)
        return levels


def bfs_levels(edges, root, n_vertices=None):
    """One search: int64 depths from root (-1 unreached)."""
    n = n_vertices if n_vertices is not None else (int(np.max(edges)) + 1 if np.size(edges) else root + 1)
    return Oracle(edges, n).levels(root)


def min_parents(edges, levels, root):
    """parent[v] = smallest neighbour u with levels[u] == levels[v] - 1."""
    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    e = e[e[:, 0] != e[:, 1]]
    a = np.concatenate([e[:, 0], e[:, 1]])
    b = np.concatenate([e[:, 1], e[:, 0]])
    keep = (levels[a] >= 1) & (levels[b] == levels[a] - 1)
    parent = np.full(levels.shape[0], np.iinfo(np.int64).max, np.int64)
    np.minimum.at(parent, a[keep], b[keep])
    parent[levels < 0] = -1
    parent[root] = root
    return parent

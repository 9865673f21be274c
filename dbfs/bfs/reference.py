"""The executable spec: a tiny NumPy BFS, the oracle for every backend's tests.

Contract: ``bfs_levels(edges, root, n_vertices=None) -> levels`` takes the
Graph500 INPUT edge list and returns the BFS depth of every vertex;
``Oracle(edges, n).levels(root)`` does the same with the adjacency built
once for many roots. ``min_parents(edges, levels, root)`` gives the parent
each vertex would get from the smallest-id neighbour one level up (the
``spmv`` rule).

Method: level-synchronous, one NumPy expression per step, in the manner of
the Graph500 reference's Octave kernel (``octave/kernel_2.m`` of
graph500/graph500); no Numba, nothing shared with the kernels. Written for
clarity, not speed.

Encoding: ``edges`` is int (M, 2), self-loops and duplicates allowed
(self-loops are dropped, each edge is used in both directions); levels are
int64, 0 at the root, -1 unreached; parents int64, ``parent[root] ==
root``, -1 unreached.

Citation: Graph500 benchmark specification 3.0.1, section 8 (BFS output
and validation); the min-parent rule is the result of a linear-algebra BFS
over the (min, select-index) semiring (Yang, Buluc and Owens, ICPP'18).
"""
from __future__ import annotations

import numpy as np


def _adjacency(edges, n):
    """CSR (indptr, neighbours) of an edge list, both directions, self-loops dropped."""
    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    e = e[e[:, 0] != e[:, 1]]
    src = np.concatenate([e[:, 0], e[:, 1]])
    dst = np.concatenate([e[:, 1], e[:, 0]])
    order = np.argsort(src, kind="stable")
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=indptr[1:])
    return indptr, dst[order]


class Oracle:
    """The adjacency of an edge list, built once, for many searches.

    Parameters
    ----------
    edges : array_like of int, shape (M, 2)
        The Graph500 input edge list.
    n_vertices : int, optional
        Vertex count; default ``max(edges) + 1``.
    """

    def __init__(self, edges, n_vertices=None):
        e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
        self.n = int(n_vertices) if n_vertices is not None else (int(e.max()) + 1 if e.size else 0)
        self.indptr, self.adj = _adjacency(e, self.n)

    def levels(self, root):
        """BFS depth of every vertex from ``root``.

        Parameters
        ----------
        root : int
            The search key.

        Returns
        -------
        ndarray of int64
            0 at ``root``, -1 where unreached.
        """
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
    """One search: the BFS depth of every vertex from ``root``.

    Parameters
    ----------
    edges : array_like of int, shape (M, 2)
        The Graph500 input edge list.
    root : int
        The search key.
    n_vertices : int, optional
        Vertex count; default ``max(edges) + 1``.

    Returns
    -------
    ndarray of int64
        0 at ``root``, -1 where unreached.
    """
    n = n_vertices if n_vertices is not None else (int(np.max(edges)) + 1 if np.size(edges) else root + 1)
    return Oracle(edges, n).levels(root)


def min_parents(edges, levels, root):
    """The min-id BFS tree: ``parent[v]`` = smallest neighbour u with
    ``levels[u] == levels[v] - 1``.

    Parameters
    ----------
    edges : array_like of int, shape (M, 2)
        The Graph500 input edge list.
    levels : ndarray of int64
        Depths from ``root`` (:func:`bfs_levels`).
    root : int
        The search key.

    Returns
    -------
    ndarray of int64
        ``parent[root] == root``, -1 where unreached.
    """
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

"""The adjacency as the CPU kernels read it: one array, or two pieces split at
an entry (the GPU backend's device/host split, simulated in host memory).

Contract:

- Every CPU kernel of the ``td``, ``bu`` and ``do`` searches (and the
  per-graph helpers they need: :func:`~dbfs.bfs.cpu.graph_aux.hub_by_degree`,
  ``_rows_sorted``) takes ``indices`` as either an ndarray (the whole
  adjacency) or a :class:`SplitAdjacency` ``(a, b, split)``, and reads entry
  ``j`` only through :func:`adj_at` (:func:`adj_prefetch` for a cache hint,
  :func:`adj_dtype` for its dtype). A kernel given a SplitAdjacency returns
  exactly what it returns given the joined array.
- :func:`split_graph` ``(graph, sp) -> CSRGraph``: ``graph`` with its
  adjacency held as the two pieces of a :class:`dbfs.split.Split` (same
  ``indptr``, ids and relabelling; ``meta["split"]`` the Split, the per-graph
  helpers rebuilt from the pieces by :func:`dbfs.bfs.cpu.prepare`). Every
  split is held in two pieces, one of them empty when the Split's mode is
  ``host`` or ``device``, so every budget runs the code that reads across the
  split (the GPU passes one piece there).
- :data:`SPLIT_ALGORITHMS`: the searches that read a split graph; the others
  (``seq-list``, ``seq-csr``, ``spmv``) refuse one (:func:`whole_adjacency`).

Method: :func:`adj_at` is a Python function with a Numba ``overload``
chosen by the argument's type when a kernel is compiled, inlined in Numba IR
(``inline="always"``): for an ndarray it is ``indices[j]``, so the unsplit
kernels compile to the same code as before the split existed; for a
SplitAdjacency it is the one comparison of ``bfs.cu``'s ``ADJ(j)``. Numba
compiles a kernel once per argument signature, so the split kernels are
separate machine code from the same source; ``warm_kernels`` loads both
kinds before a timed search.

Encoding (``dbfs/bfs/kernels/bfs.cu``, ``ADJ_PARAMS``): entries ``[0,
split)`` in ``a``, entries ``[split, nnz)`` in ``b`` at ``entry - split``;
``split`` is the Split's ``entry`` (``indptr[row]``). With order
``prefix`` ``a`` is the device piece (rows ``[0, row)``), with ``suffix``
``b`` is (rows ``[row, N)``); ``a`` and ``b`` are separate copies of the
same dtype, so a read from the wrong piece cannot land on the right value.

References: Kolganov & Chernyshev, Graph500 on GPUs with the graph in host
memory (zero-copy adjacency), 2016; Numba, "High-level extension API"
(``numba.extending.overload``, ``inline="always"``).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import types
from numba.extending import overload

from dbfs.errors import DbfsError
from dbfs.graph import CSRGraph

from .primitives import prefetch

__all__ = ["SPLIT_ALGORITHMS", "SplitAdjacency", "adj_at", "adj_dtype", "sentinel_dtype", "adj_prefetch", "is_split", "joined",
           "split_graph", "whole_adjacency"]

#: the CPU searches whose kernels read a SplitAdjacency
SPLIT_ALGORITHMS = ("td", "bu", "do")


class SplitAdjacency(NamedTuple):
    """The adjacency in two pieces (``ADJ_PARAMS`` of bfs.cu: module docstring)."""

    a: np.ndarray       # entries [0, split)
    b: np.ndarray       # entries [split, nnz), at entry - split
    split: np.int64     # the entry where the pieces meet


def is_split(indices) -> bool:
    """Whether ``indices`` is a :class:`SplitAdjacency` (else one array)."""
    return isinstance(indices, SplitAdjacency)


def _is_split_type(t) -> bool:
    return isinstance(t, types.BaseNamedTuple) and getattr(t, "instance_class", None) is SplitAdjacency


# ------------------------------------------------------------- the reads (Python fallbacks, then overloads)
def adj_at(indices, j):
    """Adjacency entry ``j``: ``indices[j]``, or from the piece of a SplitAdjacency that holds it."""
    if is_split(indices):
        return indices.a[j] if j < indices.split else indices.b[j - indices.split]
    return indices[j]


def adj_prefetch(indices, j):
    """A cache hint for adjacency entry ``j`` (compiled code only; no effect on results)."""


def adj_dtype(indices):
    """The dtype of the adjacency's entries."""
    return indices.a.dtype if is_split(indices) else indices.dtype


@overload(adj_at, inline="always")
def _adj_at(indices, j):
    if isinstance(indices, types.Array):
        def whole(indices, j):
            return indices[j]
        return whole
    if _is_split_type(indices):
        def two_pieces(indices, j):
            if j < indices.split:
                return indices.a[j]
            return indices.b[j - indices.split]
        return two_pieces
    return None


@overload(adj_prefetch, inline="always")
def _adj_prefetch(indices, j):
    if isinstance(indices, types.Array):
        def whole(indices, j):
            prefetch(indices, j)
        return whole
    if _is_split_type(indices):
        def two_pieces(indices, j):
            if j < indices.split:
                prefetch(indices.a, j)
            else:
                prefetch(indices.b, j - indices.split)
        return two_pieces
    return None


def sentinel_dtype(indices):
    """The dtype of an array of the adjacency's ids that may hold -1 (a hub table): the entries' own, int64 for
    unsigned entries (uint32 ids of 2**31 < N <= 2**32 vertices)."""
    dt = adj_dtype(indices)
    return np.dtype(np.int64) if dt.kind == "u" else dt


@overload(sentinel_dtype, inline="always")
def _sentinel_dtype(indices):
    base = indices.dtype if isinstance(indices, types.Array) else \
        (dict(zip(indices.fields, indices.types))["a"].dtype if _is_split_type(indices) else None)
    if base is None:
        return None
    if isinstance(base, types.Integer) and not base.signed:
        return lambda indices: np.int64
    return lambda indices: adj_dtype(indices)


@overload(adj_dtype, inline="always")
def _adj_dtype(indices):
    if isinstance(indices, types.Array):
        return lambda indices: indices.dtype
    if _is_split_type(indices):
        return lambda indices: indices.a.dtype
    return None


# ------------------------------------------------------------- split graphs
def split_adjacency(indices: np.ndarray, entry: int) -> SplitAdjacency:
    """``indices`` as two separate pieces meeting at ``entry`` (copies: the whole array can be freed)."""
    ix = np.asarray(indices)
    entry = int(entry)
    if not 0 <= entry <= ix.shape[0]:
        raise ValueError(f"split entry {entry} outside the adjacency's {ix.shape[0]} entries")
    return SplitAdjacency(np.array(ix[:entry]), np.array(ix[entry:]), np.int64(entry))


def joined(indices) -> np.ndarray:
    """The whole adjacency (the pieces of a SplitAdjacency concatenated; an array as it is)."""
    if is_split(indices):
        return np.concatenate([indices.a, indices.b])
    return indices


def split_graph(graph: CSRGraph, sp) -> CSRGraph:
    """``graph`` with its adjacency held as the two pieces of ``sp`` (a :class:`dbfs.split.Split`).

    Parameters
    ----------
    graph : CSRGraph
        A CSR with its adjacency in one array.
    sp : dbfs.split.Split
        From :func:`dbfs.split.plan_split` over ``graph.indptr``.

    Returns
    -------
    CSRGraph
        Same ``indptr``, ``perm``, ``iperm``; ``indices`` a :class:`SplitAdjacency`
        meeting at ``sp.entry``; ``meta`` the source's public entries (no per-graph
        helper: they are rebuilt from the pieces) plus ``"split": sp``.
    """
    if is_split(graph.indices):
        raise ValueError("the graph's adjacency is split already")
    if sp.nnz != graph.nnz:
        raise ValueError(f"the split was planned for {sp.nnz} entries, the graph has {graph.nnz}")
    meta = {k: v for k, v in graph.meta.items() if not k.startswith("_")}
    meta["split"] = sp
    return CSRGraph(indptr=graph.indptr, indices=split_adjacency(graph.indices, sp.entry),
                    n_vertices=graph.n_vertices, perm=graph.perm, iperm=graph.iperm, meta=meta)


def whole_adjacency(graph: CSRGraph, algorithm: str) -> np.ndarray:
    """``graph.indices`` for a search that reads it as one array; a one-line error when it is split."""
    if is_split(graph.indices):
        raise DbfsError(f"algorithm {algorithm!r} reads the adjacency as one array: a split CSR "
                        f"(--device-memory-limit) is searched by {', '.join(SPLIT_ALGORITHMS)}")
    return graph.indices

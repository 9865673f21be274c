"""In-memory graph containers shared by Kernel 1 and Kernel 2.

``CSRGraph`` is one partition holding every vertex (the single-process
backends). Encoding:

- ``indptr``: int64, shape (n_vertices + 1,), ``indptr[0] == 0``; the
  neighbours of vertex ``v`` are ``indices[indptr[v]:indptr[v+1]]``.
- ``indices``: int32 while n_vertices <= 2**31, uint32 up to 2**32, else int64
  (:func:`index_dtype`; ids that may be -1 elsewhere take :func:`id_dtype`); both directions of
  every undirected input edge are present, self-loops are dropped, duplicates
  are dropped unless the graph was built with ``dedupe=False``.
- ``perm``: None, or (after degree relabelling) int64 ``perm[new_id] =
  original_id``; ``iperm[original_id] = new_id``. Kernels run on new ids; every
  parent array leaving dbfs is in original ids (see :meth:`to_original`).
"""
from __future__ import annotations

import operator
import os
from dataclasses import dataclass, field

import numpy as np

from dbfs.errors import ArgumentError

#: vertex ids fit int32 while there are at most 2**31 vertices (ids 0 .. 2**31 - 1)
INT32_VERTICES = 2**31


#: vertex ids fit uint32 while there are at most 2**32 vertices (SCALE 32)
UINT32_VERTICES = 2**32
#: environment switch: ``DBFS_WIDE_IDS=1`` takes the path of 2**31 < N <= 2**32 at any N (tests of the boundary)
WIDE_ENV = "DBFS_WIDE_IDS"


def _wide() -> bool:
    return os.environ.get(WIDE_ENV, "") == "1"


def id_dtype(n_vertices: int) -> np.dtype:
    """The vertex-id width for a graph of ``n_vertices`` wherever an id may be -1 (parents, hubs, queues, claims):
    int32 while ``n_vertices <= 2**31``, else int64 (the one owner of this rule)."""
    return np.dtype(np.int32) if int(n_vertices) <= INT32_VERTICES and not _wide() else np.dtype(np.int64)


def index_dtype(n_vertices: int) -> np.dtype:
    """The width of a CSR's adjacency entries (``indices``, never -1): :func:`id_dtype` while ``n_vertices <=
    2**31``; uint32 up to 2**32 vertices (SCALE 32's CSR in 4 bytes an entry, not 8); int64 above."""
    n = int(n_vertices)
    if n <= INT32_VERTICES and not _wide():
        return np.dtype(np.int32)
    return np.dtype(np.uint32) if n <= UINT32_VERTICES else np.dtype(np.int64)


def check_root_id(root, n) -> int:
    """``root`` as an int, or :class:`~dbfs.errors.ArgumentError` (a DbfsError and a ValueError) unless
    it is an integer (Python or NumPy; no str, float or bool) vertex id in [0, n) (every backend checks
    roots so)."""
    n = int(n)
    try:
        if isinstance(root, (bool, np.bool_)):
            raise TypeError
        r = operator.index(root)
    except TypeError:
        raise ArgumentError(f"root {root!r} ({type(root).__name__}) is not an integer vertex id: pass an int "
                            f"0 <= root < {n}") from None
    if not 0 <= r < n:
        raise ArgumentError(f"root {r} is out of range for a graph of {n} vertices: pass 0 <= root < {n}")
    return r


@dataclass
class CSRGraph:
    indptr: np.ndarray
    indices: np.ndarray
    n_vertices: int
    perm: np.ndarray | None = None
    iperm: np.ndarray | None = None
    meta: dict = field(default_factory=dict)

    @property
    def nnz(self) -> int:
        return int(self.indptr[-1])

    def degree(self) -> np.ndarray:
        return np.diff(self.indptr)

    def to_internal(self, v: int) -> int:
        """Map an original vertex id to the id the kernels use."""
        return int(v) if self.iperm is None else int(self.iperm[v])

    def to_original(self, parent: np.ndarray) -> np.ndarray:
        """Map a parent array over internal ids to one over original ids.

        parent is int64 with -1 for unreached; the result has
        ``out[perm[i]] = perm[parent[i]]`` (and -1 stays -1).
        """
        if self.perm is None:
            return parent
        from dbfs.graph_map import parents_to_original  # deferred: numba (CLI start)

        return parents_to_original(parent, self.perm, self.iperm)

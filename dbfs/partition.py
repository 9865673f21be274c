"""Vertex ownership: which partition (rank) owns a vertex, defined once.

Every stage that splits vertices over P partitions (Kernel 1's bucketing, the
partitioned CSR on disk, the multi-worker BFS) uses :class:`Partitioning`, or
for Numba code the scalar :func:`owner_local` it is built on, so the rule
exists in exactly one place (the Graph500 reference's ``VERTEX_OWNER`` /
``VERTEX_LOCAL`` / ``VERTEX_TO_GLOBAL``).

Encoding (``N`` vertices ``0..N-1``, ``P`` partitions ``0..P-1``):

- ``block``: partition ``j`` owns the contiguous range ``[first_j, first_j +
  count_j)``; with ``q, r = divmod(N, P)`` the first ``r`` partitions own
  ``q + 1`` vertices and the others ``q`` (sizes differ by at most one). The
  local index of ``v`` is ``v - first_j``.
- ``cyclic``: ``v`` is owned by ``v % P`` with local index ``v // P``.

Local indices of a partition are ``0..local_count(j)-1`` and map back with
:meth:`Partitioning.to_global`. Ids are int64 throughout. ``P > N`` is legal
here: the surplus partitions own nothing.

What a run may ask (:func:`check_partition_count`, called where ``--partitions``
is checked, before any work): with ``P > 1`` every partition must own at least
:data:`MIN_PARTITION_VERTICES` vertices on average, i.e. ``P <= N // 64``. A
partition's cost does not shrink with its size (its Kernel 1 output, its load
onto a worker, a message to every other partition at each level, its share of
every validation), so past that bound the runs grow with ``P`` alone while the
work per partition vanishes.

Attributes written to disk (``Partitioning.to_attrs``) are plain JSON: the
kind, ``N``, ``P`` and, for ``block``, the per-partition ``[first, stop)``
pairs; ``cyclic`` stores the rule string ``"v % P"`` instead.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from dbfs.errors import DbfsError

KINDS = ("block", "cyclic")
_KIND_CODE = {"block": 0, "cyclic": 1}

#: the fewest vertices (on average) a partition of a run with P > 1 owns: one 64-bit bitmap word
MIN_PARTITION_VERTICES = 64


def max_partitions(n_vertices: int) -> int:
    """The largest partition count a run over ``n_vertices`` vertices may ask (at least 1)."""
    return max(1, int(n_vertices) // MIN_PARTITION_VERTICES)


def check_partition_count(P: int, n_vertices: int, flag: str = "--partitions") -> None:
    """Refuse, in one line, ``P`` partitions of a graph too small for them (module docstring).

    Parameters
    ----------
    P : int
        The partition count asked.
    n_vertices : int
        The graph's vertex count.
    flag : str
        The option named in the message.

    Raises
    ------
    DbfsError
        Naming the largest count the graph allows.
    """
    top = max_partitions(n_vertices)
    if int(P) > top:
        raise DbfsError(f"{flag} {P} is too many for a graph of {int(n_vertices):,} vertices: each partition must "
                        f"own at least {MIN_PARTITION_VERTICES} vertices, so use {flag} {top} or fewer "
                        f"(or a larger graph)")


@njit(inline="always", nogil=True, cache=True)
def owner_local(v, kind, P, q, r):
    """(owner, local index) of vertex ``v``; the one definition of ownership.

    ``kind`` is 0 (block) or 1 (cyclic); ``q, r = divmod(N, P)``.
    """
    if P == 1:
        return 0, v
    if kind == 1:
        return v % P, v // P
    big = r * (q + 1)
    if v < big:
        j = v // (q + 1)
        return j, v - j * (q + 1)
    j = r + (v - big) // q
    return j, v - big - (j - r) * q


@njit(parallel=True, nogil=True, cache=True)
def _owner_local_array(v, kind, P, q, r):
    n = v.size
    own = np.empty(n, np.int64)
    loc = np.empty(n, np.int64)
    for i in prange(n):
        j, l = owner_local(np.int64(v[i]), kind, P, q, r)
        own[i] = j
        loc[i] = l
    return own, loc


class Partitioning:
    """Ownership of ``n_vertices`` vertices by ``P`` partitions (``kind``: block|cyclic)."""

    def __init__(self, n_vertices: int, P: int, kind: str = "block"):
        if kind not in KINDS:
            raise DbfsError(f"unknown partitioning {kind!r}: use one of {', '.join(KINDS)}")
        if int(P) < 1:
            raise DbfsError(f"partition count P={P} is not positive: use P >= 1")
        if int(n_vertices) < 0:
            raise DbfsError(f"n_vertices={n_vertices} is negative: pass a vertex count >= 0")
        self.n_vertices = int(n_vertices)
        self.P = int(P)
        self.kind = kind
        self.code = _KIND_CODE[kind]
        self.q, self.r = divmod(self.n_vertices, self.P)

    def __repr__(self):
        return f"Partitioning(n_vertices={self.n_vertices}, P={self.P}, kind={self.kind!r})"

    def __eq__(self, other):
        return isinstance(other, Partitioning) and (self.n_vertices, self.P, self.kind) == (
            other.n_vertices, other.P, other.kind)

    # -- per vertex -------------------------------------------------------
    def owner_local(self, v):
        """(owner, local) as int64 arrays for an array ``v`` (or ints for an int)."""
        if np.isscalar(v):
            j, l = owner_local(int(v), self.code, self.P, self.q, self.r)
            return int(j), int(l)
        v = np.ascontiguousarray(v)
        own, loc = _owner_local_array(v.ravel(), self.code, self.P, self.q, self.r)
        return own.reshape(v.shape), loc.reshape(v.shape)

    def owner(self, v):
        """Rank owning ``v`` (vectorised over numpy arrays)."""
        return self.owner_local(v)[0]

    def local(self, v):
        """Local index of ``v`` inside its owner (vectorised)."""
        return self.owner_local(v)[1]

    def to_global(self, rank: int, i):
        """Global id of local index ``i`` of partition ``rank`` (vectorised over ``i``)."""
        r = self.vertex_range(rank)
        if np.isscalar(i):
            return r.start + int(i) * r.step
        return r.start + np.asarray(i, dtype=np.int64) * r.step

    # -- per partition ----------------------------------------------------
    def vertex_range(self, rank: int) -> range:
        """The vertices ``rank`` owns as a ``range`` (step 1 for block, P for cyclic)."""
        rank = int(rank)
        if not 0 <= rank < self.P:
            raise IndexError(f"rank {rank} out of range for P={self.P}")
        if self.kind == "cyclic":
            return range(rank, self.n_vertices, self.P)
        first = rank * self.q + min(rank, self.r)
        return range(first, first + self.q + (1 if rank < self.r else 0))

    def join(self, slices, dtype=np.int64) -> np.ndarray:
        """One array over all N vertices from the per-rank ``slices`` (rank ``r``'s in its local order)."""
        out = np.empty(self.n_vertices, dtype)
        for rk, s in enumerate(slices):
            rg = self.vertex_range(rk)
            out[rg.start:rg.stop:rg.step] = s
        return out

    def block_starts(self) -> list:
        """(block) every rank's first vertex, then N: rank ``r`` owns ``[starts[r], starts[r + 1])``."""
        if self.kind != "block":
            raise ValueError(f"block_starts of a {self.kind} partitioning: its ranks own no runs of ids")
        return [self.vertex_range(r).start for r in range(self.P)] + [self.n_vertices]

    def local_count(self, rank: int) -> int:
        return len(self.vertex_range(rank))

    def owned_vertices(self, rank: int) -> np.ndarray:
        """Global ids owned by ``rank``, ascending, int64 (local index order)."""
        r = self.vertex_range(rank)
        return np.arange(r.start, r.stop, r.step, dtype=np.int64)

    def counts(self) -> np.ndarray:
        return np.array([self.local_count(j) for j in range(self.P)], dtype=np.int64)

    # -- persistence ------------------------------------------------------
    def to_attrs(self) -> dict:
        d = {"kind": self.kind, "n_vertices": self.n_vertices, "P": self.P}
        if self.kind == "block":
            d["vertex_ranges"] = [[self.vertex_range(j).start, self.vertex_range(j).stop] for j in range(self.P)]
        else:
            d["vertex_ranges"] = "v % P"
        return d

    @classmethod
    def from_attrs(cls, d: dict) -> "Partitioning":
        return cls(d["n_vertices"], d["P"], d["kind"])

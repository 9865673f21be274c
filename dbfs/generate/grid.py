"""2-D 5-point and 3-D 7-point lattices: the high-diameter graphs of GPU BFS papers.

The lattice has N = 2**scale vertices in a box given by ``grid_dims``, a
numpy-style shape, slowest axis first:

- ``grid2d``: ``(rows, cols) = (2**ceil(scale/2), 2**floor(scale/2))``;
- ``grid3d``: ``(nz, ny, nx)``, scale split into three near-equal parts,
  the largest first (scale 4 -> (4, 2, 2), scale 5 -> (4, 4, 2)).

A dimension may be 1 (grid2d scale 1 is 2 x 1: one edge).

Encoding: vertex id is the row-major (C-order) index, x fastest:
``id = (z*ny + y)*nx + x``. Each undirected lattice edge appears once as
``(lower id, higher id)``, in a fixed order: all x-direction edges in
row-major order of their lower endpoint, then all y-direction edges, then
z-direction edges. For an axis of size ``n_d`` and stride ``s_d`` (product of
the faster dims) the axis block holds ``outer * (n_d - 1) * s_d`` edges, and its
k-th edge is

    o, r = divmod(k, (n_d - 1) * s_d)
    lower = o * n_d * s_d + r,  higher = lower + s_d

so ``grid_edges`` computes any range straight from the edge index, without
materialising the lattice, and a range computed alone equals the same range of
the whole array.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from dbfs.errors import DbfsError
from dbfs.generate.uniform import _as_int, _check_range

KINDS = ("grid2d", "grid3d")
MAX_SCALE = 62


def grid_dims(kind: str, scale: int) -> tuple[int, ...]:
    """The lattice shape, slowest axis first (see module doc)."""
    if kind not in KINDS:
        raise DbfsError(f"unknown grid kind {kind!r}; use one of {', '.join(KINDS)}")
    scale = _as_int(scale, "scale")
    if not 1 <= scale <= MAX_SCALE:
        raise DbfsError(f"{kind} scale {scale} is out of range; use 1 <= scale <= {MAX_SCALE}")
    ndim = 2 if kind == "grid2d" else 3
    q, r = divmod(scale, ndim)
    # the first r axes get one more bit: ceil first, floor after
    return tuple(1 << (q + (1 if i < r else 0)) for i in range(ndim))


def _axis_blocks(dims: tuple[int, ...]) -> list[tuple[int, int, int]]:
    """Per edge block in output order (x, y, z): (n_edges, n_d, s_d)."""
    total = 1
    for d in dims:
        total *= d
    blocks = []
    stride = 1
    for n_d in reversed(dims):  # fastest axis (x) first
        blocks.append(((total // n_d) * (n_d - 1), n_d, stride))
        stride *= n_d
    return blocks


def grid_counts(kind: str, scale: int) -> tuple[int, int]:
    """(n_vertices, n_edges) of the lattice."""
    dims = grid_dims(kind, scale)
    return 1 << scale, sum(b[0] for b in _axis_blocks(dims))


@njit(parallel=True, nogil=True, cache=True)
def _axis_edges(k0, n_d, s_d, out):
    """out[i] = edge k0 + i of the block along one axis (size n_d, stride s_d)."""
    span = (n_d - 1) * s_d
    for i in prange(out.shape[0]):
        k = k0 + i
        o = k // span
        lower = o * n_d * s_d + (k - o * span)
        out[i, 0] = lower
        out[i, 1] = lower + s_d


def grid_edges(kind: str, scale: int, start: int = 0, stop: int | None = None) -> np.ndarray:
    """Edges [start, stop) of the lattice: int64, shape (stop - start, 2)."""
    dims = grid_dims(kind, scale)
    blocks = _axis_blocks(dims)
    m = sum(b[0] for b in blocks)
    start, stop = _check_range(start, stop, m, kind)
    out = np.empty((stop - start, 2), dtype=np.int64)
    base = 0  # first global edge index of the current block
    for count, n_d, s_d in blocks:
        lo, hi = max(start, base), min(stop, base + count)
        if lo < hi:
            _axis_edges(np.int64(lo - base), np.int64(n_d), np.int64(s_d), out[lo - start : hi - start])
        base += count
    return out

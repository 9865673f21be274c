"""The live words of the ranks' bitmap slices in an NCCL search: what a frontier exchange moves.

Contract
--------
For :class:`dbfs.bfs.dask.search.gpu_nccl._NcclSearch` in its ``gather`` layout (one rank a worker, every
rank's slice of a global bitmap the same ``slice`` uint32 words, rank ``j``'s at words ``j * slice``):
:func:`own_live_words` is the number of leading words of this rank's slice that can hold a set bit (the
rows up to its last row with an edge; 0 for a rank without edges); the search takes the most over the
ranks as ``live_w`` (one allreduce(max), in its start's, so every worker holds the same number).
:func:`send_slices` (inside an NCCL group) puts every rank's live words of a global bitmap on every
worker, in place, and leaves the rest of each slice as it was; :func:`or_slices` ORs one global bitmap
into another over the live words only; :func:`zero_peer_slices` zeroes the live words of the peers'
slices. Where ``live_w`` is the whole slice, :func:`send_slices` is the slices' allgather in place.
The kernels over a partition's own bitmap (``bu_step``, the large top-down level's, ``bitmap_to_queue``)
stop at its own live words (``_GpuState.live``, any layout): past them every row is visited and no bit
is set.

Why it is exact: a row with no edge is never discovered by a level (a search from such a root ends at
its first level), so no frontier, claim or found bit past a rank's live words is ever sent; the bitmaps
start zeroed each search, so those words stay zero on every worker without being sent. A rank's own
``visited`` has them set (``base_visited``), so the bottom-up kernels never search them.

Method: Kronecker graphs leave many vertices without an edge (a share that grows with SCALE,
docs/BENCHMARKS.md); ``--relabel degree`` orders each partition by degree within itself, so they are the tail of
every slice, and the live words are ``ceil(live rows / 32)``. With the plain order they are spread
through the slices and ``live_w`` is the whole slice: nothing changes. The live words of the peers move
by NCCL point-to-point calls in the caller's group (each rank's to every peer: W - 1 sends and receives
a worker).

Encoding: uint32 bitmap words, bit ``i`` of a rank's slice is its local row ``i`` (no pad rows: the
``gather`` layout has every slice start on a 64-vertex word). Reference: Buluc and Madduri,
"Parallel Breadth-First Search on Distributed Memory Systems" (SC 2011), for exchanging only the
frontier's live part; Graph 500 specification 3.0.1, section 6, for the search keys' degrees.
"""
from __future__ import annotations

import numpy as np

__all__ = ["own_live_words", "send_slices", "or_slices", "zero_peer_slices"]


def own_live_words(p, slice_words: int) -> int:
    """Leading uint32 words of partition ``p``'s slice (``slice_words`` long) up to its last row with an edge
    (its host row offsets ``p.indptr_host``: one binary search for where the empty tail begins)."""
    ip = np.asarray(p.indptr_host)
    live_rows = int(np.searchsorted(ip, ip[-1], side="left")) if ip.shape[0] else 0
    return min(int(slice_words), -(-live_rows // 32))


def send_slices(s, dst) -> None:
    """(inside ``s.comm.group()``) Every rank's live words of the global bitmap ``dst`` onto every worker, in
    place (module docstring)."""
    comm, w, me, lw = s.comm, s.slice, s.widx, s.live_w
    if lw >= w:
        comm.allgather(dst[me * w:(me + 1) * w], dst)
        return
    if not lw:
        return
    for j in range(s.W):
        if j != me:
            comm.send(dst[me * w:me * w + lw], j)
            comm.recv(dst[j * w:j * w + lw], j)


def _live(s, a):
    """The live words of every slice of global bitmap ``a``: a (W, live_w) view."""
    return a[:s.W * s.slice].reshape(s.W, s.slice)[:, :s.live_w]


def or_slices(s, dst, src) -> None:
    """``dst |= src`` over every slice's live words (on the search's stream)."""
    import cupy as cp  # deferred: cupy

    if s.live_w:
        cp.bitwise_or(_live(s, dst), _live(s, src), out=_live(s, dst))


def zero_peer_slices(s, dst) -> None:
    """Zero the live words of every peer's slice of the global bitmap ``dst`` (this rank's slice kept)."""
    import cupy as cp  # deferred: cupy

    w, isz = s.slice, dst.itemsize
    for j in range(s.W):
        if j != s.widx and s.live_w:
            cp.cuda.runtime.memsetAsync(dst[j * w:].data.ptr, 0, s.live_w * isz, s.sp)

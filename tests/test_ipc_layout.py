"""The shared device bitmaps' layout (:func:`dbfs.bfs.dask.mesh.ipc._front_sizes`), without a GPU.

Every block partition's local bitmap (rows padded at the front to a multiple
of 64, as the GPU workers hold them) gets its own run of uint32 words, the
runs together no longer than the global bitmap plus one word pair per rank,
and each run, placed at its partition's first global word, stays inside
the global bitmap and covers every vertex of the partition. The copies
themselves (CUDA IPC) run on the GPU: ``tests/test_dask_gpu.py``.
"""
from hypothesis import given, settings
from hypothesis import strategies as st

from dbfs.bfs.dask.mesh.ipc import _front_sizes
from dbfs.bfs.dask.layout.exchange import _base_of
from dbfs.partition import Partitioning


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 1 << 20), P=st.integers(1, 64))
def test_layout_covers_every_partition(n, P):
    part = Partitioning(n, P, "block")
    starts = [part.vertex_range(rk).start for rk in range(P)] + [n]
    sizes = _front_sizes(starts)
    gw32 = 2 * ((n + 63) >> 6)
    assert sizes.shape == (P,) and (sizes >= 1).all()
    assert int(sizes.sum()) <= gw32 + 2 * P
    for rk in range(P):
        r = part.vertex_range(rk)
        base = _base_of(part, rk)
        nloc = r.stop - base                      # padded local rows
        assert int(sizes[rk]) == max(2 * ((nloc + 63) >> 6), 1)
        off = 2 * (base >> 6)
        if len(r):
            assert off + int(sizes[rk]) <= gw32   # inside the global bitmap
            assert 32 * int(sizes[rk]) >= r.stop - base

"""Graph500 Kronecker edges on the GPU, byte-identical to the CPU generator.

Contract: ``kronecker_edges_gpu(scale, edgefactor, seed1, seed2, start,
stop)`` returns a CuPy int64 ``(stop - start, 2)`` array holding exactly the
rows of :func:`dbfs.generate.graph500.kronecker_edges` (Graph500 3.0.1,
GRAPH500.md sections 1-5), so any range can be made on any device and the
bytes never depend on where or in how many pieces it was made.

Implementation (CUDA C in ``dbfs/generate/kronecker.cu``): one thread per
``edges_per_thread`` edges spaced one block apart. Each thread jumps to its
first edge ``e`` with ``B**e S0`` (``B = A**(2**64)``; the table of
``B**(2**k)`` and ``S0`` come from :mod:`dbfs.generate.mrg` and
:mod:`dbfs.generate.graph500`, computed on the host exactly as the CPU
generator does), then advances by ``B**blockDim`` per edge. Each edge runs
the reference's ``make_one_edge`` literally (rejection loop included) and
the ``scramble`` bijection in uint64 with ``__brevll``.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import cupy as cp
import numpy as np

from dbfs.errors import DbfsError
from dbfs.generate import graph500, mrg

__all__ = ["kronecker_edges_gpu"]

_KERNEL = Path(__file__).resolve().parent / "kronecker.cu"
_BLOCK = 256


@lru_cache(maxsize=None)
def _kernel():
    mod = cp.RawModule(code=_KERNEL.read_text())
    return mod.get_function("kron_edges")


@lru_cache(maxsize=None)
def _tables(block: int):
    """(B**(2**k) for k < 64, B**block) as device int64 arrays, B = A**(2**64)."""
    btab = cp.asarray(np.ascontiguousarray(graph500._edge_table(), dtype=np.int64))
    cstep = cp.asarray(mrg.as_array(mrg.matpow(block << 64)))
    return btab, cstep


def _auto_ept(k: int) -> int:
    """Edges a thread for ``k`` edges: 64 (each thread's jump to its first edge, up to 34 matrix products,
    shared by 64 edges; docs/BENCHMARKS.md) while the grid still gives every SM 8 blocks, fewer (at least 4)
    for a smaller range, whose few blocks would leave most of the device idle."""
    sms = int(cp.cuda.Device().attributes["MultiProcessorCount"])
    return int(max(4, min(64, int(k) // (_BLOCK * 8 * sms))))


def kronecker_edges_gpu(scale, edgefactor=16, seed1=2, seed2=3, start=0, stop=None, edges_per_thread=None):
    """Graph500 3.0.1 edge tuples ``[start, stop)`` as a CuPy int64 (k, 2) array.

    Same parameters and bytes as :func:`dbfs.generate.graph500.kronecker_edges`;
    ``edges_per_thread`` only changes the launch shape (None: :func:`_auto_ept` of the range's size).
    """
    graph500.check_params(scale, edgefactor, seed1, seed2)
    scale, seed1, seed2 = int(scale), int(seed1), int(seed2)
    m = int(edgefactor) << scale
    stop = m if stop is None else int(stop)
    start = int(start)
    if not 0 <= start <= stop <= m:
        raise DbfsError(f"edge range [{start}, {stop}) is outside [0, {m}): pass 0 <= start <= stop <= M")
    k = stop - start
    ept = _auto_ept(k) if edges_per_thread is None else int(edges_per_thread)
    if ept < 1:
        raise DbfsError(f"edges_per_thread {ept} is invalid: use an integer >= 1")
    out = cp.empty((k, 2), dtype=cp.int64)
    if k == 0:
        return out
    s0 = cp.asarray(np.array(mrg.seed_state(seed1, seed2), dtype=np.int64))
    val0, val1 = graph500.scramble_values(seed1, seed2)
    a, b, c = graph500.GRAPH500_INITIATOR
    btab, cstep = _tables(_BLOCK)
    per_launch = _BLOCK * ept * (1 << 30)      # grid.x stays below 2**31
    for off in range(0, k, per_launch):
        kk = min(per_launch, k - off)
        grid = (-(-kk // (_BLOCK * ept)),)
        _kernel()(grid, (_BLOCK,),
                  (np.int64(start + off), np.int64(kk), np.int64(scale), s0, btab, cstep, np.int64(ept),
                   np.uint64(val0), np.uint64(val1), np.int64(b), np.int64(b + c), np.int64(b + c + a),
                   np.int64(1), out[off:off + kk]))
    return out

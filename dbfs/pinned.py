"""Mapped pinned host memory that CUDA kernels read zero-copy (CuPy, imported when called).

Contract: :func:`mapped_host_empty` ``(shape, dtype, keep) -> (host, device)``:
one new page-locked host allocation made with ``cudaHostAllocMapped |
cudaHostAllocPortable``, seen as a NumPy array (``host``, for the CPU and
for copies from the device with ``get(out=...)``) and as a CuPy array over
the SAME bytes (``device``, what a kernel reads over the bus); ``keep``
gets the allocation's owner, which must outlive both views.

Method: with unified virtual addressing (every 64-bit CUDA platform) the
host pointer of a mapped pinned allocation is also its device pointer, so
the CuPy view is an ``UnownedMemory`` over that pointer. Reference: CUDA C
Programming Guide, "Mapped Memory"; the zero-copy adjacency of Kolganov &
Chernyshev's Graph500 GPU BFS (2016).
"""
from __future__ import annotations

import numpy as np

__all__ = ["mapped_host_empty"]


def mapped_host_empty(shape, dtype, keep: list):
    """(host NumPy view, device CuPy view) of one new mapped pinned host allocation (module docstring)."""
    import cupy as cp  # deferred: cupy

    dtype = np.dtype(dtype)
    nbytes = max(int(np.prod(shape, dtype=np.int64)) * dtype.itemsize, 8)
    rt = cp.cuda.runtime
    flags = getattr(rt, "hostAllocPortable", 1) | getattr(rt, "hostAllocMapped", 2)
    mem = cp.cuda.PinnedMemory(nbytes, flags)
    keep.append(mem)
    host = np.ndarray(shape, dtype=dtype, buffer=cp.cuda.PinnedMemoryPointer(mem, 0))
    dev_mem = cp.cuda.UnownedMemory(mem.ptr, nbytes, mem, cp.cuda.Device().id)
    return host, cp.ndarray(shape, dtype=dtype, memptr=cp.cuda.MemoryPointer(dev_mem, 0))

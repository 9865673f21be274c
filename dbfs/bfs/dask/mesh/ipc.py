"""Device memory shared by the GPU workers of one host (CUDA IPC): frontier bitmaps and claim pairs.

Contract
--------
When every mesh worker is a GPU worker on one host and the partitions are
blocks, nothing of a level's frontier travels device -> host -> socket ->
host -> device; only counts and offsets cross the mesh (whose rounds are
the barriers). :class:`_DevMesh` is one worker's view of a mesh's shared
device memory:

- bitmaps (bottom-up levels, the top-down -> bottom-up switch): every
  partition copies its local bitmap device to device into one buffer in
  the first worker's memory (:meth:`_DevMesh.publish`, before the
  barrier), every worker copies the buffer out and ORs the other ranks'
  bitmaps into its global one (:meth:`_DevMesh.collect`, after it);
- claim pairs (top-down levels): every worker buckets its claims by owner
  into its own exported pair buffers (``L``, ``U``) and sends each peer
  only where its pairs lie (a PULL frame); the peer's ``absorb`` kernel
  reads them in place through its mapping (:meth:`_DevMesh.peer_pairs`).

The GPU-worker twin of :mod:`dbfs.bfs.dask.mesh.shm` (the CPU workers' ``/dev/shm``
frontier); a mesh with CPU workers in it stages through the host.

Method: ``cudaIpcGetMemHandle`` on plain ``cudaMalloc`` allocations (not
CuPy's pool, whose blocks share an allocation), ``cudaIpcOpenMemHandle``
with lazy peer access in the other workers (the same device, or a peer
over NVLink/PCIe: an open that fails leaves the mesh on host staging);
bitmap copies are ``cudaMemcpyAsync`` with ``cudaMemcpyDefault`` on the
worker's current stream. Ordering: a publication, and the bucketing of
pairs, are synchronised before the barrier's send; a collection copies the
bitmap buffer to a private device copy, and an absorb of mapped pairs ends
with the level's counter read, before the next send. So a buffer is
rewritten (bitmaps: two publications later; pairs: the next top-down
level) only after every worker is done reading it.

Encoding: bitmaps are uint32 words, two buffers of ``total`` words each
(k alternates per publication); rank ``rk``'s local bitmap (``2 * words``
uint32 words, bit-identical to the CPU layout, see
:mod:`dbfs.bfs.dask.layout.gpu_part`) at ``roff[rk]``, ranks in order without
overlap, so no word has two writers. Pair buffers: N elements of the claim
dtype each (owner-local index, global parent), grouped by destination
rank. CUDA Runtime API, "Interprocess Communication" (CUDA C++ Programming
Guide, section 3.2.9).
"""
from __future__ import annotations

import contextlib
import threading

import numpy as np

from dbfs.bfs.dask.mesh.transport import _PeerLost

__all__ = ["_DevMesh", "_front_sizes"]

_MEMCPY_DEFAULT = 4              # cudaMemcpyDefault: the driver finds where each pointer lives


def _front_sizes(starts) -> np.ndarray:
    """uint32 words of each block partition's local bitmap, from the P + 1 block
    starts: rows padded at the front to a multiple of 64, at least one word
    (as :class:`dbfs.bfs.dask.layout.gpu_part._GpuPart` allocates them)."""
    s = np.asarray(starts, np.int64)
    base = (s[:-1] >> 6) << 6
    return np.maximum(2 * ((s[1:] - base + 63) >> 6), 1)


class _DevMesh:
    """One GPU worker's view of a mesh's shared device memory (see the module docstring).

    ``sizes``: :func:`_front_sizes` of the partitioning; ``n``, ``dtype``: the
    pair buffers' length and claim dtype; ``owner``: allocate the bitmap
    buffers here (the mesh's first worker). :attr:`handles` are what the other
    workers need to :meth:`map` this worker's allocations.
    """

    def __init__(self, sizes, n: int, dtype, owner: bool):
        import cupy as cp  # deferred: cupy

        self.cp = cp
        rt = cp.cuda.runtime
        self.sizes = np.asarray(sizes, np.int64)
        self.roff = np.zeros(self.sizes.shape[0] + 1, np.int64)
        np.cumsum(self.sizes, out=self.roff[1:])
        self.total = int(self.roff[-1])
        self.dtype = np.dtype(dtype)
        self.n = int(n)
        self._own = []                                   # this worker's cudaMalloc's (freed with it)
        self._mapped = []                                # pointers opened from peers' handles
        (pl, hl), (pu, hu) = (self._alloc(self.n * self.dtype.itemsize) for _ in range(2))
        self.L, self.U = self._array(pl, self.n, self.dtype), self._array(pu, self.n, self.dtype)
        self.handles = {"pairs": (hl, hu), "front": None}
        self.ptr = 0
        if owner:
            self.ptr, self.handles["front"] = self._alloc(2 * self.total * 4)
            rt.memset(self.ptr, 0, 2 * self.total * 4)
        self.peers = {}                                  # peer handle pair -> (L, U) mapped arrays
        self.stage = cp.zeros(self.total, cp.uint32)     # the private copy a collection reads from
        self.k = 0
        self.lock = threading.Lock()                     # close() waits for kernels queued on the buffers
        self.published = self.collected = self.pulled = 0   # bytes moved device to device (tests, benchmarks)

    # ------------------------------------------------------------ set-up
    def _alloc(self, nbytes):
        mem = self.cp.cuda.Memory(max(int(nbytes), 1))   # a cudaMalloc of its own: its handle names only it
        self._own.append(mem)
        return int(mem.ptr), bytes(self.cp.cuda.runtime.ipcGetMemHandle(mem.ptr))

    def _open(self, handle) -> int:
        rt = self.cp.cuda.runtime
        ptr = int(rt.ipcOpenMemHandle(bytes(handle), rt.cudaIpcMemLazyEnablePeerAccess))
        self._mapped.append(ptr)
        return ptr

    def _array(self, ptr, n, dtype):
        cp = self.cp
        mem = cp.cuda.UnownedMemory(ptr, max(n, 1) * np.dtype(dtype).itemsize, self, cp.cuda.Device().id)
        return cp.ndarray((n,), dtype, cp.cuda.MemoryPointer(mem, 0))

    def map(self, front, pairs) -> None:
        """Open the owner's bitmap buffers (``front``: its handle; None on the owner) and every
        other worker's pair buffers (``pairs``: their handle pairs, this worker's own skipped)."""
        if front is not None and not self.ptr:
            self.ptr = self._open(front)
        for hp in pairs:
            hp = tuple(bytes(h) for h in hp)
            if hp != self.handles["pairs"] and hp not in self.peers:
                self.peers[hp] = tuple(self._array(self._open(h), self.n, self.dtype) for h in hp)
        self.order = [tuple(bytes(h) for h in hp) for hp in pairs]

    # ------------------------------------------------------------ bitmaps
    def _buf(self, rk: int) -> int:
        return self.ptr + 4 * (self.k * self.total + int(self.roff[rk]))

    def publish(self, states) -> None:
        """Copy each partition's local bitmap ``st.fbm`` (``states``: rank -> state) into the next buffer."""
        cp = self.cp
        stream = cp.cuda.get_current_stream()
        with self.guard():
            for rk, st in states.items():
                n = int(st.fbm.shape[0])
                if n != int(self.sizes[rk]):
                    raise ValueError(f"partition {rk}'s frontier has {n} words, the shared layout {self.sizes[rk]}")
                cp.cuda.runtime.memcpyAsync(self._buf(rk), st.fbm.data.ptr, 4 * n, _MEMCPY_DEFAULT, stream.ptr)
                self.published += 4 * n
            stream.synchronize()

    def collect(self, dst, bases, mine) -> None:
        """After the barrier: OR every other rank's bitmap into the global bitmap ``dst``
        (uint32; rank ``rk``'s at word ``2 * (bases[rk] >> 6)``); ``mine``: ranks already in it."""
        cp = self.cp
        stream = cp.cuda.get_current_stream()
        with self.guard():
            cp.cuda.runtime.memcpyAsync(self.stage.data.ptr, self.ptr + 4 * self.k * self.total, 4 * self.total,
                                        _MEMCPY_DEFAULT, stream.ptr)
            stream.synchronize()                         # the buffer is free for its next writer
        self.collected += 4 * self.total
        for rk in range(self.sizes.shape[0]):
            if rk in mine:
                continue
            a, b = int(self.roff[rk]), int(self.roff[rk + 1])
            off = 2 * (int(bases[rk]) >> 6)
            seg = dst[off:off + b - a]             # an empty last partition's word may lie past the end
            cp.bitwise_or(seg, self.stage[a:a + seg.shape[0]], out=seg)
        self.k ^= 1

    # ------------------------------------------------------------ pairs
    def peer_pairs(self, j: int, first: int, end: int):
        """Mesh worker ``j``'s pairs ``[first, end)`` as (ids, parents) device arrays read in
        place (inside :meth:`guard`, with the kernels that read them)."""
        if not 0 <= first <= end <= self.n:
            raise _PeerLost(f"worker {j} sent pairs [{first}, {end}) outside its buffer of {self.n}")
        L, U = self.peers[self.order[j]]
        self.pulled += 2 * (end - first) * self.dtype.itemsize
        return L[first:end], U[first:end]

    # ------------------------------------------------------------ teardown
    @contextlib.contextmanager
    def guard(self):
        """Hold off :meth:`close` while kernels are queued on the shared memory (they run on the
        default stream, which close synchronises); raises if the mesh was closed already."""
        with self.lock:
            if not self._own:
                raise _PeerLost("the mesh was closed (its shared device memory with it)")
            yield

    def close(self) -> None:
        """Unmap the peers' allocations and free this worker's once no kernel queued on them is
        left (a search still running fails at its next step: the mesh closed under it)."""
        with self.lock:
            rt = self.cp.cuda.runtime
            rt.deviceSynchronize()
            for ptr in self._mapped:
                rt.ipcCloseMemHandle(ptr)
            self._mapped.clear()
            self.peers.clear()
            self._own.clear()
            self.ptr = 0

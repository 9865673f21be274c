"""Distributed BFS on Dask workers (``--backend dask --partitions P``).

The public API (the same names as the single-process backends' where they
overlap): :func:`load_distributed` pins a partitioned CSR variant on the
workers and opens the exchange mesh, :func:`search` runs one
bulk-synchronous direction-optimizing BFS over it, :func:`gather_parent`
and :func:`validate_distributed` read or check the parents that stay on
the workers. docs/DISTRIBUTED.md is the design.

Modules, in import order (each imports only those above it)::

    frames      wire format: binary frames, checked before use (no pickle)
    codec       frontier slices and claim pairs coded near their information (across hosts)
    handshake   mutual HMAC-SHA256 handshake of every TCP connection
    transport   message rounds: tcp (selectors), tcp-threads, dask comm
    listener    authenticated listener thread and dialer
    shm         shared frontier bitmap in /dev/shm
    ipc         shared frontier bitmap in device memory (CUDA IPC, GPU workers)
    nccl        an NCCL communicator per mesh of GPU workers on one host, set up through Dask
    plugin      MeshPlugin: every piece of worker-side state
    exchange    Numba kernels: bucket / absorb pairs, OR slices
    warmup      every kernel of the level loop loaded at load time
    worker      partitions on their workers, per-search partition state
    bsp         the level loop (one task per worker); gpu_search / gpu_nccl its GPU steps (imported by it
                on a GPU worker)
    waits       bounded client waits that notice a lost worker
    mesh        opening / closing meshes from the client
    placement   DistributedGraph, loading partitions onto workers
    recovery    placing partitions on live workers, again after a lost worker
    client      load_distributed, build_distributed, eligible_distributed, search, gather_parent,
                validate_distributed, validate_many_distributed (on the GPU workers)
    graphs      one contract for a partitioned graph (stored, built on the workers, resident in a GPU
                worker) and Kernel 1's typed results
"""
from dbfs.bfs.dask.client import ALGORITHMS, DistributedResult, build_distributed, eligible_distributed, \
    gather_parent, load_distributed, search, validate_distributed, validate_many_distributed
from dbfs.bfs.dask.mesh import DEFAULT_TIMEOUT, close_mesh, open_mesh
from dbfs.bfs.dask.placement import DistributedGraph
from dbfs.bfs.dask.transport import TRANSPORTS

__all__ = ["DistributedGraph", "DistributedResult", "load_distributed", "build_distributed", "eligible_distributed",
           "search", "gather_parent", "validate_distributed", "validate_many_distributed", "TRANSPORTS", "ALGORITHMS", "DEFAULT_TIMEOUT",
           "open_mesh", "close_mesh"]

"""Searching a partitioned graph: the level loop on the workers and the client's calls.

Parts, in import order (each imports only those above it, :mod:`dbfs.bfs.dask.layout` and
:mod:`dbfs.bfs.dask.mesh`)::

    bsp         the level loop (one task per worker); gpu_search / gpu_nccl its GPU steps (imported by it
                on a GPU worker)
    client      load_distributed, build_distributed, eligible_distributed, search, search_many
    parents     gather_parent, validate_distributed, validate_many_distributed (on the GPU workers), a lost
                worker's searches rerun
    graphs      one contract for a partitioned graph (stored, built on the workers, resident in a GPU
                worker) and Kernel 1's typed results
"""

"""The partitioned graph on the workers: which worker holds which partition, loading or building it there.

Parts, in import order (each imports only those above it and :mod:`dbfs.bfs.dask.mesh`)::

    assign      which worker holds which partition
    exchange    Numba kernels of a worker's partitions: bucket / absorb pairs, OR slices
    warmup      every kernel of the level loop loaded at load time
    worker      partitions on their workers (loaded, or built from the edges), per-search partition state
    gpu_part    a block partition in device memory (read, or built on the device)
    placement   DistributedGraph, loading partitions onto workers
    relabel     a degree-ordered variant's roots and parents in original ids
    recovery    placing partitions on live workers, again after a lost worker
    built       a CSR built in one GPU worker's memory, searched as one partition
"""

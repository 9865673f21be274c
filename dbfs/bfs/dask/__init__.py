"""Distributed BFS on Dask workers (``--backend dask --partitions P``).

The public API (the same names as the single-process backends' where they
overlap): :func:`load_distributed` pins a partitioned CSR variant on the
workers and opens the exchange mesh, :func:`search` runs one
bulk-synchronous direction-optimizing BFS over it (:func:`search_many`: a
batch of them in one task a worker), :func:`gather_parent`
and :func:`validate_distributed` read or check the parents that stay on
the workers. docs/DISTRIBUTED.md is the design.

Three parts, each importing only the ones before it::

    mesh        the exchange mesh: wire format, transports, authentication, shared memory, NCCL, the
                worker plugin, opening and closing meshes (dbfs.bfs.dask.mesh)
    layout      the partitioned graph on the workers: assignment, loading or building partitions,
                placement, recovery (dbfs.bfs.dask.layout)
    search      the level loop on the workers and the client's load / search / gather / validate
                (dbfs.bfs.dask.search)
"""
from dbfs.bfs.dask.search.client import ALGORITHMS, DistributedResult, build_distributed, eligible_distributed, \
    load_distributed, search, search_many
from dbfs.bfs.dask.search.parents import gather_parent, validate_distributed, validate_many_distributed
from dbfs.bfs.dask.mesh import DEFAULT_TIMEOUT, close_mesh, open_mesh
from dbfs.bfs.dask.layout.placement import DistributedGraph
from dbfs.bfs.dask.mesh.transport import TRANSPORTS

__all__ = ["DistributedGraph", "DistributedResult", "load_distributed", "build_distributed", "eligible_distributed",
           "search", "search_many", "gather_parent", "validate_distributed", "validate_many_distributed", "TRANSPORTS", "ALGORITHMS", "DEFAULT_TIMEOUT",
           "open_mesh", "close_mesh"]

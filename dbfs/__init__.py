"""dbfs: Graph500 breadth-first search as a Dask pipeline.

Public API (all lazily importing heavy backends):

- ``kronecker_edges(scale, edgefactor=16, seed1=2, seed2=3, start=0, stop=None)``
- ``graph500_roots(edges, scale, seed1=2, seed2=3, n=64)``
"""
__version__ = "0.1.0"

from dbfs.errors import DbfsError  # noqa: E402
from dbfs.graph import CSRGraph  # noqa: E402

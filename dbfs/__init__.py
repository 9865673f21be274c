"""dbfs: Graph500 breadth-first search as a Dask pipeline.

Public API (heavy modules import on first use):

- ``kronecker_edges(scale, edgefactor=16, seed1=2, seed2=3, start=0, stop=None)``
  Graph500 3.0.1 edge tuples, int64 (k, 2), bit-exact.
- ``graph500_roots(edges, scale, seed1=2, seed2=3, n=64)`` the search keys.
- ``GraphSpec`` graph specifications; ``edges_dask(spec, chunk_edges)``.
- ``build_csr(edges, n_vertices=None, dedupe=True, relabel="none")`` Kernel 1.
- ``bfs(graph, root, algorithm="do", backend="cpu")`` Kernel 2.
- ``validate(edges, root, parent)`` Graph500 validation.
"""
__version__ = "0.1.0"

from dbfs.errors import DbfsError  # noqa: E402
from dbfs.graph import CSRGraph  # noqa: E402

_LAZY = {
    "kronecker_edges": ("dbfs.generate.graph500", "kronecker_edges"),
    "graph500_roots": ("dbfs.roots", "graph500_roots"),
    "GraphSpec": ("dbfs.spec", "GraphSpec"),
    "edges_dask": ("dbfs.generate", "edges_dask"),
    "build_csr": ("dbfs.kernel1", "build_csr"),
    "bfs": ("dbfs.bfs", "bfs"),
    "validate": ("dbfs.validate", "validate"),
}

__all__ = ["DbfsError", "CSRGraph", "__version__", *_LAZY]


def __getattr__(name):
    if name in _LAZY:
        import importlib

        mod, attr = _LAZY[name]
        return getattr(importlib.import_module(mod), attr)
    raise AttributeError(f"module 'dbfs' has no attribute {name!r}")

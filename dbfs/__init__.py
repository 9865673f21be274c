"""dbfs: Graph500 breadth-first search as a Dask pipeline.

Public API (each name is one object on every access, in any import order;
heavy modules import on first use):

- ``kronecker_edges(scale, edgefactor=16, seed1=2, seed2=3, start=0, stop=None)``
  Graph500 3.0.1 edge tuples, int64 (k, 2), bit-exact.
- ``graph500_roots(edges, scale, seed1=2, seed2=3, n=64)`` the search keys.
- ``GraphSpec`` graph specifications; ``edges_dask(spec, chunk_edges)``.
- ``build_csr(edges, n_vertices=None, dedupe=True, relabel="none")`` Kernel 1.
- ``bfs(graph, root, algorithm="do", backend="cpu")`` Kernel 2.
- ``validate(edges, root, parent)`` Graph500 validation.

Bad input raises :class:`DbfsError` (one line: the problem and the fix); a
Python argument of the wrong type or out of range (``bfs``'s ``root``,
``graph500_roots``' ``scale``, ``n``, seeds) raises :class:`ArgumentError`,
a DbfsError that is also a ``ValueError``, naming the argument and its
valid range (never silently coerced).

``dbfs.bfs`` and ``dbfs.validate`` are the packages :mod:`dbfs.bfs` and
:mod:`dbfs.validate`, each callable as its function (``dbfs.bfs(g, r)`` is
``dbfs.bfs.bfs(g, r)``): a package's submodule import binds the package to
its parent's attribute, so a plain function of the same name would be
replaced by the module the first time ``dbfs.bfs.cpu`` is imported.
"""
import importlib as _importlib
import os as _os
import sys as _sys
import tempfile as _tempfile

__version__ = "0.1.0"


def _numba_cache_dir() -> None:
    """Numba writes the kernels it compiles (``cache=True``) to ``$NUMBA_CACHE_DIR``, else beside the
    sources, else the user's cache directory, whichever it can write; with none (a read-only install and no
    writable home) loading a cached kernel fails. Then the cache goes to the temporary directory."""
    def writable(d):
        try:
            _os.makedirs(d, exist_ok=True)
            _tempfile.TemporaryFile(dir=d).close()
            return True
        except OSError:
            return False

    home = _os.environ.get("XDG_CACHE_HOME") or _os.path.join(_os.path.expanduser("~"), ".cache")
    tries = [_os.environ.get("NUMBA_CACHE_DIR"), _os.path.join(_os.path.dirname(__file__), "__pycache__"),
             _os.path.join(home, "numba")]
    if not any(d and writable(d) for d in tries):
        d = _os.path.join(_tempfile.gettempdir(), f"dbfs-numba-cache-{_os.getuid()}")
        _os.environ["NUMBA_CACHE_DIR"] = d
        if "numba" in _sys.modules:   # its configuration is read once, at its import
            _sys.modules["numba"].config.CACHE_DIR = d


_numba_cache_dir()

from dbfs.errors import DbfsError  # noqa: E402
from dbfs.graph import CSRGraph  # noqa: E402

#: public name -> (module, attribute or None for the callable package itself)
_LAZY = {
    "kronecker_edges": ("dbfs.generate.graph500", "kronecker_edges"),
    "graph500_roots": ("dbfs.roots", "graph500_roots"),
    "GraphSpec": ("dbfs.spec", "GraphSpec"),
    "edges_dask": ("dbfs.generate", "edges_dask"),
    "build_csr": ("dbfs.kernel1", "build_csr"),
    "bfs": ("dbfs.bfs", None),
    "validate": ("dbfs.validate", None),
    "ArgumentError": ("dbfs.errors", "ArgumentError"),
}

__all__ = ["DbfsError", "CSRGraph", "__version__", *_LAZY]


def __getattr__(name):
    if name in _LAZY:
        mod, attr = _LAZY[name]
        m = _importlib.import_module(mod)
        obj = m if attr is None else getattr(m, attr)
        globals()[name] = obj
        return obj
    raise AttributeError(f"module 'dbfs' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))

"""Graph500 validation of BFS results: the public API ``dbfs.validate``.

Contract
--------
``validate(edges, root, parent, n_vertices=None, chunk_edges=2**22)
-> ValidationResult(ok, nedge, failures, levels)`` checks one search against
the INPUT edge list, one function per rule of the Graph500 specification,
section 8 "Validation" (reference code 3.0.1 ``validate.c``); an invalid run
reports its failures as :class:`Failure` records (rule, message, count,
examples), in ``RULES`` order. Four validators, one result:

- :mod:`dbfs.validate.cpu`: ``validate``, Numba passes over edge chunks; it
  also defines ``Failure``, ``ValidationResult``, ``RULES``, ``MAX_EXAMPLES``;
- :mod:`dbfs.validate.gpu`: ``validate_gpu``, the same on CuPy (imported only
  when given CuPy arrays) or NumPy;
- :mod:`dbfs.validate.batch_cpu`: ``validate_many_cpu``, several searches over one
  read of the edges, on the CPU;
- :mod:`dbfs.validate.dask`: ``validate_partitioned`` (and ``_many``), the same as Dask tasks
  over a partitioned parent array and the on-disk edge list.

Independent of what it checks: no module of this package imports anything
from :mod:`dbfs.bfs` or reads a CSR; the validators see only the edge list
and the parent array.

Encoding: ``parent`` int per vertex, ``parent[root] == root``, -1 unreached;
``levels`` int64, -1 unreached, -2 for a reached vertex whose chain misses
the root.

The package module is itself callable as the function: ``dbfs.validate(edges,
root, parent)`` is ``dbfs.validate.validate(edges, root, parent)``, so the
name works whether ``dbfs.validate`` resolves to the function (the lazy
attribute of :mod:`dbfs`) or to this package (once it is imported).
"""
from dbfs.validate.cpu import (HOST_EDGE_ROWS, MAX_EXAMPLES, RULES, Failure, ValidationResult, check_chains,
                               check_cycle, check_edges, check_length, check_parent_unreached, check_range,
                               check_root, check_tree_edges, validate)
from dbfs.validate.dask import validate_partitioned
from dbfs.validate.gpu import validate_gpu

__all__ = ["validate", "validate_gpu", "validate_partitioned", "ValidationResult", "Failure", "RULES",
           "MAX_EXAMPLES", "HOST_EDGE_ROWS", "check_length", "check_range", "check_root", "check_cycle",
           "check_parent_unreached", "check_chains", "check_edges", "check_tree_edges"]

import sys as _sys  # noqa: E402
import types as _types  # noqa: E402


class _CallableModule(_types.ModuleType):
    def __call__(self, *args, **kwargs):
        return validate(*args, **kwargs)


_sys.modules[__name__].__class__ = _CallableModule

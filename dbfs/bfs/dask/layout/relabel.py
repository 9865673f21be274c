"""Degree-ordered variants in the dask backend: searches in relabelled ids, parents back in original ids.

Contract
--------
A ``--relabel degree`` variant (``p<P>-block-deg``) numbers the vertices by
descending degree (``perm[new] = original``, :func:`dbfs.kernel1.load_perm`),
so its block partitions are degree classes: rank 0 holds the hubs. That is
what ``--placement degree`` / ``degree-low`` place (Totem's specialisation,
:mod:`dbfs.bfs.dask.layout.assign`). The searches run in the new ids; the
permutation lives on ONE worker (a future: no N-sized array on the client):

- :func:`internal_roots`: the new ids of original roots (one task for a batch);
- :func:`original_slices`: the parent slices of a search in ORIGINAL ids,
  one future per rank of the same block partitioning over original ids
  (one task joins the slices and maps indices and values through ``perm``,
  P tasks cut it): what the validation and :func:`gather_parent` read.

Encoding: parents int64, -1 unreached; ``perm`` int64 (the stored array).
"""
from __future__ import annotations

import numpy as np

from dbfs.kernel1 import load_perm
from dbfs.partition import Partitioning

__all__ = ["load_perm_future", "internal_roots", "original_slices"]


def _load_perm(dataset_path, variant):
    return load_perm(dataset_path, variant)


def _new_ids(perm, v):
    """The new ids of original vertices ``v`` (an inverse of ``perm``, on the worker holding it)."""
    iperm = np.empty(perm.size, np.int64)
    iperm[perm] = np.arange(perm.size, dtype=np.int64)
    return iperm[v]


def _unrelabel(perm, part: Partitioning, *slices):
    """The whole parent array in original ids from the relabelled slices."""
    pnew = part.join(slices)
    out = np.full(part.n_vertices, -1, np.int64)
    reached = np.flatnonzero(pnew >= 0)
    out[perm[reached]] = perm[pnew[reached]]
    return out


def _cut(full, part: Partitioning, rk):
    rg = part.vertex_range(rk)
    return np.ascontiguousarray(full[rg.start:rg.stop:rg.step])


def load_perm_future(client, dataset_path, variant, worker=None):
    """The variant's ``perm`` as a future held by ``worker`` (any when None)."""
    kw = {"workers": [worker], "allow_other_workers": True} if worker else {}
    return client.submit(_load_perm, str(dataset_path), variant, pure=False, **kw)


def internal_roots(client, perm_f, roots):
    """A future of the new ids of original vertices ``roots`` (one task; the caller waits, bounded)."""
    return client.submit(_new_ids, perm_f, np.asarray(roots, np.int64), pure=False)


def original_slices(client, perm_f, part: Partitioning, slices: list) -> list:
    """Futures of the parent slices in original ids (see the module docstring)."""
    full = client.submit(_unrelabel, perm_f, part, *slices, pure=False)
    return [client.submit(_cut, full, part, rk, pure=False) for rk in range(part.P)]

"""A relabelled search's parent array mapped back to the original vertex ids, in parallel.

Contract
--------
:func:`parents_to_original` takes ``parent`` over internal ids (int64, -1
unreached), ``perm`` (int64, ``perm[new] = original``, a permutation of
0..N-1) and optionally ``iperm`` (its inverse) and returns ``out`` over original
ids: ``out[perm[i]] = perm[parent[i]]`` and -1 where ``parent[i] == -1``. Every
element of ``out`` is written once (``perm`` is a permutation), so no fill pass
is needed.

Method: one parallel pass (Numba ``prange``) at the memory system's
random-access rate on every core instead of numpy's one thread through three
temporaries. With ``iperm`` it walks ``out`` in order and gathers
``perm[parent[iperm[j]]]`` (random reads only, sequential writes: the faster
form); without, it scatters ``out[perm[i]]``. It sits inside a relabelled
search's timed region (the parent array a search hands back is in the
user's ids, as Graph500 validates it).
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

__all__ = ["parents_to_original"]


@njit(parallel=True, nogil=True, cache=True)
def _map(parent, perm, out):
    for i in prange(parent.shape[0]):
        p = parent[i]
        out[perm[i]] = perm[p] if p >= 0 else -1


@njit(parallel=True, nogil=True, cache=True)
def _gather(parent, perm, iperm, out):
    for j in prange(out.shape[0]):
        p = parent[iperm[j]]
        out[j] = perm[p] if p >= 0 else -1


def parents_to_original(parent: np.ndarray, perm: np.ndarray, iperm: np.ndarray | None = None) -> np.ndarray:
    """``out[perm[i]] = perm[parent[i]]`` (-1 stays -1); all int64 of one length (``iperm``: ``perm``'s inverse)."""
    out = np.empty(parent.shape[0], np.int64)
    parent, perm = np.ascontiguousarray(parent, np.int64), np.ascontiguousarray(perm, np.int64)
    if iperm is None:
        _map(parent, perm, out)
    else:
        _gather(parent, perm, np.ascontiguousarray(iperm, np.int64), out)
    return out

"""Graph500 search keys (GRAPH500.md section 6), bit-exact with 3.0.1.

Candidates come from one continuous MRG stream starting at ``skip(2, 0, 0)``:
the reference asks for two doubles at position ``counter`` (state
``skip(2, 0, 2*counter)``, 4 draws) and then adds 2 to ``counter``, so
candidate i uses draws 4i..4i+3. Candidate ``r = int((d0 + d1) * N) % N`` is
taken unless it is already a root or has no incident non-self-loop edge; at
most N candidates are tried (``counter <= 2N``), so fewer than n roots come
back when the graph has fewer eligible vertices.

Eligibility is decided by streaming the edge list once per batch of
candidates (batches double), so the edge list may be a numpy, zarr or dask
array of any size (:func:`eligible`), or a CuPy array on the device
(:func:`eligible_gpu`).
"""
from __future__ import annotations

import operator

import numpy as np
from numba import njit, prange

from dbfs.arrays import iter_rows
from dbfs.errors import ArgumentError
from dbfs.generate import mrg


def candidates(nverts: int, seed1: int, seed2: int, count: int, start_state=None):
    """The first ``count`` root candidates and the stream state after them."""
    n = int(nverts)
    st = mrg.PyStream(start_state or mrg.skip(mrg.seed_state(seed1, seed2), 2, 0, 0))
    out = np.empty(count, dtype=np.int64)
    for i in range(count):
        d0 = st.double()
        d1 = st.double()
        out[i] = int((d0 + d1) * n) % n
    return out, st.z


@njit(parallel=True, nogil=True, cache=True)
def _mark_incident(edges, sorted_cands, hit):
    """hit[j] = 1 if sorted_cands[j] is an endpoint of a non-self-loop edge."""
    k = sorted_cands.shape[0]
    for i in prange(edges.shape[0]):
        u = edges[i, 0]
        v = edges[i, 1]
        if u == v:
            continue
        j = np.searchsorted(sorted_cands, u)
        if j < k and sorted_cands[j] == u:
            hit[j] = 1
        j = np.searchsorted(sorted_cands, v)
        if j < k and sorted_cands[j] == v:
            hit[j] = 1


def eligible(edges, cands: np.ndarray) -> np.ndarray:
    """Boolean mask: which of ``cands`` have an incident non-self-loop edge."""
    uniq = np.unique(cands)
    hit = np.zeros(uniq.shape[0], dtype=np.uint8)
    for _, block in iter_rows(edges):
        _mark_incident(block, uniq, hit)
    return hit[np.searchsorted(uniq, cands)].astype(bool)


def eligible_gpu(edges, cands: np.ndarray, rows: int = 1 << 26) -> np.ndarray:
    """:func:`eligible` on a device edge list (CuPy, imported here: this module needs no GPU).

    Parameters
    ----------
    edges : cupy.ndarray, shape (M, 2)
    cands : array_like of int
        Candidate roots.
    rows : int
        Edge rows scanned at once.

    Returns
    -------
    numpy.ndarray of bool
        Whether each candidate (in ``cands`` order) has an incident
        non-self-loop edge.
    """
    import cupy as cp  # deferred: cupy

    cands = np.asarray(cands, dtype=np.int64)
    uniq_h = np.unique(cands)
    uniq = cp.asarray(uniq_h)
    hit = cp.zeros(uniq.shape[0], dtype=cp.bool_)
    k = int(uniq.shape[0])
    for a in range(0, int(edges.shape[0]), rows):
        e = cp.asarray(edges[a:a + rows])
        u = e[:, 0].astype(cp.int64)
        v = e[:, 1].astype(cp.int64)
        del e
        keep = u != v
        for x in (u[keep], v[keep]):
            j = cp.minimum(cp.searchsorted(uniq, x), k - 1)
            found = uniq[j] == x
            hit[j[found]] = True
    return cp.asnumpy(hit)[np.searchsorted(uniq_h, cands)]


def select_roots(nverts: int, seed1: int, seed2: int, n: int, is_eligible) -> np.ndarray:
    """The reference's selection loop: candidates in stream order, skipping
    repeats and vertices for which ``is_eligible(cands) -> bool mask`` is False."""
    roots: list[int] = []
    chosen: set[int] = set()
    tried = 0
    batch = max(4 * n, 64)
    state = None
    while len(roots) < n and tried < nverts:
        take = min(batch, nverts - tried)
        cands, state = candidates(nverts, seed1, seed2, take, state)
        ok = np.asarray(is_eligible(cands), dtype=bool)
        for r, good in zip(cands.tolist(), ok.tolist()):
            tried += 1
            if r in chosen or not good:
                continue
            roots.append(r)
            chosen.add(r)
            if len(roots) == n:
                break
        batch *= 2
    return np.array(roots, dtype=np.int64)


#: the largest SCALE whose 2**SCALE vertex ids fit int64 (the largest any generator takes)
MAX_ROOT_SCALE = 62


def _int_arg(name: str, value, lo: int, hi: int, valid: str) -> int:
    """``value`` as an int, or ArgumentError naming ``name`` and its range ``valid`` (``lo..hi``; an
    int or NumPy integer, not a bool, str or float)."""
    try:
        if isinstance(value, (bool, np.bool_)):
            raise TypeError
        v = operator.index(value)
    except TypeError:
        v = None
    if v is None or not lo <= v <= hi:
        raise ArgumentError(f"graph500_roots: {name}={value!r} is invalid: pass an integer {valid}")
    return v


def graph500_roots(edges, scale: int, seed1: int = 2, seed2: int = 3, n: int = 64,
                   n_vertices: int | None = None) -> np.ndarray:
    """The reference's search keys, in its order (int64, length <= n).

    N is ``2**scale`` (Graph500) unless ``n_vertices`` is given (imported graphs).

    Raises
    ------
    dbfs.errors.ArgumentError
        (a ValueError) naming an argument that is not an integer in its range: ``scale`` 1..62
        (unless ``n_vertices`` is given), ``seed1``/``seed2`` 0..2**64-1, ``n`` >= 1,
        ``n_vertices`` 1..2**63-1.
    """
    if n_vertices is not None:
        nverts = _int_arg("n_vertices", n_vertices, 1, (1 << 63) - 1, "1..2**63-1 (the graph's vertex count)")
    else:
        nverts = 1 << _int_arg("scale", scale, 1, MAX_ROOT_SCALE,
                               f"1..{MAX_ROOT_SCALE} (N = 2**scale vertex ids must fit int64)")
    for name, seed in (("seed1", seed1), ("seed2", seed2)):
        _int_arg(name, seed, 0, mrg.UINT64_MAX, "0..2**64-1")
    n = _int_arg("n", n, 1, (1 << 63) - 1, ">= 1 (the number of keys; fewer come back when fewer vertices have "
                                           "an edge)")
    return select_roots(nverts, seed1, seed2, n, lambda cands: eligible(edges, cands))

"""The bottom-up step of the CPU BFS (GAP's ``BUStep``): every unvisited
vertex looks for a parent in the frontier bitmap.

Contract: :func:`bu_step` ``(indptr, indices, offset, front, parent,
visited, nxt, hub, no_edge, multi, fill, want_deg) -> (awake, examined,
awake_deg, left_deg)`` works on a LOCAL vertex range:

- ``indptr``, ``indices``: the local rows (``indices`` hold global ids;
  one array, or a :class:`~dbfs.bfs.cpu.adjacency.SplitAdjacency` whose
  entries are read through ``adj_at``); ``offset``: the global id of local
  row 0, a multiple of 64.
- ``front``: the GLOBAL frontier bitmap. ``parent``, ``visited``, ``nxt``,
  ``hub``, ``no_edge``, ``multi``: local (index = global id - offset).
- ``visited`` must be EXACT on entry (every reached vertex has its bit;
  bits may also mark vertices never to search, such as isolated ones).
  Every vertex whose bit is clear and that has a neighbour in ``front``
  gets one such neighbour as parent and its bit set in ``visited``; ``nxt``
  is overwritten with exactly those vertices (the next frontier).
- ``hub[v]``: v's highest-degree neighbour
  (:func:`~dbfs.bfs.cpu.graph_aux.hub_neighbours`, -1 for an empty row);
  ``multi``: the rows with more than one entry
  (:func:`~dbfs.bfs.cpu.graph_aux.degree_over_bitmap` ``(indptr, 1)``,
  Kernel-1 data); ``no_edge``: the vertices without edges.
- ``fill`` (the first bottom-up level of a single-process search): on entry
  ``parent`` holds values only for the vertices ``visited`` marks as
  reached, garbage elsewhere, and the step writes the -1 of every other
  vertex itself: those without edges (``no_edge``) and those whose hub
  misses (before pass 2 looks for their parent). The parent array's lines
  are then written in this one pass instead of first by a -1 fill of the
  whole array. Without ``fill`` (``no_edge`` is then not read) ``parent``
  must hold -1 for every unreached vertex.
- Returns: ``awake``, the vertices awakened; ``examined``, the edges
  examined (one per hub test plus the row entries read); ``awake_deg``,
  the sum of the awakened vertices' degrees (Beamer's m_f of the next
  frontier), only with ``want_deg`` (else -1: without it a sparse word does
  not read the hits' rows in ``indptr``; a dense word reads them anyway, as
  a sequential stream that also brings in the row starts its misses need);
  ``left_deg``, the sum of the degrees of the vertices left unvisited
  (Beamer's m_u), from the misses' rows, which the step reads anyway.

Method (Beamer, Asanovic and Patterson, "Direction-Optimizing
Breadth-First Search", SC'12, bottom-up step, with GAP's early exit at the
first parent found). ``hub[v]``, v's highest-degree neighbour, is the
likeliest to be in the frontier, so it is tested first from a dense array
and most vertices never touch their adjacency row. Each thread owns blocks
of ``_BU_BLOCK`` whole 64-vertex words, in two passes. Pass 1, per word:
the hub tests and the hits' parents (``_bu_word_hits``; a dense word works
on all 64 lanes branch-free, vectorised over slices of ``hub``, ``parent``
and ``indptr``), and a software prefetch of the rows of the first
``_BU_LEAD`` vertices of degree > 1 whose hub missed. Pass 2 scans those
rows up to the first neighbour in the frontier (early exit), each scan
prefetching the row of the miss ``_BU_LEAD`` ahead (a second cursor over
the block's miss bits, ``_next_miss``): the rows are in flight while the
block's tests and scans run, where a scan right after its word's tests
waited for each row in turn. A vertex of degree 1 is not scanned at all:
its only neighbour is the hub (on Kronecker graphs most misses). ``multi``
(the rows with more than one entry) takes them out of both passes' walks a
word at a time, and a scanned row's outcome is recorded branch-free: per
vertex, whether its degree exceeds 1 and whether its scan finds a parent
are coin flips on the weak roots' widest level, and their mispredicts
cost more than the row reads. Between the passes a word's hits are kept in
``nxt`` and ``visited``; each word is written by its owner only, so no
atomics are needed. Before its pass 1 a block prefetches the
hub and parent entries of the next block's sparse words
(``_prefetch_sparse_words``). Without ``fill``, a block whose words are all
visited (most blocks of the late levels) only clears its ``nxt`` words: one
OR over the block instead of three walks.

Encoding: bitmaps are int64 words, bit ``v & 63`` of word ``v >> 6``;
``hub[v]`` is -1 for an empty row; parent -1 for unreached.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from .adjacency import adj_at, adj_prefetch
from .primitives import _cttz, _popcount, _set_lanes, prefetch


# a word with at least this many unvisited vertices tests all 64 hubs with a
# branch-free (vectorisable) loop; sparser words walk their clear bits
_BU_DENSE_WORD = 16
# words per bottom-up block: pass 1 over its words, then pass 2
_BU_BLOCK = 8
# rows a bottom-up block prefetches in pass 1; pass 2 keeps that many ahead
_BU_LEAD = 16


@njit(nogil=True, cache=True, inline="always")
def _hub_hits(hv, front, count):
    """Bit b set iff hub ``hv[b] >= 0`` is in ``front`` (b < count; ``hv``
    is one word's slice of the hub array, so its loads are contiguous): a
    branch-free loop that LLVM turns into vector loads and gathers."""
    m = np.int64(0)
    for b in range(count):
        h = np.int64(hv[b])
        hc = h if h > 0 else np.int64(0)
        m |= (((front[hc >> 6] >> (hc & 63)) & 1) & np.int64(h >= 0)) << b
    return m


@njit(nogil=True, cache=True, inline="always")
def _scan_row(indptr, indices, front, vl):
    """(first neighbour of local row vl in ``front`` or -1, entries read)."""
    s = indptr[vl]
    e = indptr[vl + 1]
    j = s
    while j < e:
        u = adj_at(indices, j)
        j += 1
        if (front[u >> 6] >> (u & 63)) & 1:
            return np.int64(u), j - s
    return np.int64(-1), j - s


@njit(nogil=True, cache=True, inline="always")
def _bu_word_hits(hv, pv, dv, front, todo, count, want_deg):
    """One word of bottom-up pass 1: the bits of ``todo`` whose hub is in
    ``front``, their parents written (``pv[b] = hv[b]``) and the sum of
    their degrees (from ``dv``, the word's indptr slice; a sparse word
    reads them only with ``want_deg``). A word with many
    unvisited vertices works on all 64 lanes branch-free (vector gathers and
    masked stores); a sparse one walks its clear bits."""
    d = np.int64(0)
    if _popcount(todo) >= _BU_DENSE_WORD:
        hits = _hub_hits(hv, front, count) & todo
        for b in range(count):
            if (hits >> b) & 1:
                pv[b] = hv[b]
        for b in range(count):
            d += ((hits >> b) & 1) * (dv[b + 1] - dv[b])
        return hits, d
    hits = np.int64(0)
    t = todo
    while t != 0:
        b = _cttz(t)
        t &= t - 1
        h = hv[b]
        if h >= 0 and (front[h >> 6] >> (h & 63)) & 1:
            hits |= np.int64(1) << b
            pv[b] = h
            if want_deg:
                d += dv[b + 1] - dv[b]
    return hits, d


@njit(nogil=True, cache=True, inline="always")
def _prefetch_sparse_words(visited, hub, parent, w0, w1, nloc):
    """Prefetch the ``hub`` and ``parent`` entries of the unvisited vertices
    of the sparse words in [w0, w1) (the next block): in a level that finds
    the last few vertices the walk over a word's clear bits mispredicts its
    exit about once per vertex, so its misses did not overlap; dense words
    stream without help."""
    for w in range(w0, w1):
        x = ~visited[w]
        if x != 0 and _popcount(x) < _BU_DENSE_WORD:
            base = w << 6
            while x != 0:
                vl = base + _cttz(x)
                x &= x - 1
                if vl < nloc:
                    prefetch(hub, vl)
                    prefetch(parent, vl)


@njit(nogil=True, cache=True, inline="always")
def _next_miss(visited, multi, lw, lx, w1):
    """One step of ``bu_step``'s lead cursor over a block's misses to scan
    (``~visited & multi`` of words up to ``w1``; ``lx``: the bits of word
    ``lw`` not yet taken): (lw, lx, the local vertex taken, -1 past the end)."""
    while lx == 0 and lw + 1 < w1:
        lw += 1
        lx = ~visited[lw] & multi[lw]
    if lx == 0:
        return lw, lx, np.int64(-1)
    return lw, lx & (lx - 1), np.int64((lw << 6) + _cttz(lx))


@njit(nogil=True, cache=True, inline="always")
def _bu_block(indptr, indices, front, parent, visited, nxt, hub, no_edge, multi, fill, want_deg, blk, nwords, nloc):
    """Block ``blk`` of :func:`bu_step` (its words ``[blk * _BU_BLOCK, ...)`` of the ``nwords`` over ``nloc``
    local rows): pass 1 and pass 2 of the module docstring; returns (awake, examined, awake_deg, left_deg)."""
    w0 = blk * _BU_BLOCK
    w1 = min(w0 + _BU_BLOCK, nwords)
    n_ex = 0
    n_deg = 0
    n_aw = 0
    n_left = 0
    n_pf = 0
    n_miss = 0
    _prefetch_sparse_words(visited, hub, parent, w1, min(w1 + _BU_BLOCK, nwords), nloc)
    if not fill:
        left = np.int64(0)
        for w in range(w0, w1):
            left |= ~visited[w]
        if left == 0:              # a block with nothing left to find (late levels: most blocks)
            for w in range(w0, w1):
                nxt[w] = 0
            return 0, 0, 0, 0
    for w in range(w0, w1):        # pass 1: hubs, prefetch the misses' rows
        vis = visited[w]
        todo = ~vis
        base = w << 6
        count = min(64, nloc - base)
        pv = parent[base:base + count]
        if todo == 0:
            nxt[w] = 0
            if fill:
                _set_lanes(pv, no_edge[w], count)
            continue
        dv = indptr[base:base + count + 1]
        hits, d = _bu_word_hits(hub[base:base + count], pv, dv, front, todo, count, want_deg)
        if fill:
            _set_lanes(pv, (todo & ~hits) | no_edge[w], count)
        n_ex += _popcount(todo)
        n_deg += d
        x = todo & ~hits & multi[w]
        n_miss += _popcount(x)
        while x != 0 and n_pf < _BU_LEAD:
            b = _cttz(x)
            x &= x - 1
            adj_prefetch(indices, dv[b])
            n_pf += 1
        nxt[w] = hits
        visited[w] = vis | hits
        n_aw += _popcount(hits)
    # the lead cursor: the miss _BU_LEAD ahead of the one being scanned
    lw = w0
    lx = np.int64(0)
    if n_miss > _BU_LEAD:
        lx = ~visited[w0] & multi[w0]
        for _ in range(_BU_LEAD):          # pass 1 prefetched these
            lw, lx, _v = _next_miss(visited, multi, lw, lx, w1)
    for w in range(w0, w1):        # pass 2: scan the misses' rows
        vis = visited[w]
        miss = ~vis
        if miss == 0:
            continue
        base = w << 6
        # a miss of degree 1 is settled (its only neighbour is the hub)
        n_left += _popcount(miss & ~multi[w])
        miss &= multi[w]
        nb = np.int64(0)
        while miss != 0:
            b = _cttz(miss)
            miss &= miss - 1
            if n_miss > _BU_LEAD:
                lw, lx, ahead = _next_miss(visited, multi, lw, lx, w1)
                if ahead >= 0:
                    adj_prefetch(indices, indptr[ahead])
            vl = base + b
            dg = indptr[vl + 1] - indptr[vl]
            u, k = _scan_row(indptr, indices, front, vl)
            n_ex += k
            # branch-free from here (found or not is a coin flip):
            # a miss's parent is already -1
            parent[vl] = u
            f = np.int64(u >= 0)
            nb |= f << b
            n_deg += f * dg
            n_left += (1 - f) * dg
        nxt[w] |= nb
        visited[w] = vis | nb
        n_aw += _popcount(nb)
    return n_aw, n_ex, n_deg, n_left


@njit(parallel=True, nogil=True, cache=True)
def bu_step(indptr, indices, offset, front, parent, visited, nxt, hub, no_edge, multi, fill, want_deg):
    """Bottom-up step over the local rows (GAP's BUStep; contract: module docstring).

    Parameters
    ----------
    indptr, indices, offset, front, parent, visited, nxt, hub, no_edge, multi
        The local rows, their offset and the bitmaps and arrays of the contract.
    fill, want_deg : bool
        Write the -1s of the unreached vertices; sum the awakened vertices' degrees.

    Returns
    -------
    awake, examined, awake_deg, left_deg : int
    """
    nloc = indptr.shape[0] - 1
    nwords = (nloc + 63) >> 6
    nblocks = (nwords + _BU_BLOCK - 1) // _BU_BLOCK
    awake = 0
    examined = 0
    awake_deg = 0
    left_deg = 0
    for blk in prange(nblocks):
        n_aw, n_ex, n_deg, n_left = _bu_block(indptr, indices, front, parent, visited, nxt, hub, no_edge, multi,
                                              fill, want_deg, blk, nwords, nloc)
        awake += n_aw
        examined += n_ex
        awake_deg += n_deg
        left_deg += n_left
    return awake, examined, awake_deg if want_deg else -1, left_deg

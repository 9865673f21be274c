"""Graph500 validation of several searches over one read of the edge list, on the CPU.

Contract
--------
``validate_many_cpu(edges, searches, n_vertices=None, chunk_edges=2**22)
-> [ValidationResult, ...]``: for each ``(root, parent)`` of ``searches``
the same result as :func:`dbfs.validate.cpu.validate` on it (same ``ok``,
``nedge``, failed rules in ``RULES`` order, counts, messages and examples),
with ``levels`` None. ``batch_size_cpu(available, n)`` is how many searches
one batch holds for ``available`` bytes of host memory. Independent of what
it checks, as the one-search validator: nothing from :mod:`dbfs.bfs`, only
the INPUT edges, read in row chunks (NumPy, zarr, anything sliceable).

Method: each search's vertex rules (``length``, ``range``, ``root``) and its
levels from the parent chains (:mod:`dbfs.validate.cpu`'s, with its
``cycle`` and ``parent-unreached`` statuses); then a table with one row per
vertex holding the (level, parent) of every search of the batch side by
side, so an input tuple costs two random row reads (one cache line each: up
to 12 searches of one-byte levels and 4-byte parents) for the whole batch
instead of four scattered reads per search. One Numba pass per chunk counts,
per search, the edge-range, edge-span, level-diff and nedge quantities and
marks tree edges, over blocks of the chunk in parallel (per-block counters,
summed after; each block prefetches the two table rows of the tuple
``PREFETCH_AHEAD`` rows on, so its random row reads overlap instead of
waiting one behind another); a
search whose counts show a failure in a chunk has that chunk re-scanned by
the one-search example collector, so its examples are the first offending
tuples in input order, as :func:`validate`'s.

Encoding: a level is -1 unreached, -2 broken chain, else the BFS depth.
While ids fit int32 (n <= 2^31) and every level of the batch fits int8
(depth <= 127), the table is compact: rows of :func:`_compact_row` bytes
(64 up to 12 searches, one cache line), the K int8 levels first (padded to
16 bytes), then the K int32 parents. Otherwise (a deeper tree, or wider
ids) it is (n, K, 2) of the id width: ``[v, s, 0]`` the level, ``[v, s, 1]``
the parent; a compact table that meets a deeper search is widened once,
its columns copied. The kernels read both through two (n, K) views, levels
and parents. Tree-edge marks are (K, n) uint8. Edge chunks stay in their
stored dtype (no int64 copy of each chunk).

Reference: Graph 500 Benchmark 1 specification 3.0.1, section 8
"Validation"; the batch and the table follow :mod:`dbfs.validate.gpu`'s.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

from dbfs.validate.cpu import (HOST_EDGE_ROWS, MAX_EXAMPLES, RULES, Failure, ValidationResult, _edge_examples,
                               _levels_from_chains, check_chains, check_length, check_range, check_root,
                               check_tree_edges, joined_edge_failures)
from dbfs.prefetch import prefetch
from dbfs.validate.gpu import _width

__all__ = ["validate_many_cpu", "batch_size_cpu", "SearchTable", "CPU_VALIDATE_MOST"]

#: most searches one CPU batch holds: 12 one-byte levels and 4-byte parents fill one 64-byte cache line
CPU_VALIDATE_MOST = 12
#: the deepest level a compact table's int8 holds
_COMPACT_DEPTH = 127
#: False: every table wide, as before the compact layout (a benchmark's switch)
COMPACT = True
#: tuples ahead whose two table rows the pass prefetches (0: none; the distances tried: docs/BENCHMARKS.md)
PREFETCH_AHEAD = 16
#: host bytes per vertex as (a, b) for a * id width + b: the chain walk's own (levels, status, stack: int64,
#: int8, int64), then each search of a batch (its int64 parents as held, its table row, its tree-edge mark)
_MODEL = ((0, 17), (2, 9))


def batch_size_cpu(available: int, n: int, most: int = CPU_VALIDATE_MOST) -> int:
    """Searches one batch validates with ``available`` host bytes for it on a graph of ``n`` vertices: at
    most ``most``, at least 1 (:data:`_MODEL`)."""
    vb = np.dtype(_width(n)).itemsize
    own, each = (a * vb + b for a, b in _MODEL)
    return int(max(1, min(int(most), (int(available) - own * n) // max(1, each * n))))


@njit(parallel=True, nogil=True, cache=True)
def _batch_pass(chunk, levs, pars, flat, row, k, found, counts, ahead):
    """Per block t of the chunk, ``counts[t]`` = (edge-range, then per search s: nedge, edge-span,
    level-diff); tree edges marked in ``found[s]``. ``k`` searches of the table (its views ``levs`` and
    ``pars``) are used. The table rows of the tuple ``ahead`` rows on are prefetched (``flat``: the table's
    bytes, ``row`` bytes a row; 0: none), so a block's random row reads overlap. (Branches, not flags added
    to counters: a real search's tests go the same way for most tuples, and the branches measured faster.)"""
    m = chunk.shape[0]
    n = levs.shape[0]
    blocks = counts.shape[0]
    step = (m + blocks - 1) // blocks
    for t in prange(blocks):
        c = np.zeros(1 + 3 * k, np.int64)        # this block's own (no cache line shared with another's)
        hi = min(m, (t + 1) * step)
        for i in range(t * step, hi):
            if ahead > 0 and i + ahead < hi:
                pu = np.int64(chunk[i + ahead, 0])
                pv = np.int64(chunk[i + ahead, 1])
                if pu >= 0 and pu < n:
                    prefetch(flat, pu * row)
                if pv >= 0 and pv < n:
                    prefetch(flat, pv * row)
            u = np.int64(chunk[i, 0])
            v = np.int64(chunk[i, 1])
            if u < 0 or v < 0 or u >= n or v >= n:
                c[0] += 1
                continue
            for s in range(k):
                lu = np.int64(levs[u, s])
                lv = np.int64(levs[v, s])
                if lu == -2 or lv == -2:
                    continue
                if lu >= 0 and lv >= 0:
                    d = lu - lv
                    if d > 1 or d < -1:
                        c[3 + 3 * s] += 1
                    if u != v:
                        c[1 + 3 * s] += 1
                        if pars[v, s] == u:
                            found[s, v] = 1
                        if pars[u, s] == v:
                            found[s, u] = 1
                elif lu >= 0 or lv >= 0:
                    c[2 + 3 * s] += 1
        counts[t, :] = c


@njit(parallel=True, nogil=True, cache=True)
def _fill_column(levs, pars, s, lev, parent):
    """Search ``s``'s column of the table (its views ``levs``, ``pars``): ``(lev[v], parent[v])`` for every v,
    both written in one visit of the row's cache line, rows spread over the threads (the values fit: the
    caller chose the widths)."""
    for v in prange(levs.shape[0]):
        levs[v, s] = lev[v]
        pars[v, s] = parent[v]


def _aligned(shape, dtype, line: int = 64):
    """An empty array whose first byte starts a ``line``-byte cache line (a table row of a full batch is one
    line, not two)."""
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    raw = np.empty(nbytes + line, np.uint8)
    at = (-raw.ctypes.data) % line
    return raw[at:at + nbytes].view(dtype).reshape(shape)


def _level_bytes(K: int) -> int:
    """Bytes of a compact row's levels for ``K`` searches: K int8, padded to 16 (the parents start there)."""
    return -(-max(1, K) // 16) * 16


def _compact_row(K: int) -> int:
    """Bytes of a compact table row for ``K`` searches: its levels (:func:`_level_bytes`), K int32 parents, the
    whole rounded up to 64-byte lines (64 up to 12 searches)."""
    return -(-(_level_bytes(K) + 4 * max(1, K)) // 64) * 64


def _compact(n: int, K: int):
    """An empty compact table for ``n`` vertices and ``K`` searches (module docstring): (n, row) bytes."""
    return _aligned((n, _compact_row(K)), np.uint8)


def _wide(n: int, K: int):
    """An empty wide table (module docstring): (n, K, 2) of the id width."""
    return _aligned((n, max(1, K), 2), _width(n))


def _views(table, K: int):
    """The (n, K) levels and parents views of a compact or wide ``table`` for ``K`` searches, and its row
    bytes."""
    K = max(1, K)
    if table.ndim == 2:
        lb = _level_bytes(K)
        return table[:, :K].view(np.int8), table[:, lb:lb + 4 * K].view(np.int32), table.shape[1]
    return table[:, :, 0], table[:, :, 1], table.shape[1] * table.shape[2] * table.itemsize


class SearchTable:
    """A batch's searches: their stops or chain failures, the (level, parent) table, tree-edge marks and the
    per-search edge counts, examples and nedge (module docstring). :meth:`fold` each search in, :meth:`chunk`
    every chunk of the edges (or hand :meth:`for_edges` copies to tasks that each read some of them), then
    :meth:`results`."""

    def __init__(self, n: int, K: int):
        self.n, self.k, self.cap = int(n), 0, max(1, int(K))
        narrow = COMPACT and np.dtype(_width(self.n)) == np.dtype(np.int32)
        self._set_table((_compact if narrow else _wide)(self.n, self.cap))
        self.items = []                 # per search, in order: its stopping Failure, or (slot, root, chain failures)
        self.found = None               # the marks and counters, made once every search is in

    def _set_table(self, table) -> None:
        self.table = table
        self.levs, self.pars, self.row = _views(table, self.cap)

    def __getstate__(self):
        """Pickled (a task's argument) without the views: they would travel as copies of the table."""
        return {k: v for k, v in self.__dict__.items() if k not in ("levs", "pars", "row")}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._set_table(self.table)

    @property
    def compact(self) -> bool:
        return self.levs.dtype == np.dtype(np.int8)

    def _widen(self) -> None:
        """The compact table as a wide one, the columns folded so far copied (a search deeper than int8)."""
        table = _wide(self.n, self.cap)
        levs, pars, _ = _views(table, self.cap)
        for s in range(self.k):
            _fill_column(levs, pars, s, self.levs[:, s], self.pars[:, s])
        self._set_table(table)

    def _counters(self):
        if self.found is not None and self.found.shape[0] == max(1, self.k):
            return
        self.found = np.zeros((max(1, self.k), self.n), np.uint8)
        self.totals = [[0, 0, 0] for _ in range(self.k)]
        self.examples = [[np.empty(2 * MAX_EXAMPLES + 2, np.int64) for _ in range(3)] for _ in range(self.k)]
        self.nex = [[0, 0, 0] for _ in range(self.k)]
        self.nedge = [0] * self.k

    def fold(self, root, parent) -> None:
        """One search in: the rules that stop validation (``parent`` may be that Failure already), else its
        levels and chain rules, and its table column."""
        root = int(root)
        if not isinstance(parent, Failure):
            parent = np.ascontiguousarray(np.asarray(parent), dtype=np.int64)
        f = parent if isinstance(parent, Failure) else \
            check_length(parent, self.n) or check_range(parent, self.n) or check_root(parent, root, self.n)
        if f:
            self.items.append(f)
            return
        lev, status = _levels_from_chains(parent, root)
        if self.compact and lev.shape[0] and int(lev.max()) > _COMPACT_DEPTH:
            self._widen()
        if self.k == self.cap:
            raise ValueError(f"a batch table for {self.cap} searches is full")
        s, self.k = self.k, self.k + 1
        _fill_column(self.levs, self.pars, s, lev, parent)
        self.items.append((s, root, check_chains(status)))

    def for_edges(self) -> "SearchTable":
        """This batch with fresh marks and counters over the same table (for a task reading some edges)."""
        e = object.__new__(SearchTable)
        e.n, e.k, e.cap, e.items, e.found = self.n, self.k, self.cap, [], None
        e._set_table(self.table)
        e._counters()
        return e

    def chunk(self, chunk) -> None:
        self._counters()
        counts = np.zeros((4 * numba.get_num_threads(), 1 + 3 * self.k), np.int64)
        _batch_pass(chunk, self.levs, self.pars, self.table.reshape(-1).view(np.uint8), self.row, self.k, self.found,
                    counts, PREFETCH_AHEAD)
        c = counts.sum(axis=0)
        for s in range(self.k):
            self.nedge[s] += int(c[1 + 3 * s])
            got = (int(c[0]), int(c[2 + 3 * s]), int(c[3 + 3 * s]))
            if any(got):
                lev = self.levs[:, s]
                for kind, cnt in enumerate(got):
                    if cnt:
                        self.totals[s][kind] += cnt
                        self.nex[s][kind] = _edge_examples(chunk, lev, kind, self.examples[s][kind],
                                                           self.nex[s][kind])

    def summary(self) -> dict:
        """The edge counts, examples (in input order) and nedge of every search, small."""
        self._counters()
        return {"nedge": list(self.nedge), "totals": [list(t) for t in self.totals],
                "examples": [[self.examples[s][kind][:self.nex[s][kind]].copy() for kind in range(3)]
                             for s in range(self.k)]}

    def results(self, summaries, found) -> list:
        """One ValidationResult per search from the edge ``summaries`` (in input order) and the tree-edge
        marks ``found`` (k, n) of every read of the edges."""
        out = []
        for item in self.items:
            if isinstance(item, Failure):
                out.append(ValidationResult(False, 0, [item]))
                continue
            s, root, failures = item
            failures = list(failures) + joined_edge_failures(
                [{"totals": x["totals"][s], "examples": x["examples"][s]} for x in summaries], self.n)
            f = check_tree_edges(self.levs[:, s], found[s], root)
            if f:
                failures.append(f)
            failures.sort(key=lambda x: RULES.index(x.rule))
            out.append(ValidationResult(not failures, int(sum(x["nedge"][s] for x in summaries)), failures, None))
        return out


def validate_many_cpu(edges, searches, n_vertices=None, chunk_edges=HOST_EDGE_ROWS) -> list:
    """Validate several searches over one read of ``edges`` (module docstring).

    Parameters
    ----------
    edges : array-like
        int (M, 2) input tuples, sliceable by rows.
    searches : list of (int, array-like)
        ``(root, parent)`` per search, parents as :func:`dbfs.validate.validate` takes them.
    n_vertices : int, optional
        Defaults to the first parent's length.
    chunk_edges : int
        Input rows read per chunk.

    Returns
    -------
    list of ValidationResult
        One per search, in order, ``levels`` None.
    """
    if not searches:
        return []
    n = int(n_vertices) if n_vertices is not None else int(np.shape(searches[0][1])[0])
    st = SearchTable(n, len(searches))
    for root, parent in searches:
        st.fold(root, parent)
    m = int(edges.shape[0])
    step = max(1, int(chunk_edges))
    for a in range(0, m if st.k else 0, step):
        chunk = np.ascontiguousarray(np.asarray(edges[a:min(a + step, m)]))
        if chunk.ndim != 2 or chunk.shape[1] != 2:
            raise ValueError(f"edges must have shape (M, 2); got a chunk of shape {chunk.shape}")
        st.chunk(chunk)
    summary = st.summary()
    return st.results([summary], st.found)

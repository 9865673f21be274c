"""Graph500 validation of one BFS result against the INPUT edge list, on the CPU.

Contract
--------
``validate(edges, root, parent, n_vertices=None, chunk_edges=HOST_EDGE_ROWS)
-> ValidationResult(ok, nedge, failures, levels)``: ``ok`` iff every rule
below holds; ``failures`` holds one :class:`Failure` per broken rule, in
``RULES`` order, with its count and at most ``MAX_EXAMPLES`` example ids.
This module also defines the result types and rule names that the GPU
(:mod:`dbfs.validate.gpu`) and Dask (:mod:`dbfs.validate.dask`) validators
return, and the Numba passes the Dask validator runs per task.

Independent of what it checks: it imports nothing from :mod:`dbfs.bfs` and
never looks at a CSR; it reads the Graph500 edge list (int (M, 2), self-loops
and duplicates allowed) in row chunks of ``chunk_edges`` tuples, so ``edges``
may be a NumPy array or anything sliceable by rows (a zarr or Dask array).

Encodings: ``parent`` is int, one entry per vertex, ``parent[root] == root``,
-1 for unreached. ``n_vertices`` defaults to ``len(parent)``.
``levels`` (int64, -1 unreached) is derived by following parent pointers;
vertices whose chain is broken get -2 and are left out of the edge rules
(they are already reported).

Rules (Graph500 specification, section 8 "Validation"; reference code 3.0.1
``validate.c``), one function each, in this order; if an earlier rule makes
later ones meaningless (bad ids, bad root) validation stops there:

- ``length``: ``len(parent) == n_vertices``.
- ``range``: every parent is -1 or a vertex id in ``[0, n)``.
- ``root``: ``0 <= root < n`` and ``parent[root] == root``.
- ``cycle``: following parents from a reached vertex reaches the root (no
  cycle, no self-parent other than the root).
- ``parent-unreached``: a reached vertex's parent is itself reached.
- ``edge-range``: every input endpoint is in ``[0, n)``.
- ``edge-span``: no input edge joins a reached and an unreached vertex, so
  the tree spans the root's whole component (rule 4, second half).
- ``level-diff``: the endpoints of every input edge differ in level by at
  most one (rule 4), which also makes tree edges differ by exactly one
  (rule 3: a tree edge differs by one by construction of the levels).
- ``tree-edge``: every reached vertex but the root has its parent edge
  ``{v, parent[v]}`` among the input tuples (rules 2 and 5).

``nedge`` (3.0.1 rule, for TEPS): the number of input tuples that are not
self-loops and have both endpoints reached; duplicates count once per tuple.

Method: levels in parallel rounds (each unresolved vertex whose parent has a
level takes it plus one; a valid tree of depth D resolves in about D rounds
of independent reads, where one walk up the chains chases one pointer at a
time), then one iterative walk up the chains of whatever the rounds left
(cycles and broken chains, which get their statuses there); the three edge rules, ``nedge`` and the tree-edge marks in one
streaming pass over the edge list. Per-chunk passes are Numba kernels that
only count; a failing chunk is re-scanned serially to collect up to
``MAX_EXAMPLES`` offending vertices.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numba import njit, prange

from dbfs.arrays import DEFAULT_ROWS

__all__ = ["Failure", "ValidationResult", "validate", "RULES", "MAX_EXAMPLES", "HOST_EDGE_ROWS",
           "check_length", "check_range", "check_root", "check_cycle", "check_parent_unreached", "check_chains",
           "check_edges", "check_tree_edges"]

RULES = ("length", "range", "root", "cycle", "parent-unreached", "edge-range", "edge-span",
         "level-diff", "tree-edge")

#: input edge rows one host pass of the validation reads at a time (an edge list's block on the host)
HOST_EDGE_ROWS = DEFAULT_ROWS
MAX_EXAMPLES = 16


@dataclass
class Failure:
    """One broken rule.

    Attributes
    ----------
    rule : str
        Its name, one of ``RULES``.
    message : str
        What is wrong, starting with the count for counted rules.
    vertices : numpy.ndarray
        int64, at most ``MAX_EXAMPLES`` example vertex ids (for edge rules the
        endpoints ``u0, v0, u1, v1, ...`` of the first offending tuples).
    count : int
        How many vertices (vertex rules) or tuples (edge rules) break it.
    """

    rule: str
    message: str
    vertices: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    count: int = 0


@dataclass
class ValidationResult:
    """The outcome of validating one search.

    Attributes
    ----------
    ok : bool
        True iff no rule failed.
    nedge : int
        Input tuples that are not self-loops with both endpoints reached (0
        when validation stopped at ``length``, ``range`` or ``root``).
    failures : list of Failure
        In ``RULES`` order.
    levels : numpy.ndarray or None
        int64 per vertex: level, -1 unreached, -2 broken chain; None where the
        validator does not gather it (Dask, or ``levels=False`` on the GPU).
    """

    ok: bool
    nedge: int
    failures: list = field(default_factory=list)
    levels: np.ndarray | None = None

    @property
    def rules_failed(self) -> list:
        """The names of the failed rules, in ``RULES`` order."""
        return [f.rule for f in self.failures]

    def summary(self) -> str:
        """One line: ``valid (nedge N)`` or ``rule: message; ...``."""
        if self.ok:
            return f"valid (nedge {self.nedge})"
        return "; ".join(f"{f.rule}: {f.message}" for f in self.failures)


def _fail(rule, message, vertices, count=None):
    v = np.asarray(vertices, dtype=np.int64).ravel()
    return Failure(rule, message, v[:MAX_EXAMPLES], int(v.size if count is None else count))


# ------------------------------------------------------------ vertex rules
def check_length(parent, n):
    """Rule ``length``: ``parent`` has one entry per vertex.

    Parameters
    ----------
    parent : numpy.ndarray
        int64 parent array.
    n : int
        Number of vertices.

    Returns
    -------
    Failure or None
    """
    if parent.shape[0] != n:
        return _fail("length", f"parent has {parent.shape[0]} entries, graph has {n} vertices", [], 1)
    return None


def check_range(parent, n):
    """Rule ``range``: every parent is -1 or a vertex id in ``[0, n)``.

    Parameters
    ----------
    parent : numpy.ndarray
        int64 parent array.
    n : int
        Number of vertices.

    Returns
    -------
    Failure or None
        Examples are the smallest offending vertex ids.
    """
    if _out_of_range(parent, n) == 0:            # a count over the threads; the examples only for a failure
        return None
    bad = np.flatnonzero((parent < -1) | (parent >= n))
    return _fail("range", f"{bad.size} parent value(s) are neither -1 nor a vertex id in [0, {n})", bad)


@njit(parallel=True, nogil=True, cache=True)
def _out_of_range(parent, n):
    cnt = 0
    for v in prange(parent.shape[0]):
        if parent[v] < -1 or parent[v] >= n:
            cnt += 1
    return cnt


def check_root(parent, root, n):
    """Rule ``root``: the root is a vertex id and its own parent.

    Parameters
    ----------
    parent : numpy.ndarray
        int64 parent array (already checked by ``length`` and ``range``).
    root : int
        The search key.
    n : int
        Number of vertices.

    Returns
    -------
    Failure or None
    """
    if not 0 <= root < n:
        return _fail("root", f"root {root} is not a vertex id in [0, {n})", [], 1)
    if parent[root] != root:
        return _fail("root", f"parent[root] is {int(parent[root])}, not the root {root}", [root])
    return None


#: level of a vertex not resolved yet, and of one on the chain walk's stack
UNSET, ONSTACK = -3, -4
#: level rounds before the chain walk takes over (a valid Kronecker tree needs about its depth, 6-12)
MAX_ROUNDS = 64


@njit(parallel=True, nogil=True, cache=True)
def _level_init(parent, root, lev):
    """``lev`` = -1 where the parent is -1 (unreached), 0 at the root, UNSET elsewhere."""
    for v in prange(parent.shape[0]):
        lev[v] = -1 if parent[v] < 0 else UNSET
    lev[root] = 0


@njit(parallel=True, nogil=True, cache=True)
def _level_round(parent, lev):
    """One round: every UNSET vertex whose parent has a level takes it plus one. Returns (vertices set,
    vertices still UNSET). A level is written once, from UNSET to its final value, so a read racing with
    that write sees one or the other: the result does not depend on the threads' order."""
    done = 0
    left = 0
    for v in prange(parent.shape[0]):
        if lev[v] == UNSET:
            d = lev[parent[v]]
            if d >= 0:
                lev[v] = d + 1
                done += 1
            else:
                left += 1
    return done, left


@njit(nogil=True, cache=True)
def _chain_walk(parent, lev, status):
    """The UNSET vertices of ``lev`` by following their parent pointers: levels, or -2 with a status
    (1 on a cycle, 2 parent unreached, 3 descends from 1 or 2). Which vertex of a broken chain gets which
    status does not depend on the order the chains are walked in."""
    n = parent.shape[0]
    stack = np.empty(n, np.int64)
    for v in range(n):
        if lev[v] != UNSET:
            continue
        sp = 0
        x = v
        while lev[x] == UNSET:
            lev[x] = ONSTACK
            stack[sp] = x
            sp += 1
            x = parent[x]
        top = lev[x]
        if top >= 0:
            d = top
            while sp > 0:
                sp -= 1
                d += 1
                lev[stack[sp]] = d
            continue
        # broken chain: stack[sp-1] is the vertex whose parent x is bad
        if top == ONSTACK:
            # x is on the current stack: the cycle is stack[k:] from x's slot
            k = sp - 1
            while stack[k] != x:
                k -= 1
            for i in range(k, sp):
                status[stack[i]] = 1
            for i in range(sp):
                lev[stack[i]] = -2
                if status[stack[i]] == 0:
                    status[stack[i]] = 3
        else:
            # x unreached (-1) or already broken (-2)
            last = stack[sp - 1]
            status[last] = 2 if top == -1 else 3
            for i in range(sp):
                lev[stack[i]] = -2
                if status[stack[i]] == 0:
                    status[stack[i]] = 3


def _levels_from_chains(parent, root):
    """Levels by following parent pointers, with status per vertex:
    0 ok / unreached, 1 on a cycle, 2 parent unreached, 3 descends from 1 or 2. Parallel rounds first,
    then the chain walk for what they leave (nothing, for a valid search)."""
    parent = np.ascontiguousarray(parent)
    n = parent.shape[0]
    lev = np.empty(n, np.int64)
    status = np.zeros(n, np.int8)
    _level_init(parent, root, lev)
    left = 1
    for _ in range(MAX_ROUNDS):
        done, left = _level_round(parent, lev)
        if done == 0 or left == 0:
            break
    if left:
        _chain_walk(parent, lev, status)
    return lev, status


def check_cycle(status):
    """Rule ``cycle``: no reached vertex lies on a parent cycle that misses the root.

    Parameters
    ----------
    status : numpy.ndarray
        int8 chain status per vertex from ``_levels_from_chains`` (1: on a cycle).

    Returns
    -------
    Failure or None
    """
    cyc = np.flatnonzero(status == 1)
    if cyc.size:
        return _fail("cycle", f"{cyc.size} vertex(es) lie on a parent cycle that misses the root", cyc)
    return None


def check_parent_unreached(status):
    """Rule ``parent-unreached``: no reached vertex has an unreached parent.

    Parameters
    ----------
    status : numpy.ndarray
        int8 chain status per vertex from ``_levels_from_chains`` (2: parent is -1).

    Returns
    -------
    Failure or None
    """
    pun = np.flatnonzero(status == 2)
    if pun.size:
        return _fail("parent-unreached",
                     f"{pun.size} reached vertex(es) have an unreached parent (-1)", pun)
    return None


def check_chains(status):
    """The chain rules ``cycle`` and ``parent-unreached``.

    Parameters
    ----------
    status : numpy.ndarray
        int8 chain status per vertex from ``_levels_from_chains``.

    Returns
    -------
    list of Failure
        Zero, one or two failures, in ``RULES`` order.
    """
    return [f for f in (check_cycle(status), check_parent_unreached(status)) if f]


# -------------------------------------------------------------- edge rules
@njit(parallel=True, nogil=True, cache=True)
def _edge_pass(chunk, parent, lev, has_edge):
    """Count per-rule violations over one chunk; mark tree edges; count nedge.

    Returns (nedge, n_edge_range, n_edge_span, n_level_diff)."""
    m = chunk.shape[0]
    n = parent.shape[0]
    nedge = 0
    n_range = 0
    n_span = 0
    n_diff = 0
    for k in prange(m):
        u = chunk[k, 0]
        v = chunk[k, 1]
        if u < 0 or v < 0 or u >= n or v >= n:
            n_range += 1
            continue
        lu = lev[u]
        lv = lev[v]
        if lu == -2 or lv == -2:
            continue
        if lu >= 0 and lv >= 0:
            if u != v:
                nedge += 1
            d = lu - lv
            if d > 1 or d < -1:
                n_diff += 1
            if u != v:
                if parent[v] == u:
                    has_edge[v] = 1
                if parent[u] == v:
                    has_edge[u] = 1
        elif lu >= 0 or lv >= 0:
            n_span += 1
    return nedge, n_range, n_span, n_diff


@njit(nogil=True, cache=True)
def _edge_examples(chunk, lev, kind, out, nout):
    """Collect offending endpoints of one rule (kind 0 range, 1 span, 2 level)."""
    n = lev.shape[0]
    for k in range(chunk.shape[0]):
        if nout >= out.shape[0] - 1:
            break
        u = chunk[k, 0]
        v = chunk[k, 1]
        bad_range = u < 0 or v < 0 or u >= n or v >= n
        if kind == 0:
            if bad_range:
                out[nout] = u
                out[nout + 1] = v
                nout += 2
            continue
        if bad_range:
            continue
        lu = lev[u]
        lv = lev[v]
        if lu == -2 or lv == -2:
            continue
        if kind == 1 and (lu >= 0) != (lv >= 0):
            out[nout] = u
            out[nout + 1] = v
            nout += 2
        elif kind == 2 and lu >= 0 and lv >= 0 and (lu - lv > 1 or lv - lu > 1):
            out[nout] = u
            out[nout + 1] = v
            nout += 2
    return nout


@njit(parallel=True, nogil=True, cache=True)
def _missing_tree_edges(lev, has_edge, root):
    n = lev.shape[0]
    cnt = 0
    for v in prange(n):
        if lev[v] > 0 and has_edge[v] == 0 and v != root:
            cnt += 1
    return cnt


#: (rule, message after the count) of the three streamed edge rules, in pass order
_EDGE_RULES = (
    ("edge-range", "input tuple(s) have an endpoint outside [0, {n})"),
    ("edge-span", "input edge(s) join a reached and an unreached vertex (the tree misses part of the root's component)"),
    ("level-diff", "input edge(s) join vertices whose levels differ by more than one"),
)


def check_edges(edges, parent, lev, n, chunk_edges):
    """Rules ``edge-range``, ``edge-span``, ``level-diff`` in one pass over the input edges.

    Parameters
    ----------
    edges : array-like
        int (M, 2) input tuples, sliceable by rows.
    parent : numpy.ndarray
        int64 parent array.
    lev : numpy.ndarray
        int64 levels from ``_levels_from_chains`` (-1 unreached, -2 broken).
    n : int
        Number of vertices.
    chunk_edges : int
        Rows per chunk.

    Returns
    -------
    nedge : int
        The 3.0.1 TEPS edge count.
    failures : list of Failure
    has_edge : numpy.ndarray
        uint8 per vertex: 1 where a tuple ``{v, parent[v]}`` was seen.
    """
    m = int(edges.shape[0])
    has_edge = np.zeros(n, np.uint8)
    totals = [0, 0, 0]
    examples = [np.empty(2 * MAX_EXAMPLES + 2, np.int64) for _ in range(3)]
    nex = [0, 0, 0]
    nedge = 0
    step = max(1, int(chunk_edges))
    for s in range(0, m, step):
        chunk = np.ascontiguousarray(np.asarray(edges[s:min(s + step, m)]), dtype=np.int64)
        if chunk.ndim != 2 or chunk.shape[1] != 2:
            raise ValueError(f"edges must have shape (M, 2); got a chunk of shape {chunk.shape}")
        ne, *counts = _edge_pass(chunk, parent, lev, has_edge)
        nedge += int(ne)
        for kind, c in enumerate(counts):
            if c:
                totals[kind] += int(c)
                nex[kind] = _edge_examples(chunk, lev, kind, examples[kind], nex[kind])
    return nedge, edge_failures(totals, [examples[k][:nex[k]] for k in range(3)], n), has_edge


def edge_failures(totals, examples, n) -> list:
    """The Failures of the three streamed edge rules (in pass order) from their counts and examples: one
    per rule whose count is not zero (every validator reports them through this)."""
    return [_fail(rule, f"{totals[kind]} " + text.format(n=n), examples[kind], totals[kind])
            for kind, (rule, text) in enumerate(_EDGE_RULES) if totals[kind]]


def joined_edge_failures(parts, n) -> list:
    """:func:`edge_failures` of several reads of the edges (``parts``: dicts with ``totals`` and ``examples``
    per rule, in input order): counts summed, examples concatenated."""
    return edge_failures([sum(p["totals"][k] for p in parts) for k in range(3)],
                         [np.concatenate([p["examples"][k] for p in parts]) for k in range(3)], n)


def check_tree_edges(lev, has_edge, root):
    """Rule ``tree-edge``: every reached vertex but the root has its parent edge in the input.

    Parameters
    ----------
    lev : numpy.ndarray
        int64 levels.
    has_edge : numpy.ndarray
        uint8 marks from :func:`check_edges`.
    root : int
        The search key.

    Returns
    -------
    Failure or None
    """
    cnt = int(_missing_tree_edges(lev, has_edge, root))
    if cnt:
        bad = np.flatnonzero((lev > 0) & (has_edge == 0))
        return _fail("tree-edge",
                     f"{cnt} reached vertex(es) have a parent that is not an input neighbour", bad, cnt)
    return None


# ----------------------------------------------------------------- driver
def validate(edges, root, parent, n_vertices=None, chunk_edges=HOST_EDGE_ROWS) -> ValidationResult:
    """Check one search against the input edge list (rules in the module docstring).

    Parameters
    ----------
    edges : array-like
        int (M, 2) Graph500 input tuples (NumPy, zarr, Dask: anything sliceable by rows).
    root : int
        The search key.
    parent : array-like
        int parent per vertex, ``parent[root] == root``, -1 unreached.
    n_vertices : int, optional
        Number of vertices; defaults to ``len(parent)``.
    chunk_edges : int
        Input rows read per chunk.

    Returns
    -------
    ValidationResult
        With ``levels`` (int64, -1 unreached, -2 broken chain) unless
        validation stopped at ``length``, ``range`` or ``root``.
    """
    parent = np.ascontiguousarray(np.asarray(parent), dtype=np.int64)
    n = int(n_vertices) if n_vertices is not None else parent.shape[0]
    root = int(root)
    # length, range and root each stop validation: later rules would index out of bounds
    f = check_length(parent, n) or check_range(parent, n) or check_root(parent, root, n)
    if f:
        return ValidationResult(False, 0, [f])
    lev, status = _levels_from_chains(parent, root)
    failures = check_chains(status)
    nedge, edge_failures, has_edge = check_edges(edges, parent, lev, n, chunk_edges)
    failures += edge_failures
    f = check_tree_edges(lev, has_edge, root)
    if f:
        failures.append(f)
    failures.sort(key=lambda x: RULES.index(x.rule))
    return ValidationResult(not failures, int(nedge), failures, lev)

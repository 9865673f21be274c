"""Property test: the Graph500 validator accepts a tree iff it is a BFS tree.

Contract
--------
For random small graphs (Graph500 input tuples, self-loops and duplicates
allowed, at most 64 vertices) and a root with at least one non-self-loop
edge, :func:`dbfs.validate.validate`

- accepts every BFS parent array built by the test's own BFS, with ``nedge``
  the number of non-self-loop tuples whose endpoints are both reached and
  ``levels`` the BFS distances;
- after one to three random mutations of the parent array, the root argument,
  ``n_vertices`` or the edge list, returns ``ok`` exactly when an independent
  oracle says the mutated parent array is still a BFS tree of the mutated
  input (some mutations give another valid tree: then it must accept).

Method
------
Two oracles, written here in plain Python and independent of :mod:`dbfs`:

- ``is_bfs_tree`` (the definition): ``parent[root] == root``; a vertex is
  reached (parent not -1) iff it is in the root's component; every reached
  vertex but the root has an input neighbour as parent whose BFS distance is
  one less than its own (distances by a fresh BFS over the mutated input).
- ``follows_rules`` (the Graph500 rules, checked one by one): length, parent
  range, root, parent chains reach the root (no cycle, no unreached parent),
  edge endpoints in range, no input edge joins a reached and an unreached
  vertex, no input edge joins levels that differ by more than one (levels from
  the mutated parent chains), every tree edge is an input tuple.

The two are equivalent (tree levels are at least the distances because tree
edges are input edges, and at most because input edges span at most one
level), and each example asserts that they agree before comparing the
validator's verdict with them. Mutations are drawn with Hypothesis, so a
failure shrinks to a small graph and a short list of named mutations.

Encoding: ``parent`` int per vertex, ``parent[root] == root``, -1 unreached;
edges int (M, 2); the validator gets ``n_vertices`` either explicitly or as
``None`` (then ``len(parent)``).

Reference: Graph500 specification 3.0.1, section 8 "Validation" (reference
code ``validate.c``); issue #22 (property test of the validator).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from dbfs.validate import RULES, validate
from dbfs.validate.batch_cpu import validate_many_cpu

MAX_N = 64
#: chunk sizes for the validator's streaming edge pass (None: its default)
CHUNKS = (None, 1, 2, 3, 7)

_COMMON = dict(deadline=None, database=None, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
FAST = settings(max_examples=100, derandomize=True, **_COMMON)
SLOW = settings(max_examples=1000, **_COMMON)


# ------------------------------------------------------------------ oracles
def neighbours(edges, n):
    """Neighbour sets of the input tuples with both ends in ``[0, n)``, self-loops left out."""
    adj = [set() for _ in range(n)]
    for u, v in edges:
        if u != v and 0 <= u < n and 0 <= v < n:
            adj[u].add(v)
            adj[v].add(u)
    return adj


def bfs_distances(adj, root):
    """Hop distance from ``root`` per vertex, -1 where unreachable (plain FIFO BFS)."""
    dist = [-1] * len(adj)
    dist[root] = 0
    queue = deque([root])
    while queue:
        u = queue.popleft()
        for w in adj[u]:
            if dist[w] < 0:
                dist[w] = dist[u] + 1
                queue.append(w)
    return dist


def is_bfs_tree(edges, root, parent, n):
    """The definition: ``parent`` is a shortest-path tree spanning the root's component."""
    if len(parent) != n or not 0 <= root < n or parent[root] != root:
        return False
    if any(not (0 <= u < n and 0 <= v < n) for u, v in edges):
        return False
    adj = neighbours(edges, n)
    dist = bfs_distances(adj, root)
    for v in range(n):
        p = parent[v]
        if dist[v] < 0:
            if p != -1:
                return False
        elif v != root and not (p in adj[v] and dist[p] == dist[v] - 1):
            return False
    return True


def chain_levels(parent, root):
    """Levels by walking each reached vertex's parent chain; None if a chain misses the root."""
    n = len(parent)
    lev = [-1] * n
    for v in range(n):
        if parent[v] == -1:
            continue
        x, steps, seen = v, 0, set()
        while x != root:
            if x in seen or parent[x] == -1:
                return None
            seen.add(x)
            x, steps = parent[x], steps + 1
        lev[v] = steps
    return lev


def follows_rules(edges, root, parent, n):
    """The Graph500 validation rules, one after the other."""
    if len(parent) != n or any(p < -1 or p >= n for p in parent):
        return False
    if not 0 <= root < n or parent[root] != root:
        return False
    lev = chain_levels(parent, root)
    if lev is None:
        return False
    tuples = set()
    for u, v in edges:
        if not (0 <= u < n and 0 <= v < n):
            return False
        if (lev[u] >= 0) != (lev[v] >= 0):
            return False
        if lev[u] >= 0 and abs(lev[u] - lev[v]) > 1:
            return False
        tuples.add(frozenset((u, v)))
    return all(frozenset((v, parent[v])) in tuples for v in range(n) if lev[v] > 0)


# ----------------------------------------------------------------- the case
@dataclass
class Case:
    """A graph, its BFS tree, and the mutated arguments given to the validator."""

    n: int
    root: int
    edges: list
    parent: list
    dist: list
    m_edges: list | None = None
    m_parent: list | None = None
    m_root: int | None = None
    n_vertices: int | None = None
    mutations: list = field(default_factory=list)
    parent_dtype: str = "int64"
    edge_dtype: str = "int64"
    chunk_edges: int | None = None


def _pick(draw, seq):
    seq = list(seq)
    return draw(st.sampled_from(seq)) if seq else None


def _tuples(n):
    """Input tuples: ``(u, w, near)`` gives ``(u, w)``, or ``(u, u + w % 7 - 3)`` clipped when ``near``
    (near tuples make long paths, so deep trees)."""
    def make(t):
        u, w, near = t
        return (u, min(n - 1, max(0, u + w % 7 - 3))) if near else (u, w)
    ids = st.integers(0, n - 1)
    return st.lists(st.tuples(ids, ids, st.booleans()).map(make), max_size=3 * n)


@st.composite
def graphs(draw):
    """A random input with a root that has a non-self-loop edge, and a BFS tree of it.

    The input is a path of random length, random tuples and one guaranteed
    non-self-loop tuple ``(a, b)``; the root is any endpoint of a
    non-self-loop tuple, and each reached vertex's parent any neighbour one
    level up (so many different valid trees are drawn, not only one).
    """
    n = draw(st.integers(2, MAX_N))
    a = draw(st.integers(0, n - 1))
    b = (a + draw(st.integers(1, n - 1))) % n
    s, k = draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1))
    edges = [(v, v + 1) for v in range(s, min(s + k, n - 1))]  # a path: deep trees
    edges += draw(_tuples(n))
    edges = draw(st.permutations(edges)) if draw(st.booleans()) else edges
    edges.insert(draw(st.integers(0, len(edges))), (a, b))
    root = _pick(draw, sorted({x for e in edges if e[0] != e[1] for x in e}))
    adj = neighbours(edges, n)
    dist = bfs_distances(adj, root)
    parent = [-1] * n
    parent[root] = root
    for v in range(n):
        if dist[v] > 0:
            parent[v] = _pick(draw, sorted(w for w in adj[v] if dist[w] == dist[v] - 1))
    return Case(n, root, edges, parent, dist)


# ---------------------------------------------------------------- mutations
def _reached_nonroot(c):
    """Reached non-root vertices of the original tree still present in the (maybe shortened) parent array."""
    return [v for v in range(min(c.n, len(c.m_parent))) if c.dist[v] > 0]


def _set_parent_from(draw, c, pool_of):
    """Set ``parent[v]`` of a reached non-root ``v`` to a vertex of ``pool_of(v)``."""
    v = _pick(draw, _reached_nonroot(c))
    if v is None:
        return "skipped"
    w = _pick(draw, sorted(pool_of(v)))
    if w is None:
        return "skipped"
    c.m_parent[v] = w
    return f"parent[{v}]={w}"


def mut_parent_non_neighbour(draw, c):
    adj = neighbours(c.edges, c.n)
    return _set_parent_from(draw, c, lambda v: set(range(c.n)) - adj[v])


def mut_parent_two_up(draw, c):
    return _set_parent_from(draw, c, lambda v: {w for w in range(c.n) if c.dist[w] == c.dist[v] - 2 >= 0})


def _neighbour_at(draw, c, delta):
    adj = neighbours(c.edges, c.n)
    return _set_parent_from(draw, c, lambda v: {w for w in adj[v] if c.dist[w] == c.dist[v] + delta})


def mut_parent_same_level(draw, c):
    return _neighbour_at(draw, c, 0)


def mut_parent_level_down(draw, c):
    return _neighbour_at(draw, c, 1)


def mut_parent_other_valid(draw, c):
    return _neighbour_at(draw, c, -1)


def mut_parent_unreach(draw, c):
    v = _pick(draw, _reached_nonroot(c))
    if v is None:
        return "skipped"
    c.m_parent[v] = -1
    return f"parent[{v}]=-1"


def mut_parent_reach_unreached(draw, c):
    v = _pick(draw, [v for v in range(min(c.n, len(c.m_parent))) if c.dist[v] < 0])
    if v is None:
        return "skipped"
    c.m_parent[v] = w = draw(st.integers(0, c.n - 1))
    return f"parent[{v}]={w}"


def mut_parent_cycle(draw, c):
    """Point a vertex at one of its descendants (itself included) in the current tree."""
    v = _pick(draw, [x for x in range(len(c.m_parent)) if x != c.root])
    if v is None:
        return "skipped"
    below = []
    for x in range(len(c.m_parent)):
        y, hops = x, 0
        while 0 <= y < len(c.m_parent) and y != v and y != c.root and hops <= len(c.m_parent):
            y, hops = c.m_parent[y], hops + 1
        if y == v:
            below.append(x)
    c.m_parent[v] = w = _pick(draw, below)
    return f"parent[{v}]={w} (cycle)"


def _out_of_range(draw, c):
    small = [c.n, c.n + 1, 2 * c.n + 5, -2, -c.n - 3, 2**31 - 1, -2**31]
    big = [2**40, -2**40] if c.parent_dtype == "int64" else []
    return _pick(draw, small + big)


def mut_parent_root(draw, c):
    w = draw(st.one_of(st.integers(-1, c.n - 2).map(lambda x: x + (x >= c.root)), st.just(None)))
    if c.root >= len(c.m_parent):
        return "skipped"
    c.m_parent[c.root] = w = _out_of_range(draw, c) if w is None else w
    return f"parent[root]={w}"


def mut_parent_out_of_range(draw, c):
    v = draw(st.integers(0, len(c.m_parent) - 1))
    c.m_parent[v] = w = _out_of_range(draw, c)
    return f"parent[{v}]={w}"


def mut_parent_any(draw, c):
    v = draw(st.integers(0, len(c.m_parent) - 1))
    c.m_parent[v] = w = draw(st.integers(-1, c.n - 1))
    return f"parent[{v}]={w}"


def mut_parent_swap(draw, c):
    v = draw(st.integers(0, len(c.m_parent) - 1))
    w = draw(st.integers(0, len(c.m_parent) - 1))
    c.m_parent[v], c.m_parent[w] = c.m_parent[w], c.m_parent[v]
    return f"swap parent[{v}], parent[{w}]"


def mut_parent_length(draw, c):
    k = draw(st.integers(1, 3))
    if draw(st.booleans()):
        extra = [draw(st.integers(-1, c.n + k - 1)) for _ in range(k)]
        c.m_parent.extend(extra)
        return f"append {extra}"
    k = min(k, len(c.m_parent) - 1)
    del c.m_parent[len(c.m_parent) - k:]
    return f"drop last {k}"


def mut_root_argument(draw, c):
    other = st.integers(0, c.n - 2).map(lambda x: x + (x >= c.root))
    c.m_root = w = draw(st.sampled_from([-1, c.n, c.n + 7]) | other)
    return f"root={w}"


def _tree_tuple_indices(draw, c):
    v = _pick(draw, [x for x in _reached_nonroot(c) if 0 <= c.m_parent[x] < c.n])
    if v is None:
        return None, []
    p = c.m_parent[v]
    return (v, p), [i for i, e in enumerate(c.m_edges) if set(e) == {v, p}]


def mut_edge_drop_tree_all(draw, c):
    pair, idx = _tree_tuple_indices(draw, c)
    for i in reversed(idx):
        del c.m_edges[i]
    return f"drop all {len(idx)} tuple(s) {pair}"


def mut_edge_drop_tree_one(draw, c):
    pair, idx = _tree_tuple_indices(draw, c)
    if not idx:
        return "skipped"
    del c.m_edges[_pick(draw, idx)]
    return f"drop one of {len(idx)} tuple(s) {pair}"


def mut_edge_drop_any(draw, c):
    if not c.m_edges:
        return "skipped"
    e = c.m_edges.pop(draw(st.integers(0, len(c.m_edges) - 1)))
    return f"drop {e}"


def _add(draw, c, pairs):
    e = _pick(draw, pairs)
    if e is None:
        return "skipped"
    if draw(st.booleans()):
        e = e[::-1]
    c.m_edges.insert(draw(st.integers(0, len(c.m_edges))), e)
    return f"add {e}"


def mut_edge_add_span2(draw, c):
    d = c.dist
    return _add(draw, c, [(u, w) for u in range(c.n) for w in range(u) if d[u] >= 0 and d[w] >= 0
                          and abs(d[u] - d[w]) >= 2])


def mut_edge_add_reached_unreached(draw, c):
    d = c.dist
    return _add(draw, c, [(u, w) for u in range(c.n) for w in range(c.n) if d[u] >= 0 > d[w]])


def mut_edge_add_any(draw, c):
    return _add(draw, c, [(draw(st.integers(0, c.n - 1)), draw(st.integers(0, c.n - 1)))])


def mut_edge_add_out_of_range(draw, c):
    u = draw(st.integers(0, c.n - 1))
    return _add(draw, c, [(u, draw(st.sampled_from([c.n, c.n + 1, -1, -5])))])


def mut_edge_flip(draw, c):
    if not c.m_edges:
        return "skipped"
    i = draw(st.integers(0, len(c.m_edges) - 1))
    c.m_edges[i] = c.m_edges[i][::-1]
    return f"flip {c.m_edges[i]}"


def mut_edge_duplicate(draw, c):
    if not c.m_edges:
        return "skipped"
    e = c.m_edges[draw(st.integers(0, len(c.m_edges) - 1))]
    c.m_edges.insert(draw(st.integers(0, len(c.m_edges))), e)
    return f"duplicate {e}"


def mut_edge_shuffle(draw, c):
    c.m_edges = draw(st.permutations(c.m_edges))
    return "shuffle"


PARENT_MUTATIONS = (mut_parent_non_neighbour, mut_parent_two_up, mut_parent_same_level, mut_parent_level_down,
                    mut_parent_other_valid, mut_parent_unreach, mut_parent_reach_unreached, mut_parent_cycle,
                    mut_parent_root, mut_parent_out_of_range, mut_parent_any, mut_parent_swap, mut_parent_length,
                    mut_root_argument)
EDGE_MUTATIONS = (mut_edge_drop_tree_all, mut_edge_drop_tree_one, mut_edge_drop_any, mut_edge_add_span2,
                  mut_edge_add_reached_unreached, mut_edge_add_any, mut_edge_add_out_of_range, mut_edge_flip,
                  mut_edge_duplicate, mut_edge_shuffle)


@st.composite
def mutated(draw):
    """A graph with its BFS tree, then one to three mutations and the validator's options."""
    c = draw(graphs())
    c.m_edges, c.m_parent, c.m_root = [tuple(e) for e in c.edges], list(c.parent), c.root
    c.parent_dtype = draw(st.sampled_from(["int64", "int32"]))
    c.edge_dtype = draw(st.sampled_from(["int64", "int32"]))
    c.chunk_edges = draw(st.sampled_from(CHUNKS))
    c.n_vertices = draw(st.sampled_from([None, c.n]))
    for mut in draw(st.lists(st.sampled_from(PARENT_MUTATIONS + EDGE_MUTATIONS), min_size=1, max_size=3)):
        c.mutations.append(f"{mut.__name__[4:]}: {mut(draw, c)}")
        event(f"mutation {mut.__name__[4:]}")
    return c


# ------------------------------------------------------------------- checks
def run_validator(edges, root, parent, n_vertices, c):
    e = np.asarray(edges, dtype=c.edge_dtype).reshape(-1, 2)
    p = np.asarray(parent, dtype=c.parent_dtype)
    kw = {} if c.chunk_edges is None else {"chunk_edges": c.chunk_edges}
    return validate(e, root, p, n_vertices=n_vertices, **kw)


def stopping_rule(root, parent, n):
    """The first of the rules that end validation (``length``, ``range``, ``root``) that fails, or None."""
    if len(parent) != n:
        return "length"
    if any(p < -1 or p >= n for p in parent):
        return "range"
    if not 0 <= root < n or parent[root] != root:
        return "root"
    return None


def assert_verdict(res, edges, root, parent, n):
    """The validator's verdict equals both oracles'; a valid result carries nedge and levels."""
    want = is_bfs_tree(edges, root, parent, n)
    assert follows_rules(edges, root, parent, n) == want, "the two oracles disagree (a bug in this test)"
    assert res.ok == want, f"validator says ok={res.ok}, oracle says {want}: {res.summary()}"
    stop = stopping_rule(root, parent, n)
    if stop:  # these rules end validation: nothing else is reported, nedge is 0
        assert res.rules_failed == [stop] and res.nedge == 0, res.summary()
    assert res.ok == (not res.failures)
    assert all(r in RULES for r in res.rules_failed)
    assert res.rules_failed == sorted(res.rules_failed, key=RULES.index)
    if want:
        reached = [p != -1 for p in parent]
        assert res.nedge == sum(1 for u, v in edges if u != v and reached[u] and reached[v])
        assert res.levels.tolist() == bfs_distances(neighbours(edges, n), root)
    return want


def assert_batch_same(edges, searches, n, c):
    """The batched CPU validator gives each search of a batch exactly :func:`validate`'s result."""
    e = np.asarray(edges, dtype=c.edge_dtype).reshape(-1, 2)
    kw = {} if c.chunk_edges is None else {"chunk_edges": c.chunk_edges}
    ss = [(r, np.asarray(p, dtype=c.parent_dtype)) for r, p in searches]
    for (r, p), got in zip(ss, validate_many_cpu(e, ss, n_vertices=n, **kw)):
        want = validate(e, r, p, n_vertices=n, **kw)
        assert (got.ok, got.nedge) == (want.ok, want.nedge), (got.summary(), want.summary())
        assert [(f.rule, f.count, f.message, f.vertices.tolist()) for f in got.failures] == \
            [(f.rule, f.count, f.message, f.vertices.tolist()) for f in want.failures]


def check_case(c):
    res = run_validator(c.edges, c.root, c.parent, c.n_vertices, c)
    assert assert_verdict(res, c.edges, c.root, c.parent, c.n), "the test's own BFS tree is invalid"
    n = c.n_vertices if c.n_vertices is not None else len(c.m_parent)
    res = run_validator(c.m_edges, c.m_root, c.m_parent, c.n_vertices, c)
    valid = assert_verdict(res, c.m_edges, c.m_root, c.m_parent, n)
    assert_batch_same(c.m_edges, [(c.m_root, c.m_parent), (c.root, c.parent), (c.m_root, c.m_parent)], n, c)
    event("tree depth >= 4" if max(c.dist) >= 4 else "tree depth < 4")
    event("mutated tree " + ("still valid" if valid else "invalid"))
    for rule in res.rules_failed:
        event(f"rule failed: {rule}")


@FAST
@given(mutated())
def test_validator_verdict_matches_oracle(c):
    check_case(c)


@pytest.mark.slow
@SLOW
@given(mutated())
def test_validator_verdict_matches_oracle_slow(c):
    check_case(c)


@st.composite
def _parent_arrays(draw):
    n = draw(st.integers(1, 48))
    parent = np.array(draw(st.lists(st.integers(-1, n - 1), min_size=n, max_size=n)), np.int64)
    root = draw(st.integers(0, n - 1))
    parent[root] = root
    return parent, root


def _walked(parent, root):
    """Levels and statuses by the chain walk alone (the validator's one-thread method before the rounds)."""
    from dbfs.validate.cpu import UNSET, _chain_walk

    lev = np.where(parent < 0, -1, UNSET).astype(np.int64)
    lev[root] = 0
    status = np.zeros(len(parent), np.int8)
    _chain_walk(parent, lev, status)
    return lev, status


@settings(max_examples=300, deadline=None)
@given(_parent_arrays())
def test_level_rounds_give_the_chain_walks_levels_and_statuses(case):
    """Any parent array (cycles, self-parents, unreached parents, chains into them): the parallel rounds
    plus the walk of what they leave give the walk's levels and statuses exactly."""
    from dbfs.validate.cpu import _levels_from_chains

    parent, root = case
    lev, status = _levels_from_chains(parent, root)
    ref_lev, ref_status = _walked(parent, root)
    assert lev.tolist() == ref_lev.tolist() and status.tolist() == ref_status.tolist()


def test_level_rounds_hand_a_chain_deeper_than_their_limit_to_the_walk():
    from dbfs.validate.cpu import MAX_ROUNDS, _levels_from_chains

    depth = 3 * MAX_ROUNDS
    ids = np.random.default_rng(5).permutation(depth + 3)  # a path 0 - 1 - ... in shuffled ids, then 3 more
    parent = np.empty(depth + 3, np.int64)
    parent[ids[0]] = ids[0]
    parent[ids[1:depth]] = ids[:depth - 1]
    a, b, c = ids[depth:]                                    # a cycle a <-> b, and c hanging off it
    parent[a], parent[b], parent[c] = b, a, a
    lev, status = _levels_from_chains(parent, int(ids[0]))
    assert lev[ids[:depth]].tolist() == list(range(depth))
    assert lev[[a, b, c]].tolist() == [-2, -2, -2] and status[[a, b, c]].tolist() == [1, 1, 3]
    ref_lev, ref_status = _walked(parent, int(ids[0]))
    assert lev.tolist() == ref_lev.tolist() and status.tolist() == ref_status.tolist()


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 600), st.integers(1, 4), st.integers(0, 2**32 - 1), st.integers(0, 3))
def test_deep_random_trees_rounds_and_chain_walk_agree(n, reach, seed, broken):
    """Random trees up to hundreds of levels deep (each vertex's parent among the ``reach`` vertices before
    it in a shuffled order), with ``broken`` vertices re-pointed to themselves or to -1: the validator's levels
    and statuses are the chain walk's alone (past the rounds' limit too)."""
    from dbfs.validate.cpu import _levels_from_chains

    rng = np.random.default_rng(seed)
    order = rng.permutation(n)
    parent = np.empty(n, np.int64)
    parent[order[0]] = order[0]
    for i in range(1, n):
        parent[order[i]] = order[max(0, i - int(rng.integers(1, reach + 1)))]
    for v in rng.choice(np.arange(n)[np.arange(n) != order[0]], size=min(broken, n - 1), replace=False):
        parent[v] = v if rng.integers(2) else -1                      # a self-cycle, or an unreached parent
    lev, status = _levels_from_chains(parent, int(order[0]))
    ref_lev, ref_status = _walked(parent, int(order[0]))
    assert lev.tolist() == ref_lev.tolist() and status.tolist() == ref_status.tolist()

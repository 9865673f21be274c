"""Direction policies for the direction-optimizing BFS (pure Python).

Contract: a policy decides, once per level, whether the next level is
expanded top-down ('td': scan the out-edges of the frontier queue) or
bottom-up ('bu': every unvisited vertex scans its edges for a parent in the
frontier bitmap). It sees only counts, never arrays, so the same policy
drives the single-process CPU kernels, the GPU kernels and a distributed
backend (which feeds it global counts after an all-reduce):

- ``n_f``: vertices in the frontier about to be expanded,
- ``m_f``: edges incident on that frontier (sum of their degrees),
- ``m_u``: edges incident on still-unvisited vertices,
- ``n``:   vertices in the graph.

Usage, once per search::

    pol = make_policy("beamer", alpha=15, beta=18)
    pol.start(n)
    while n_f:
        d = pol.next(n_f, m_f, m_u)      # 'td' or 'bu'
        ... expand one level in direction d ...

A caller for whom ``m_f`` costs a pass over the new frontier may first ask
``pol.m_f_cap(n_f, m_u)`` (after the level, before the next ``next``): None
means the next call does not read ``m_f`` at all; a number C means it only
compares ``m_f`` with C, so a sum may stop as soon as it exceeds C (pass the
exact ``m_f`` when it is <= C, any value > C otherwise; ``inf``: exact). The
decisions are then exactly those made with exact sums.

Encoding: directions are the strings ``TD = 'td'`` and ``BU = 'bu'``;
counts are Python ints (``m_f`` may be any value above the cap).

Method: the policies
--------------------
``beamer`` (default), Beamer, Asanovic and Patterson, "Direction-Optimizing
Breadth-First Search", SC'12; parameters as in the GAP Benchmark Suite:

- top-down -> bottom-up when ``m_f > m_u / alpha``   (alpha = 15)
- bottom-up -> top-down when ``n_f < n / beta`` and the frontier shrank
  (``n_f < previous n_f``)                             (beta = 18)
- as in GAP, the level at which bottom-up -> top-down fires runs top-down
  without an edge check (GAP sets ``scout_count = 1`` there).
- ``unexplored="gap"`` (default) uses GAP's ``edges_to_check`` in place of
  ``m_u``: it starts at the graph's directed edge count and drops by ``m_f``
  on top-down levels only, so after the bottom-up phase it stays large and
  the small tail levels stay top-down. ``unexplored="exact"`` uses the
  ``m_u`` it is fed (Beamer's definition); near the end of a search that is
  tiny and the policy flips back to bottom-up for the last levels, which
  costs a pass over the unvisited vertices for little gain.
- ``tail="cost"`` (default) keeps bottom-up when beta's rule fires but the
  unvisited vertices have fewer edges than the frontier (``m_u < m_f``, with
  the EXACT ``m_u``): bottom-up then reads at most ``m_u`` edges, top-down
  exactly ``m_f``. On Kronecker graphs the level after the big bottom-up
  levels is such a level: top-down there reads every frontier row at
  random, bottom-up takes a pass over the visited words. ``tail="gap"`` is
  GAP's rule unchanged.

``change_state``, the growing/shrinking-frontier rule of the hybrid BFS of
Yasui, Fujisawa and Goto ("NUMA-optimized parallel breadth-first search on
multicore single-node system", IEEE BigData 2013) and Ueno and Suzumura's
Graph500 code (``growing_or_shrinking``), which looks at frontier *sizes* only:

- top-down -> bottom-up when the frontier grows (``n_f > previous n_f``) and
  ``n_f > n / alpha``                                  (alpha = 1024)
- bottom-up -> top-down when the frontier shrinks and ``n_f < n / beta``
                                                       (beta = 64)

The change_state defaults were tuned on Kronecker graphs (the measurements
are in docs/CPU.md); Ueno and Suzumura's code uses alpha = 2000 and
beta = 8.
"""
from __future__ import annotations

import math

from dbfs.errors import DbfsError

TD = "td"
BU = "bu"

# Beamer's alpha for the GPU ``do`` (the CPU keeps GAP's 15), used by every
# search on GPU kernels (``--backend gpu`` and a dask mesh with GPU workers):
# a GPU bottom-up level (hub first, warp per word) costs far less than a
# top-down level over the same edges, so the switch comes earlier
# (m_f > edges/50); the choice's measurements are in docs/GPU.md.
GPU_BEAMER_ALPHA = 50.0


class BeamerPolicy:
    """Beamer's alpha/beta rule (edges-based switch to bottom-up)."""

    name = "beamer"

    def __init__(self, alpha: float = 15.0, beta: float = 18.0, unexplored: str = "gap",
                 tail: str = "cost"):
        if alpha <= 0 or beta <= 0:
            raise DbfsError(f"policy beamer needs alpha > 0 and beta > 0, got alpha={alpha} beta={beta}")
        if unexplored not in ("gap", "exact"):
            raise DbfsError(f"policy beamer: unexplored must be 'gap' or 'exact', got {unexplored!r}")
        if tail not in ("cost", "gap"):
            raise DbfsError(f"policy beamer: tail must be 'cost' or 'gap', got {tail!r}")
        self.alpha = float(alpha)
        self.beta = float(beta)
        self.unexplored = unexplored
        self.tail = tail
        self.start(1)

    def start(self, n: int) -> None:
        self.n = int(n)
        self.direction = TD
        self.prev_n_f = 0
        self.edges_to_check = None  # GAP's m_u estimate, set on the first level

    def next(self, n_f: int, m_f: int, m_u: int) -> str:
        if self.edges_to_check is None:
            self.edges_to_check = m_u + m_f  # every directed edge
        if self.direction == TD:
            unexplored = self.edges_to_check if self.unexplored == "gap" else m_u
            if m_f > unexplored / self.alpha:
                self.direction = BU
            else:
                self.edges_to_check -= m_f
        else:
            shrinking = n_f < self.prev_n_f
            cheaper_bu = self.tail == "cost" and m_u < m_f
            if shrinking and n_f < self.n / self.beta and not cheaper_bu:
                self.direction = TD
        self.prev_n_f = n_f
        return self.direction

    def m_f_cap(self, n_f: int, m_u: int):
        """What the next :meth:`next` needs of ``m_f`` for a new frontier of
        ``n_f`` vertices, ``m_u`` being exact when the last level was
        bottom-up (see the module docstring): top-down (gap) compares it with
        ``edges_to_check / alpha``; bottom-up only when beta's rule fires and
        ``tail="cost"``, against ``m_u``."""
        if self.edges_to_check is None or (self.direction == TD and self.unexplored == "exact"):
            return math.inf
        if self.direction == TD:
            return self.edges_to_check / self.alpha
        if self.tail == "cost" and n_f < self.prev_n_f and n_f < self.n / self.beta:
            return m_u
        return None


class ChangeStatePolicy:
    """Growing/shrinking frontier-size rule (Yasui et al.; Ueno et al.)."""

    name = "change_state"

    def __init__(self, alpha: float = 1024.0, beta: float = 64.0):
        if alpha <= 0 or beta <= 0:
            raise DbfsError(
                f"policy change_state needs alpha > 0 and beta > 0, got alpha={alpha} beta={beta}")
        self.alpha = float(alpha)
        self.beta = float(beta)
        self.start(1)

    def start(self, n: int) -> None:
        self.n = int(n)
        self.direction = TD
        self.prev_n_f = 0

    def next(self, n_f: int, m_f: int, m_u: int) -> str:
        growing = n_f > self.prev_n_f
        if self.direction == TD:
            if growing and n_f > self.n / self.alpha:
                self.direction = BU
        else:
            if not growing and n_f < self.n / self.beta:
                self.direction = TD
        self.prev_n_f = n_f
        return self.direction

    def m_f_cap(self, n_f: int, m_u: int):
        """Never reads ``m_f`` (frontier sizes only)."""
        return None


POLICIES = {"beamer": BeamerPolicy, "change_state": ChangeStatePolicy}
DEFAULTS = {"beamer": {"alpha": 15.0, "beta": 18.0}, "change_state": {"alpha": 1024.0, "beta": 64.0}}


def make_policy(policy: str = "beamer", alpha: float | None = None, beta: float | None = None,
                **params):
    """A fresh policy object; alpha/beta None means the policy's default;
    ``params`` go to the policy (``unexplored`` for beamer)."""
    try:
        cls = POLICIES[policy]
    except KeyError:
        raise DbfsError(f"unknown direction policy {policy!r}: use one of {sorted(POLICIES)}") from None
    kw = dict(DEFAULTS[policy])
    if alpha is not None:
        kw["alpha"] = alpha
    if beta is not None:
        kw["beta"] = beta
    kw.update(params)
    try:
        return cls(**kw)
    except TypeError as exc:
        raise DbfsError(f"policy {policy!r}: {exc}; see dbfs.bfs.policy") from None


def policy_from(policy: str = "beamer", alpha: float | None = None, beta: float | None = None,
                unexplored: str = "gap", tail: str = "cost"):
    """:func:`make_policy` from a search's options: ``unexplored`` and
    ``tail`` are beamer's and are dropped for the other policies (the
    option set every backend's ``do`` accepts)."""
    if policy == "beamer":
        return make_policy(policy, alpha, beta, unexplored=unexplored, tail=tail)
    return make_policy(policy, alpha, beta)

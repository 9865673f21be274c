"""dbfs.bfs.cpu.rowclaims: a top-down level's new vertices taken from the bits equal the atomic per claim.

On a worker's row table of block partitions (some ranks held, some not; pad rows, rows without edges),
the bit-pass kernels must give what :func:`split_claims` and :func:`absorb_rows` give: the same new rows
(as a set: the bit pass writes them in row order), parents, worker and global bits and degree sums, and
the same pairs byte for byte. Random claims, duplicated pairs and already visited rows included."""
from __future__ import annotations

import numpy as np
import pytest

from dbfs.bfs.cpu import _no_edge_bitmap
from dbfs.bfs.cpu.rowclaims import absorb_bits, absorb_rows, by_bits, mark_pairs, split_claims, split_sorted
from dbfs.bfs.cpu.rowtable import row_table
from dbfs.partition import Partitioning

N, P = 1000, 3
HELD = (0, 2)


def _worker(seed):
    """(table, parts, visited_w, gvis, slot_of) of a worker holding ranks HELD of a block partitioning of N
    vertices in P, random rows (some empty), some rows visited before the level."""
    rng = np.random.default_rng(seed)
    part = Partitioning(N, P, "block")
    slots, keep = [], []
    for rk in HELD:
        rg = part.vertex_range(rk)
        base = rg.start & ~63
        pad = rg.start - base
        deg = rng.integers(0, 6, len(rg)) * (rng.random(len(rg)) < 0.8)
        indptr = np.concatenate([np.zeros(pad + 1, np.int64), np.cumsum(deg)])
        indices = rng.integers(0, N, int(indptr[-1])).astype(np.int32)
        nrow = pad + len(rg)
        slots.append((indptr, indices, np.zeros(nrow, np.int32), np.zeros((nrow + 63) >> 6, np.int64), pad, base, 1))
        keep.append((rg, base, pad, indptr))
    rows = row_table(slots)
    visited = np.zeros(rows.rows >> 6, np.int64)
    gvis = np.zeros((N + 63) >> 6, np.int64)
    for s, (rg, base, pad, indptr) in enumerate(keep):
        w0 = rows.off[s] >> 6
        ne = _no_edge_bitmap(indptr)
        visited[w0:w0 + ne.shape[0]] = ne
        for v in rg:
            if rng.random() < 0.3 and indptr[v - base + 1] > indptr[v - base]:
                x = rows.off[s] + v - base
                visited[x >> 6] |= np.int64(1) << (x & 63)
                gvis[v >> 6] |= np.int64(1) << (v & 63)
    slot_of = np.full(P, -1, np.int64)
    slot_of[list(HELD)] = np.arange(len(HELD))
    return rows, keep, part, visited, gvis, slot_of


def _unvisited(rows, keep, visited):
    """Global ids of the held rows not visited (with edges)."""
    out = []
    for s, (rg, base, pad, indptr) in enumerate(keep):
        for v in rg:
            x = rows.off[s] + v - base
            if not visited[x >> 6] >> (x & 63) & 1:
                out.append(v)
    return np.asarray(out, np.int64)


def _set_bits(g, vs):
    for v in vs:
        g[v >> 6] |= np.int64(1) << (v & 63)


@pytest.mark.parametrize("seed", range(4))
def test_own_claims_from_the_bits_equal_the_atomic_claims(seed):
    """The held ranks' claims of a level: absorb_bits (from the global bits td_rows set) takes the rows,
    parents and degrees split_claims takes one atomic at a time."""
    rows, keep, part, visited, gvis, slot_of = _worker(seed)
    rng = np.random.default_rng(100 + seed)
    cand = _unvisited(rows, keep, visited)
    own = rng.choice(cand, size=len(cand) // 2, replace=False)
    other = np.asarray([v for v in range(N) if part.owner_local(v)[0] == 1][:40], np.int64)
    claimed = np.concatenate([own, other])
    rng.shuffle(claimed)
    claim = np.full(N, -7, np.int64)
    claim[claimed] = rng.integers(0, N, claimed.shape[0])
    _set_bits(gvis, claimed)

    R = rows.rows
    want_p, want_v, want_out = np.full(R, -1, np.int64), visited.copy(), np.empty(R, np.int64)
    _, _, _, end, deg = split_claims(rows.t, claimed, claim, part.code, P, part.q, part.r, slot_of, want_p, want_v,
                                     np.empty(claimed.shape[0], np.int64), want_out, 3)
    got_p, got_v, got_out = np.full(R, -1, np.int64), visited.copy(), np.empty(R, np.int64)
    end2, deg2 = absorb_bits(rows.t, gvis, got_v, got_p, claim, True, got_out, 0)
    assert end2 == end == own.shape[0] and deg2 == deg
    assert np.array_equal(np.sort(got_out[:end2]), np.sort(want_out[:end])) and np.all(np.diff(got_out[:end2]) > 0)
    assert np.array_equal(got_p, want_p) and np.array_equal(got_v, want_v)


@pytest.mark.parametrize("seed", range(4))
def test_sorted_claims_give_the_same_pairs(seed):
    """Ascending claims: split_sorted's pairs for the ranks held elsewhere are split_claims's, byte for byte."""
    rows, keep, part, visited, gvis, slot_of = _worker(seed)
    rng = np.random.default_rng(200 + seed)
    claimed = np.sort(rng.choice(N, size=300, replace=False)).astype(np.int64)
    claim = rng.integers(0, N, N).astype(np.int32)
    R = rows.rows
    want = split_claims(rows.t, claimed, claim, part.code, P, part.q, part.r, slot_of, np.full(R, -1, np.int64),
                        visited.copy(), np.empty(300, np.int64), np.empty(R, np.int64), 2, True)
    for C in (1, 4):
        L, U, cnt = split_sorted(claimed, claim, np.asarray([part.vertex_range(k).start for k in range(P)] + [N]),
                                 slot_of, C)
        assert cnt.tolist() == want[2].tolist() and cnt[1] == cnt[0] and cnt[3] == cnt[2]
        assert L.dtype == U.dtype == claim.dtype
        assert L.tobytes() == want[0].tobytes() and U.tobytes() == want[1].tobytes()
    assert want[3] == 0 and want[4] == 0          # skip_own: nothing absorbed


@pytest.mark.parametrize("seed", range(4))
def test_pairs_from_peers_marked_then_taken_from_the_bits(seed):
    """Peers' pairs (duplicates with different parents, already visited rows among them): mark_pairs then
    absorb_bits take the rows and degrees absorb_rows takes; each row's parent one of its pairs'."""
    rows, keep, part, visited, gvis, slot_of = _worker(seed)
    rng = np.random.default_rng(300 + seed)
    segs = []
    for s, (rg, base, pad, indptr) in enumerate(keep):
        loc = rng.integers(0, len(rg), 2 * len(rg) // 3)
        segs.append((s, loc.astype(np.int32), rng.integers(0, N, loc.shape[0]).astype(np.int32)))
    L = np.concatenate([x[1] for x in segs])
    U = np.concatenate([x[2] for x in segs])
    n = np.asarray([x[1].shape[0] for x in segs], np.int64)
    lo = np.concatenate([[0], np.cumsum(n)[:-1]]).astype(np.int64)
    sl = np.asarray([x[0] for x in segs], np.int64)
    R, M = rows.rows, int(n.sum())

    want_p, want_v, want_g, want_out = np.full(R, -1, np.int64), visited.copy(), gvis.copy(), np.empty(R, np.int64)
    end, deg = absorb_rows(rows.t, L, U, lo, n, sl, want_p, want_v, want_g, np.empty(M, np.int64), want_out, 5, 3)
    got_p, got_v, got_g, got_out = np.full(R, -1, np.int64), visited.copy(), gvis.copy(), np.empty(R, np.int64)
    mark_pairs(rows.t, L, U, lo, n, sl, got_p, got_v, got_g, 3)
    end2, deg2 = absorb_bits(rows.t, got_g, got_v, got_p, U, False, got_out, 5)
    assert end2 == end and deg2 == deg and end > 5
    assert np.array_equal(np.sort(got_out[5:end2]), np.sort(want_out[5:end]))
    assert np.array_equal(got_v, want_v) and np.array_equal(got_g, want_g)
    assert np.array_equal(got_p >= 0, want_p >= 0)
    for s, loc, par in segs:
        x = rows.off[s] + keep[s][2] + loc.astype(np.int64)
        new = got_p[x] >= 0
        for xi in np.unique(x[new]):
            assert got_p[xi] in par[x == xi]       # the parent of one of the row's own pairs


def test_bit_pass_only_for_block_rows_and_levels_dense_enough():
    assert not by_bits(False, 10 ** 9, 1)
    assert by_bits(True, 1000, 1000) and not by_bits(True, 1, 1000)

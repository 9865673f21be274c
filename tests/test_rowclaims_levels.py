"""A worker's top-down level over its row table: the kernels' slot walks, claims left as bits, peers' pairs.

The row kernels (:mod:`dbfs.bfs.cpu.rowtable`, :mod:`dbfs.bfs.cpu.rowclaims`) find a row's slot from the
previous row's slot bounds and walk a word range slot by slot; a large level on block partitions leaves
its claims as bits (``td_rows``'s ``front``) and reads only the words of the ranks held elsewhere
(``words_elsewhere``, ``claims_in``). Each must give what the plain definitions give: degree sums and
offsets of queues crossing slots in any order, the same claims with and without ``front`` and with the held
block rows' parents written by the claims (``parent``, ``split_claims``'s ``direct``), the same pairs
as :func:`split_sorted` of the whole ascending queue, the bit pass's rows (and frontier words) however its
chunks cut the slots.
End to end, two and three workers (in this process, their rounds through a mesh of threads) of block and
cyclic partitions find the single-process ``do`` levels and parents that validate.
"""
from __future__ import annotations

import copy
import threading

import numpy as np
import pytest

from dbfs import kernel1
from dbfs.bfs import bfs
from dbfs.bfs.cpu import bitmap_to_queue, queue_to_bitmap
from dbfs.bfs.cpu.rowclaims import _absorb_bits, claims_in, split_claims, split_sorted, words_elsewhere
from dbfs.bfs.cpu.rowtable import (_rows_claim_serial, _rows_degree_offsets, _rows_degree_offsets_par, _rows_edges,
                                   row_table, td_rows)
from dbfs.bfs.cpu.topdown import _TD_SERIAL_EDGES, reserve_td
from dbfs.partition import Partitioning
from dbfs.validate import validate

KEY = ("direction", "frontier", "edges", "discovered")


def _table(rng, sizes, N):
    """A row table of block-like slots of ``sizes`` rows (random degrees, neighbours in ``[0, N)``), laid at
    global bases 0, 64 * k, ...; returns (table, per slot (indptr, indices))."""
    slots, csr, base = [], [], 0
    for n in sizes:
        deg = rng.integers(0, 9, n) * (rng.random(n) < 0.8)
        indptr = np.concatenate([[0], np.cumsum(deg)]).astype(np.int64)
        indices = rng.integers(0, N, int(indptr[-1])).astype(np.int32)
        slots.append((indptr, indices, np.zeros(n, np.int32), np.zeros((n + 63) >> 6, np.int64), 0, base, 1))
        csr.append((indptr, indices))
        base += ((n + 63) >> 6) << 6
    return row_table(slots), csr


def _degree(rows, csr, wr):
    s = max(k for k in range(rows.S) if rows.off[k] <= wr)
    ip = csr[s][0]
    r = wr - rows.off[s]
    return int(ip[r + 1] - ip[r])


@pytest.mark.parametrize("seed", range(3))
def test_degree_sums_over_slots_in_any_order(seed):
    rng = np.random.default_rng(seed)
    rows, csr = _table(rng, [100, 1, 300, 64, 129], 4096)
    real = [rows.off[s] + i for s in range(rows.S) for i in range(csr[s][0].shape[0] - 1)]
    for f in (0, 1, 7, 500):
        q = rng.choice(real, f).astype(np.int64)          # unsorted, repeats, slots revisited
        want = np.concatenate([[0], np.cumsum([_degree(rows, csr, x) for x in q])]).astype(np.int64)
        assert np.array_equal(_rows_degree_offsets(rows.t, q), want)
        assert np.array_equal(_rows_degree_offsets_par(rows.t, q), want)
        assert _rows_edges(rows.t, q) == want[-1]


def test_serial_claims_sum_the_degrees_first_and_leave_a_large_queue():
    """``E = -1``: the serial claims sum the degrees themselves; past the serial limit they claim nothing."""
    rng = np.random.default_rng(7)
    rows, csr = _table(rng, [4000, 3000], 1 << 14)
    q = np.arange(rows.rows, dtype=np.int64)
    q = q[[(wr < rows.off[1] and wr < 4000) or wr >= rows.off[1] and wr - rows.off[1] < 3000 for wr in q]]
    total = int(_rows_edges(rows.t, q))
    assert total > _TD_SERIAL_EDGES
    claim = np.zeros(1 << 14, np.int32)
    vis = np.zeros((1 << 14) >> 6, np.int64)
    got, E = _rows_claim_serial(rows.t, q, claim, np.empty(0, np.int64), vis, -1)
    assert got.shape[0] == 0 and E > _TD_SERIAL_EDGES and not vis.any()
    small = q[:40]
    got, E = _rows_claim_serial(rows.t, small, claim, np.empty(0, np.int64), vis, -1)
    assert E == _rows_edges(rows.t, small)
    want = np.unique(np.concatenate([csr[0][1][csr[0][0][r]:csr[0][0][r + 1]] for r in small]))
    assert np.array_equal(np.sort(got), want)


@pytest.mark.parametrize("seed", range(3))
def test_a_large_level_left_as_bits_claims_the_same(seed):
    """td_rows with ``front``: the claims of a large level are the bits ``front`` gets, the queue without it;
    ``visited`` ends the same; every claimed vertex's claim is a queued row's global id adjacent to it."""
    rng = np.random.default_rng(10 + seed)
    N = 1 << 15
    rows, csr = _table(rng, [9000, 7000, 200], N)
    q = np.sort(rng.choice(9000, 8500, replace=False)).astype(np.int64)
    vis0 = np.zeros(N >> 6, np.int64)
    vis0[rng.integers(0, N >> 6, 50)] = -1
    claim_a, vis_a = np.full(N, -1, np.int32), vis0.copy()
    got, E, asc = td_rows(rows.t, q, claim_a, vis_a)
    claim_b, vis_b, front = np.full(N, -1, np.int32), vis0.copy(), np.full(N >> 6, 5, np.int64)
    none, E2, asc2 = td_rows(rows.t, q, claim_b, vis_b, front)
    assert E == E2 > _TD_SERIAL_EDGES and asc and asc2 and none is None
    assert np.array_equal(bitmap_to_queue(front, 0), got) and np.array_equal(vis_a, vis_b)
    assert np.array_equal(vis_b, vis0 | front)
    ip, ix = csr[0]
    for v in got[:: max(1, got.shape[0] // 200)]:
        r = int(claim_b[v])
        assert r in q.tolist() and v in ix[ip[r]:ip[r + 1]]


def test_claims_keep_their_buffers_in_the_reserved_worker_store():
    """``reserve_td`` sizes the record buffer and seen bitmap in a worker's store; a large level's claims then use
    those arrays (not grown, the bitmap left all zero) and claim what they claim with the thread's buffers."""
    rng = np.random.default_rng(11)
    N = 1 << 15
    rows, csr = _table(rng, [9000, 7000], N)
    q = np.sort(rng.choice(9000, 8500, replace=False)).astype(np.int64)
    bufs = {}
    reserve_td(bufs, sum(int(ip[-1]) for ip, _ in csr), N >> 6)
    rec, seen = bufs["rec"], bufs["seen"]
    assert rec.shape[0] >= sum(int(ip[-1]) for ip, _ in csr) and seen.shape == (1, N >> 6) and not seen.any()
    want, E, _ = td_rows(rows.t, q, np.full(N, -1, np.int32), np.zeros(N >> 6, np.int64))
    got, E2, _ = td_rows(rows.t, q, np.full(N, -1, np.int32), np.zeros(N >> 6, np.int64), bufs=bufs)
    assert E == E2 > _TD_SERIAL_EDGES and np.array_equal(np.sort(got), np.sort(want))
    assert bufs["rec"] is rec and bufs["seen"] is seen and not seen.any()


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("f", [40, 6000])            # serial and parallel claims
def test_claims_of_held_block_rows_write_their_parents(seed, f):
    """td_rows with ``parent``: a claimed vertex of a block slot's rows (its pad rows left out) gets
    ``parent[x]`` at its worker row, a frontier row's global id adjacent to it, and its claim entry is left
    alone; any other claimed vertex (another worker's ranks: the gaps, pad rows) gets ``claim[v]``; the
    claims and bits are those without ``parent``."""
    rng = np.random.default_rng(40 + seed)
    N = 1 << 15
    slots, csr = [], []
    for n, gb, pad in ((9000, 0, 0), (7010, 8960, 50), (300, 20480, 3)):    # held: [0, 9000), [9010, 15970), ...
        deg = rng.integers(0, 9, n) * (rng.random(n) < 0.8) * (np.arange(n) >= pad)
        indptr = np.concatenate([[0], np.cumsum(deg)]).astype(np.int64)
        indices = rng.integers(0, N, int(indptr[-1])).astype(np.int32)
        slots.append((indptr, indices, np.zeros(n, np.int32), np.zeros((n + 63) >> 6, np.int64), pad, gb, 1))
        csr.append((indptr, indices, gb, pad))
    rows = row_table(slots)
    held = {}                                        # global id -> worker row
    for s, (ip, ix, gb, pad) in enumerate(csr):
        held.update({gb + i: rows.off[s] + i for i in range(pad, ip.shape[0] - 1)})
    gid = {x: v for v, x in held.items()}
    q = np.sort(rng.choice(sorted(gid), f, replace=False)).astype(np.int64)
    vis0 = np.zeros(N >> 6, np.int64)
    vis0[rng.integers(0, N >> 6, 50)] = -1
    claim_a, vis_a = np.full(N, -1, np.int32), vis0.copy()
    got, E, _ = td_rows(rows.t, q, claim_a, vis_a)
    claim_b, vis_b, parent = np.full(N, -1, np.int32), vis0.copy(), np.full(rows.rows, -1, np.int64)
    got_b, E_b, _ = td_rows(rows.t, q, claim_b, vis_b, None, parent)
    assert (E > _TD_SERIAL_EDGES) == (f > 40) and E == E_b
    assert np.array_equal(np.sort(got), np.sort(got_b)) and np.array_equal(vis_a, vis_b)
    mine = np.asarray([v in held for v in got_b.tolist()])
    assert mine.any() and (~mine).any()
    xs = np.asarray([held[v] for v in got_b[mine].tolist()], np.int64)
    assert (claim_b[got_b[mine]] == -1).all() and (claim_b[got_b[~mine]] >= 0).all()
    assert (parent >= 0).sum() == xs.shape[0] and (parent[xs] >= 0).all()
    adj = {}
    for x in q.tolist():
        s = max(k for k in range(rows.S) if rows.off[k] <= x)
        ip, ix = csr[s][0], csr[s][1]
        adj[gid[x]] = set(ix[ip[x - rows.off[s]]:ip[x - rows.off[s] + 1]].tolist())
    for v in got_b.tolist():                         # each parent a frontier vertex adjacent to v
        u = int(parent[held[v]]) if v in held else int(claim_b[v])
        assert u in adj and v in adj[u]
    if f == 40:                                      # serial: the same claimer as without parent
        assert np.array_equal(parent[xs], claim_a[got_b[mine]])


@pytest.mark.parametrize("seed", range(3))
def test_split_claims_after_direct_parents_takes_only_the_bits(seed):
    """Claims with ``parent`` then split_claims with ``direct``: the held ranks' vertices keep the parents the
    claims wrote (one chunk or three), the same rows, bits, degrees, pairs and parents as claims into
    ``claim`` split without it (serial claims: one claimer per vertex either way)."""
    rng = np.random.default_rng(50 + seed)
    N, P = 1000, 3
    part = Partitioning(N, P, "block")
    slots = []
    for rk in (0, 2):
        rg = part.vertex_range(rk)
        base, pad = rg.start & ~63, rg.start - (rg.start & ~63)
        deg = rng.integers(0, 6, len(rg)) * (rng.random(len(rg)) < 0.8)
        indptr = np.concatenate([np.zeros(pad + 1, np.int64), np.cumsum(deg)])
        nrow = pad + len(rg)
        slots.append((indptr, rng.integers(0, N, int(indptr[-1])).astype(np.int32), np.zeros(nrow, np.int32),
                      np.zeros((nrow + 63) >> 6, np.int64), pad, base, 1))
    rows = row_table(slots)
    slot_of = np.asarray([0, -1, 1], np.int64)
    q = np.asarray(sorted(rng.choice(np.arange(rows.off[1], rows.off[1] + 300), 30, replace=False)), np.int64)
    res = []
    for direct, C in ((False, 1), (True, 1), (True, 3)):
        claim, gvis = np.full(N, -1, np.int32), np.zeros((N + 63) >> 6, np.int64)
        parent, vis = np.full(rows.rows, -1, np.int64), np.zeros(rows.rows >> 6, np.int64)
        claimed, _, _ = td_rows(rows.t, q, claim, gvis, None, parent if direct else None)
        out = np.empty(rows.rows, np.int64)
        L, U, cnt, end, deg = split_claims(rows.t, claimed, claim, part.code, P, part.q, part.r, slot_of, parent, vis,
                                           np.empty(claimed.shape[0], np.int64), out, C, False, direct)
        res.append((sorted(out[:end].tolist()), deg, vis.tolist(), parent.tolist(), L.tolist(), U.tolist(),
                    cnt.tolist()))
    assert res[0][0] and res[0][4] and res[0] == res[1] == res[2]


@pytest.mark.parametrize("seed", range(4))
def test_claims_of_the_ranks_elsewhere_give_the_sorted_pairs(seed):
    """claims_in over words_elsewhere, then split_sorted: the pairs of split_sorted on the whole queue (rank
    boundaries inside words, held ranks between others, empty ranks)."""
    rng = np.random.default_rng(20 + seed)
    N, P = 5000, 7
    cuts = np.sort(rng.choice(np.arange(1, N), P - 1, replace=False))
    cuts[2] = cuts[1]                               # an empty rank
    starts = np.concatenate([[0], cuts, [N]]).astype(np.int64)
    bits = rng.integers(-(1 << 62), 1 << 62, (N + 63) >> 6, dtype=np.int64) & rng.integers(0, 1 << 62, (N + 63) >> 6)
    bits[-1] &= (1 << (N & 63)) - 1
    claim = rng.integers(0, N, N).astype(np.int32)
    full = bitmap_to_queue(bits, 0)
    for held in ([0], [1, 4], [3], [0, 2, 6], [], list(range(P))):
        slot_of = np.full(P, -1, np.int64)
        slot_of[held] = np.arange(len(held))
        runs = words_elsewhere(starts, slot_of)
        assert all(a < b for a, b in runs) and all(x[1] < y[0] for x, y in zip(runs, runs[1:]))
        q = claims_in(bits, runs)
        assert np.all(np.diff(q) > 0)
        for C in (1, 3):
            want = split_sorted(full, claim, starts, slot_of, C)
            got = split_sorted(q, claim, starts, slot_of, C)
            assert all(np.array_equal(a, b) for a, b in zip(got, want))


@pytest.mark.parametrize("seed", range(3))
def test_bit_pass_chunks_cut_slots_anywhere(seed):
    """absorb_bits's word pass split in 1..9 chunks (chunk ends inside slots, chunks spanning slots): the same
    rows in order, parents, worker bits and degree sum."""
    rng = np.random.default_rng(30 + seed)
    N = 1 << 14
    rows, csr = _table(rng, [700, 64, 1, 1500, 300], N)
    WW = rows.rows >> 6
    gvis = rng.integers(-(1 << 62), 1 << 62, N >> 6, dtype=np.int64)
    vis0 = rng.integers(-(1 << 62), 1 << 62, WW, dtype=np.int64)
    for s in range(rows.S):                          # a slot's tail rows are visited (never reached)
        n = csr[s][0].shape[0] - 1
        if n & 63:
            vis0[(rows.off[s] + n) >> 6] |= -(1 << (n & 63))
    claim = rng.integers(0, N, N).astype(np.int32)
    front0 = rng.integers(-(1 << 62), 1 << 62, WW, dtype=np.int64)
    res, fronts = [], {}
    for C in range(1, 10):
        for fmode in (0, 1, 2):                      # no frontier words, words set, words OR'd
            vis, parent, out = vis0.copy(), np.full(rows.rows, -1, np.int64), np.full(rows.rows + 3, -9, np.int64)
            front = front0.copy() if fmode else np.empty(0, np.int64)
            end, deg = _absorb_bits(rows.t, gvis, vis, parent, claim, True, out, 3, C, front, fmode)
            res.append((end, deg, out[:end].tolist(), parent.tolist(), vis.tolist()))
            if fmode:
                fronts[fmode] = front.copy()
    assert all(r == res[0] for r in res)
    end, deg, out, parent, vis = res[0]
    want = [wr for wr in range(rows.rows)
            if not vis0[wr >> 6] >> (wr & 63) & 1 and gvis[wr >> 6] >> (wr & 63) & 1]
    assert out[3:] == want and deg == sum(_degree(rows, csr, x) for x in want)
    assert all(parent[x] == claim[x] for x in want) and sum(p >= 0 for p in parent) == len(want)
    bm = np.zeros(WW, np.int64)                      # the frontier words: exactly the new rows' bits
    queue_to_bitmap(np.asarray(want, np.int64), 0, bm)
    assert np.array_equal(fronts[1], bm) and np.array_equal(fronts[2], front0 | bm)


# ------------------------------------------------------------ end to end
@pytest.fixture(scope="module")
def kron13(tmp_path_factory):
    from conftest import kron_with_roots

    return kron_with_roots(tmp_path_factory.mktemp("rcl"), 13, 3, 3)


class _ThreadMesh:
    """W workers as threads of this process: a round posts copies of the messages, waits for every worker,
    reads its own. One worker computes at a time (``lock``, released while waiting)."""

    def __init__(self, hub, widx):
        self.hub, self.widx, self.W = hub, widx, hub["W"]

    def exchange(self, kind, out):
        h = self.hub
        for j, msg in out.items():
            h["box"][(self.widx, j)] = (kind, copy.deepcopy([np.array(a) if isinstance(a, np.ndarray) else a
                                                             for a in msg]))
        h["lock"].release()
        try:
            h["barrier"].wait(timeout=120)
            got = {}
            for j in range(self.W):
                if j != self.widx:
                    k, msg = h["box"].pop((j, self.widx))
                    assert k == kind
                    got[j] = msg
            h["barrier"].wait(timeout=120)
        finally:
            h["lock"].acquire()
        return got

    def close(self):
        pass


class _NoWorker:
    address = "tcp://127.0.0.1:1"
    handlers: dict = {}


def _mesh_search(parts, ranks_of, root, algorithm, nnz):
    """One search by len(ranks_of) workers (threads) holding ``parts`` by ``ranks_of``; per worker its result."""
    from dbfs.bfs.dask.mesh.plugin import MeshPlugin
    from dbfs.bfs.dask.search.bsp import _bsp_levels

    W = len(ranks_of)
    hub = {"W": W, "box": {}, "barrier": threading.Barrier(W), "lock": threading.Lock()}
    res, errs = [None] * W, []

    def run(w):
        plugin = MeshPlugin()
        plugin.setup(_NoWorker())
        hub["lock"].acquire()
        try:
            res[w] = _bsp_levels(_ThreadMesh(hub, w), w, ranks_of, [parts[rk] for rk in ranks_of[w]], root, algorithm,
                                 {"policy": "beamer"}, nnz, plugin)
        except BaseException as exc:      # noqa: BLE001 - reported below
            errs.append(exc)
            hub["barrier"].abort()
        finally:
            hub["lock"].release()

    th = [threading.Thread(target=run, args=(w,)) for w in range(W)]
    for x in th:
        x.start()
    for x in th:
        x.join()
    if errs:
        raise errs[0]
    return res


@pytest.mark.parametrize("kind,ranks_of", [("block", [[0, 2], [1, 3]]), ("block", [[0, 1], [2, 3]]),
                                           ("block", [[1], [0, 3], [2]]), ("cyclic", [[0, 2], [1, 3]])])
def test_workers_find_the_single_process_levels(kron13, kind, ranks_of, monkeypatch):
    """Workers exchanging pairs and slices: the do levels of one process, parents that validate; on block
    partitions the large top-down levels are read from the bits (claims_in runs)."""
    from dbfs.bfs.dask.layout.worker import _global_degrees, _load_part, _local_degrees, _prepare_part
    from dbfs.bfs.dask.search import bsp
    from dbfs.partition import Partitioning

    ds, edges, csr, roots = kron13
    P = 4
    kernel1.build_partitioned(ds.path, P=P, partitioning=kind, client=None, progress=False)
    variant = kernel1.variant_name(P, kind)
    parts = [_load_part(ds.path, variant, rk) for rk in range(P)]
    part = Partitioning(ds.n_vertices, P, kind)
    deg = _global_degrees(part, *[_local_degrees(p) for p in parts])
    parts = [_prepare_part(p, deg) for p in parts]
    calls = []
    real = bsp.claims_in
    monkeypatch.setattr(bsp, "claims_in", lambda *a: calls.append(1) or real(*a))
    nnz = int(csr.indptr[-1])
    for root in roots:
        ref = bfs(csr, root, algorithm="do", stats=True)
        for algorithm in ("do", "td"):
            res = _mesh_search(parts, ranks_of, root, algorithm, nnz)
            g = np.full(ds.n_vertices, -2, np.int64)
            for r in res:
                for rk, sl in r["parents"].items():
                    rg = part.vertex_range(rk)
                    g[rg.start:rg.stop:rg.step] = sl[:len(rg)]
            assert (g != -2).all()
            v = validate(edges, root, g)
            assert v.ok, f"{kind} {ranks_of} {algorithm} root {root}: {v.summary()}"
            if algorithm == "do":
                assert [tuple(x[k] for k in KEY) for x in res[0]["records"]] == \
                    [tuple(x[k] for k in KEY) for x in ref.level_stats]
    assert bool(calls) == (kind == "block")

"""A large top-down level's claims shared in /dev/shm by the CPU workers of one host: no pairs sent.

:mod:`dbfs.bfs.dask.mesh.shm_claims`: each worker's claim bits and claim scratch live in a file mapping of its
own (created ``O_EXCL``, mode 0o600, its name unlinked once every worker mapped it), which its peers map
read-only; a level that :func:`takes_shared` replaces the pairs round with a payload-free barrier, and each
worker takes the peers' claims of its own rows from their mappings. The kernel must give what its definition
gives (first peer in worker order, masked by both visited sets, slots sharing a global word); end to end, on
real LocalClusters (2 workers x 1 thread, one or two partitions a worker; 3 workers), the searches must be
the single-process ``do`` level for level, their parents valid, and every level that takes the shared path
must send no byte (so the test fails if the path is never taken), nor may the smaller top-down levels
(their pairs through the pairs boxes); with the shared memory switched off the same levels send their pairs.
"""
from __future__ import annotations

import glob
import os
import stat

import numpy as np
import pytest

import dbfs.bfs.dask as D
from dbfs import kernel1
from dbfs.bfs import bfs
from dbfs.bfs.cpu.rowtable import row_table
from dbfs.bfs.dask.mesh.shm_claims import (_ShmClaims, _take_peers, _unlink_all, claims_bytes, or_claims, take_peers,
                                           takes_shared)
from dbfs.validate import validate

KEY = ("direction", "frontier", "edges", "discovered")


# ------------------------------------------------------------- the kernel
def _claims_of(tmp, n, dtype, W):
    """W workers' claims in this process (files under /dev/shm, unlinked once mapped)."""
    paths = [os.path.join("/dev/shm", f"dbfs-test-{os.getpid()}-{tmp.name}-claims{i}") for i in range(W)]
    try:
        cls = [_ShmClaims(p, n, dtype, i) for i, p in enumerate(paths)]
        for c in cls:
            c.map_peers(paths)
    finally:
        _unlink_all(paths)
    return cls


def test_claims_files_are_private_exclusive_and_unlinked(tmp_path):
    """A worker's file is created with O_EXCL (an existing name is refused), mode 0o600, sized for the bits
    and the scratch; peers map it read-only; after set-up no name is left."""
    path = os.path.join("/dev/shm", f"dbfs-test-{os.getpid()}-{tmp_path.name}-claims0")
    try:
        c = _ShmClaims(path, 1000, np.int32, 0)
        st = os.stat(path)
        assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_size == claims_bytes(1000, np.int32) == 16 * 8 + 4000
        with pytest.raises(FileExistsError):
            _ShmClaims(path, 1000, np.int32, 0)
        assert c.front.shape == (16,) and c.scratch.shape == (1000,) and c.scratch.dtype == np.int32
    finally:
        _unlink_all([path])
    cls = _claims_of(tmp_path, 1000, np.int32, 3)
    assert not glob.glob(f"/dev/shm/dbfs-test-{os.getpid()}-{tmp_path.name}-*")
    cls[1].front[3] = 5
    peer = cls[0]._peers[0][1]                          # worker 0's view of worker 1's bits
    assert peer[3] == 5 and not peer.flags.writeable


@pytest.mark.parametrize("seed", range(3))
def test_take_peers_is_the_first_peer_of_each_unvisited_bit(tmp_path, seed):
    """Over a worker's slots (pad rows, a global word shared by two slots, an empty slot): a row clear in
    both visited sets takes the first peer's claim that has its bit (its parent from that peer's scratch) and
    gets its global bit; nothing else changes."""
    rng = np.random.default_rng(seed)
    N = 4000
    slots, gids = [], []
    for nrow, gb, pad in ((700, 0, 0), (330, 640, 60), (0, 1024, 0), (900, 2048, 17)):
        ip = np.zeros(nrow + 1, np.int64)
        slots.append((ip, np.zeros(0, np.int32), np.zeros(nrow, np.int32), np.zeros((nrow + 63) >> 6, np.int64),
                      pad, gb, 1))
        gids.append((gb, pad, nrow))
    rows = row_table(slots)
    R = rows.rows
    cls = _claims_of(tmp_path, N, np.int32, 3)
    for c in cls[1:]:
        c.front[:] = rng.integers(-(1 << 62), 1 << 62, c.front.shape[0]) & rng.integers(0, 1 << 62, c.front.shape[0])
        c.scratch[:] = rng.integers(0, N, N)
    visited = rng.integers(-(1 << 62), 1 << 62, R >> 6) & rng.integers(-(1 << 62), 1 << 62, R >> 6)
    wof = {}                                           # worker row -> global id (real rows only)
    for s, (gb, pad, nrow) in enumerate(gids):
        for i in range(nrow):
            x = rows.off[s] + i
            if i < pad:
                visited[x >> 6] |= np.int64(1) << (x & 63)     # pad rows: another rank's, always visited
            else:
                wof[x] = gb + i
        for x in range(rows.off[s] + nrow, int(rows.t.off[s + 1])):   # tail rows
            visited[x >> 6] |= np.int64(1) << (x & 63)
    gvis = rng.integers(-(1 << 62), 1 << 62, (N + 63) >> 6) & rng.integers(0, 1 << 62, (N + 63) >> 6)
    parent = np.full(R, -1, np.int64)
    g0, v0, p0 = gvis.copy(), visited.copy(), parent.copy()

    def bit(a, i):
        return bool(a[i >> 6] >> (i & 63) & 1)

    want_g, want_p = g0.copy(), p0.copy()
    for x, v in wof.items():
        if bit(v0, x) or bit(g0, v):
            continue
        for c in cls[1:]:
            if bit(c.front, v):
                want_g[v >> 6] |= np.int64(1) << (v & 63)
                want_p[x] = c.scratch[v]
                break
    assert (want_p >= 0).sum() > 100
    c0 = cls[0]
    for C in (None, 1, 5):                           # the wrapper's chunks, one chunk, chunks cutting slots
        gvis, visited, parent = g0.copy(), v0.copy(), p0.copy()
        if C is None:
            take_peers(c0, rows.t, gvis, visited, parent)
        else:
            _take_peers(rows.t.off, rows.t.gb, c0.fronts, c0.scratches, c0.scratch, gvis, visited, parent, c0.gwords,
                        c0.n, C)
        assert np.array_equal(visited, v0) and np.array_equal(gvis, want_g) and np.array_equal(parent, want_p)
    f = np.zeros(63, np.int64)
    or_claims(f, np.asarray([0, 64, 65, 4031], np.int64), 2)
    assert f[0] == 1 and f[1] == 3 and f[62] == np.int64(1) << 63 and f[2:62].sum() == 0


# ------------------------------------------------------------ end to end
@pytest.fixture(scope="module")
def kron13(tmp_path_factory):
    from conftest import kron_with_roots

    return kron_with_roots(tmp_path_factory.mktemp("shc"), 13, 7, 3)


def _searches(dg, ds, edges, csr, roots):
    """Each root's do and td searches (at this scale only top-down searches have levels past the serial
    claims'): valid parents and the single-process levels; returns the bytes every worker sent in each level
    that takes the shared claims."""
    gwords = (ds.n_vertices + 63) >> 6
    shared, small = [], []
    for root in roots:
        for algorithm in ("do", "td"):
            res, _, rec = D.search(dg, root, algorithm=algorithm)
            v = validate(edges, root, D.gather_parent(res))
            assert v.ok, v.summary()
            ref = bfs(csr, root, algorithm=algorithm, stats=True)
            assert [tuple(r[k] for k in KEY) for r in rec] == [tuple(r[k] for k in KEY) for r in ref.level_stats]
            shared += [[w["sent_bytes"] for w in r["workers"]] for r in rec
                       if r["direction"] == "td" and takes_shared(r["edges"], gwords)]
            small += [[w["sent_bytes"] for w in r["workers"]] for r in rec
                      if r["direction"] == "td" and not takes_shared(r["edges"], gwords) and r["discovered"]]
            res.release()
    return shared, small


@pytest.mark.distributed
@pytest.mark.parametrize("P", [2, 4])
def test_two_workers_take_large_levels_from_shared_memory(kron13, P):
    """2 workers x 1 thread holding P block partitions: the large top-down levels send nothing (a SYNC and a
    counts round), the searches are the single-process do's; with shared memory off the same levels send
    their pairs."""
    from dbfs.cluster import client_for

    ds, edges, csr, roots = kron13
    kernel1.build_partitioned(ds.path, P=P, client=None, progress=False)
    variant = kernel1.variant_name(P)
    with client_for(n_workers=2, threads_per_worker=1, quiet=True) as client:
        with D.load_distributed(client, ds.path, variant) as dg:
            assert dg.shm == "" and dg.shm_claims == "" and len(dg.mesh_workers) == 2
            assert not glob.glob(f"/dev/shm/dbfs-{dg.mesh_id}-claims*")     # unlinked once mapped
            shared, small = _searches(dg, ds, edges, csr, roots)
        assert shared and all(sent == [0, 0] for sent in shared), shared
        assert small and all(sent == [0, 0] for sent in small), small
        with D.load_distributed(client, ds.path, variant, shared_memory=False) as dg:
            assert dg.shm_claims == "no shared frontier"
            off, small_off = _searches(dg, ds, edges, csr, roots)
        assert len(off) == len(shared) and all(sum(sent) > 0 for sent in off), off
        assert len(small_off) == len(small) and any(sum(sent) > 0 for sent in small_off), small_off


@pytest.mark.distributed
def test_three_workers_take_large_levels_from_shared_memory(kron13):
    """3 workers x 1 thread, one partition each: the same (two peers' claims a worker, first peer first)."""
    from dbfs.cluster import client_for

    ds, edges, csr, roots = kron13
    kernel1.build_partitioned(ds.path, P=3, client=None, progress=False)
    with client_for(n_workers=3, threads_per_worker=1, quiet=True) as client:
        with D.load_distributed(client, ds.path, kernel1.variant_name(3)) as dg:
            assert dg.shm_claims == "" and len(dg.mesh_workers) == 3
            shared, small = _searches(dg, ds, edges, csr, roots)
    assert shared and all(sent == [0, 0, 0] for sent in shared), shared
    assert small and all(sent == [0, 0, 0] for sent in small), small

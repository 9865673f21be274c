"""The small rounds of one host's CPU workers through the board in their shared frontier's file, not TCP.

:mod:`dbfs.bfs.dask.mesh.board`: BEGIN, COUNTS and SYNC rounds post a record and a round number into the
worker's slot of the mesh's ``/dev/shm`` file and wait for every peer's; the other kinds keep the TCP mesh.
Checked: two workers (threads of this process, each with its own mapping of a real shared file and its end
of a loopback TCP connection under the select transport) get each other's records round after round, with a TCP
round between that still arrives; a peer whose connection closed is a lost peer within a second, and so is
a slot past the round (out of step); end to end on a real LocalCluster (2 workers x 1 thread) the searches
are the single-process ``do`` level for level with valid parents, every worker's board counts the same
rounds, and with the board switched off on every worker no round goes through it.
"""
from __future__ import annotations

import os
import socket
import threading
import time

import numpy as np
import pytest

import dbfs.bfs.dask as D
from dbfs import kernel1
from dbfs.bfs import bfs
from dbfs.bfs.dask.mesh import board
from dbfs.bfs.dask.mesh.frames import BEGIN, COUNTS, FRONT, SYNC, Limits
from dbfs.bfs.dask.mesh.shm import _ShmFront, _unlink
from dbfs.bfs.dask.mesh.transport import _PeerLost, _SelectMesh
from dbfs.validate import validate

KEY = ("direction", "frontier", "edges", "discovered")


def _tcp_pair():
    """Two ends of one loopback TCP connection (what the mesh's transports run on)."""
    with socket.create_server(("127.0.0.1", 0)) as srv:
        a = socket.create_connection(srv.getsockname())
        b, _ = srv.accept()
    return a, b


def _pair(tmp_path, P=2, gwords=4):
    """Two workers' ends: their own mappings of one shared file, each end of a socket pair wrapped in the
    select transport, and the board over both."""
    path = os.path.join("/dev/shm", f"dbfs-test-{os.getpid()}-{tmp_path.name}-board")
    try:
        shs = [_ShmFront(path, gwords, P, True), _ShmFront(path, gwords, P, False)]
    finally:
        _unlink(path)
    a, b = _tcp_pair()
    lim = Limits.for_graph(64 * gwords, P)
    meshes = [_SelectMesh("m", 0, 2, {1: a}, 5.0, lim), _SelectMesh("m", 1, 2, {0: b}, 5.0, lim)]
    return shs, meshes, [board._BoardMesh(meshes[i], shs[i], i, 2) for i in (0, 1)]


def _both(fn0, fn1):
    out, errs = [None, None], []

    def run(i, fn):
        try:
            out[i] = fn()
        except BaseException as exc:        # noqa: BLE001 (reported below)
            errs.append(exc)

    ts = [threading.Thread(target=run, args=(i, fn)) for i, fn in enumerate((fn0, fn1))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert not errs, errs
    return out


def test_board_rounds_carry_each_workers_record(tmp_path):
    shs, meshes, bms = _pair(tmp_path)
    words = np.arange(4, dtype=np.int64)

    def worker(i):
        seen = []
        for r in range(60):
            got = bms[i].exchange(BEGIN, {1 - i: [(100 * i + r, 3)]})
            seen.append(got[1 - i][0])
            got = bms[i].exchange(COUNTS, {1 - i: [(i, r, 7 * r + i), (0.5 * r + i,)]})
            seen.append(got[1 - i])
            bms[i].exchange(SYNC, {1 - i: []})
            if r % 20 == 0:         # a TCP round between board rounds: the wrapped mesh stays in step
                got = bms[i].exchange(FRONT, {1 - i: [(i,), words + i]})
                seen.append(("front", int(got[1 - i][1][0])))
        return seen

    s0, s1 = _both(lambda: worker(0), lambda: worker(1))
    for i, seen in ((0, s0), (1, s1)):
        j = 1 - i
        begins = [x for x in seen if isinstance(x, tuple) and x[0] != "front"]
        counts = [x for x in seen if isinstance(x, list)]
        assert begins == [(100 * j + r, 3) for r in range(60)]
        assert counts == [[(j, r, 7 * r + j), (0.5 * r + j,)] for r in range(60)]
        assert [x for x in seen if isinstance(x, tuple) and x[0] == "front"] == [("front", j)] * 3
    assert shs[0].board_round == shs[1].board_round == 180
    for m in meshes:
        m.close()


def test_board_sees_a_closed_connection_and_an_out_of_step_peer(tmp_path):
    shs, meshes, bms = _pair(tmp_path)
    meshes[1].close()                       # worker 1 gone: its end of the connection shut
    t = time.monotonic()
    with pytest.raises(_PeerLost, match="connection to worker 1 lost"):
        bms[0].exchange(SYNC, {1: []})
    assert time.monotonic() - t < 2.0
    shs2, meshes2, bms2 = _pair(tmp_path)
    r = shs2[0].board_round + 1
    peer = (r & 1) * 2 * board.SLOT + board.SLOT   # worker 1's slot of this round's parity
    shs2[1].board[peer] = r + 2
    with pytest.raises(_PeerLost, match="out of step"):
        bms2[0].exchange(COUNTS, {1: [(1, 2, 3), (0.0,)]})
    for m in meshes + meshes2:
        m.close()


def _set_use(value, dask_worker=None):
    old, board.USE = board.USE, value
    return old


def _rounds(dask_worker=None):
    from dbfs.bfs.dask.mesh.plugin import get_plugin

    return [getattr(sh, "board_round", None) for sh in get_plugin(dask_worker).shms.values()]


@pytest.fixture(scope="module")
def kron12(tmp_path_factory):
    from conftest import kron_with_roots

    return kron_with_roots(tmp_path_factory.mktemp("board"), 12, 6, 3)


@pytest.mark.distributed
def test_searches_through_the_board_on_a_local_cluster(kron12):
    from dbfs.cluster import client_for

    ds, edges, csr, roots = kron12
    kernel1.build_partitioned(ds.path, P=2, client=None, progress=False)
    with client_for(n_workers=2, threads_per_worker=1, quiet=True) as client:
        for use in (True, False):
            client.run(_set_use, use)
            with D.load_distributed(client, ds.path, kernel1.variant_name(2)) as dg:
                assert dg.shm == "" and len(dg.mesh_workers) == 2
                for root in roots:
                    res, _, rec = D.search(dg, root)
                    assert validate(edges, root, D.gather_parent(res)).ok
                    ref = bfs(csr, root, algorithm="do", stats=True)
                    assert [tuple(r[k] for k in KEY) for r in rec] == \
                        [tuple(r[k] for k in KEY) for r in ref.level_stats]
                    res.release()
                rounds = [r for rs in client.run(_rounds).values() for r in rs]
            if use:     # the same rounds on both workers: a start barrier and a counts round at least a search
                assert len(rounds) == 2 and rounds[0] == rounds[1] >= 2 * len(roots), rounds
            else:
                assert rounds == [0, 0], rounds
        client.run(_set_use, True)

"""Recovery of a distributed graph after a worker was lost during a search.

Contract
--------
:func:`_recover` closes the graph's mesh, waits (bounded) until the
scheduler or a direct ping shows which workers are gone, reloads every
partition whose worker is gone (or whose future was lost) from zarr onto
the least-loaded live worker (a nanny's restarted worker counts), opens a
new mesh and returns the event record it also appends to ``dg.events``:
``{"event": "worker-lost", "attempt", "error", "workers_lost",
"ranks_reloaded", "moved_to", "reload_time"}``. :func:`_is_peer_loss` tells
a lost peer (retry) from a genuine error (raise unchanged).
"""
from __future__ import annotations

import time

from dbfs.bfs.dask.mesh import _alive, _close_mesh, _open_mesh
from dbfs.bfs.dask.placement import DistributedGraph, _submit_loads
from dbfs.bfs.dask.transport import _PeerLost
from dbfs.bfs.dask.worker import _noop
from dbfs.errors import DbfsError

__all__ = ["_recover", "_is_peer_loss"]


def _lost_workers(dg: DistributedGraph) -> list:
    """Workers of ``dg`` that are gone: wait (bounded) for the scheduler to notice, pinging them meanwhile."""
    client = dg.client
    deadline = time.monotonic() + 30.0
    while True:
        alive = _alive(client)
        lost_w = [w for w in set(dg.rank_worker.values()) if w not in alive]
        if lost_w or time.monotonic() > deadline:
            return lost_w
        # a worker may be dead but not yet removed: ping the mesh workers directly
        res = client.run(_noop, workers=list(set(dg.rank_worker.values())), on_error="return")
        dead = [w for w, v in res.items() if isinstance(v, BaseException)]
        if dead:
            return dead
        time.sleep(0.2)


def _recover(dg: DistributedGraph, error: str, attempt: int) -> dict:
    """Reload lost partitions on live workers and open a new mesh; returns the event record."""
    client = dg.client
    t0 = time.perf_counter()
    _close_mesh(dg)
    deadline = time.monotonic() + 30.0
    lost_w = _lost_workers(dg)
    alive = _alive(client) - set(lost_w)
    if not alive:
        # all our workers gone: wait for replacements (a nanny restarts them)
        while not alive and time.monotonic() < deadline + 30.0:
            time.sleep(0.5)
            alive = _alive(client) - set(lost_w)
        if not alive:
            raise DbfsError("every Dask worker died during the search and none came back: restart the cluster")
    lost_ranks = [rk for rk in range(dg.P)
                  if dg.rank_worker[rk] in lost_w or dg.part_futures[rk].status != "finished"]
    load = {w: 0 for w in alive}
    for rk in range(dg.P):
        if rk not in lost_ranks and dg.rank_worker[rk] in load:
            load[dg.rank_worker[rk]] += 1
    moved = {}
    for rk in lost_ranks:
        w = min(sorted(load), key=lambda x: load[x])
        load[w] += 1
        dg.rank_worker[rk] = w
        moved[rk] = w
        dg.part_futures.pop(rk, None)
    _submit_loads(dg, lost_ranks)
    _open_mesh(dg)
    ev = {"event": "worker-lost", "attempt": attempt, "error": error[:300], "workers_lost": sorted(lost_w),
          "ranks_reloaded": sorted(lost_ranks), "moved_to": moved,
          "reload_time": time.perf_counter() - t0}
    dg.events.append(ev)
    return ev


def _is_peer_loss(exc) -> bool:
    return isinstance(exc, (_PeerLost, ConnectionError)) or type(exc).__name__ in ("KilledWorker",
                                                                                    "CommClosedError")

"""Placing a distributed graph on live workers, and placing it again after a lost worker.

Contract
--------
:func:`place` loads partitions onto their workers and opens the graph's
mesh; when a worker is lost meanwhile (:class:`dbfs.bfs.dask.mesh.waits.WorkerLost`,
or a peer of the mesh setup gone) it moves the partitions that worker held
(and every partition whose load did not finish) to the least-loaded live
workers and tries again, at most ``retries`` times, then fails with one
line (:class:`~dbfs.errors.DbfsError`) naming the lost workers and the fix.
:func:`_recover` does the same for a graph that was loaded, after a worker
was lost during a search or a validation: it closes the mesh, waits
(bounded) until the scheduler or a direct ping shows which workers are
gone, reloads the partitions from zarr and opens a new mesh; a nanny's
restarted worker counts as a live one. Both return event records, also
appended to ``dg.events``: ``{"event": "worker-lost", "stage", "attempt",
"error", "workers_lost", "ranks_reloaded", "moved_to", "reload_time"}``.
"""
from __future__ import annotations

import time

from dbfs.bfs.dask.mesh import _close_mesh, _open_mesh
from dbfs.bfs.dask.layout.assign import move_lost
from dbfs.bfs.dask.layout.placement import DistributedGraph, _submit_loads, gpu_budgets, worker_kinds
from dbfs.bfs.dask.mesh.transport import _PeerLost
from dbfs.bfs.dask.mesh.waits import LOOK_BACK, NANNY_WAIT, WorkerLost, alive_workers, is_peer_loss, run_within
from dbfs.bfs.dask.layout.worker import _noop
from dbfs.errors import DbfsError
from dbfs.progress import say
from dbfs.worker_deaths import said_since

__all__ = ["place", "_recover", "_is_peer_loss", "FIND_LOST_S", "REPLACE_S"]

FIND_LOST_S = 30.0     # seconds to wait for the scheduler to show which worker is gone
REPLACE_S = 60.0       # seconds to wait for a replacement when every worker of the graph is gone

_is_peer_loss = is_peer_loss


def _lost_workers(dg: DistributedGraph) -> list:
    """Workers of ``dg`` that are gone: wait (bounded) for the scheduler to notice, pinging them meanwhile."""
    client = dg.client
    mine = sorted(set(dg.rank_worker.values()))
    deadline = time.monotonic() + FIND_LOST_S
    while True:
        alive = alive_workers(client)
        lost_w = [w for w in mine if w not in alive]
        if lost_w or time.monotonic() > deadline:
            return lost_w
        # a worker may be dead but not yet removed: ping the graph's workers directly
        try:
            res = run_within(client, _noop, workers=mine, timeout=5.0, what="a ping of the graph's workers")
        except WorkerLost as exc:
            if exc.workers:
                return exc.workers
            res = {}
        except DbfsError:
            res = {}
        dead = [w for w in mine if isinstance(res.get(w), BaseException)]
        if dead:
            return dead
        time.sleep(0.2)


def _live_workers(client, lost_w) -> set:
    """The live workers, waiting (bounded) for a replacement when none is left."""
    alive = alive_workers(client) - set(lost_w)
    deadline = time.monotonic() + REPLACE_S
    while not alive and time.monotonic() < deadline:
        time.sleep(0.5)
        alive = alive_workers(client) - set(lost_w)
    if not alive:
        raise DbfsError(f"every Dask worker of the graph died ({', '.join(lost_w) or 'unknown'}) and none came "
                        f"back within {REPLACE_S:.0f} s: restart the cluster and rerun")
    return alive


def _move_lost(dg: DistributedGraph, error: str, stage: str, attempt: int) -> dict:
    """Move the partitions of lost workers (and unfinished loads) to live workers
    (:func:`dbfs.bfs.dask.layout.assign.move_lost`: a GPU worker with room for a GPU partition, else a CPU worker)."""
    t0 = time.perf_counter()
    lost_w = _lost_workers(dg)
    alive = _live_workers(dg.client, lost_w)
    lost_ranks = [rk for rk in range(dg.P) if dg.rank_worker[rk] not in alive
                  or rk not in dg.part_futures or dg.part_futures[rk].status != "finished"]
    kinds = worker_kinds(dg.client, sorted(alive))
    fresh = {w: k for w, k in kinds.items() if k == "gpu" and w not in dg.budgets}
    if fresh:       # a restarted GPU worker: ask its device
        dg.budgets.update(gpu_budgets(dg.client, fresh, dg.n_vertices, dg.device_memory_limit))
    dg.worker_kinds.update(kinds)
    moved, kind = move_lost(lost_ranks, dg.rank_kind, dg.rank_worker, kinds, dg.part_bytes or [0] * dg.P,
                            dg.budgets)
    for rk in lost_ranks:
        dg.rank_worker[rk] = moved[rk]
        if dg.rank_kind.get(rk, "cpu") == "gpu" and kind[rk] != "gpu":
            say(f"partition {rk} was on a lost GPU worker and no GPU worker has room: it is reloaded on CPU "
                f"worker {moved[rk]}")
        dg.rank_kind[rk] = kind[rk]
        old = dg.part_futures.pop(rk, None)
        if old is not None:
            old.release()
    return {"event": "worker-lost", "stage": stage, "attempt": attempt, "error": error[:300],
            "nanny": said_since(time.monotonic() - LOOK_BACK, NANNY_WAIT)[-3:],   # why, on a local cluster
            "workers_lost": sorted(lost_w), "ranks_reloaded": sorted(lost_ranks), "moved_to": moved,
            "kinds": {rk: kind[rk] for rk in lost_ranks},
            "reload_time": time.perf_counter() - t0}


def place(dg: DistributedGraph, ranks, stage: str = "load", retries: int = 2, attempt: int = 0) -> list:
    """Load partitions ``ranks`` onto their workers and open the mesh, moving partitions off lost workers.

    Parameters
    ----------
    dg : DistributedGraph
    ranks : list of int
        The partitions to load (the others are loaded already).
    stage : str
        Recorded in the events ("load", "search", "validation").
    retries : int
        Lost workers survived before giving up (DbfsError).
    attempt : int
        Attempts already made (numbers the events).

    Returns
    -------
    list of dict
        One event per lost worker survived (also appended to ``dg.events``).
    """
    events = []
    ranks = list(ranks)
    while True:
        t0 = time.perf_counter()
        try:
            _submit_loads(dg, ranks)
            t1 = time.perf_counter()
            _open_mesh(dg)
            dg.load_steps.update(partitions=t1 - t0, mesh=time.perf_counter() - t1)
            return events
        except _PeerLost as exc:
            if len(events) >= retries:
                raise DbfsError(f"loading CSR {dg.variant} of {dg.dataset_path.name} onto the Dask workers failed "
                                f"{len(events) + 1} times, last: {exc}: check the workers' logs (memory limit?) "
                                f"and rerun") from None
            _close_mesh(dg)
            ev = _move_lost(dg, f"{type(exc).__name__}: {exc}", stage, attempt + len(events) + 1)
            ev["reload_time"] += time.perf_counter() - t0
            whole = dg.source == "edges" and sorted(ranks) == list(range(dg.P))
            ranks = list(range(dg.P)) if whole else ev["ranks_reloaded"]     # a shuffle's ranks fail together
            dg.events.append(ev)
            events.append(ev)


def _recover(dg: DistributedGraph, error: str, attempt: int, stage: str = "search") -> dict:
    """Reload lost partitions on live workers and open a new mesh; returns the event record."""
    if dg.built:        # nothing in zarr to reload from (dbfs.bfs.dask.layout.built)
        raise DbfsError(f"the worker holding CSR {dg.variant} was lost during the {stage} ({error[:200]}): "
                        f"{dg.built}, so it cannot be reloaded; rerun (Kernel 1 runs again)")
    t0 = time.perf_counter()
    _close_mesh(dg)
    ev = _move_lost(dg, error, stage, attempt)
    dg.events.append(ev)
    place(dg, ev["ranks_reloaded"], stage, attempt=attempt)
    ev["reload_time"] = time.perf_counter() - t0
    return ev

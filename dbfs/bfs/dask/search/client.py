"""Distributed BFS, client side: load or build the partitions, pick the roots, search.

Contract
--------
``load_distributed(client, dataset_path, variant) -> DistributedGraph``
pins every partition of a Kernel 1 CSR variant (``csr/p<P>-<block|cyclic>``,
vertex ownership :class:`dbfs.partition.Partitioning`) onto a worker ONCE
(rank ``r`` on worker ``r % W`` of the sorted worker list, so P may exceed
the number of workers) and opens the exchange mesh.
``build_distributed(client, dataset_path, P)`` builds the same block
partitions from the dataset's edges on the workers that search them (no
variant in zarr: a CSR larger than the disk, split over GPU workers).

``search(dgraph, root, algorithm="do") -> (DistributedResult, seconds,
level_stats)``; ``search_many(dgraph, roots, ...)`` -> that triple per root,
the searches run one after another in one task a worker (one scheduler
round trip for the batch, not one a search). ``root`` is an ORIGINAL vertex id (a degree-ordered ``-deg``
variant searches in its own ids; :mod:`dbfs.bfs.dask.layout.relabel` maps the root
and, for the validation and :func:`gather_parent`, the parents). Parents stay on the workers, one future per
partition (``result.parents[rank]``): int64 in the partition's LOCAL index
order (global vertex ``Partitioning.to_global(rank, i)``), holding global
parent ids, ``parent[root] == root`` and -1 for unreached. ``level_stats``
has the CPU backend's keys (level, direction, frontier, edges, discovered,
time) plus ``kernel`` (seconds of per-partition compute on the slowest
worker), ``overhead`` (= time - kernel), ``rounds`` (message rounds in the
level) and ``exchange`` (seconds inside them). ``seconds`` is Graph500
Kernel 2 time measured on the workers (:mod:`dbfs.bfs.dask.search.bsp`), max over
workers; the client round trip around it is ``result.wall`` (a batch's
over its searches).

The parents are gathered or validated where they lie by
:mod:`dbfs.bfs.dask.search.parents` (``gather_parent``,
``validate_distributed``, ``validate_many_distributed``).

Method: the client only starts the search and collects counts; one
long-running task per worker (:func:`dbfs.bfs.dask.search.bsp._bsp_search`) runs
the whole level loop and exchanges frontier data directly with its peers.
Failures: every wait is bounded and watches the workers it depends on
(:mod:`dbfs.bfs.dask.mesh.waits`). A worker lost during the load moves its
partitions to live workers (:func:`dbfs.bfs.dask.layout.recovery.place`); during
a search (its peers see the mesh break at once; the client sees the
worker leave the cluster) the lost partitions are reloaded and the search
rerun (a batch: the whole batch); each at most ``retries`` times, recorded
in ``result.events`` and ``dgraph.events``
(:mod:`dbfs.bfs.dask.layout.recovery`), then one DbfsError naming what was lost.
Any other error in a search task closes that worker's end of the mesh,
the client gives the graph a fresh mesh and raises the error unchanged,
without retry.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np

from dbfs.bfs.dask.layout.assign import assign
from dbfs.bfs.dask.search.bsp import _bsp_search
from dbfs.bfs.dask.layout.gpu_part import ranks_device_bytes
from dbfs.bfs.dask.mesh import DEFAULT_TIMEOUT, _alive, _close_mesh, _open_mesh
from dbfs.bfs.dask.layout.placement import DistributedGraph, _variant_attrs, gpu_budgets, worker_kinds
from dbfs.bfs.dask.layout.recovery import _is_peer_loss, _recover, place
from dbfs.bfs.dask.layout.relabel import internal_roots, load_perm_future
from dbfs.bfs.dask.mesh.transport import TRANSPORTS, _PeerLost
from dbfs.bfs.dask.mesh.waits import gather_watched, wait_watched
from dbfs.bfs.dask.layout.worker import _pick_parent, _search_summary
from dbfs.bfs.policy import GPU_BEAMER_ALPHA, policy_from
from dbfs.errors import DbfsError
from dbfs.graph import check_root_id
from dbfs.kernel1 import variant_name
from dbfs.partition import Partitioning
from dbfs.store import open_dataset

__all__ = ["DistributedResult", "load_distributed", "build_distributed", "eligible_distributed", "search",
           "search_many", "ALGORITHMS"]

ALGORITHMS = ("do", "td", "bu")


@dataclass
class DistributedResult:
    """One distributed search: parents stay on the workers, one future per partition."""

    root: int
    parents: dict                           # rank -> Future (int64 slice in local index order)
    partitioning: Partitioning
    rank_worker: dict
    seconds: float
    wall: float
    level_stats: list | None
    algorithm: str = "do"
    opts: dict = field(default_factory=dict)
    events: list = field(default_factory=list)
    attempts: int = 1
    on_device: bool = False                 # device slices, the id width (DistributedGraph.parents_on_device)

    def release(self) -> None:
        self.parents.clear()


def _check_client(client, transport: str) -> None:
    if client is None:
        raise DbfsError("backend dask needs a Dask client: run with a cluster (drop --scheduler threads)")
    if transport not in TRANSPORTS:
        raise DbfsError(f"unknown transport {transport!r}: use one of {', '.join(TRANSPORTS)}")


def _workers_of(client, workers=None) -> list:
    """``workers`` sorted, or every live worker of the cluster; none is a one-line error."""
    ws = sorted(workers) if workers else sorted(_alive(client))
    if not ws:
        raise DbfsError("the Dask cluster has no workers: start some (dbfs cluster ...) and retry")
    return ws


def load_distributed(client, dataset_path, variant: str, workers=None, transport: str = "tcp",
                     timeout: float = DEFAULT_TIMEOUT, shared_memory: bool | None = None, placement: str = "block",
                     device_memory_limit: int | None = None, seed: int = 0) -> DistributedGraph:
    """Pin every partition of CSR ``variant`` onto a worker and open the exchange mesh.

    Parameters
    ----------
    client : distributed.Client
    dataset_path : path-like
        The dataset holding ``csr/<variant>``.
    variant : str
        A partitioned CSR variant (``p<P>-<block|cyclic>[-deg]``).
    workers : list of str, optional
        Addresses to use (default: all, sorted).
    transport : {"tcp", "tcp-threads", "dask"}
        The mesh; on a TLS cluster the TCP ones become ``"dask"`` (``dg.transport``
        says which one runs, ``dg.events`` why).
    timeout : float
        Seconds any single wait may take before a search is declared failed.
    shared_memory : bool, optional
        None (default): a shared frontier bitmap when every worker is on one
        host and the partitions are blocks: in /dev/shm for CPU workers, in
        device memory through CUDA IPC when every worker is a GPU worker
        (bottom-up levels then exchange only counts); False: frontier slices
        always go through the mesh. ``dg.shm`` says why it is off ('' when on),
        ``dg.frontier_sharing`` which one is on.
    placement : {"block", "random", "degree", "degree-low"}
        Which ranks GPU workers (Dask resource ``GPU``) hold: :mod:`dbfs.bfs.dask.layout.assign`.
        Without GPU workers rank r goes to worker ``r % W`` (in the policy's order).
    device_memory_limit : int, optional
        Device bytes each GPU worker may give to partitions (default: 85% of its free
        device memory); what does not fit goes to CPU workers.
    seed : int
        The ``random`` placement's seed.

    Returns
    -------
    DistributedGraph
        With ``load_time`` (wall), per-rank ``part_load_times`` (zarr read +
        checksum + hub on the worker) and ``mesh_time``.
    """
    _check_client(client, transport)
    t0 = time.perf_counter()
    dataset_path = Path(dataset_path)
    attrs = _variant_attrs(dataset_path, variant)
    relabelled = attrs.get("options", {}).get("relabel", "none") != "none"
    if placement.startswith("degree") and not relabelled:
        raise DbfsError(f"--placement {placement} places degree classes: it needs the degree-ordered variant; add "
                        f"--relabel degree")
    part = Partitioning(int(attrs["n_vertices"]), int(attrs["P"]), attrs["partitioning"])
    ws = _workers_of(client, workers)
    kinds = worker_kinds(client, ws)
    if device_memory_limit is not None and "gpu" not in kinds.values():
        raise DbfsError("--device-memory-limit does not apply: the cluster has no GPU worker (a worker with the "
                        "Dask resource GPU, e.g. `dbfs cluster local-gpu`); drop it or join a GPU cluster")
    if "gpu" in kinds.values() and part.code != 0:
        raise DbfsError(f"{variant} is cyclic: GPU workers hold block partitions only; build the variant with "
                        f"--partitioning block")
    nnz = [int(x) for x in attrs["nnz"]]
    part_bytes = ranks_device_bytes(part, nnz)
    budgets = gpu_budgets(client, kinds, part.n_vertices, device_memory_limit)
    rank_worker, rank_kind = assign(placement, part.P, kinds, part_bytes, budgets, seed)
    dg = DistributedGraph(client=client, dataset_path=dataset_path, variant=variant, partitioning=part,
                          nnz_total=int(attrs["nnz_total"]), rank_worker=rank_worker, part_futures={},
                          transport=transport, timeout=float(timeout), attrs=attrs,
                          shared_memory=False if shared_memory is False else None, placement=placement,
                          rank_kind=rank_kind, worker_kinds=kinds, budgets=budgets, part_bytes=part_bytes,
                          device_memory_limit=device_memory_limit)
    if relabelled:
        dg.perm_f = load_perm_future(client, dataset_path, variant, ws[0])
    try:
        place(dg, list(range(part.P)))
    except BaseException:
        dg.close()
        raise
    dg.load_time = time.perf_counter() - t0
    return dg


def build_distributed(client, dataset_path, P: int, dedupe: bool = True, workers=None, transport: str = "tcp",
                      timeout: float = DEFAULT_TIMEOUT, shared_memory: bool | None = None,
                      relabel: str = "none") -> DistributedGraph:
    """Build the ``P`` block partitions of a dataset's CSR on the workers that search them and open the mesh.

    Kernel 1 of each partition's rows from the dataset's edges, on the worker's GPU for a GPU worker
    (:func:`dbfs.bfs.dask.layout.worker._build_part`): the graph :func:`load_distributed` gives for variant
    ``p<P>-block`` (the same bytes per partition), without the variant in zarr. Rank ``r`` goes to worker
    ``r % W`` of the GPU workers, or of all workers when none has a GPU (sorted; ``workers`` to choose them).
    A lost worker's partitions are rebuilt on live workers (:mod:`dbfs.bfs.dask.layout.recovery`). ``dg.source`` is
    ``"edges"``; ``relabel="degree"`` (GPU workers only) numbers each partition's vertices by descending degree
    within the partition (the searches in those ids, roots and parents mapped on the partitions' workers); the
    other parameters are :func:`load_distributed`'s.
    """
    _check_client(client, transport)
    if int(P) < 1:
        raise DbfsError(f"--partitions {P} is invalid: use 1 or more")
    t0 = time.perf_counter()
    dataset_path = Path(dataset_path)
    ds = open_dataset(dataset_path.name, dataset_path.parent)
    ws = _workers_of(client, workers)
    kinds = worker_kinds(client, ws)
    use = [w for w in ws if kinds[w] == "gpu"] or ws
    if relabel not in ("none", "degree") or (relabel == "degree" and kinds[use[0]] != "gpu"):
        raise DbfsError(f"--relabel {relabel} of partitions built on the workers needs GPU workers (CPU workers "
                        f"search a stored degree-ordered variant): use --relabel none, or a GPU cluster")
    part = Partitioning(int(ds.n_vertices), int(P), "block")
    rank_worker = {rk: use[rk % len(use)] for rk in range(part.P)}
    attrs = {"n_vertices": part.n_vertices, "P": part.P, "partitioning": "block",
             "options": {"dedupe": bool(dedupe), "relabel": relabel}}
    dg = DistributedGraph(client=client, dataset_path=dataset_path, variant=variant_name(part.P, "block", dedupe,
                                                                                         "none"),
                          partitioning=part, nnz_total=0, rank_worker=rank_worker, part_futures={},
                          transport=transport, timeout=float(timeout), attrs=attrs,
                          shared_memory=False if shared_memory is False else None,
                          rank_kind={rk: kinds[w] for rk, w in rank_worker.items()},
                          worker_kinds={w: kinds[w] for w in use}, source="edges", dedupe=bool(dedupe),
                          relabel=relabel)
    if relabel != "none":
        dg.roots_of = partial(_roots_within, dg)
    try:
        place(dg, list(range(part.P)))
    except BaseException:
        dg.close()
        raise
    nnz = [int(dg.part_info[rk]["nnz"]) for rk in range(part.P)]
    dg.attrs.update(nnz=nnz, nnz_total=sum(nnz))
    dg.nnz_total, dg.part_bytes = sum(nnz), ranks_device_bytes(part, nnz)
    dg.load_time = time.perf_counter() - t0
    return dg


def _rows_nonempty(p, local):
    """(on a partition's worker) whether its vertices of local index ``local`` have entries in their rows."""
    ip = getattr(p, "indptr_host", p.indptr)
    local = np.asarray(local, np.int64)
    i = p.new_local(local) + p.pad                       # a partition relabelled within itself maps it
    return ip[i + 1] > ip[i]


def _ask_owners(dg: DistributedGraph, v: np.ndarray, fn, what: str) -> list:
    """``fn(partition, local indices)`` on each owner's worker for the global ids ``v`` it owns, asked at once
    (one round trip): ``[(rank, positions in v, answer)]``."""
    owner, local = dg.partitioning.owner_local(v)
    asks = []
    for rk in np.unique(owner).tolist():
        sel = np.flatnonzero(owner == rk)
        asks.append((rk, sel, dg.client.submit(fn, dg.part_futures[rk], local[sel], workers=[dg.rank_worker[rk]],
                                               allow_other_workers=False, pure=False)))
    got = gather_watched(dg.client, [f for _, _, f in asks], set(dg.rank_worker.values()), what, dg.timeout)
    return [(rk, sel, g) for (rk, sel, _), g in zip(asks, got)]


def _roots_within(dg: DistributedGraph, roots) -> list:
    """The ids the searches from ORIGINAL ``roots`` start at in partitions relabelled within themselves: each
    owner's new local indices of its roots, asked of the owners' workers at once (one round trip)."""
    out = np.empty(len(roots), np.int64)
    for rk, sel, new in _ask_owners(dg, np.asarray(roots, np.int64), _rows_new_local,
                                    f"the new ids of roots {list(roots)}"):
        out[sel] = dg.partitioning.vertex_range(rk).start + np.asarray(new, np.int64)
    return out.tolist()


def _rows_new_local(p, local):
    return np.asarray(p.new_local(np.asarray(local, np.int64)), np.int64)


def eligible_distributed(dg: DistributedGraph, cands) -> np.ndarray:
    """Which ORIGINAL vertices ``cands`` have a non-self-loop input edge: their CSR rows are not empty, read on the
    partitions' workers (a relabelled variant's ids mapped through its ``perm`` there). Its cost does not grow
    with the edge list, which is never read (Graph500 section 6's root sampling: same answer)."""
    v = np.asarray(cands, np.int64)
    if dg.perm_f is not None and v.size:
        v = gather_watched(dg.client, [internal_roots(dg.client, dg.perm_f, v)],
                           set(dg.rank_worker.values()), "the new ids of candidate roots", dg.timeout)[0]
    out = np.zeros(v.size, bool)
    for _, sel, mask in _ask_owners(dg, v, _rows_nonempty, "the eligibility of candidate roots"):
        out[sel] = mask
    return out


def _wait_search(dg: DistributedGraph, futs, what: str) -> None:
    """Wait for the search tasks; a vanished worker or a failed task ends the wait (see the module docstring)."""
    try:
        wait_watched(dg.client, futs, dg.mesh_workers, what, dg.timeout)
    except BaseException:
        for f in futs:
            f.cancel()
        raise
    if any(f.status == "error" for f in futs):
        # let the others finish (a failing worker closes its mesh end, so they stop at once)
        try:
            wait_watched(dg.client, futs, dg.mesh_workers, what, 2.0, stop_on_error=False)
        except (_PeerLost, DbfsError):
            pass
        excs = [f.exception() for f in futs if f.status == "error"]
        for f in futs:
            f.cancel()
        real = [e for e in excs if not _is_peer_loss(e)]
        if real:
            # a genuine error (not a lost worker): no retry; give the graph a fresh mesh, re-raise
            _close_mesh(dg)
            _open_mesh(dg)
            raise real[0]
        raise _PeerLost("; ".join(f"{type(e).__name__}: {e}" for e in excs[:3]))


def _searching(roots) -> str:
    return f"search from root {roots[0]}" if len(roots) == 1 else f"searches from roots {list(roots)}"


def _run_once(dg: DistributedGraph, roots, algorithm, pol, stats) -> list:
    """One task a mesh worker searching from ``roots`` (internal ids) one after another; per root
    (parents, seconds, wall, records), the wall being the batch's over its searches."""
    client = dg.client
    ranks_of = dg.ranks_of()
    pin = {"allow_other_workers": False, "pure": False}
    what = "the " + _searching(roots)
    t0 = time.perf_counter()
    futs, sums = [], []
    for i, w in enumerate(dg.mesh_workers):
        parts = [dg.part_futures[rk] for rk in ranks_of[i]]
        futs.append(client.submit(_bsp_search, dg.mesh_id, i, ranks_of, parts, tuple(int(r) for r in roots),
                                  algorithm, pol, dg.nnz_total, workers=[w], **pin))
        # submitted now, so each runs as its searches end, on its worker: the wait below is the only round
        sums.append(client.submit(_search_summary, futs[-1], workers=[w], **pin))
    _wait_search(dg, futs, what)
    wall = (time.perf_counter() - t0) / len(roots)
    summaries = gather_watched(client, sums, dg.mesh_workers, what, dg.timeout)
    lost = [s["lost"] for s in summaries if isinstance(s, dict)]
    if lost:
        raise _PeerLost("; ".join(lost[:3]))
    out = []
    for k in range(len(roots)):
        parents = {rk: client.submit(_pick_parent, f, k, rk, workers=[w], **pin)
                   for i, (f, w) in enumerate(zip(futs, dg.mesh_workers)) for rk in ranks_of[i]}
        mine = [s[k] for s in summaries]
        records = mine[0]["records"] if stats else None
        if records:
            for lv, r in enumerate(records):     # per worker: kernel vs exchange seconds, bytes sent in the level
                r["workers"] = [{"worker": i, "kind": dg.worker_kinds.get(w, "cpu"),
                                 "kernel": s["own"][lv][0], "exchange": s["own"][lv][1],
                                 "sent_bytes": s["own"][lv][2],
                                 **({"issue": s["own"][lv][3]} if len(s["own"][lv]) > 3 else {})}
                                for i, (w, s) in enumerate(zip(dg.mesh_workers, mine)) if lv < len(s["own"])]
                if r["workers"]:        # the slowest worker's kernel (an NCCL level's counts carry no peer seconds)
                    r["kernel"] = max(x["kernel"] for x in r["workers"])
                    r["overhead"] = max(0.0, r["time"] - r["kernel"])
        out.append(({rk: parents[rk] for rk in sorted(parents)}, max(s["seconds"] for s in mine), wall, records))
    return out


def search_many(dgraph: DistributedGraph, roots, algorithm: str = "do", policy: str = "beamer",
                alpha: float | None = None, beta: float | None = None, unexplored: str = "gap", tail: str = "cost",
                stats: bool = True, retries: int = 2) -> list:
    """Distributed searches from ORIGINAL vertices ``roots``, one after another in one task a worker (one
    scheduler round trip for the batch; each search timed on the workers as :func:`search` times it).

    Parameters
    ----------
    dgraph : DistributedGraph
    roots : sequence of int
        Original vertex ids.
    algorithm : {"do", "td", "bu"}
        Direction-optimizing (policy as in :mod:`dbfs.bfs.policy`), top-down or bottom-up only.
    policy, alpha, beta, unexplored, tail
        Options of :func:`dbfs.bfs.policy.policy_from`.
    stats : bool
        Return the per-level records.
    retries : int
        Reload + rerun the batch at most this many times after a lost worker.

    Returns
    -------
    list of (DistributedResult, float, list or None)
        Per root, in order: the result (``events`` records each recovery), Kernel 2 seconds, level records.
    """
    if algorithm not in ALGORITHMS:
        raise DbfsError(f"unknown algorithm {algorithm!r} for backend dask: use one of {', '.join(ALGORITHMS)}")
    rs = [check_root_id(r, dgraph.n_vertices) for r in roots]
    if not rs:
        return []
    if len(dgraph.part_futures) != dgraph.P:
        raise DbfsError("this DistributedGraph was closed: load it again with load_distributed(...)")
    if alpha is None and policy == "beamer" and dgraph.has_gpu:
        alpha = GPU_BEAMER_ALPHA        # the decisions --backend gpu makes (GPU kernels search here)
    pol = {"policy": policy, "alpha": alpha, "beta": beta, "unexplored": unexplored, "tail": tail}
    policy_from(**pol)  # check the parameters on the client
    ri = rs
    if dgraph.roots_of is not None:     # whoever opened the graph maps the roots (a CSR relabelled on its worker)
        ri = [int(x) for x in dgraph.roots_of(rs)]
    elif dgraph.perm_f is not None:     # a degree-ordered variant searches in its own ids
        ri = gather_watched(dgraph.client, [internal_roots(dgraph.client, dgraph.perm_f, rs)],
                            set(dgraph.rank_worker.values()), f"the new ids of roots {rs}", dgraph.timeout)[0]
        ri = [int(x) for x in ri]
    events = []
    attempt = 0
    while True:
        try:
            got = _run_once(dgraph, ri, algorithm, pol, stats)
            break
        except _PeerLost as exc:
            if attempt >= retries:
                raise DbfsError(f"distributed {_searching(rs)} failed {attempt + 1} time(s), last: {exc}; "
                                f"check the workers' logs") from None
            attempt += 1
            events.append(_recover(dgraph, f"{type(exc).__name__}: {exc}", attempt, "search"))
    return [(DistributedResult(root=r, parents=parents, partitioning=dgraph.partitioning,
                               rank_worker=dict(dgraph.rank_worker), seconds=seconds, wall=wall, level_stats=rec,
                               algorithm=algorithm, opts=dict(pol), events=list(events), attempts=attempt + 1,
                               on_device=dgraph.parents_on_device), seconds, rec)
            for r, (parents, seconds, wall, rec) in zip(rs, got)]


def search(dgraph: DistributedGraph, root: int, algorithm: str = "do", policy: str = "beamer",
           alpha: float | None = None, beta: float | None = None, unexplored: str = "gap", tail: str = "cost",
           stats: bool = True, retries: int = 2):
    """One distributed search from ORIGINAL vertex ``root``: :func:`search_many` of one root.

    Returns
    -------
    (DistributedResult, float, list or None)
        The result (``events`` records each recovery), Kernel 2 seconds, level records.
    """
    return search_many(dgraph, [root], algorithm, policy, alpha, beta, unexplored, tail, stats, retries)[0]

"""The parents of distributed searches, from the client: gathered or validated where they lie.

Contract
--------
``gather_parent(result, client=None, dgraph=None) -> int64 parent array``
(original ids, -1 unreached; small graphs and tests);
``validate_distributed(client, dataset_path, dgraph, result, root)`` and
``validate_many_distributed(client, dataset_path, dgraph, results, gpus)``
-> ValidationResult(s) against the INPUT edges (``levels`` None), no
N-sized array on the client. A search's parents are its
:class:`dbfs.bfs.dask.search.client.DistributedResult`'s futures, one a
partition, on the workers that searched (device arrays in original ids
where they stayed on a GPU worker, ``result.on_device``).

Method: the validation runs on the cluster's GPU workers, each checking its
share of the input edges for the batch in one pass
(:func:`dbfs.validate.gpus.validate_on_gpus`; parents kept on the devices
joined there over NCCL, :func:`dbfs.bfs.dask.search.validate_nccl.validate_on_mesh`,
or, all on one GPU worker, validated whole there,
:func:`dbfs.validate.gpus.validate_on_worker`),
or, with no GPU workers, as Dask tasks over one read of the edges
(:func:`dbfs.validate.dask.validate_partitioned_many`). A relabelled
variant's parents are mapped back to original ids on a worker first
(:mod:`dbfs.bfs.dask.layout.relabel`). Failures: every wait is bounded and
watches the workers holding the parents; when one is lost (its parents
with it), its partitions are reloaded on live workers, the searches rerun
(untimed, one batch) with their new parents put into the results, and the
step redone, at most ``retries`` times, recorded in each result's
``events`` (stage "validation"), then one DbfsError naming what was lost.

Encoding: parent slices int64 in a partition's local order, global ids
(:class:`dbfs.partition.Partitioning`).

Reference: Graph 500 Benchmark 1 specification 3.0.1, section 8 "Validation".
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from dbfs.bfs.dask.layout.placement import DistributedGraph
from dbfs.bfs.dask.layout.recovery import _recover
from dbfs.bfs.dask.layout.relabel import original_slices
from dbfs.bfs.dask.layout.worker import _host_slice
from dbfs.bfs.dask.mesh import DEFAULT_TIMEOUT
from dbfs.bfs.dask.mesh.transport import _PeerLost
from dbfs.bfs.dask.mesh.waits import gather_watched
from dbfs.bfs.dask.search.client import DistributedResult, _searching, search_many
from dbfs.bfs.dask.search.validate_nccl import validate_on_mesh
from dbfs.errors import DbfsError
from dbfs.validate.dask import validate_partitioned_many
from dbfs.validate.gpus import validate_on_gpus, validate_on_worker

__all__ = ["gather_parent", "validate_distributed", "validate_many_distributed"]


def _rerun(dg: DistributedGraph, results: list, error: str, stage: str, attempt: int) -> dict:
    """After a worker holding the parents of ``results`` was lost: reload the lost partitions once, search
    from each result's root again (same algorithm and policy; one batch for them all) and put the new
    parents into it; returns the event (appended to every result's events)."""
    ev = _recover(dg, error, attempt, stage)
    ev["rerun_seconds"] = 0.0
    groups = {}                 # the searches of one algorithm and policy rerun as one batch
    for result in results:
        groups.setdefault((result.algorithm, tuple(sorted(result.opts.items()))), []).append(result)
    for (algorithm, opts), group in groups.items():
        got = search_many(dg, [r.root for r in group], algorithm, stats=False, **dict(opts))
        for result, (new, seconds, _) in zip(group, got):
            result.parents, result.rank_worker, result.on_device = new.parents, new.rank_worker, new.on_device
            ev["rerun_seconds"] += seconds
            result.events += [ev] + new.events
    return ev


def _with_parents(dg, results: list, step, what: str, retries: int):
    """``step()`` (which reads the parents of ``results`` on the workers); after a lost worker the parents
    are recomputed (:func:`_rerun`) and ``step`` redone, at most ``retries`` times, else one DbfsError."""
    attempt = 0
    roots = ", ".join(str(r.root) for r in results)
    while True:
        try:
            return step()
        except _PeerLost as exc:
            err = f"{type(exc).__name__}: {exc}"
        if dg is None:
            raise DbfsError(f"{what}: the parents of the search(es) from root(s) {roots} were lost with their "
                            f"worker ({err}): search again")
        if attempt >= retries:
            raise DbfsError(f"{what} failed {attempt + 1} time(s) after losing a worker, last: {err}: check the "
                            f"workers' logs (memory limit?) and rerun")
        attempt += 1
        _rerun(dg, results, err, "validation", attempt)


def gather_parent(result: DistributedResult, client=None, dgraph: DistributedGraph | None = None,
                  retries: int = 2) -> np.ndarray:
    """The whole parent array on the client (small graphs and tests only).

    Parameters
    ----------
    result : DistributedResult
    client : distributed.Client, optional
        Default: the client of the parent futures.
    dgraph : DistributedGraph, optional
        The searched graph: with it, parents lost with a worker are
        recomputed (partitions reloaded, search rerun) instead of a DbfsError.
    retries : int
        Lost workers survived (with ``dgraph``).

    Returns
    -------
    numpy.ndarray
        int64, one entry per vertex in global ids, -1 for unreached.
    """
    part = result.partitioning
    if client is None:
        client = result.parents[0].client
    timeout = dgraph.timeout if dgraph is not None else DEFAULT_TIMEOUT

    def step():
        futs = _original(dgraph, result, client)
        return gather_watched(client, futs, set(result.rank_worker.values()),
                              f"gathering the parents of the search from root {result.root}", timeout)

    return part.join(_with_parents(dgraph, [result], step, "gathering the parents", retries))


def _original(dg, result: DistributedResult, client) -> list:
    """The int64 parent slices of ``result`` in original ids (relabelled variants are mapped back on a worker,
    slices kept on the device copied to the host on theirs)."""
    futs = [result.parents[rk] for rk in range(result.partitioning.P)]
    if result.on_device:
        futs = [client.submit(_host_slice, f, workers=[result.rank_worker[rk]], allow_other_workers=False,
                              pure=False) for rk, f in enumerate(futs)]
    if dg is None or dg.perm_f is None:
        return futs
    return original_slices(client, dg.perm_f, result.partitioning, futs)


def validate_distributed(client, dataset_path, dgraph: DistributedGraph, result: DistributedResult, root,
                         chunk_edges: int | None = None, retries: int = 2):
    """Graph500 validation of ``result`` as Dask tasks (:mod:`dbfs.validate.dask`).

    Every wait is bounded and watches the workers holding the parents; when
    one is lost, its partitions are reloaded on live workers, the search
    from ``result.root`` is rerun (untimed; ``result``'s parents replaced,
    the event appended to ``result.events`` with ``stage`` "validation")
    and the validation redone.

    Parameters
    ----------
    client : distributed.Client
    dataset_path : path-like
        The dataset whose stored edges are checked.
    dgraph : DistributedGraph
    result : DistributedResult
        Its parent slices stay on their workers.
    root : int
    chunk_edges : int, optional
        Edges per validation task (default: the stored chunks).
    retries : int
        Lost workers survived before a one-line DbfsError.

    Returns
    -------
    dbfs.validate.ValidationResult
        With ``levels`` None.
    """
    return _validate_tasks(client, dataset_path, dgraph, [result], [int(root)], chunk_edges, retries)[0]


def _validate_tasks(client, dataset_path, dgraph, results: list, roots: list, chunk_edges, retries: int) -> list:
    """:func:`dbfs.validate.dask.validate_partitioned_many` of ``results`` (checked against ``roots``) as Dask
    tasks on any workers, one read of the edges for all; a lost worker survived as in
    :func:`validate_distributed`."""
    what = "the " + _searching(roots)

    def step():
        watch = set().union(*(set(r.rank_worker.values()) for r in results))

        def gather(futs, step_what):
            return gather_watched(client, futs, watch, f"{step_what} of {what}", dgraph.timeout)

        return validate_partitioned_many(client, Path(dataset_path),
                                         [(root, _original(dgraph, r, client)) for r, root in zip(results, roots)],
                                         results[0].partitioning, chunk_edges=chunk_edges, gather=gather)

    return _with_parents(dgraph, results, step, f"the validation of {what}", retries)


def validate_many_distributed(client, dataset_path, dgraph: DistributedGraph, results: list, gpus: list,
                              retries: int = 2) -> list:
    """Graph500 validation of several searches together: on the GPU workers ``gpus``
    (:func:`dbfs.validate.gpus.validate_on_gpus`: each checks its share of the input edges, one pass for the
    batch; parents kept on the devices are joined there over NCCL instead,
    :func:`dbfs.bfs.dask.search.validate_nccl.validate_on_mesh`, or validated whole on the one GPU worker
    holding them, :func:`dbfs.validate.gpus.validate_on_worker`), or, with no GPU workers, as Dask tasks on
    any workers (:func:`dbfs.validate.dask.validate_partitioned_many`: one table of the batch, one read of
    the edges). A lost worker is survived as in :func:`validate_distributed` (every search of the batch
    rerun).

    Returns
    -------
    list of dbfs.validate.ValidationResult
        In the order of ``results``; ``levels`` None.
    """
    roots = [r.root for r in results]
    if not gpus:
        return _validate_tasks(client, dataset_path, dgraph, results, roots, None, retries)

    def step():
        watch = set(gpus).union(*(set(r.rank_worker.values()) for r in results))

        def gather(futs, what):
            return gather_watched(client, futs, watch, what, dgraph.timeout)

        if dgraph is not None and dgraph.parents_on_device and dgraph.perm_f is None and all(
                r.on_device and r.rank_worker == dgraph.rank_worker for r in results):
            if dgraph.parents_held == "mesh":
                return validate_on_mesh(dgraph, results, gather)      # the parents joined on the devices
            part = results[0].partitioning      # one GPU worker holds them all: validated there, not copied
            return validate_on_worker(client, Path(dataset_path), [(r.root, [r.parents[rk] for rk in range(part.P)])
                                                                  for r in results], part, dgraph.mesh_workers[0],
                                      gather)
        return validate_on_gpus(client, Path(dataset_path), [(r.root, _original(dgraph, r, client)) for r in results],
                                results[0].partitioning, gpus, gather=gather)

    return _with_parents(dgraph, results, step, f"the validation of the {_searching(roots)}", retries)

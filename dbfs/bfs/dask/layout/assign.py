"""Which worker holds which partition: the placement policies (pure functions).

Contract
--------
:func:`assign` maps the P ranks of a partitioned CSR variant onto a cluster's
workers, each of kind ``"gpu"`` (a worker that declares the Dask resource
``GPU``, as ``dbfs cluster local-gpu`` and the ``slurm-gpu`` job script start
them) or ``"cpu"``, and returns ``(rank -> worker, rank -> kind)``. A worker
holds partitions of its own kind only. Policies (the order in which ranks
are offered to the GPU workers):

- ``block``: rank order (the CPU-only placement of every earlier dbfs:
  rank ``r`` on worker ``r % W``);
- ``random``: a permutation of the ranks seeded by ``seed`` (the same
  placement for the same seed, whatever the worker order given);
- ``degree`` / ``degree-low``: on a degree-ordered variant (``--relabel
  degree``: rank 0 holds the highest-degree vertices) the hubs' ranks first,
  or the lowest-degree ranks first (Totem's two specialisations: which one
  the GPU should get is decided by measurement, docs/BENCHMARKS.md).

A GPU worker takes an offered rank while its device budget holds the
rank's bytes (:func:`dbfs.bfs.dask.layout.gpu_part.device_bytes`; the budget is
``--device-memory-limit`` or the device's free memory, less what the
worker needs once, :func:`dbfs.bfs.dask.layout.gpu_part.worker_bytes`), round
robin over the GPU workers with room; the ranks no GPU worker can take go
round robin to the CPU workers. With no CPU worker, ranks that do not fit
are a one-line :class:`dbfs.errors.DbfsError` naming the bytes needed and
``--device-memory-limit``.

:func:`move_lost` is the recovery's choice for ranks of lost workers: a
GPU worker with room for a lost GPU rank, else the least loaded CPU
worker (said in the event), else the least loaded worker of any kind.

Method: greedy first fit in offer order, as Totem's partitioner fills
the accelerator up to its memory and leaves the rest to the host
(Gharaibeh, Beltrao Costa, Santos-Neto and Ripeanu, "A Yoke of Oxen and a
Thousand Chickens for Heavy Lifting Graph Processing", PACT 2012).
"""
from __future__ import annotations

import numpy as np

from dbfs.errors import DbfsError
from dbfs.units import human

__all__ = ["PLACEMENTS", "assign", "offer_order", "move_lost"]

PLACEMENTS = ("block", "random", "degree", "degree-low")


def offer_order(policy: str, P: int, seed: int = 0) -> list:
    """The order in which the ranks are offered to the GPU workers."""
    if policy == "block":
        return list(range(P))
    if policy == "random":
        return [int(x) for x in np.random.default_rng(seed).permutation(P)]
    if policy == "degree":          # a degree-ordered variant: rank 0 holds the hubs
        return list(range(P))
    if policy == "degree-low":
        return list(range(P - 1, -1, -1))
    raise DbfsError(f"unknown placement {policy!r}: use one of {', '.join(PLACEMENTS)}")


def assign(policy: str, P: int, kinds: dict, part_bytes: list, budgets: dict, seed: int = 0):
    """Place ranks 0..P-1 (see the module docstring).

    Parameters
    ----------
    policy : {"block", "random"}
    P : int
    kinds : dict
        worker address -> "gpu" | "cpu".
    part_bytes : list of int
        Device bytes of each rank if held by a GPU worker.
    budgets : dict
        GPU worker address -> device bytes it may give to partitions.
    seed : int

    Returns
    -------
    (dict, dict)
        rank -> worker address, rank -> kind.
    """
    gpus = sorted(w for w, k in kinds.items() if k == "gpu")
    cpus = sorted(w for w, k in kinds.items() if k != "gpu")
    if not gpus and not cpus:
        raise DbfsError("the Dask cluster has no workers: start some (dbfs cluster ...) and retry")
    order = offer_order(policy, P, seed)
    if not gpus:        # CPU-only: rank r on worker r % W, whatever the policy's order of offers
        return {rk: cpus[i % len(cpus)] for i, rk in enumerate(order)}, {rk: "cpu" for rk in range(P)}
    left = {w: int(budgets.get(w, 0)) for w in gpus}
    rank_worker, rank_kind, rest = {}, {}, []
    turn = 0
    for rk in order:
        need = int(part_bytes[rk])
        for i in range(len(gpus)):
            w = gpus[(turn + i) % len(gpus)]
            if left[w] >= need:
                left[w] -= need
                rank_worker[rk], rank_kind[rk] = w, "gpu"
                turn = (turn + i + 1) % len(gpus)
                break
        else:
            rest.append(rk)
    if rest and not cpus:
        need = sum(int(part_bytes[rk]) for rk in rest)
        raise DbfsError(f"partition(s) {sorted(rest)} ({human(need)} on a device) do not fit in the GPU workers' "
                        f"device memory ({', '.join(human(b) for b in budgets.values())} per worker): add CPU "
                        f"workers, GPU workers or memory (--device-memory-limit)")
    for i, rk in enumerate(sorted(rest)):
        rank_worker[rk], rank_kind[rk] = cpus[i % len(cpus)], "cpu"
    return rank_worker, rank_kind


def move_lost(lost_ranks, rank_kind: dict, rank_worker: dict, kinds: dict, part_bytes: list, budgets: dict):
    """New homes for ``lost_ranks`` among the live workers ``kinds`` (address -> kind).

    Returns (rank -> worker, rank -> kind); ``rank_worker``/``rank_kind``
    describe the ranks that stay where they are."""
    live = sorted(kinds)
    if not live:
        raise DbfsError("every Dask worker is gone: restart the cluster and rerun")
    load = {w: 0 for w in live}
    used = {w: 0 for w in live}
    for rk, w in rank_worker.items():
        if rk not in lost_ranks and w in load:
            load[w] += 1
            used[w] += int(part_bytes[rk]) if rank_kind.get(rk) == "gpu" else 0
    moved, kind = {}, {}
    for rk in lost_ranks:
        home = None
        if rank_kind.get(rk) == "gpu":
            room = [w for w in live if kinds[w] == "gpu" and used[w] + int(part_bytes[rk]) <= budgets.get(w, 0)]
            if room:
                home = min(room, key=lambda w: (load[w], w))
        if home is None:
            cpu = [w for w in live if kinds[w] != "gpu"]
            home = min(cpu or live, key=lambda w: (load[w], w))
        kind[rk] = kinds[home]                   # a worker holds partitions of its own kind only
        if kinds[home] == "gpu":
            used[home] += int(part_bytes[rk])
        load[home] += 1
        moved[rk] = home
    return moved, kind

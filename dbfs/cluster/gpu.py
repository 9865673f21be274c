"""A GPU cluster on this host: dask-cuda's LocalCUDACluster plus optional CPU workers.

Contract
--------
:func:`start_local_gpu` starts, for a ``type: local-gpu`` profile, one
dask-cuda worker process per visible GPU (``gpus``: the devices, null for
all; each worker sees its GPU as device 0 and declares the Dask resource
``GPU=1``, which is how dbfs tells GPU workers from CPU workers,
:func:`dbfs.bfs.dask.layout.placement.worker_kinds`) and ``cpu_workers`` plain
worker processes of ``cpu_threads`` threads each, which see no GPU
(``CUDA_VISIBLE_DEVICES`` empty), all on one scheduler bound to 127.0.0.1.
It returns ``(client, close)``. Without a GPU, or without dask-cuda (the
``gpu`` extra), it fails in one line naming the extra and the CPU profile
to use instead.

Method: the CPU workers are added to the LocalCUDACluster's worker
specification (distributed's ``SpecCluster``: one spec per worker, then
``scale`` to the spec's size), so one cluster object owns and closes
both kinds. dask-cuda's device spilling is off (``device_memory_limit=0``) and so is
distributed's host spilling and pausing (:data:`NO_SPILL`): dbfs keeps its
partitions in device and pinned host memory on purpose and bounds them
itself (``--device-memory-limit``, the placement's host check).

Reference: dask-cuda ``LocalCUDACluster`` (docs.rapids.ai/api/dask-cuda).
"""
from __future__ import annotations

import os

import dask
from distributed import Client, Nanny

from dbfs.cluster import _workers_ignore_sigint, worker_env
from dbfs.errors import DbfsError
from dbfs.progress import say

__all__ = ["start_local_gpu", "gpu_count", "GPU_RESOURCE"]

GPU_RESOURCE = "GPU"
#: the workers' Dask memory settings: never spill (pickle) a held result to disk, never pause for host memory.
#: A partition holds device memory and pinned host memory (the adjacency the device leaves, which can be
#: most of the host's memory): pickling it would copy the device piece to the host. dbfs bounds both
#: memories itself; the nanny still restarts a worker past 95% of its memory limit.
NO_SPILL = {"distributed.worker.memory.target": False, "distributed.worker.memory.spill": False,
            "distributed.worker.memory.pause": False}
#: the same as environment variables, for the workers a SLURM job script starts
NO_SPILL_ENV = {"DASK_" + k.upper().replace(".", "__"): str(v) for k, v in NO_SPILL.items()}


def gpu_count() -> int:
    """CUDA devices this process sees (0 without CuPy or a driver)."""
    try:
        import cupy as cp  # deferred: cupy

        return int(cp.cuda.runtime.getDeviceCount())
    except Exception:       # no CuPy, no driver, no device: all mean "no GPU here"
        return 0


def _need(prof_name: str) -> None:
    n = gpu_count()
    try:
        import dask_cuda  # deferred: dask_cuda  # noqa: F401
        has_cuda = True
    except ImportError:
        has_cuda = False
    if n == 0:
        raise DbfsError(f"cluster profile {prof_name} needs a GPU and dask-cuda (pip install -e '.[gpu]'): this "
                        f"machine has no usable GPU; use --cluster local (CPU workers) instead")
    if not has_cuda:
        raise DbfsError(f"cluster profile {prof_name} needs dask-cuda: pip install -e '.[gpu]' (or use --cluster "
                        f"local for CPU workers)")


def _devices(gpus, visible: str | None = None) -> str | None:
    """The ``CUDA_VISIBLE_DEVICES`` list dask-cuda gets for a profile's ``gpus`` (None: every device this
    process sees). The profile's numbers count the devices this process sees, as CUDA numbers them: under
    ``CUDA_VISIBLE_DEVICES=2,3`` (``visible``, default the environment's; a SLURM allocation sets it)
    ``gpus: [0]`` is device 2, not the host's device 0. A number past the devices seen is refused in one line."""
    if gpus is None:
        return None
    want = [str(g).strip() for g in gpus] if isinstance(gpus, list) else [g.strip() for g in str(gpus).split(",")]
    seen = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    if not seen or not seen.strip():
        return ",".join(want)
    ids = [d.strip() for d in seen.split(",") if d.strip()]
    bad = [g for g in want if not g.isdigit() or int(g) >= len(ids)]
    if bad:
        raise DbfsError(f"cluster profile gpus {bad[0]!r} is not one of the {len(ids)} device(s) this process sees "
                        f"(CUDA_VISIBLE_DEVICES={seen}): number them 0 to {len(ids) - 1}, or leave gpus out for all")
    return ",".join(ids[int(g)] for g in want)


def start_local_gpu(prof: dict, quiet: bool = False, name: str = "local-gpu", ports: tuple = (0, 0),
                    config: dict | None = None):
    """(client, close) of a LocalCUDACluster with ``prof["cpu_workers"]`` CPU workers added (module docstring):
    its scheduler and dashboard on ``ports`` of 127.0.0.1 (0: any free port), its nannies created under the
    Dask ``config`` given (e.g. :meth:`dbfs.worker_logs.DaskLog.local_cluster_config`)."""
    _need(name)
    from dask_cuda import LocalCUDACluster  # deferred: dask_cuda

    t_gpu = int(prof.get("threads_per_gpu_worker") or 1)
    n_cpu = int(prof.get("cpu_workers") or 0)
    t_cpu = int(prof.get("cpu_threads") or 1)
    mem = prof.get("memory_limit") or "auto"

    with _workers_ignore_sigint(), dask.config.set({"distributed.worker.profile.enabled": False, **NO_SPILL,
                                                    **(config or {})}):
        cluster = LocalCUDACluster(CUDA_VISIBLE_DEVICES=_devices(prof.get("gpus")), threads_per_worker=t_gpu,
                                   memory_limit=mem, device_memory_limit=0, host="127.0.0.1",
                                   scheduler_port=ports[0], dashboard_address=f"127.0.0.1:{ports[1]}",
                                   resources={GPU_RESOURCE: 1}, silence_logs=40)
        n_gpu = len(cluster.worker_spec)
        env = {**worker_env(t_cpu), "CUDA_VISIBLE_DEVICES": ""}
        for i in range(n_cpu):
            cluster.worker_spec[f"cpu-{i}"] = {"cls": Nanny, "options": {
                "nthreads": t_cpu, "memory_limit": mem, "host": "127.0.0.1", "env": env, "silence_logs": 40}}
        if n_cpu:
            cluster.scale(len(cluster.worker_spec))
        client = Client(cluster)
        client.wait_for_workers(n_gpu + n_cpu, timeout=float(prof.get("wait") or 120))
    if not quiet:
        say(f"started LocalCUDACluster ({n_gpu} GPU worker(s) x {t_gpu} thread, {n_cpu} CPU worker(s) x {t_cpu} "
            f"thread{'s' if t_cpu > 1 else ''}); dashboard: {client.dashboard_link}")
    return client, cluster.close


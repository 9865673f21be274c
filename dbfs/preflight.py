"""Will a run fit this machine? Checked before any work (refused in one line, never by the OOM killer).

Contract
--------
:func:`check_run` raises a one-line :class:`~dbfs.errors.DbfsError` naming
the memory that is short, what the run needs, what the machine has and by
how much, with the fix, when the searches of ``backend`` cannot hold the
graph; it returns the estimate (a dict) otherwise. ``dbfs run`` and ``dbfs
bfs`` call it before a cluster starts or anything is generated.

Method: upper bounds from the graph's size alone (N vertices, M input
edges). The CSR holds at most 2M entries (each edge both ways, before
self-loops and duplicates are dropped, a share that shrinks as SCALE grows:
docs/BENCHMARKS.md) of the vertex-id width (:func:`dbfs.graph.id_dtype`) and 8 (N + 1)
bytes of row offsets; a search and its validation add about 40 bytes per
vertex (parents, queues, bitmaps, the validation's per-vertex arrays).

- ``cpu``: the CSR is loaded into this process: host memory available
  (``MemAvailable``) >= CSR + 40 N.
- ``gpu``: the CSR stays on the device when CSR + 30 N fits the device's
  memory, else (part of) its adjacency lives in pinned host memory
  (zero-copy): refused only when the device's total memory and the host
  memory available together cannot hold CSR + 30 N.
- ``dask``: the partitions live on the cluster's workers, whose memory this
  process cannot see before the cluster starts: nothing is checked by
  :func:`check_run`. Once it has started (before anything is generated),
  :func:`check_cluster` refuses a graph whose CSR and each worker's
  N-sized claim array exceed all the memory its workers have, host
  (their memory limits) and device (their GPUs) together: a run that
  cannot fit anywhere on the cluster, however it is split. A worker
  without a memory limit makes the cluster's host memory unknown: then
  nothing is refused. :func:`check_gpu_ranks` checks
  partitions built on GPU workers (P > 1): each worker's free device
  memory >= CSR / P + 30 N (an average rank and the search's arrays over
  all N), or, one rank a GPU worker built as one shuffle, >= its row
  starts and 30 N with the rest of every rank in the host memory available
  (pinned); a worker that cannot load a stored partition fails the load in
  one line.

Encoding: bytes as ints; the estimate dict has ``csr``, ``per_vertex`` and
the resource checked. Reference: Graph500 3.0.1's memory estimate in
``make_graph_data_structure`` (the reference refuses too large a SCALE the
same way, before generating).
"""
from __future__ import annotations

import numpy as np
import psutil

from dbfs.errors import DbfsError
from dbfs.graph import id_dtype, index_dtype
from dbfs.units import human

__all__ = ["csr_bytes", "host_available", "device_total", "check_run", "check_cluster", "check_gpu_ranks",
           "PER_VERTEX"]

PER_VERTEX = 40          # bytes per vertex a search and its validation add (upper bound)
GPU_PER_VERTEX = 30      # bytes per vertex of the GPU backend's device working set


def csr_bytes(n: int, m: int) -> tuple[int, int]:
    """(row offsets, adjacency) bytes of the CSR of ``m`` input edges over ``n`` vertices (upper bound)."""
    return 8 * (n + 1), 2 * m * np.dtype(index_dtype(n)).itemsize


def host_available() -> int:
    """Host memory available to a new allocation (``MemAvailable``), bytes."""
    return int(psutil.virtual_memory().available)


def device_total() -> int | None:
    """The current CUDA device's memory, bytes (None without CuPy or a device)."""
    try:
        import cupy as cp  # deferred: cupy

        return int(cp.cuda.runtime.memGetInfo()[1])
    except Exception:      # no CuPy, driver or device: the GPU backend refuses to run anyway
        return None


def _what(n: int, m: int, scale: int | None) -> str:
    """The graph as the messages name it."""
    return f"SCALE {scale}" if scale is not None else f"a graph of {n:,} vertices and {m:,} edges"


def _short(what: str, need: int, have: int, fix: str) -> DbfsError:
    return DbfsError(f"{what}: the run needs up to {human(need)}, this machine has {human(have)} "
                     f"({human(need - have)} short): {fix}")


def check_run(backend: str, n: int, m: int, scale: int | None = None, host: int | None = None,
              device: int | None = None) -> dict:
    """Refuse (one line) a run whose searches cannot fit; see the module docstring.

    Parameters
    ----------
    backend : str
    n, m : int
        Vertices and input edges.
    scale : int, optional
        For the message.
    host, device : int, optional
        The memory to check against (default: this machine's).
    """
    ip, ix = csr_bytes(n, m)
    est = {"csr": ip + ix, "per_vertex": PER_VERTEX * n}
    what = _what(n, m, scale)
    if backend == "cpu":
        need = ip + ix + PER_VERTEX * n
        have = host_available() if host is None else host
        est["host"] = need
        if need > have:
            raise _short(f"{what} with --backend cpu does not fit host memory (the CSR is loaded whole)", need,
                         have, "use a smaller --scale, or --backend dask on a cluster with more memory")
    elif backend == "gpu":
        dev = device_total() if device is None else device
        need_dev = ip + ix + GPU_PER_VERTEX * n
        have = host_available() if host is None else host
        est["device"] = need_dev
        if dev is not None and need_dev > dev + have:
            raise _short(f"{what} with --backend gpu fits neither the GPU ({human(dev)}) nor the GPU and host "
                         f"memory together ({human(have)} available)", need_dev, dev + have,
                         "use a smaller --scale, or --backend dask with GPU and CPU workers (--cluster local-gpu)")
    return est


def check_cluster(n: int, m: int, host: dict, device: dict, scale: int | None = None) -> dict:
    """Refuse (one line, before any work) a dask run that no split of the graph over the cluster can hold.

    Parameters
    ----------
    n, m : int
        Vertices and input edges.
    host : dict
        Worker -> its memory limit in bytes (0 or None: no limit, the cluster's memory unknown).
    device : dict
        GPU worker -> its device's memory in bytes.
    scale : int, optional
        For the message.

    Returns
    -------
    dict
        ``{"need": bytes, "have": bytes}``, or ``{}`` when the host memory is unknown.
    """
    if not host or any(not v for v in host.values()):
        return {}
    ip, ix = csr_bytes(n, m)
    need = ip + ix + len(host) * n * np.dtype(id_dtype(n)).itemsize
    h, d = sum(int(v) for v in host.values()), sum(int(v) for v in device.values())
    if need > h + d:
        what = _what(n, m, scale)
        raise DbfsError(f"{what} does not fit the Dask cluster: its CSR and each worker's search arrays need up to "
                        f"{human(need)}, its {len(host)} worker(s) have {human(h + d)} of memory ({human(h)} host, "
                        f"{human(d)} device; {human(need - h - d)} short): use a smaller --scale, or a cluster with "
                        f"more memory (more workers, nodes or GPUs)")
    return {"need": need, "have": h + d}


def check_gpu_ranks(n: int, m: int, P: int, free: dict, scale: int | None = None, host: int | None = None) -> dict:
    """Refuse (one line, before Kernel 1) P > 1 partitions built on GPU workers that cannot hold them.

    Parameters
    ----------
    n, m, P : int
        Vertices, input edges, partitions (one a GPU worker, or several).
    free : dict
        GPU worker -> free device bytes (asked on the workers).
    scale : int, optional
        For the message.
    host : int, optional
        Host bytes the ranks may take in pinned memory where one rank a GPU worker is built as one shuffle
        (:mod:`dbfs.kernel1.shuffle_gpu` splits a rank past the device); None: every rank whole on its device.

    Returns
    -------
    dict
        ``{"per_worker": bytes the fullest worker needs, "free": the smallest free}``, and ``"host"``: the
        pinned host bytes the split ranks need together (0 when every rank fits its device).
    """
    if not free or P < 1:
        return {}
    ip, ix = csr_bytes(n, m)
    ranks = -(-int(P) // len(free))                      # ranks on the fullest worker
    need = ranks * (ip + ix) // int(P) + GPU_PER_VERTEX * n
    w, have = min(free.items(), key=lambda kv: kv[1])
    what = _what(n, m, scale)
    if need <= have:
        return {"per_worker": need, "free": have, "host": 0}
    if host is not None and ranks == 1:      # the rest of each rank in pinned host memory: its row starts and the
        least = ip // int(P) + GPU_PER_VERTEX * n               # searches' arrays stay on the device
        pinned = (need - have) * int(P)
        if least <= have and pinned <= int(host):
            return {"per_worker": need, "free": have, "host": pinned}
        short = (f"GPU worker {w} has {human(have)} free of the {human(least)} each needs on its device"
                 if least > have else f"the host has {human(host)} available of the {human(pinned)} of pinned memory "
                 f"the split ranks need")
        raise DbfsError(f"{what} in {P} partitions on {len(free)} GPU worker(s) does not fit even split between "
                        f"device and host memory: {short}: use more GPU workers, a smaller --scale, or a host with "
                        f"more memory")
    raise DbfsError(f"{what} in {P} partitions on {len(free)} GPU worker(s) needs up to {human(need)} of device "
                    f"memory a worker ({ranks} partition(s) and the search's arrays), GPU worker {w} has "
                    f"{human(have)} free ({human(need - have)} short): use more GPU workers, or one partition a "
                    f"GPU worker (its rows split between device and host memory)")

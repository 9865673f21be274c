"""The GPU backend's Kernel 1 for a CSR that is never stored: built in passes into the searches'
device/host split and kept for the run (``--backend gpu`` when the CSR fits neither the device nor the
disk; importing it needs no CuPy).

Contract: :func:`build_placed` builds a dataset's CSR with
:func:`dbfs.kernel1.placed_gpu.build_csr_placed` (edge chunks from
:func:`dbfs.store.gpu.device_chunks`: regenerated on the device for a virtual
Kronecker list) into ``ds.memo["graph"]`` and says so on stderr (the note
also goes to the run's JSON); :func:`placed_budgets` splits the free device
memory between the device piece of the adjacency and a Kernel 1 pass,
keeping what the searches and validations need per vertex
(:data:`SEARCH_PER_VERTEX`).

Method and encodings: those of :mod:`dbfs.kernel1.placed_gpu` and
:mod:`dbfs.split`. Reference: Graph 500 Benchmark 1 specification 3.0.1,
Kernel 1 (any data structure, its construction timed).
"""
from __future__ import annotations

import resource
import time

import numpy as np

from dbfs import preflight
from dbfs.errors import DbfsError
from dbfs.graph import id_dtype
from dbfs.kernel1 import variant_name
from dbfs.progress import say
from dbfs.store.gpu import _free_device_bytes, device_chunks, edges_fit
from dbfs.units import human

__all__ = ["build_placed", "placed_budgets", "host_need", "reserve_per_vertex", "SEARCH_PER_VERTEX", "VALIDATE_BATCH",
           "PLACED_STEP"]


#: device bytes per vertex the searches and validations of a placed CSR need besides it (``indptr``
#: excluded): the hub table and zero-degree bitmap (~4.2 N), a relabelled graph's ``perm`` (4 N), a
#: search's parents, queues, bitmaps and degree scan (~29 N) or a validation's int32 pointer jumping
#: beside the kept parents and their original-id copy (~34 N)
SEARCH_PER_VERTEX = 44
#: searches a placement keeps device memory for, validated per pass over a streamed edge list (regenerated,
#: or read from zarr); each one more keeps its parents, its (level, parent) row of the batch table and a found
#: flag, 13 B per vertex at 4-byte ids (:func:`reserve_per_vertex`); the backend sizes the real batch from the
#: memory left after the load (:func:`dbfs.validate.gpu.batch_size`)
VALIDATE_BATCH = 3


def reserve_per_vertex(batch: int = 1) -> int:
    """Device bytes per vertex the searches and validations of a placed CSR keep free, validating
    ``batch`` searches at once."""
    return SEARCH_PER_VERTEX + 13 * (max(1, int(batch)) - 1)


_SLACK = 2 << 30
#: edge rows a placed build reads at once (about 3 GiB of device memory for a chunk, pass model)
PLACED_STEP = 1 << 25


#: device bytes per vertex a Kernel 1 pass needs at least besides its entries: raw row starts (8 N), a
#: relabelling's ``perm`` and ``iperm`` (up to 16 N), with room for the block's rows and entries
PASS_PER_VERTEX = 32


def placed_budgets(n: int, adjacency: int, free: int, device_limit: int | None = None,
                   per_vertex: int = SEARCH_PER_VERTEX) -> tuple:
    """(device piece bytes, pass budget) of :func:`build_placed` for ``n`` vertices.

    The device piece gets at most ``adjacency`` bytes (the raw entries' upper
    bound), what the searches and validations leave of ``free``
    (``per_vertex`` bytes per vertex: :func:`reserve_per_vertex`) and what
    leaves a pass at least :data:`PASS_PER_VERTEX` per vertex plus 4 GiB; or
    ``device_limit`` less
    the row offsets (the CSR's share of the device, as
    ``--device-memory-limit`` means for the searches). A Kernel 1 pass gets
    what the piece leaves of ``free``."""
    n, free = int(n), int(free)
    ip = 8 * (n + 1)
    if device_limit is not None:
        piece = max(0, min(int(device_limit) - ip, int(adjacency)))
    else:
        piece = max(0, min(int(adjacency), free - ip - int(per_vertex) * n - _SLACK,
                           free - PASS_PER_VERTEX * n - 2 * _SLACK))
    return piece, free - piece - (_SLACK >> 1)


def host_need(n: int, adjacency: int, piece: int, vid_bytes: int) -> int:
    """Host bytes a placed build holds: the pinned piece (the adjacency the device piece leaves), the row
    lengths that become ``indptr`` (8 N), a relabelling's two host copies, 16 B per vertex more (a margin
    over the measured peak RSS: docs/KERNEL1.md) and 4 GiB for the process."""
    return max(0, int(adjacency) - int(piece)) + (24 + 2 * int(vid_bytes)) * int(n) + (4 << 30)


def _fit_host(ds, item: int, free: int, device_limit, batch: int) -> tuple:
    """(validation batch, piece, pass budget): the largest batch (down to 1) whose placement leaves the
    pinned piece room in host memory; none: a one-line DbfsError naming what is short (never the OOM killer)."""
    n, adj = int(ds.n_vertices), 2 * int(ds.n_edges) * item
    have = int(0.88 * preflight.host_available())  # looked up at call time (tests replace it)
    for k in range(max(1, batch), 0, -1):
        piece, passes = placed_budgets(n, adj, free, device_limit, reserve_per_vertex(k))
        need = host_need(n, adj, piece, item)
        if need <= have:
            return k, piece, passes
    raise DbfsError(f"the CSR of {ds.name} fits neither the GPU nor the GPU and host memory together: the "
                    f"adjacency the device leaves needs {human(need)} of host memory, {human(have)} is available "
                    f"({human(need - have)} short): use a machine with more host or device memory, or "
                    f"--backend dask with more workers")


def build_placed(ds, dedupe: bool = True, device_limit: int | None = None, quiet: bool = False,
                 pass_budget: int | None = None, relabel: str = "none", order: str = "prefix",
                 tell: bool = True) -> dict:
    """GPU Kernel 1 in passes into the searches' device/host split, kept in ``ds.memo["graph"]``, not stored.

    Parameters
    ----------
    ds : Dataset
    dedupe : bool
    device_limit : int, optional
        Device bytes for the CSR (row offsets and the device piece); None: what
        the searches leave of the free device memory (:func:`placed_budgets`).
    quiet : bool
    pass_budget : int, optional
        Device bytes of one Kernel 1 pass (None: what the device piece leaves).
    relabel : {"none", "degree"}
    order : {"prefix", "suffix"}
        Which end of the row order keeps its adjacency on the device (:mod:`dbfs.split`).
    tell : bool
        Say the note on stderr here (False on a Dask worker: the client says it once).

    Returns
    -------
    dict
        ``construction_time``, ``in_memory``, ``note`` (said on stderr too),
        ``nnz``, ``passes``, ``placement``.
    """
    from dbfs.kernel1.placed_gpu import build_csr_placed  # deferred: cupy

    t0 = time.perf_counter()
    free = int(0.94 * _free_device_bytes())
    item = np.dtype(id_dtype(ds.n_vertices)).itemsize
    # validated in batches (the backend) wherever each validation streams the edges: regenerated, or stored
    # and too large for a device copy beside the CSR
    streamed = (ds.storage == "virtual" and ds.spec.kind == "kronecker") or not edges_fit(ds, free)
    _, piece, passes = _fit_host(ds, item, free, device_limit, VALIDATE_BATCH if streamed else 1)
    budget_name = "--device-memory-limit" if device_limit is not None else "the free device memory"
    g = build_csr_placed(device_chunks(ds, step=min(PLACED_STEP, max(int(ds.n_edges), 1))), ds.n_vertices,
                         piece // item, pass_budget if pass_budget is not None else passes, dedupe=dedupe,
                         order=order, relabel=relabel, budget_name=budget_name, quiet=quiet)
    info = g.meta["passes"]
    pl = info["placement"]
    why = "relabelled on the GPU" if relabel != "none" else "no room on disk or in host memory for it whole"
    note = (f"the CSR of {ds.name} is kept in memory for this run, not stored ({why}): "
            f"{human(pl['device_bytes'])} of adjacency on the device, {human(pl['host_bytes'])} "
            f"in pinned host memory ({pl['device_fraction']:.0%} of {pl['device_entries'] + pl['host_entries']:,} "
            f"entries on the device)")
    say(note, quiet or not tell)
    seconds = time.perf_counter() - t0

    import cupy as cp  # deferred: cupy

    free_now, total = cp.cuda.runtime.memGetInfo()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    say(f"GPU Kernel 1 placed {g.nnz:,} entries in {info['count']} pass(es) in {seconds:.2f} s (peak host RSS "
        f"{human(rss)}, device in use {human(total - free_now)})", quiet)
    g.meta.update({"variant": variant_name(1, "block", dedupe, relabel), "construction_time": seconds,
                   "load_time": 0.0})
    ds.memo["graph"] = g
    return {"construction_time": seconds, "in_memory": True, "note": note, "nnz": int(g.nnz),
            "passes": info["count"], "placement": pl}

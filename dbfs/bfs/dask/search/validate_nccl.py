"""Graph500 validation of searches whose parents stayed on the GPU workers, joined over the mesh's NCCL communicator.

Contract
--------
``validate_on_mesh(dg, results, gather) -> [ValidationResult, ...]``: for
searches of ``dg`` whose parent slices stayed on the devices
(``result.on_device``: the levels exchanged by NCCL, mesh worker ``g``
holding rank ``g`` alone, :func:`dbfs.bfs.dask.mesh.nccl.holds_parents`), the
same results as :func:`dbfs.validate.gpus.validate_on_gpus` on the same
parents: same ``ok``, ``nedge``, failed rules in order, counts, messages and
examples, ``levels`` None. No parent slice moves through Dask: each worker's
task takes only the slices it holds.

Method: mesh worker ``g`` runs one task pinned to it with rank ``g``'s slice
of every search of the batch; it first drops the searches' N-sized claim
arrays (the next search makes them again), so the validation's own arrays
fit beside the partition. One allgather of every worker's slice lengths
(so every worker takes the same path: a wrong length is the ``length``
failure on all of them, with no data collective); then, per search, one
allgather of the slices (each padded to the widest rank) gives every device
the whole parent array; the rest is :func:`dbfs.validate.gpus.check_share`
(vertex rules, levels by pointer jumping, the edge rules over this worker's
1/G of the input rows, regenerated on the device for a Kronecker dataset;
the rows stay on the device in the communicator's ``kept`` store for the
next batches, within ``dg.keep_bytes``, and go when the mesh closes),
one allreduce(max) of the batch's tree-edge flag bytes (their OR: worker 0
counts the ``tree-edge`` rule on its device, no bitmap leaves a worker),
and :func:`dbfs.validate.gpus.finish` on worker 0. A worker whose read of
the edges fails still joins that allreduce before it raises, so no peer is
left waiting in a collective. The searches run one at a time, so the
communicator is never used by a search and a validation at once; closing
the mesh (a lost worker) aborts it, and the step is redone after the
searches are rerun (:func:`dbfs.bfs.dask.search.parents.validate_many_distributed`).

Encoding: slices in the graph's id width (:func:`dbfs.graph.id_dtype`),
original ids, -1 unreached, block order (rank ``g`` owns its vertex range
of :class:`dbfs.partition.Partitioning`).

Reference: Graph 500 Benchmark 1 specification 3.0.1, section 8
"Validation"; NVIDIA's NCCL user guide (allgather).
"""
from __future__ import annotations

import numpy as np

from dbfs.bfs.dask.mesh.plugin import get_plugin
from dbfs.bfs.dask.mesh.transport import _PeerLost
from dbfs.bfs.dask.search import profiled
from dbfs.graph import id_dtype
from dbfs.partition import Partitioning
from dbfs.validate.cpu import _fail
from dbfs.validate.gpus import check_share, run_shares

__all__ = ["validate_on_mesh"]


def _joined(xp, comm, part: Partitioning, g: int, mine: list) -> list:
    """Every search's whole parent array on this device (or its ``length`` Failure), from this worker's
    slices ``mine`` and its peers' (the collectives of the module docstring, the same on every worker;
    ``xp`` the array module of ``comm``'s buffers)."""
    n, W, K = part.n_vertices, comm.W, len(mine)
    counts = np.asarray(part.counts(), np.int64)
    width = int(counts.max())
    dt = np.dtype(id_dtype(n))
    every = xp.empty(W * K, xp.int64)
    if K:
        comm.allgather(xp.asarray([int(np.shape(s)[0]) for s in mine], xp.int64), every)
    L = (every.get() if hasattr(every, "get") else every).reshape(W, K)
    comm.check()
    out = []
    for k in range(K):
        if not np.array_equal(L[:, k], counts):
            out.append(_fail("length", f"parent has {int(L[:, k].sum())} entries, graph has {n} vertices", [], 1))
            continue
        send = xp.full(width, -1, dt)
        send[:int(counts[g])] = xp.asarray(mine[k]).astype(dt, copy=False)
        got = xp.empty(W * width, dt)
        comm.allgather(send, got)
        del send
        if (counts == width).all():
            out.append(got)
        else:
            out.append(xp.concatenate([got[j * width:j * width + int(counts[j])] for j in range(W)]))
            del got
    return out


def _share_on_mesh(mesh_id: str, dataset_path: str, g: int, part: Partitioning, roots, keep_bytes: int, *mine):
    """(task pinned to mesh worker ``g``) :func:`dbfs.validate.gpus.check_share` of this worker's share of the
    input rows, the parent arrays joined over the mesh's communicator (module docstring)."""
    import cupy as cp  # deferred: cupy

    plugin = get_plugin()
    comm = plugin.shms.get(mesh_id)
    if getattr(comm, "kind", "") != "nccl":
        raise _PeerLost(f"no NCCL communicator of mesh {mesh_id[:8]} on this worker (restarted?)")
    if comm.W != part.P or comm.widx != g:
        raise _PeerLost(f"mesh worker {comm.widx} of {comm.W} asked for rank {g} of {part.P}")
    # the searches' N-sized claim arrays (kept between searches) go first, so the validation's own N-sized
    # arrays fit beside the partition at the largest SCALE a box holds; the next search makes them again
    plugin.scratch.pop("gpu", None)
    prof = profiled.profiler()      # the DBFS_PROFILE_SEARCH diagnostic: validate-w<g>-*.prof
    try:
        return _share(cp, comm, plugin, dataset_path, int(g), part, roots, keep_bytes, list(mine))
    finally:
        profiled.dump(prof, f"validate-w{g}")


def _share(cp, comm, plugin, dataset_path, g, part, roots, keep_bytes, mine):
    """:func:`_share_on_mesh`'s work once the communicator is checked."""
    parents = _joined(cp, comm, part, g, mine)
    del mine

    def parent_of(k):
        p, parents[k] = parents[k], None
        return p

    def join(flags):            # the tree-edge flags OR-ed over the mesh: a max of bytes
        plugin.note_device()            # the batch's arrays are all held here: the validation's peak
        comm.allreduce(flags.view(cp.uint8), "max")
        cp.cuda.get_current_stream().synchronize()
        comm.check()

    return check_share(cp, dataset_path, g, comm.W, True, part.n_vertices, roots, parent_of, join,
                       keep=(comm.kept, keep_bytes))


def validate_on_mesh(dg, results: list, gather) -> list:
    """Validate the searches ``results`` of ``dg`` (parents on the devices) over the mesh's communicator.

    Parameters
    ----------
    dg : dbfs.bfs.dask.DistributedGraph
        ``dg.parents_on_device``; every result's ``rank_worker`` is ``dg``'s.
    results : list of dbfs.bfs.dask.DistributedResult
    gather : callable
        ``gather(futures, what) -> list`` (bounded, watching the workers).

    Returns
    -------
    list of ValidationResult
        In the order of ``results``; ``levels`` None.
    """
    if not results:
        return []
    ws = dg.mesh_workers
    roots = [int(r.root) for r in results]
    return run_shares(dg.client, ws, _share_on_mesh,
                      lambda g: (dg.mesh_id, str(dg.dataset_path), g, dg.partitioning, roots, dg.keep_bytes,
                                 *[r.parents[g] for r in results]),
                      dg.n_vertices, roots, gather,
                      f"the validation of {len(roots)} search(es) over NCCL on {len(ws)} GPU worker(s)")

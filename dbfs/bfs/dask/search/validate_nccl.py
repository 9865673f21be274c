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

Method, by search (``dg.validate_by == "search"``: every worker keeps the
whole input edge list on its device and the batch has at least one search
per worker): search ``k`` of a batch is validated whole by mesh worker
``k mod W``. One allgather of every worker's slice lengths (so every worker
takes the same path: a wrong length is the ``length`` failure, with no data
collective); then, per search, one NCCL group in which every other worker
sends its slice to the search's worker, which places it in the whole
parent array; then each worker runs the one-device validator
(:mod:`dbfs.validate.gpu`: vertex rules, levels by sweeps, every input row
against its searches' (level, parent) table, the tree-edge rule from its own
flags) over the rows kept in the communicator's ``kept`` store (regenerated
on the device for a Kronecker dataset the first time), and worker 0 only
puts the results in batch order. No vertex work is repeated on two devices
and no flags are joined.

Method, by edges (otherwise: the rows do not all fit beside the partition,
or a batch smaller than the mesh): mesh worker ``g`` runs one task pinned to
it with rank ``g``'s slice of every search of the batch; the lengths'
allgather as above; then, per search, one allgather of the slices (each
padded to the widest rank) gives every device the whole parent array; the
rest is :func:`dbfs.validate.gpus.check_share` (vertex rules, levels, the
edge rules over this worker's 1/G of the input rows, kept within
``dg.keep_bytes`` as above), one allreduce(max) of the batch's tree-edge
flag bytes (their OR: worker 0 counts the ``tree-edge`` rule on its device,
no bitmap leaves a worker), and :func:`dbfs.validate.gpus.finish` on worker
0. A worker whose read of the edges fails still joins that allreduce before
it raises, so no peer is left waiting in a collective.

Both: each task first drops the searches' N-sized claim arrays (the next
search makes them again), so the validation's own arrays fit beside the
partition. The searches run one at a time, so the communicator is never
used by a search and a validation at once; closing the mesh (a lost worker)
aborts it, and the step is redone after the searches are rerun
(:func:`dbfs.bfs.dask.search.parents.validate_many_distributed`).

Encoding: slices in the graph's id width (:func:`dbfs.graph.id_dtype`),
original ids, -1 unreached, block order (rank ``g`` owns its vertex range
of :class:`dbfs.partition.Partitioning`).

Reference: Graph 500 Benchmark 1 specification 3.0.1, section 8
"Validation"; NVIDIA's NCCL user guide (allgather, point-to-point groups).
"""
from __future__ import annotations

import numpy as np

from dbfs.bfs.dask.mesh.plugin import get_plugin
from dbfs.bfs.dask.mesh.transport import _PeerLost
from dbfs.bfs.dask.search import profiled
from dbfs.graph import id_dtype
from dbfs.partition import Partitioning
from dbfs.validate.cpu import _fail
from dbfs.validate.gpus import check_share, finish, run_shares, whole_searches

__all__ = ["validate_on_mesh"]


def _lengths(xp, comm, mine: list) -> np.ndarray:
    """(W, K) every worker's slice length of every search of the batch (one allgather)."""
    W, K = comm.W, len(mine)
    every = xp.empty(W * K, xp.int64)
    if K:
        comm.allgather(xp.asarray([int(np.shape(s)[0]) for s in mine], xp.int64), every)
    L = (every.get() if hasattr(every, "get") else every).reshape(W, K)
    comm.check()
    return L


def _length_fail(L, k: int, n: int):
    return _fail("length", f"parent has {int(L[:, k].sum())} entries, graph has {n} vertices", [], 1)


def _joined(xp, comm, part: Partitioning, g: int, mine: list) -> list:
    """(by edges) Every search's whole parent array on this device (or its ``length`` Failure), from this
    worker's slices ``mine`` and its peers' (the collectives of the module docstring, the same on every
    worker; ``xp`` the array module of ``comm``'s buffers)."""
    n, W = part.n_vertices, comm.W
    counts = np.asarray(part.counts(), np.int64)
    width = int(counts.max())
    dt = np.dtype(id_dtype(n))
    L = _lengths(xp, comm, mine)
    out = []
    for k in range(len(mine)):
        if not np.array_equal(L[:, k], counts):
            out.append(_length_fail(L, k, n))
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


def _owned(xp, comm, part: Partitioning, g: int, mine: list) -> list:
    """(by search) The whole parent array (or ``length`` Failure) of each search ``k`` of the batch this
    worker validates (``k mod W == g``, in order): every peer sends its slice to that search's worker in one
    NCCL group a search (module docstring)."""
    n, W = part.n_vertices, comm.W
    counts = np.asarray(part.counts(), np.int64)
    offs = np.concatenate([[0], np.cumsum(counts)])
    dt = np.dtype(id_dtype(n))
    L = _lengths(xp, comm, mine)
    out = []
    for k in range(len(mine)):
        o = k % W
        if not np.array_equal(L[:, k], counts):
            if o == g:
                out.append(_length_fail(L, k, n))
            continue
        own = xp.ascontiguousarray(xp.asarray(mine[k]).astype(dt, copy=False))
        mine[k] = None
        if o == g:
            whole = xp.empty(n, dt)
            whole[offs[g]:offs[g + 1]] = own
        with comm.group():
            for j in range(W):
                if o == g and j != g and counts[j]:
                    comm.recv(whole[offs[j]:offs[j + 1]], j)
            if o != g and counts[g]:
                comm.send(own, o)
        del own                 # stream-ordered: the pool gives its block out only behind the send
        if o == g:
            out.append(whole)
            del whole
    return out


def _share_on_mesh(mesh_id: str, dataset_path: str, g: int, part: Partitioning, roots, keep_bytes: int,
                   by_search: bool, *mine):
    """(task pinned to mesh worker ``g``) this worker's part of the batch's validation over the mesh's
    communicator, by search or by edges (module docstring)."""
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
        work = _by_search if by_search else _share
        return work(cp, comm, plugin, dataset_path, int(g), part, roots, keep_bytes, list(mine))
    finally:
        profiled.dump(prof, f"validate-w{g}")


def _by_search(cp, comm, plugin, dataset_path, g, part, roots, keep_bytes, mine):
    """(by search) The ValidationResults of this worker's searches of the batch (``k mod W == g``, in
    order), each validated whole on this device against every input row."""
    parents = _owned(cp, comm, part, g, mine)
    del mine
    res = whole_searches(cp, dataset_path, True, part.n_vertices, roots[g::comm.W], parents,
                         keep=(comm.kept, keep_bytes))
    plugin.note_device()            # the batch's blocks are still the pool's: the validation's peak
    cp.get_default_memory_pool().free_all_blocks()     # the device memory goes back to the searches
    return res


def _in_order(n: int, roots, *shares) -> list:
    """(on worker 0, by search) the workers' results put back in batch order: search ``k`` from worker
    ``k mod W``."""
    W = len(shares)
    return [shares[k % W][k // W] for k in range(len(roots))]


def _share(cp, comm, plugin, dataset_path, g, part, roots, keep_bytes, mine):
    """(by edges) this worker's share of every search of the batch, once the communicator is checked."""
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
    by_search = dg.validate_by == "search" and len(roots) >= len(ws)
    return run_shares(dg.client, ws, _share_on_mesh,
                      lambda g: (dg.mesh_id, str(dg.dataset_path), g, dg.partitioning, roots, dg.keep_bytes,
                                 by_search, *[r.parents[g] for r in results]),
                      dg.n_vertices, roots, gather,
                      f"the validation of {len(roots)} search(es) over NCCL on {len(ws)} GPU worker(s)",
                      last=_in_order if by_search else finish)

"""Graph500 validation of partitioned searches on the GPU workers of a Dask cluster, each checking its share of the edges.

Contract
--------
``validate_on_gpus(client, dataset_path, searches, partitioning, gpu_workers,
gather=None) -> [ValidationResult, ...]``: for each search ``(root,
parent_slices)`` (one future per partition: int64 parents in that partition's
local order, global ORIGINAL ids, -1 unreached, as
:func:`dbfs.validate.dask.validate_partitioned` takes them) the same result
as :func:`dbfs.validate.validate` on the joined parent array: same ``ok``,
``nedge``, failed rules in ``RULES`` order, counts and messages, with
``levels`` None. Several searches share one pass over the edges. Only counts,
example ids and one tree-edge bitmap per search per worker move between
workers; nothing N-sized reaches the client. ``validate_on_worker(client,
dataset_path, searches, partitioning, worker, gather)``: the same results
where one GPU worker holds every slice on its device (one task there, each
search joined in its own id width and checked whole, :func:`whole_searches`).
Independent of what it checks: nothing from :mod:`dbfs.bfs`.

Method: with G GPU workers, worker ``g`` runs one task (pinned to it) that
joins each search's slices into a device parent array (Dask moves the
slices it does not hold), applies the vertex rules and the levels by pointer
jumping (:mod:`dbfs.validate.gpu`: ``_check_prefix``, ``_levels``; every
worker computes them, worker 0 reports the chain rules), then reads input
rows ``[g M / G, (g + 1) M / G)`` once, in chunks, against every search of
the batch (``_Batch``: the (level, parent) table and the fused edge kernel). A Kronecker dataset's
rows are regenerated on the device (:func:`dbfs.store.virtual.device_rows`,
the generator being a pure function of the row range: the same bytes as the
stored list, whose checksum was checked when it was written), any other
kind's are read from zarr (crc32c-checked) and uploaded. One last task on
worker 0 ORs the workers' tree-edge bitmaps (packed bits of ``found``) and
checks that every vertex above level 0 has its parent edge among the input
edges (rule ``tree-edge``). Over a mesh's NCCL communicator
(:mod:`dbfs.bfs.dask.search.validate_nccl`) the flags are OR-ed on the
devices instead (``check_share``'s ``join``: one allreduce(max) of the
batch's flag bytes) and worker 0 sends only the rule's count and examples.

Encoding: bitmaps are ``numpy.packbits`` of a bool per vertex (big-endian
bit order, ``ceil(N / 8)`` bytes). Edge-rule examples are concatenated in
row order of the shares, so they are the first offending tuples of the
input order, as the CPU validator's.

Reference: Graph 500 Benchmark 1 specification 3.0.1, section 8
"Validation" (checked against the input edge list, not the CSR searched).
"""
from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np

from dbfs.partition import Partitioning
from dbfs.store import open_edges
from dbfs.store.datasets import open_dataset
from dbfs.store.gpu import _free_device_bytes
from dbfs.store.virtual import device_rows
from dbfs.validate.cpu import MAX_EXAMPLES, RULES, Failure, ValidationResult, _fail, joined_edge_failures
from dbfs.validate.gpu import DEVICE_EDGE_ROWS, KeptRows, _Batch, _fold, _sweep, _width, validate_batch

__all__ = ["validate_on_gpus", "validate_on_worker", "edge_rows_on_device", "edge_rows_bytes", "device_free", "check_share",
           "whole_searches", "finish", "run_shares"]



class _Window:
    """Rows ``[a, b)`` of an edge source as a sliceable (M, 2) array (``_sweep`` reads it in chunks)."""

    def __init__(self, read, a: int, b: int):
        self.read, self.a, self.shape = read, int(a), (int(b) - int(a), 2)

    def __getitem__(self, key):
        lo, hi, _ = key.indices(self.shape[0])
        return self.read(self.a + lo, self.a + hi)


def edge_rows_on_device(dataset_path, device: bool = True):
    """``read(a, b)`` -> input rows ``[a, b)`` for a GPU task, and M: regenerated on the device for a
    Kronecker dataset (stored or virtual), else (or with ``device=False``) read from the stored array or
    regenerated on the host (host rows; the validator uploads them chunk by chunk)."""
    ds, arr = _edge_array(dataset_path)
    m = int(arr.shape[0])
    if device and ds.spec.kind == "kronecker":
        return (lambda a, b: device_rows(ds.spec, a, b, arr.dtype)), m
    return (lambda a, b: np.asarray(arr[a:b])), m


def _edge_array(dataset_path):
    """The dataset at ``dataset_path`` and its input edge array (stored or virtual, opened: nothing read)."""
    path = Path(dataset_path)
    ds = open_dataset(path.name, path.parent)
    return ds, open_edges(path, ds.attrs, verify_sum=False)


def edge_rows_bytes(dataset_path) -> int:
    """Device bytes of the whole input edge list as :func:`edge_rows_on_device` makes it (what a GPU worker
    keeping every row needs)."""
    arr = _edge_array(dataset_path)[1]
    return int(arr.shape[0]) * 2 * np.dtype(arr.dtype).itemsize


def _host(a) -> np.ndarray:
    return a.get() if hasattr(a, "get") else np.asarray(a)


def _share(dataset_path, g: int, G: int, device: bool, part: Partitioning, roots, *slices):
    """(task on GPU worker ``g`` of ``G``) every search's vertex rules, levels and the edge rules over this
    worker's share of the input rows (``device=False``: the same with NumPy, on any worker). Returns one
    dict per search (module docstring)."""
    if device:
        import cupy as cp  # deferred: cupy
    else:
        cp = np
    return check_share(cp, dataset_path, g, G, device, part.n_vertices, roots,
                       lambda k: _joined(cp, part, slices[k * part.P:(k + 1) * part.P], cp.int64))


def _joined(xp, part: Partitioning, sl, dtype):
    """One search's whole parent array of ``dtype`` (``xp``'s) from its P partition slices ``sl``, or the
    ``length`` Failure where their lengths are not the partitions'."""
    n = part.n_vertices
    lens = [int(np.shape(s)[0]) for s in sl]
    if lens != [part.local_count(rk) for rk in range(part.P)]:
        return _fail("length", f"parent has {sum(lens)} entries, graph has {n} vertices", [], 1)
    parent = xp.empty(n, dtype)
    for rk, s in enumerate(sl):
        rg = part.vertex_range(rk)
        parent[rg.start:rg.stop:rg.step] = xp.asarray(s)
    return parent


def _whole(dataset_path, part: Partitioning, roots, *slices):
    """(task on the one GPU worker holding every search's slices on its device) the searches' ValidationResults:
    each joined in the slices' own width (:func:`whole_searches`)."""
    import cupy as cp  # deferred: cupy

    P = part.P
    parents = [_joined(cp, part, slices[k * P:(k + 1) * P], slices[k * P].dtype) for k in range(len(roots))]
    del slices
    return whole_searches(cp, dataset_path, True, part.n_vertices, roots, parents)


def validate_on_worker(client, dataset_path, searches, partitioning: Partitioning, worker: str, gather) -> list:
    """:func:`validate_on_gpus`'s results where one GPU worker ``worker`` holds every search's parent slices on
    its device (futures of device arrays, original ids): one task there validates the whole searches; no
    slice is copied to the host or to another worker."""
    roots = [int(r) for r, _ in searches]
    fut = client.submit(_whole, str(dataset_path), partitioning, roots, *[f for _, sl in searches for f in sl],
                        workers=[worker], allow_other_workers=False, pure=False,
                        key=f"validate-gpu-whole-{uuid.uuid4().hex}")
    return gather([fut], f"the validation of {len(roots)} search(es) on GPU worker {worker}")[0]


def check_share(cp, dataset_path, g: int, G: int, device: bool, n: int, roots, parent_of, join=None,
                keep=None) -> list:
    """The share of GPU worker ``g`` of ``G`` (module docstring) given ``parent_of(k)``: search ``k``'s whole
    parent array on this worker (any integer width, original ids) or the Failure that stops it (``length``).
    ``parent_of`` is called once for every search, in order, whatever the earlier ones gave (so it may hold
    a collective every worker must join). ``join(flags)``, where given, ORs the batch's (K, n) tree-edge
    flags over every worker in place (a collective: called on every worker, even one whose read of the
    edges failed, which raises after it); worker 0 then counts the tree-edge rule itself and no bitmap
    leaves a worker. ``keep``, where given, is ``(store, budget)``: this worker's rows stay on the device in
    ``store`` (the caller's, living as long as its graph) for the next batches, within ``budget`` bytes
    (:class:`dbfs.validate.gpu.KeptRows`). Returns one dict per search."""
    batch = _Batch(cp, n, len(roots), _width(n))
    out = []
    for k, root in enumerate(roots):
        got = _fold(cp, batch, root, parent_of(k), n)
        out.append({"stop": got} if isinstance(got, Failure) else {"slot": got[0], "chain": got[1] if g == 0 else []})
    failed = None
    try:
        read, m = edge_rows_on_device(dataset_path, device)
        a, b = g * m // G, (g + 1) * m // G
        if batch.k and b > a:
            rows = _Window(read, a, b)
            if keep is not None and device:
                rows = KeptRows(cp, rows, keep[0], keep[1], (str(dataset_path), a, b))
            _sweep(cp, rows, batch, DEVICE_EDGE_ROWS)
    except Exception as e:      # re-raised once this worker has joined its peers' collective
        if join is None:
            raise
        failed = e
    if join is not None and batch.k:
        join(batch.found[:batch.k])
    if failed is not None:
        raise failed
    res = []
    for o in out:
        if "stop" in o:
            res.append(o)
            continue
        s = o.pop("slot")
        r = {**o, "totals": list(batch.totals[s]), "examples": list(batch.examples[s]),
             "nedge": int(batch.nedge[s]), "found": None, "above0": None, "missing": None}
        if join is None:
            r["found"] = _host(cp.packbits(batch.found[s]))
            r["above0"] = _host(cp.packbits(batch.lev(s) > 0)) if g == 0 else None
        elif g == 0:            # every worker's flags are joined: the rule is counted here
            miss = (batch.lev(s) > 0) & ~batch.found[s]
            r["missing"] = (int(miss.sum()), _host(cp.flatnonzero(miss)[:MAX_EXAMPLES]).astype(np.int64))
        res.append(r)
    del batch, out
    if device:
        cp.get_default_memory_pool().free_all_blocks()     # the device memory goes back to the searches
    return res


def whole_searches(xp, dataset_path, device: bool, n: int, roots, parents: list, keep=None) -> list:
    """The ValidationResults of whole searches on one worker (:func:`dbfs.validate.gpu.validate_batch`):
    ``parents[i]`` is search ``i``'s whole parent array (any integer width, original ids; the list's items are
    dropped as they are folded in) or the Failure that stops it; every input row is read once for all of them
    (``device``: made on the device, as :func:`edge_rows_on_device`; ``keep``: as :func:`check_share`'s)."""
    read, m = edge_rows_on_device(dataset_path, device)
    rows = _Window(read, 0, m)
    if keep is not None and device:
        rows = KeptRows(xp, rows, keep[0], keep[1], (str(dataset_path), 0, m))

    def handed():
        for i, root in enumerate(roots):
            p, parents[i] = parents[i], None
            yield root, p

    return validate_batch(xp, rows, n, len(parents), handed(), DEVICE_EDGE_ROWS)


def device_free(client, gpu_workers) -> int:
    """The least free device memory among ``gpu_workers`` (bytes), what a batch of validations must fit."""
    got = client.run(_free_device_bytes, workers=list(gpu_workers))
    return min(int(v) for v in got.values())


def _first_bits(bits: np.ndarray, n: int) -> np.ndarray:
    """The smallest indices (< n) of the set bits of a packbits array, at most MAX_EXAMPLES."""
    nz = np.flatnonzero(bits)[:MAX_EXAMPLES]
    if not nz.size:
        return np.empty(0, np.int64)
    ids = (nz[:, None] * 8 + np.arange(8)[None, :]).ravel()
    hit = np.unpackbits(bits[nz]).astype(bool)
    ids = ids[hit]
    return ids[ids < n][:MAX_EXAMPLES].astype(np.int64)


def finish(n: int, roots, *shares):
    """(task on worker 0) the ValidationResult of every search from the G workers' share results."""
    results = []
    for k in range(len(roots)):
        parts = [s[k] for s in shares]
        if "stop" in parts[0]:
            results.append(ValidationResult(False, 0, [parts[0]["stop"]]))
            continue
        failures = list(parts[0]["chain"]) + joined_edge_failures(parts, n)
        if parts[0].get("missing") is not None:     # the flags were joined on the devices
            cnt, first = parts[0]["missing"]
        else:
            found = parts[0]["found"].copy()
            for p in parts[1:]:
                np.bitwise_or(found, p["found"], out=found)
            missing = np.bitwise_and(parts[0]["above0"], np.bitwise_not(found))
            cnt, first = int(np.bitwise_count(missing).sum()), _first_bits(missing, n)
        if cnt:
            failures.append(_fail("tree-edge", f"{cnt} reached vertex(es) have a parent that is not an input "
                                               f"neighbour", first, cnt))
        failures.sort(key=lambda x: RULES.index(x.rule))
        results.append(ValidationResult(not failures, int(sum(p["nedge"] for p in parts)), failures, None))
    return results


def validate_on_gpus(client, dataset_path, searches, partitioning: Partitioning, gpu_workers, gather=None,
                     device: bool = True) -> list:
    """Validate several partitioned searches on the GPU workers (method in the module docstring).

    Parameters
    ----------
    client : distributed.Client
    dataset_path : path-like
        The dataset whose INPUT edges are checked.
    searches : list of (int, sequence of Future)
        ``(root, parent_slices)`` per search, slices as :func:`dbfs.validate.dask.validate_partitioned`'s.
    partitioning : dbfs.partition.Partitioning
    gpu_workers : sequence of str
        The GPU workers that share the edges (at least one).
    gather : callable, optional
        ``gather(futures, what) -> list``; default ``client.gather``.
    device : bool
        False runs the same tasks with NumPy on any workers (how CI checks the method without a GPU).

    Returns
    -------
    list of ValidationResult
        In the order of ``searches``; ``levels`` None.
    """
    if not searches:
        return []
    if gather is None:
        def gather(futs, what):
            return client.gather(futs)
    roots = [int(r) for r, _ in searches]
    flat = [f for _, sl in searches for f in sl]
    G = len(gpu_workers)
    what = f"the validation of {len(roots)} search(es) on {G} GPU worker(s)"
    return run_shares(client, gpu_workers, _share,
                      lambda g: (str(dataset_path), g, G, device, partitioning, roots, *flat),
                      partitioning.n_vertices, roots, gather, what)


def run_shares(client, workers, task, args_of, n: int, roots, gather, what: str, last=finish) -> list:
    """One ``task(*args_of(g))`` pinned to each of ``workers`` (``validate-gpu-share-*`` keys), then
    ``last(n, roots, *shares)`` (default :func:`finish`) on the first (``validate-gpu-finish-*``); the
    ValidationResults, gathered by ``gather(futures, what)``."""
    tag = uuid.uuid4().hex
    shares = [client.submit(task, *args_of(g), workers=[w], allow_other_workers=False, pure=False,
                            key=f"validate-gpu-share-{g}-{tag}") for g, w in enumerate(workers)]
    done = client.submit(last, n, roots, *shares, workers=[workers[0]], allow_other_workers=False, pure=False,
                         key=f"validate-gpu-finish-{tag}")
    return gather([done], what)[0]

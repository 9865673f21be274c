"""Graph500 validation of a PARTITIONED BFS result as Dask tasks.

Contract
--------
``validate_partitioned(client, dataset_path, parent_slices, partitioning,
root, workers=None, chunk_edges=None) -> ValidationResult(ok, nedge,
failures, levels=None)``: same rules, order, messages, counts and example
vertices as :func:`dbfs.validate.validate` (Graph500 specification, section 8
"Validation"), whose Numba per-chunk passes (:mod:`dbfs.validate.cpu`) it
runs inside the tasks. Only counts and at most a few dozen example ids reach
the client: never an N-sized array.

Independent of what it checks: it imports nothing from :mod:`dbfs.bfs`.

Encoding: the parent array arrives as one future per partition
(``parent_slices[r]``: int64 in partition ``r``'s local index order, global
ids, -1 unreached, e.g. ``dbfs.bfs.dask.DistributedResult.parents``);
which vertex sits where is :class:`dbfs.partition.Partitioning`'s rule.

Method:

- the vertex rules (length, range, root) run as one task per slice on the
  slice's worker (``workers[r]``);
- the chain rules (cycle, parent-unreached) and the levels run in one task
  that joins the slices on a worker (dask moves them worker to worker);
- the edge rules read the INPUT edge list (:func:`dbfs.store.open_edges`: the
  stored ``<dataset>/edges`` zarr array, every chunk through its crc32c, or a
  virtual dataset's regenerated rows) in
  row ranges of whole zarr chunks, one task each, with the joined
  (parent, levels) as a dependency that dask copies once to each worker;
  each returns its counts, its first offending tuples and a packed bitmap
  of the vertices whose parent edge it saw (OR-reduced in a tree).

Task keys are ``validate-chunk-<step>-<uuid>`` (step: vertex, join, chain,
edges, summary, marks, or, tree), so Dask's task stream and progress pages
show the validation as ``validate-chunk-*`` groups.

Memory: the join task and every worker running edge tasks hold the parent
and level arrays (16 bytes per vertex) plus per task the chunk and N bytes
of tree-edge marks; so a worker must hold ~17 N bytes (SCALE 26: 1.1 GB,
SCALE 30: 18 GB). Past that the next step is an owner-partitioned lookup
(edges shuffled to the owners of their endpoints), not implemented.
"""
from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np

from dbfs.partition import Partitioning
from dbfs.store import open_edges  # stored (crc32c-checked) or virtual (regenerated) rows, same bytes
from dbfs.validate.cpu import (_EDGE_RULES, MAX_EXAMPLES, RULES, ValidationResult, _edge_examples, _edge_pass, _fail,
                               _levels_from_chains, check_chains, check_tree_edges)

__all__ = ["validate_partitioned"]

_TARGET_ROWS = 1 << 22          # edge rows per task (rounded to whole zarr chunks)


# ------------------------------------------------------------------ tasks
def _key(step: str) -> str:
    """A unique task key of the validation (``validate-chunk-<step>-<uuid>``; module docstring)."""
    return f"validate-chunk-{step}-{uuid.uuid4()}"


def _slice_check(sl, rank, part: Partitioning, root):
    """Vertex rules on one slice: its length, out-of-range parents (count +
    first global ids), and parent[root] if this slice owns the root."""
    sl = np.asarray(sl)
    n = part.n_vertices
    out = {"rank": rank, "len": int(sl.shape[0]), "expected": part.local_count(rank), "range_count": 0,
           "range_examples": np.empty(0, np.int64), "root_value": None}
    if out["len"] != out["expected"]:
        return out
    bad = np.flatnonzero((sl < -1) | (sl >= n))
    if bad.size:
        out["range_count"] = int(bad.size)
        out["range_examples"] = np.asarray(part.to_global(rank, bad[:MAX_EXAMPLES]), np.int64)
    if 0 <= root < n:
        o, l = part.owner_local(int(root))
        if o == rank:
            out["root_value"] = int(sl[l])
    return out


def _join_levels(part: Partitioning, root, *slices):
    """The whole parent array, its levels and chain status (one worker)."""
    parent = np.empty(part.n_vertices, np.int64)
    for rk, sl in enumerate(slices):
        rg = part.vertex_range(rk)
        parent[rg.start:rg.stop:rg.step] = sl
    lev, status = _levels_from_chains(parent, int(root))
    return {"parent": parent, "lev": lev, "status": status}


def _chain_failures(pl):
    return check_chains(pl["status"])


def _edge_range(edges_path, r0, r1, pl):
    """Edge rules over input rows [r0, r1): counts, examples, nedge, tree-edge marks (packed bits)."""
    chunk = np.ascontiguousarray(np.asarray(open_edges(Path(edges_path).parent, verify_sum=False)[r0:r1]),
                                 dtype=np.int64)
    parent, lev = pl["parent"], pl["lev"]
    has_edge = np.zeros(parent.shape[0], np.uint8)
    ne, *counts = _edge_pass(chunk, parent, lev, has_edge)
    examples = []
    for kind, c in enumerate(counts):
        buf = np.empty(2 * MAX_EXAMPLES + 2, np.int64)
        k = _edge_examples(chunk, lev, kind, buf, 0) if c else 0
        examples.append(buf[:k].copy())
    return {"nedge": int(ne), "counts": [int(c) for c in counts], "examples": examples,
            "marks": np.packbits(has_edge)}


def _marks_of(res):
    return res["marks"]


def _summary_of(res):
    return {k: v for k, v in res.items() if k != "marks"}


def _or_marks(a, b):
    return np.bitwise_or(a, b)


def _tree_failure(pl, marks, root):
    n = pl["parent"].shape[0]
    has_edge = np.unpackbits(marks, count=n) if n else np.zeros(0, np.uint8)
    return check_tree_edges(pl["lev"], has_edge, int(root))


# ----------------------------------------------------------------- driver
def _row_ranges(m: int, zchunk: int, chunk_edges: int | None):
    target = int(chunk_edges) if chunk_edges else _TARGET_ROWS
    step = max(1, target // max(1, zchunk)) * max(1, zchunk)
    return [(s, min(s + step, m)) for s in range(0, m, step)]


def validate_partitioned(client, dataset_path, parent_slices, partitioning: Partitioning, root, workers=None,
                         chunk_edges: int | None = None, gather=None) -> ValidationResult:
    """Validate a partitioned parent array against ``<dataset_path>/edges`` (method in the module docstring).

    Parameters
    ----------
    client : distributed.Client
        The cluster the tasks run on.
    dataset_path : path-like
        The dataset directory; its ``edges`` zarr array is the input edge list.
    parent_slices : sequence of distributed.Future
        One per partition: int64 parents in that partition's local index order.
    partitioning : dbfs.partition.Partitioning
        Which partition owns which vertex.
    root : int
        The search key.
    workers : sequence of str, optional
        ``workers[r]`` holds slice ``r``; its vertex-rule task is placed there.
    chunk_edges : int, optional
        Input rows per edge task (rounded to whole zarr chunks).
    gather : callable, optional
        ``gather(futures, what) -> list`` of their results, for the two
        waits of the validation; default ``client.gather``. The dask
        backend passes one that is bounded and reacts to a lost worker
        (:func:`dbfs.bfs.dask.validate_distributed`).

    Returns
    -------
    ValidationResult
        As :func:`dbfs.validate.validate`'s, with ``levels`` None.
    """
    part = partitioning
    n = part.n_vertices
    root = int(root)
    P = part.P
    if len(parent_slices) != P:
        return ValidationResult(False, 0, [_fail("length", f"{len(parent_slices)} parent slices for "
                                                            f"{P} partitions", [], 1)])
    pin = (lambda rk: {"workers": [workers[rk]], "allow_other_workers": True}) if workers else (lambda rk: {})
    if gather is None:
        def gather(futs, what):
            return client.gather(futs)

    # ---- vertex rules, per slice on its worker
    checks = gather([client.submit(_slice_check, parent_slices[rk], rk, part, root, key=_key("vertex"), **pin(rk))
                     for rk in range(P)], "the vertex rules")
    total = sum(c["len"] for c in checks)
    if total != n or any(c["len"] != c["expected"] for c in checks):
        return ValidationResult(False, 0, [_fail("length", f"parent has {total} entries, graph has {n} vertices",
                                                 [], 1)])
    rc = sum(c["range_count"] for c in checks)
    if rc:
        ex = np.sort(np.concatenate([c["range_examples"] for c in checks]))
        return ValidationResult(False, 0, [_fail("range", f"{rc} parent value(s) are neither -1 nor a vertex id "
                                                          f"in [0, {n})", ex, rc)])
    if not 0 <= root < n:
        return ValidationResult(False, 0, [_fail("root", f"root {root} is not a vertex id in [0, {n})", [], 1)])
    rv = next(c["root_value"] for c in checks if c["root_value"] is not None)
    if rv != root:
        return ValidationResult(False, 0, [_fail("root", f"parent[root] is {rv}, not the root {root}", [root])])

    # ---- levels and chain rules: one join task
    pl = client.submit(_join_levels, part, root, *parent_slices, key=_key("join"))
    chain_f = client.submit(_chain_failures, pl, key=_key("chain"))

    # ---- edge rules over row ranges of the input edge list
    edges_path = str(Path(dataset_path) / "edges")
    arr = open_edges(Path(dataset_path), verify_sum=False)
    m = int(arr.shape[0])
    ranges = _row_ranges(m, int(arr.chunks[0]), chunk_edges)
    eres = [client.submit(_edge_range, edges_path, r0, r1, pl, key=_key("edges")) for r0, r1 in ranges]
    summ = [client.submit(_summary_of, e, key=_key("summary")) for e in eres]
    marks = [client.submit(_marks_of, e, key=_key("marks")) for e in eres]
    while len(marks) > 1:
        nxt = [client.submit(_or_marks, marks[i], marks[i + 1], key=_key("or")) for i in range(0, len(marks) - 1, 2)]
        if len(marks) % 2:
            nxt.append(marks[-1])
        marks = nxt
    if marks:
        tree_f = client.submit(_tree_failure, pl, marks[0], root, key=_key("tree"))
    else:
        tree_f = client.submit(_tree_failure, pl, np.zeros((n + 7) // 8, np.uint8), root,
                               key=_key("tree"))
    del eres
    chain_failures, tree, *summaries = gather([chain_f, tree_f, *summ], "the edge rules")

    failures = list(chain_failures)
    nedge = sum(s["nedge"] for s in summaries)
    for kind, (rule, text) in enumerate(_EDGE_RULES):
        cnt = sum(s["counts"][kind] for s in summaries)
        if cnt:
            ex = np.concatenate([s["examples"][kind] for s in summaries])
            failures.append(_fail(rule, f"{cnt} " + text.format(n=n), ex, cnt))
    if tree is not None:
        failures.append(tree)
    failures.sort(key=lambda x: RULES.index(x.rule))
    return ValidationResult(not failures, int(nedge), failures, None)

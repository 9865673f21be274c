"""Graph500 validation of PARTITIONED BFS results as Dask tasks, several searches over one read of the edges.

Contract
--------
``validate_partitioned_many(client, dataset_path, searches, partitioning,
chunk_edges=None, gather=None) -> [ValidationResult, ...]``, for each
``(root, parent_slices)`` of ``searches``, and ``validate_partitioned(client,
dataset_path, parent_slices, partitioning, root, ...)`` for one: same rules,
order, messages, counts and example vertices as :func:`dbfs.validate.validate`
(Graph500 specification, section 8 "Validation"), ``levels`` None. Only the
results (counts and at most a few dozen example ids) reach the client: never
an N-sized array.

Independent of what it checks: it imports nothing from :mod:`dbfs.bfs`.

Encoding: each search's parent array arrives as one future per partition
(``parent_slices[r]``: int64 in partition ``r``'s local index order, global
ids, -1 unreached, e.g. ``dbfs.bfs.dask.DistributedResult.parents``);
which vertex sits where is :class:`dbfs.partition.Partitioning`'s rule.

Method (:class:`dbfs.validate.batch_cpu.SearchTable` does the checking):

- one join task gathers every search's slices (dask moves them), applies the
  vertex rules (length, range, root) and the chain rules (cycle,
  parent-unreached) with the levels, and folds each search into one
  (level, parent) table;
- the edge rules read the INPUT edge list (:func:`dbfs.store.open_edges`: the
  stored ``<dataset>/edges`` zarr array, every chunk through its crc32c, or a
  virtual dataset's regenerated rows) in row ranges of whole zarr chunks, one
  task each, with the table as a dependency that dask copies once to each
  worker; each returns its counts, its first offending tuples per search and
  packed bitmaps of the vertices whose parent edge it saw (OR-reduced in a
  tree);
- one last task joins the counts and bitmaps into the results.

Task keys are ``validate-chunk-<step>-<uuid>`` (step: join, edges, summary,
marks, or, results), so Dask's task stream and progress pages show the
validation as ``validate-chunk-*`` groups.

Memory: the join task holds one joined parent array at a time (8 bytes a
vertex) beside the table (2 id widths a vertex a search); every worker running
edge tasks holds the table plus per task the chunk and a byte a vertex a
search of tree-edge marks (SCALE 26, 8 searches: 4.3 GB). Past that the next
step is an owner-partitioned lookup (edges shuffled to the owners of their
endpoints), not implemented.
"""
from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np

from dbfs.partition import Partitioning
from dbfs.store import open_edges  # stored (crc32c-checked) or virtual (regenerated) rows, same bytes
from dbfs.validate.batch_cpu import SearchTable
from dbfs.validate.cpu import HOST_EDGE_ROWS, ValidationResult, _fail

__all__ = ["validate_partitioned", "validate_partitioned_many"]

# ------------------------------------------------------------------ tasks
def _key(step: str) -> str:
    """A unique task key of the validation (``validate-chunk-<step>-<uuid>``; module docstring)."""
    return f"validate-chunk-{step}-{uuid.uuid4()}"


def _join_table(part: Partitioning, roots, *slices) -> SearchTable:
    """(one worker) every search's parent array joined from its P slices (``slices``: search after search),
    folded into one table: vertex rules, levels, chain rules."""
    n, P = part.n_vertices, part.P
    st = SearchTable(n, len(roots))
    for i, root in enumerate(roots):
        sl = slices[i * P:(i + 1) * P]
        lens = [int(np.shape(x)[0]) for x in sl]
        if lens != [part.local_count(rk) for rk in range(P)]:
            st.fold(root, _fail("length", f"parent has {sum(lens)} entries, graph has {n} vertices", [], 1))
            continue
        st.fold(root, part.join(sl))
    return st


def _edge_range(edges_path, r0, r1, st: SearchTable) -> dict:
    """Edge rules of every search over input rows [r0, r1): its summary and tree-edge marks (packed bits)."""
    e = st.for_edges()
    if e.k:
        e.chunk(np.ascontiguousarray(np.asarray(open_edges(Path(edges_path).parent, verify_sum=False)[r0:r1])))
    return {"summary": e.summary(), "marks": np.packbits(e.found, axis=1)}


def _marks_of(res):
    return res["marks"]


def _summary_of(res):
    return res["summary"]


def _or_marks(a, b):
    return np.bitwise_or(a, b)


def _results(st: SearchTable, marks, *summaries) -> list:
    found = np.unpackbits(marks, axis=1, count=st.n) if st.n else np.zeros((marks.shape[0], 0), np.uint8)
    return st.results(list(summaries), found)


# ----------------------------------------------------------------- driver
def _row_ranges(m: int, zchunk: int, chunk_edges: int | None):
    target = int(chunk_edges) if chunk_edges else HOST_EDGE_ROWS     # whole zarr chunks near it a task
    step = max(1, target // max(1, zchunk)) * max(1, zchunk)
    return [(s, min(s + step, m)) for s in range(0, m, step)]


def validate_partitioned_many(client, dataset_path, searches, partitioning: Partitioning,
                              chunk_edges: int | None = None, gather=None) -> list:
    """Validate several partitioned parent arrays against ``<dataset_path>/edges`` over one read of it
    (method in the module docstring).

    Parameters
    ----------
    client : distributed.Client
        The cluster the tasks run on.
    dataset_path : path-like
        The dataset directory; its ``edges`` zarr array is the input edge list.
    searches : list of (int, sequence of distributed.Future)
        ``(root, parent_slices)``: one slice per partition, int64 parents in that partition's local order.
    partitioning : dbfs.partition.Partitioning
        Which partition owns which vertex.
    chunk_edges : int, optional
        Input rows per edge task (rounded to whole zarr chunks).
    gather : callable, optional
        ``gather(futures, what) -> list`` of their results, for the one wait of the validation; default
        ``client.gather``. The dask backend passes one that is bounded and reacts to a lost worker
        (:func:`dbfs.bfs.dask.validate_distributed`).

    Returns
    -------
    list of ValidationResult
        As :func:`dbfs.validate.validate`'s, in the order of ``searches``, with ``levels`` None.
    """
    part = partitioning
    n, P = part.n_vertices, part.P
    if gather is None:
        def gather(futs, what):
            return client.gather(futs)

    out = [None if len(sl) == P else ValidationResult(False, 0, [_fail(
        "length", f"{len(sl)} parent slices for {P} partitions", [], 1)]) for _, sl in searches]
    ok = [(int(r), list(sl)) for (r, sl), o in zip(searches, out) if o is None]
    if ok:
        st = client.submit(_join_table, part, [r for r, _ in ok], *[x for _, sl in ok for x in sl],
                           key=_key("join"))
        arr = open_edges(Path(dataset_path), verify_sum=False)
        m = int(arr.shape[0])
        edges_path = str(Path(dataset_path) / "edges")
        eres = [client.submit(_edge_range, edges_path, r0, r1, st, key=_key("edges"))
                for r0, r1 in _row_ranges(m, int(arr.chunks[0]), chunk_edges)]
        summ = [client.submit(_summary_of, e, key=_key("summary")) for e in eres]
        marks = [client.submit(_marks_of, e, key=_key("marks")) for e in eres]
        while len(marks) > 1:
            nxt = [client.submit(_or_marks, marks[i], marks[i + 1], key=_key("or"))
                   for i in range(0, len(marks) - 1, 2)]
            if len(marks) % 2:
                nxt.append(marks[-1])
            marks = nxt
        mk = marks[0] if marks else np.zeros((len(ok), (n + 7) // 8), np.uint8)
        done = client.submit(_results, st, mk, *summ, key=_key("results"))
        del eres
        got = iter(gather([done], "the validation")[0])
        out = [o if o is not None else next(got) for o in out]
    return out


def validate_partitioned(client, dataset_path, parent_slices, partitioning: Partitioning, root,
                         chunk_edges: int | None = None, gather=None) -> ValidationResult:
    """:func:`validate_partitioned_many` of one search ``(root, parent_slices)``."""
    return validate_partitioned_many(client, dataset_path, [(root, parent_slices)], partitioning, chunk_edges,
                                     gather)[0]

"""Kernel 1 on the Dask workers that search the partitions: one block partition's rows, built where it is held.

Contract
--------
Every function here runs inside a task pinned to a worker; the caller
(:mod:`dbfs.bfs.dask.layout.worker`) turns the rows into the partition it
searches. A build returns ``(indptr, indices, meta)``: rank ``rank``'s rows
of the block partitioning in ``P`` of the dataset at ``dataset_path``, byte
for byte partition ``rank`` of the stored variant ``p<P>-block``
(:func:`dbfs.kernel1.build_partitioned`), nothing stored: ``indptr`` int64
from 0, ``indices`` of width :func:`dbfs.graph.id_dtype`, NumPy on a CPU
worker, CuPy on a GPU worker (the rows stay in its memory). ``meta`` holds
``variant, rank, P, partitioning, n_vertices, vertex_range, nnz, relabel,
load_time`` (what :func:`dbfs.kernel1.load_partition` gives), ``report``
(``kernel1``: which build; ``edge_rows_read``: the rows it asked of the edge
list, every pass counted; ``edge_readers``, ``build_ranges``; the GPU shuffle's
``kernel1_seconds``, its phases on that GPU), and from a
GPU build ``perm`` (device ``perm[new] = original`` of all N, relabelled
within each block) and ``deg`` (the GPU shuffle: every vertex's
deduplicated degree on the device, for the hub table).

- :func:`rank_rows`: one rank alone, from the whole edge list (CPU:
  :func:`.passes.build_csr_passes` over its rows in passes within
  :data:`BUILD_PASS` bytes; GPU: :func:`.passes_gpu.build_csr_gpu_passes`
  within most of the free device memory, ``relabel="degree"`` numbering each
  block by degree within itself). What a rebuild after a lost worker uses.
- :func:`shuffle_read`, :func:`shuffle_piece`, :func:`shuffle_rows`: every
  rank of CPU workers at once as one shuffle (:mod:`.shuffle`: each edge
  chunk read once by one of G readers, the pieces moved by Dask).
- :func:`gpu_shuffle_rows`: every rank of GPU workers at once, one a GPU, as
  one shuffle over NCCL (:mod:`.shuffle_gpu`; ``comm`` from the caller), each
  GPU reading :func:`shuffle_source`'s device chunks.
- :func:`resident_csr`: the one partition (P = 1) in a GPU worker's memory,
  split between the device and pinned host memory (:func:`.build_placed.build_placed`,
  the GPU backend's in-memory build): a :class:`~dbfs.graph.CSRGraph` in
  ``ds.memo["graph"]`` and the build's attributes, not ``(indptr, indices, meta)``.

This module and :mod:`dbfs.kernel1.entry` (this process) are how code
outside :mod:`dbfs.kernel1` reaches a builder.

Method and memory: those of the builders named. Reference: Graph 500
Benchmark 1 specification 3.0.1, Kernel 1 (any data structure, its
construction timed); the read-once owner shuffle is the reference MPI code's
``convert_graph_to_oned_csr``.
"""
from __future__ import annotations

from pathlib import Path

from dbfs.errors import DbfsError
from dbfs.kernel1.build_placed import build_placed
from dbfs.kernel1.passes import build_csr_passes, chunk_cost
from dbfs.kernel1.shuffle import ShufflePlan, build_rank, check_sum, read_buckets, reader_spans
from dbfs.partition import Partitioning
from dbfs.split import split_order
from dbfs.store import open_dataset
from dbfs.store.gpu import _free_device_bytes, device_chunks
from dbfs.store.variants import variant_name

__all__ = ["rank_rows", "shuffle_read", "shuffle_piece", "shuffle_rows", "shuffle_source", "gpu_shuffle_rows",
           "resident_csr", "BUILD_PASS", "K1_DEVICE_SHARE", "SHUFFLE_STEP"]

#: host bytes one pass of a partition built on a CPU worker may hold beyond the degree prefix and a chunk
BUILD_PASS = 1 << 30
#: share of the free device memory a GPU Kernel 1 on the workers may take (per rank; the shuffle: of the smallest)
K1_DEVICE_SHARE = 0.8
#: edge rows a GPU of a shuffled Kernel 1 reads at once: 8x a virtual list's 2**20-row chunk, while the chunk's
#: share of the pass model (96 B a row) stays under 1 GB, so whether a GPU keeps its span barely moves
SHUFFLE_STEP = 1 << 23


def _dataset(dataset_path):
    path = Path(dataset_path)
    return open_dataset(path.name, path.parent)


def _meta(P: int, rank: int, n: int, dedupe: bool, relabel: str, nnz: int, report: dict) -> dict:
    part = Partitioning(n, int(P), "block")
    return {"variant": variant_name(int(P), "block", dedupe, "none"), "rank": int(rank), "P": int(P),
            "partitioning": "block", "n_vertices": int(n), "vertex_range": part.vertex_range(int(rank)),
            "load_time": 0.0, "relabel": relabel, "nnz": int(nnz), "report": report}


def _bounds(part: Partitioning, relabel: str):
    """Block starts and N for a build relabelled within each block (None: not relabelled)."""
    return part.block_starts() if relabel == "degree" else None


def rank_rows(dataset_path, P: int, rank: int, dedupe: bool = True, device: bool = False, relabel: str = "none"):
    """Rank ``rank``'s rows from the whole edge list, on this worker's CPU or (``device``) its GPU; see the module
    docstring. ``relabel="degree"`` needs ``device``: a one-line error otherwise."""
    if relabel not in ("none", "degree") or (relabel == "degree" and not device):
        raise DbfsError(f"relabel {relabel!r} of partitions built on workers: use 'none', or 'degree' on GPU workers")
    ds = _dataset(dataset_path)
    n = int(ds.n_vertices)
    part = Partitioning(n, int(P), "block")
    rg = part.vertex_range(int(rank))
    if device:      # the rows stay in this device's memory: the partition searched here (no host round trip)
        from dbfs.kernel1.passes_gpu import build_csr_gpu_passes  # deferred: cupy

        g = build_csr_gpu_passes(device_chunks(ds), n, dedupe=dedupe,
                                 memory_budget=int(K1_DEVICE_SHARE * _free_device_bytes()), rows=(rg.start, rg.stop),
                                 on_device=True, relabel_bounds=_bounds(part, relabel))
    else:
        edges = ds.edges()
        fixed = 8 * (n + 1) + chunk_cost(int(edges.chunks[0]), edges.dtype.itemsize)
        g = build_csr_passes(edges, n, dedupe=dedupe, memory_budget=fixed + BUILD_PASS, rows=(rg.start, rg.stop))
    passes = int(g.meta["passes"]["count"])
    report = {"kernel1": "rank-passes", "edge_rows_read": int(g.meta["n_edges"]) * (1 + passes),  # degrees, passes
              "edge_readers": 1, "build_ranges": passes}
    meta = _meta(P, rank, n, dedupe, relabel, int(g.indptr[-1]), report)
    if g.meta.get("perm") is not None:
        meta["perm"] = g.meta["perm"]
    return g.indptr, g.indices, meta


def shuffle_read(dataset_path, P: int, ranks, g: int, G: int):
    """Reader ``g`` of ``G``: its 1/G of the dataset's edge chunks (:func:`.shuffle.reader_spans`; a virtual list's
    regenerated) read once, both directions of every tuple bucketed by owner rank of the block partitioning in
    ``P``, the pieces of ``ranks`` kept: ``(rank -> piece, read info)`` (:func:`.shuffle.read_buckets`)."""
    ds = _dataset(dataset_path)
    edges = ds.edges()
    r0, r1 = reader_spans(edges.shape[0], edges.chunks[0], G)[g]
    return read_buckets(edges, r0, r1, ShufflePlan.make(ds.n_vertices, P), ranks)


def shuffle_piece(read, rank):
    """(on a reader's worker) the piece of ``rank`` of a reader's result, with the reader's info: what moves."""
    pieces, info = read
    return pieces[rank], info


def shuffle_rows(dataset_path, P: int, rank: int, dedupe: bool, credit: int, *got):
    """Rank ``rank``'s rows from ``got``, the ``(piece, read info)`` every reader sent it: the readers' rows checked
    against the dataset's ``edges_checksum``, the rows built (:func:`.shuffle.build_rank`, in ranges within
    :data:`BUILD_PASS`). The report credits the rows and seconds of reader ``credit`` (-1: none), so a shuffle's
    ranks add up to its reads; ``meta["load_time"]`` is that reader's seconds."""
    ds = _dataset(dataset_path)
    infos = [info for _, info in got]
    check_sum(ds.edges(), infos)
    plan = ShufflePlan.make(ds.n_vertices, P)
    indptr, indices, built = build_rank([piece for piece, _ in got], plan, rank, dedupe, BUILD_PASS)
    del got
    read = infos[credit] if credit >= 0 else {"rows": 0, "seconds": 0.0}
    report = {"kernel1": "cpu-shuffle", "edge_rows_read": int(read["rows"]), "edge_readers": len(infos),
              "build_ranges": int(built["ranges"])}
    meta = _meta(P, rank, plan.n, dedupe, "none", int(indptr[-1]), report)
    meta["load_time"] = float(read["seconds"])
    return indptr, indices, meta


def shuffle_source(ds):
    """The device chunks every GPU of a shuffled Kernel 1 reads (:func:`dbfs.store.gpu.device_chunks`) in reads of
    :data:`SHUFFLE_STEP` rows, not the dataset's chunk: a pass pays its launches and syncs a chunk (the spans are
    whole reads, the same on every GPU)."""
    return device_chunks(ds, step=min(SHUFFLE_STEP, max(int(ds.n_edges), 1)))


def gpu_shuffle_rows(dataset_path, P: int, rank: int, dedupe: bool, relabel: str, comm, budget: int,
                     room: int | None = None):
    """Rank ``rank``'s rows, built by every GPU of ``comm`` at once (:func:`.shuffle_gpu.build_shuffled_gpu`: each
    reads 1/P of the edge rows once), and ``meta["deg"]``, every vertex's deduplicated degree on the device; a
    rank whose rows pass ``room`` device bytes is split between the device and pinned host memory (the low-degree
    tail on the device where relabelled, :func:`dbfs.split.split_order`), ``meta["pieces"]`` then its pieces and
    ``indices`` None."""
    from dbfs.kernel1.shuffle_gpu import build_shuffled_gpu  # deferred: cupy

    ds = _dataset(dataset_path)
    n = int(ds.n_vertices)
    part = Partitioning(n, int(P), "block")
    source = shuffle_source(ds)
    span = reader_spans(source.m, source.step, part.P)[int(rank)]
    g, deg = build_shuffled_gpu(source, span, part, int(rank), comm, dedupe, int(budget), _bounds(part, relabel),
                                budget_name="the free device memory", room=room,
                                order=split_order("block", relabel))
    report = {"kernel1": "gpu-shuffle", "edge_rows_read": int(g.meta["edge_rows_read"]), "edge_readers": part.P,
              "build_ranges": int(g.meta["passes"]["count"]), "kernel1_seconds": g.meta["seconds"]}
    meta = _meta(P, rank, n, dedupe, relabel, int(g.indptr[-1]), report)
    meta["deg"] = deg
    for key in ("perm", "pieces"):
        if g.meta.get(key) is not None:
            meta[key] = g.meta[key]
    return g.indptr, g.indices, meta


def resident_csr(ds, dedupe: bool, device_limit, quiet: bool, relabel: str, order: str) -> dict:
    """The one partition of ``ds`` built on this worker's GPU into the device/host split, kept in
    ``ds.memo["graph"]`` (module docstring); returns the build's attributes. Nothing is said on the
    worker (the caller says the build's ``note``)."""
    return build_placed(ds, dedupe=dedupe, device_limit=device_limit, quiet=quiet, relabel=relabel, order=order,
                        tell=False)

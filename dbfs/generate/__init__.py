"""Graph generators: pure, block-seeded functions of (spec, start, stop).

``edges_dask(spec, chunk_edges)`` is the generation stage of the pipeline: a
dask array int64 ``(M, 2)`` with one block per ``chunk_edges`` rows, each block
``spec.edges(lo, hi)``. Because every kind computes any row range alone, the
array's values do not depend on ``chunk_edges``, the scheduler or the workers.
Its blocks are keyed ``generate-chunk-<token>`` (``generate-import-<token>`` for
an import's parsed rows), which the Dask dashboard shows as the stage's name.
"""
from __future__ import annotations

import dask.array as da
import numpy as np
from dask.base import tokenize

from dbfs.errors import DbfsError
from dbfs.generate.graph500 import kronecker_edges as _kronecker_edges

DEFAULT_CHUNK_EDGES = 1 << 20


def row_chunks(n_rows: int, chunk_rows: int) -> tuple[int, ...]:
    """Chunk sizes covering n_rows in pieces of chunk_rows (last one shorter)."""
    if n_rows == 0:
        return (0,)
    full, rest = divmod(n_rows, chunk_rows)
    return (chunk_rows,) * full + ((rest,) if rest else ())


def _block(spec, block_info=None):
    lo, hi = block_info[None]["array-location"][0]
    return spec.edges(lo, hi)


def edges_dask(spec, chunk_edges: int = DEFAULT_CHUNK_EDGES):
    """The edge list of ``spec`` as a chunked dask array (int64, (M, 2))."""
    if chunk_edges < 1:
        raise DbfsError(f"--chunk-edges {chunk_edges} is invalid: use a positive number of edges per chunk")

    chunks = (row_chunks(spec.n_edges, int(chunk_edges)), (2,))
    tok = tokenize(spec.to_dict(), int(chunk_edges))
    if spec.kind == "import":  # already parsed in memory: ship the rows, not the parser
        edges, _ = spec._load_import()
        return da.from_array(np.asarray(edges, dtype=np.int64), chunks=chunks, name=f"generate-import-{tok}")
    return da.map_blocks(_block, dtype=np.int64, chunks=chunks, spec=spec,
                         meta=np.empty((0, 2), np.int64), name=f"generate-chunk-{tok}")


def kronecker_edges(scale, edgefactor=16, seed1=2, seed2=3, start=0, stop=None):
    """Graph500 3.0.1 edges [start, stop) as int64 (k, 2) (see ``graph500``)."""
    return _kronecker_edges(scale, edgefactor, seed1, seed2, start, stop)

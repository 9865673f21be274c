"""Reading big 2-D row arrays (numpy, zarr, dask) in bounded row chunks.

Stages that stream an edge list (roots, validation, export, checksums) accept
any of these; ``iter_rows`` yields ``(start, int64 block)`` pairs in order and
never holds more than ``chunk_rows`` rows at once.
"""
from __future__ import annotations

import numpy as np

DEFAULT_ROWS = 1 << 22


def natural_rows(arr, default: int = DEFAULT_ROWS) -> int:
    """A block length that matches the array's own chunks when it has them.

    Parameters
    ----------
    arr : array-like
        Anything with ``chunks`` (zarr or dask) or without (numpy).
    default : int
        Rows when the array has no chunks; with chunks, a whole multiple of
        the first chunk length near it.

    Returns
    -------
    int
    """
    chunks = getattr(arr, "chunks", None)
    if chunks:
        first = chunks[0]
        n = first[0] if isinstance(first, tuple) else first
        if n and n > 0:
            return int(max(n, min(default, (default // n) * n)))
    return default


def iter_rows(arr, chunk_rows: int | None = None):
    """Yield an array's rows in order, in bounded blocks.

    Parameters
    ----------
    arr : numpy, zarr or dask array, 2-D
        The rows to read.
    chunk_rows : int, optional
        Rows per block (None: :func:`natural_rows`).

    Yields
    ------
    (int, numpy.ndarray)
        The block's first row index and the block as int64.
    """
    n = int(arr.shape[0])
    step = chunk_rows or natural_rows(arr)
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        block = arr[lo:hi]
        if hasattr(block, "compute"):
            block = block.compute()
        yield lo, np.asarray(block).astype(np.int64, copy=False)

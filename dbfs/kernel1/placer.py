"""Placing a CSR built in passes into two pieces: the searches' device/host split (array-module generic).

Contract
--------
``Placer(n, cap, raw_ptr, idt, order, xp, host_alloc)`` is a pass sink:
``placer(lo, hi, ptr, idx)`` takes the block of rows ``[lo, hi)`` (``ptr``
its row starts from 0, ``idx`` its entries; arrays of ``xp``) in row order
(``order="prefix"``) or in reverse row order (``"suffix"``), and
``finish()`` returns ``(indptr, split, adj)``: the whole CSR's row starts
(int64 host array), the :class:`dbfs.split.Split` where the pieces meet and
``adj``, the kernels' ``ADJ_PARAMS`` (``ix_a``, ``ix_b``, the entry where
they meet: ``dbfs/bfs/kernels/bfs.cu``). The rows of one end of the row
order go to ONE array of ``xp`` of at most ``cap`` entries (the device
piece) while they fit whole; from the first row that does not fit on,
every row goes to ONE host array made by ``host_alloc(shape, dtype, keep)
-> (host view, kernel view)`` (mapped pinned memory for the GPU,
:func:`dbfs.pinned.mapped_host_empty`; a NumPy array here, which is how CI
runs this code with the CPU passes). Both pieces fill from their start
(prefix) or from their end (suffix: their filled tails are the pieces).

Method: a block's row lengths go straight into one host int64 array (no
host copy of its row starts), summed into ``indptr`` at the end; the host
piece is sized when the split is crossed by the raw (undeduplicated)
entries still to come (``raw_ptr``), an upper bound. Used by
:mod:`dbfs.kernel1.placed_gpu`; measured in docs/BENCHMARKS.md.

Reference: Graph 500 Benchmark 1 specification 3.0.1, Kernel 1; the split
of one adjacency between GPU and host memory after Kolganov & Chernyshev
(zero-copy Graph500 BFS, 2016) and Totem (Gharaibeh et al., PACT 2012).
"""
from __future__ import annotations

import numpy as np

from dbfs.split import Split

__all__ = ["Placer", "PassStarts", "host_empty"]


def _bisect(xp, ptr, x: int, side: str) -> int:
    """``searchsorted`` of one value in an array of ``xp``."""
    return int(xp.searchsorted(ptr, xp.asarray([x], dtype=ptr.dtype), side=side)[0])


def _to_numpy(src, dst: np.ndarray) -> None:
    """Copy ``src`` (CuPy or NumPy) into the host array ``dst`` (CuPy: one device-to-host copy, no staging)."""
    if isinstance(src, np.ndarray):
        dst[...] = src
    else:
        src.get(out=dst)


def host_empty(shape, dtype, keep: list):
    """The NumPy placer's host piece: (host view, the view the kernels read) are one array."""
    a = np.empty(shape, dtype)
    return a, a


class Placer:
    """Puts pass blocks into the device piece while whole rows fit, then into the host piece.

    ``prefix``: ranges arrive in ascending row order and fill both pieces
    from their start; ``suffix``: descending, filling both from their end
    (the pieces are then the filled tails). Row lengths are kept and summed
    into ``indptr`` at the end."""

    def __init__(self, n, cap, raw_ptr, idt, order, xp=np, host_alloc=host_empty):
        self.n, self.idt, self.raw, self.order = n, idt, raw_ptr, order     # raw row starts (xp)
        self.xp, self.host_alloc = xp, host_alloc
        self.dev = xp.empty(max(cap, 1), idt)
        self.cap = int(cap)
        self.lens = np.zeros(n + 1, np.int64)   # lens[v + 1] = row v's length; cumsum -> indptr
        self.dev_used = self.host_used = 0
        self.row = None                         # the split row once crossed
        self.host = self.host_dev = None
        self.hcap = 0
        self.keep: list = []

    def _cross(self, row: int):
        self.row = row
        # raw (undeduplicated) entries of the rows still to come: an upper bound of the host piece
        left = int(self.raw[self.n]) - int(self.raw[row]) if self.order == "prefix" else int(self.raw[row])
        self.hcap = max(left, 1)
        self.host, self.host_dev = self.host_alloc((self.hcap,), self.idt, self.keep)

    def _to_host(self, part):
        k = int(part.size)
        if not k:
            return
        if self.order == "prefix":
            _to_numpy(part, self.host[self.host_used:self.host_used + k])
        else:
            _to_numpy(part, self.host[self.hcap - self.host_used - k:self.hcap - self.host_used])
        self.host_used += k

    def __call__(self, lo: int, hi: int, ptr_d, idx_d):
        # the block's row lengths go straight into ``lens`` (no host copy of a block's ``indptr``: a pass
        # over the zero-degree tail of a large graph can span most of its rows)
        _to_numpy(self.xp.diff(ptr_d), self.lens[lo + 1:hi + 1])
        c, rows = int(ptr_d[-1]), hi - lo
        if self.row is not None:
            self._to_host(idx_d)
            return
        room = self.cap - self.dev_used
        if self.order == "prefix":       # whole rows from the block's start
            fit = min(_bisect(self.xp, ptr_d, room, "right") - 1, rows)
            put, cut = int(ptr_d[fit]), fit
            if put:
                self.dev[self.dev_used:self.dev_used + put] = idx_d[:put]
            rest = idx_d[put:]
        else:                            # whole rows from the block's end
            cut = min(max(_bisect(self.xp, ptr_d, c - room, "left"), 0), rows)
            put = c - int(ptr_d[cut])
            if put:
                self.dev[self.cap - self.dev_used - put:self.cap - self.dev_used] = idx_d[c - put:]
            rest = idx_d[:c - put]
        self.dev_used += put
        if (self.order == "prefix" and cut < rows) or (self.order == "suffix" and cut > 0):
            self._cross(lo + cut)
            self._to_host(rest)

    def finish(self):
        """(indptr, Split, adj): the kernels' ``ADJ_PARAMS`` over the filled pieces."""
        indptr = np.cumsum(self.lens, out=self.lens)
        nnz, item = int(indptr[-1]), self.idt.itemsize
        whole = np.int64(1 << 62)
        if self.order == "prefix":
            dev, host = self.dev[:self.dev_used], (self.host_dev[:self.host_used] if self.host_used else None)
            row = self.n if self.row is None else self.row
            sp = Split("prefix", row, self.dev_used, nnz, item)
            first, second = dev, host
        else:
            dev = self.dev[self.cap - self.dev_used:self.cap]
            host = self.host_dev[self.hcap - self.host_used:] if self.host_used else None
            row = 0 if self.row is None else self.row
            sp = Split("suffix", row, self.host_used, nnz, item)
            first, second = host, dev
        if sp.mode == "device":
            return indptr, sp, (dev, dev, whole)
        if sp.mode == "host":
            return indptr, sp, (host, host, whole)
        return indptr, sp, (first, second, np.int64(sp.entry))


class PassStarts:
    """Raw row starts known at a few rows only (``rows`` ascending, ``raw`` their starts), as the ``raw_ptr`` of a
    :class:`Placer`, which reads them to size the host piece: row ``r`` reads the known row at or below it
    (``prefix``: the entries from it on are then over-counted) or at or above it (``suffix``: the entries before
    it), an upper bound either way. What a shuffled build gives (its passes' bounds): its raw row starts have
    left the device when the host piece is made."""

    def __init__(self, rows, raw, order: str):
        self.rows, self.raw, self.order = np.asarray(rows, np.int64), np.asarray(raw, np.int64), order

    def __getitem__(self, row: int) -> int:
        side = "right" if self.order == "prefix" else "left"
        i = int(np.searchsorted(self.rows, int(row), side=side)) - (1 if self.order == "prefix" else 0)
        return int(self.raw[min(max(i, 0), self.raw.size - 1)])

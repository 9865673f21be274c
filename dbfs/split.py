"""Device/host split of a CSR's adjacency: which rows the GPU keeps in its own memory.

Contract
--------
:func:`plan_split` ``(indptr, device_entries, order) -> Split``: the rows
whose adjacency entries go to device memory when only ``device_entries``
entries fit there; the other rows' entries stay in mapped pinned host memory
that the same kernels read zero-copy over the bus (``dbfs/bfs/kernels/bfs.cu``
reads every entry through ``ADJ(j)``: entries ``[0, split)`` from one piece,
``[split, nnz)`` from the other). Pure NumPy, no device: CI tests it.

Orders (the device piece is always one contiguous run of rows, so one
comparison per read finds the piece):

- ``"prefix"``: rows ``[0, row)`` on the device. On a ``--relabel degree``
  CSR (ids by descending degree) that is *hubs first*, the placement Totem
  and Kolganov et al. use for the most-accessed part; on Graph500's scrambled
  ids it is a degree-blind sample.
- ``"suffix"``: rows ``[row, N)`` on the device: on a degree-ordered CSR the
  low-degree tail, whose short rows a bottom-up level scans whole (more rows
  per device byte).

``--placement`` picks the order (:func:`split_order`): ``degree`` the hubs
(prefix), ``degree-low`` the low-degree tail (suffix), and ``block``, the
default, the first rows of Graph500's scrambled ids or, on a degree-ordered
CSR, the low-degree tail: hubs first is the slowest placement measured, the
low-degree tail the fastest (docs/BENCHMARKS.md, "The device/host split of
the adjacency").

Encoding: :class:`Split` holds the row and entry where the pieces meet and
:meth:`Split.report` the bytes and entries each side (the run's JSON).

References: Gharaibeh et al., "A yoke of oxen and a thousand chickens for
heavy lifting graph processing" (Totem), PACT 2012; Kolganov & Chernyshev,
Graph500 on GPUs with the graph in host memory, 2016 (zero-copy adjacency).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["ORDERS", "PLACEMENT_ORDER", "Split", "plan_split", "split_order"]

ORDERS = ("prefix", "suffix")
#: ``--placement`` -> the split order: which end of the row order keeps its adjacency on the device
#: (``degree``/``degree-low`` name the hubs / the low-degree tail of a ``--relabel degree`` CSR); the
#: GPU backend splits by it, the CPU backend simulates the same split in host memory
PLACEMENT_ORDER = {"block": "prefix", "degree": "prefix", "degree-low": "suffix"}


def split_order(placement: str, relabel: str) -> str:
    """The order ``--placement`` takes on a CSR relabelled by ``relabel`` (``"none"`` or ``"degree"``):
    :data:`PLACEMENT_ORDER`'s, except that ``block`` (the default) keeps the low-degree tail of a degree-ordered
    CSR on the device (``suffix``), not its hubs. KeyError for a placement that does not split a CSR."""
    order = PLACEMENT_ORDER[placement]
    return "suffix" if placement == "block" and relabel == "degree" else order


@dataclass(frozen=True)
class Split:
    """Where the device and host pieces of the adjacency meet."""

    order: str          # "prefix" or "suffix"
    row: int            # prefix: rows [0, row) on the device; suffix: rows [row, N)
    entry: int          # the entry index where the pieces meet (= indptr[row])
    nnz: int
    itemsize: int

    @property
    def device_entries(self) -> int:
        return self.entry if self.order == "prefix" else self.nnz - self.entry

    @property
    def host_entries(self) -> int:
        return self.nnz - self.device_entries

    @property
    def mode(self) -> str:
        """``device`` (all entries on the device), ``host`` (none) or ``split``."""
        if self.host_entries == 0:
            return "device"
        return "host" if self.device_entries == 0 else "split"

    def report(self) -> dict:
        return {"order": self.order, "mode": self.mode, "row": self.row, "entry": self.entry,
                "device_entries": self.device_entries, "host_entries": self.host_entries,
                "device_bytes": self.device_entries * self.itemsize,
                "host_bytes": self.host_entries * self.itemsize,
                "device_fraction": self.device_entries / self.nnz if self.nnz else 1.0}


def plan_split(indptr, device_entries: int, order: str = "prefix", itemsize: int = 4) -> Split:
    """The largest run of whole rows (from the start, or from the end) whose entries fit ``device_entries``.

    Parameters
    ----------
    indptr : array_like of int64, N + 1 entries
        Row offsets of the CSR.
    device_entries : int
        Adjacency entries the device piece may hold (clamped at 0).
    order : {"prefix", "suffix"}
        Which end of the row order goes to the device (module docstring).
    itemsize : int
        Bytes per entry (for the report).

    Returns
    -------
    Split
    """
    if order not in ORDERS:
        raise ValueError(f"unknown split order {order!r}: use one of {', '.join(ORDERS)}")
    ip = np.asarray(indptr)
    n = int(ip.shape[0]) - 1
    nnz = int(ip[-1]) if n >= 0 else 0
    cap = max(0, int(device_entries))
    if order == "prefix":
        row = int(np.searchsorted(ip, min(cap, nnz), side="right")) - 1
    else:
        row = int(np.searchsorted(ip, max(nnz - cap, 0), side="left"))
    row = min(max(row, 0), n)
    return Split(order, row, int(ip[row]), nnz, int(itemsize))

"""CPU BFS kernels (Numba): one contract, several algorithms.

Contract: :data:`ALGORITHMS` maps ``seq-list``, ``seq-csr``, ``td``, ``bu``,
``do`` and ``spmv`` to search functions ``fn(graph, root, stats=False,
**opts) -> (parent, level_stats)`` over INTERNAL vertex ids (see
:mod:`dbfs.bfs.cpu.algorithms`); :func:`prepare` builds the per-graph
helpers (Kernel-1 data). :mod:`dbfs.bfs` maps ids and checks arguments
around them.

Method: level-synchronous searches whose per-level work is one named step
(GAP style, after Beamer's gapbs ``TDStep``/``BUStep``/``QueueToBitmap``/
``BitmapToQueue``); the direction-optimizing search picks the step per level
with a policy from :mod:`dbfs.bfs.policy` (Beamer, Asanovic and Patterson,
SC'12). Each step works on a LOCAL vertex range so a distributed backend can
call it per partition: ``indptr`` has one row per local vertex, local row
``i`` is global vertex ``offset + i``, ``indices`` hold global ids;
single-process callers pass ``offset = 0``. A public step is a thin Python
function choosing a serial or a parallel Numba kernel by size: the parallel
kernels are only ever called from Python (a cached non-parallel kernel
calling a parallel one is recompiled in every process), and small steps must
not wake threads.

Encoding:

- queue: int64 array of global vertex ids.
- bitmap: int64 words, bit ``v & 63`` of word ``v >> 6``. Local bitmaps
  (``visited``, ``next``) index local ids, so ``offset`` must be a multiple
  of 64 for them; the frontier bitmap read by ``bu_step`` is global.
- ``visited``: the vertices not to search: those reached so far, those
  with no edges (never reachable) and the padding bits past the last vertex.
  It is exact at level boundaries (bottom-up sets its own words, top-down
  sets the bits of the vertices it returns), so neither step reads
  ``parent`` and bottom-up never reads an isolated vertex's row.
- parent: int64 over internal ids, ``parent[root] == root``, -1 unreached.

Modules, bottom to top: ``primitives`` (bit scans, atomic OR, prefetch),
``adjacency`` (entry reads of one array or of a device/host split),
``buffers`` (parent pool, per-thread scratch), ``frontier`` (queue/bitmap
conversions, degree sums), ``graph_aux`` (per-graph helpers), ``topdown``,
``bottomup``, ``semiring`` (the steps), ``rowtable`` (the steps over all the
partitions of a distributed worker in one call), ``rowclaims`` (their
top-down claims split by owner and absorbed, or taken from the bits),
``sequential`` (queue BFS
kernels), ``warmup`` (kernel loading), ``algorithms`` (the searches). They import
one another relatively, so ``benchmarks/cpu_ab.py`` can load another
commit's copy of this package beside the working tree's; none imports the
:mod:`dbfs.bfs` facade.
"""
from __future__ import annotations

from .adjacency import SPLIT_ALGORITHMS, SplitAdjacency, split_graph
from .algorithms import (ALGORITHMS, bottom_up, direction_optimizing, prepare, seq_csr, seq_list, spmv,
                         top_down)
from .bottomup import bu_step
from .buffers import _fill_parent, parent_array, reused_int64
from .frontier import bitmap_degrees, bitmap_to_queue, frontier_edges, mark_queue, queue_to_bitmap
from .graph_aux import (_no_edge_bitmap, degree_over_bitmap, hub_by_degree, hub_neighbours, multi_edge_bitmap,
                        start_visited)
from .primitives import atomic_or, num_threads, prefetch
from .semiring import min_parent_fixup, spmv_pull_step
from .sequential import levels_from_parent, seq_list_structure
from .topdown import td_step
from .warmup import warm_kernels, warm_row_kernels

__all__ = [
    # the kernel contract (dbfs.bfs)
    "ALGORITHMS", "prepare", "levels_from_parent", "warm_kernels", "warm_row_kernels",
    # the searches
    "seq_list", "seq_csr", "top_down", "bottom_up", "direction_optimizing", "spmv",
    # named steps on a local vertex range (dbfs.bfs.dask calls them per partition)
    "td_step", "bu_step", "spmv_pull_step", "min_parent_fixup",
    "mark_queue", "queue_to_bitmap", "bitmap_to_queue", "frontier_edges", "bitmap_degrees",
    # the adjacency in two pieces (the GPU's device/host split, simulated in host memory)
    "SplitAdjacency", "split_graph", "SPLIT_ALGORITHMS",
    # per-graph helpers and buffers
    "hub_by_degree", "hub_neighbours", "degree_over_bitmap", "multi_edge_bitmap", "start_visited",
    "seq_list_structure", "parent_array", "reused_int64",
    # compiled primitives
    "atomic_or", "prefetch", "num_threads",
    # private names dbfs.bfs.dask.layout.worker imports
    "_fill_parent", "_no_edge_bitmap",
]

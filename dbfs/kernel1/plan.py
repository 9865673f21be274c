"""Work plan of the partitioned Kernel 1: how the edges and rows are cut to fit a memory budget.

Contract
--------
Arithmetic on sizes and counts, no I/O (a client is asked only for its
threads and memory limits): given the edge array's shape and chunking, the
ownership (:class:`dbfs.partition.Partitioning`) and the per-key entry
counts of phase 1, it returns the edge slices of phases R/1, each
partition's fine-block layout, the (partition, sub-range) units of phase 2
and the zarr chunking of phase 3 (phases: :mod:`.partitioned`). A plan changes only how the work is
cut, never the bytes built. A unit that cannot fit the budget raises
:class:`DbfsError` up front, naming the budget it needs.

Memory model (bytes a task holds; ``s``/``d`` = source/neighbour id width,
4 for int32 ids, 8 for int64; ``e`` = input id width, 4 for uint32):

=========  ==========================================================
phase R    ``3 * 8 * N`` (two partial degree arrays and their sum)
phase 1    ``4 * e + 2 * (s + d)`` per edge row (decoded chunk, slice,
           bucketed pairs) + ``8 * N`` for ``iperm`` when relabelling
phase 2    ``s + d + 8`` per directed entry (pairs read, packed keys;
           then keys + ``indices``) + 16 per local row (``indptr``, degrees)
phase 3    ``3 * d`` per entry written (slice, encoded chunk, codec copy)
           or 24 per ``indptr`` entry
=========  ==========================================================

With int32 ids that is 32 B per edge row, 16 B per directed entry (+16 B per
row) and 12 B per entry written. ``memory_budget`` (bytes per task; default
:data:`DEFAULT_MEMORY_BUDGET`, or half a worker thread's share of its memory
limit) bounds all of them. The process baseline (Python, Numba, zarr) is not
in the budget.

Encoding: fine blocks are ``local >> fshift`` (``fshift >= 0``) or, for
relabelled builds (``fshift == -1``), bounds ``fbounds[j, f]`` of local rows
cut so each block holds about the same number of entries.
"""
from __future__ import annotations

import os

import numpy as np

from dbfs.errors import DbfsError
from dbfs.kernel1.csr_store import _MAX_OUT_CHUNK, _MIN_OUT_CHUNK
from dbfs.partition import Partitioning
from dbfs.workers_info import workers_info

__all__ = ["DEFAULT_MEMORY_BUDGET"]

DEFAULT_MEMORY_BUDGET = 1 << 30
_KEYS_PER_SLICE = 4096         # partitioned: at most this many (part, fine block) keys


def _total_threads(client) -> int:
    if client is None:
        return os.cpu_count() or 1
    return max(1, sum(client.nthreads().values()))


def _default_budget(client) -> int:
    if client is None:
        return DEFAULT_MEMORY_BUDGET
    info = workers_info(client)
    shares = [w.get("memory_limit", 0) / max(1, w.get("nthreads", 1)) for w in info.values()]
    shares = [s for s in shares if s > 0]
    if not shares:
        return DEFAULT_MEMORY_BUDGET
    return int(min(4 << 30, max(64 << 20, min(shares) // 2)))



def _edge_slices(M, chunk_rows, budget, e_isz, s_isz, d_isz, iperm_bytes, threads):
    """Edge row slices of phases R/1 within the budget (module docstring, memory model)."""
    row_cost = 4 * e_isz + 2 * (s_isz + d_isz)
    rows_cap = (budget - iperm_bytes) // row_cost
    if rows_cap < 1 or chunk_rows * 4 * e_isz > budget - iperm_bytes:
        need = iperm_bytes + chunk_rows * 4 * e_isz + row_cost
        raise DbfsError(f"memory budget {budget} B is too small to read edge chunks of {chunk_rows} rows "
                        f"(needs {need} B): raise memory_budget or re-chunk the edges")
    return _plan_slices(M, chunk_rows, max(1, rows_cap), threads)


def _plan_slices(n_rows_total, chunk_rows, rows_cap, threads):
    """Row slices [r0, r1) for phases R/1: whole chunks grouped, or a chunk cut in pieces."""
    if n_rows_total == 0:
        return []
    nchunks = -(-n_rows_total // chunk_rows)
    if chunk_rows <= rows_cap:
        g = max(1, min(rows_cap // chunk_rows, -(-nchunks // max(1, threads))))
        step = g * chunk_rows
        return [(r, min(r + step, n_rows_total)) for r in range(0, n_rows_total, step)]
    k = -(-chunk_rows // rows_cap)
    out = []
    for c in range(nchunks):
        c0, c1 = c * chunk_rows, min((c + 1) * chunk_rows, n_rows_total)
        step = -(-(c1 - c0) // k)
        out += [(r, min(r + step, c1)) for r in range(c0, c1, step)]
    return out


def _fine_blocks(part: Partitioning, deg_new):
    """Fine-block layout per partition: (nfb, fshift, fbounds (P, nfb+1) of local rows)."""
    P = part.P
    counts = part.counts()
    max_local = int(counts.max()) if P else 0
    target = max(1, _KEYS_PER_SLICE // P)
    if deg_new is None:
        tbits = max(0, target.bit_length() - 1)
        fshift = max(0, (max(max_local, 1) - 1).bit_length() - tbits)
        nfb = max(1, -(-max_local // (1 << fshift)))
        ks = np.arange(nfb + 1, dtype=np.int64) << fshift
        fb = np.minimum(ks[None, :], counts[:, None])
        return nfb, fshift, np.ascontiguousarray(fb)
    # relabelled: cut each partition's rows so every fine block holds ~equal entries
    nfb = max(1, min(target, max_local))
    fb = np.zeros((P, nfb + 1), np.int64)
    for j in range(P):
        d = deg_new[part.owned_vertices(j)]
        cum = np.cumsum(d)
        tot = int(cum[-1]) if cum.size else 0
        if tot:
            marks = (np.arange(1, nfb, dtype=np.float64) * tot / nfb)
            fb[j, 1:nfb] = np.searchsorted(cum, marks, side="right")
        fb[j, nfb] = counts[j]
        np.maximum.accumulate(fb[j], out=fb[j])
        fb[j] = np.minimum(fb[j], counts[j])
    return nfb, -1, fb


def _subranges(H, fbounds, cost_entry, cost_row, budget, part_label):
    """Cut fine blocks [0, nfb) of one partition into consecutive groups of cost <= budget."""
    nfb = H.size
    subs = []
    f0 = 0
    acc_e = 0
    for f in range(nfb):
        e = int(H[f])
        rows = int(fbounds[f + 1] - fbounds[f])
        c1 = e * cost_entry + rows * cost_row
        if c1 > budget:
            raise DbfsError(f"memory budget {budget} B is too small for {part_label} rows "
                            f"{int(fbounds[f])}..{int(fbounds[f + 1])} ({e} entries need {c1} B): "
                            f"raise memory_budget to at least {c1} B")
        cur_rows = int(fbounds[f + 1] - fbounds[f0])
        if f > f0 and (acc_e + e) * cost_entry + cur_rows * cost_row > budget:
            subs.append((f0, f))
            f0 = f
            acc_e = 0
        acc_e += e
    subs.append((f0, nfb))
    return subs



def _key_offsets(Hs, K):
    """Phase-1 key counts per slice -> (Hmat (n_slices, K), offsets of each key in its bucket file, totals)."""
    if Hs:
        Hmat = np.stack(Hs)                                  # (n_slices, K)
        offs = np.zeros_like(Hmat)
        np.cumsum(Hmat[:, :-1], axis=1, out=offs[:, 1:])     # key offsets inside each bucket file
        H = Hmat.sum(axis=0)
    else:
        Hmat = offs = np.zeros((0, K), np.int64)
        H = np.zeros(K, np.int64)
    return Hmat, offs, H


def _row_plan(Hs, prefixes, P, nfb, fbounds, s_isz, d_isz, budget):
    """Phase-2 units: ([(j, s, l0, l1, n_entries, pieces)], sub-ranges per partition).

    ``pieces`` lists ``(bucket file prefix, entry offset, count)`` of the
    unit's key range in every phase-1 bucket file that holds some of it.
    """
    Hmat, offs, H = _key_offsets(Hs, P * nfb)
    cost_entry, cost_row = s_isz + d_isz + 8, 16
    plan = []                                                # (j, s, l0, l1, n_entries, pieces)
    n_subs = []
    for j in range(P):
        subs = _subranges(H[j * nfb:(j + 1) * nfb], fbounds[j], cost_entry, cost_row, budget,
                          f"partition {j}")
        n_subs.append(len(subs))
        for s, (f0, f1) in enumerate(subs):
            k0, k1 = j * nfb + f0, j * nfb + f1
            cnt = Hmat[:, k0:k1].sum(axis=1)
            pieces = [(prefixes[i], int(offs[i, k0]), int(cnt[i])) for i in range(len(prefixes)) if cnt[i]]
            plan.append((j, s, int(fbounds[j, f0]), int(fbounds[j, f1]), int(cnt.sum()), pieces))
    return plan, n_subs


def _write_chunking(budget, d_isz):
    """Phase 3: (zarr chunk length, positions one write task covers), both within the budget."""
    w_cost = max(3 * d_isz, 24)
    out_chunk = 1 << max(_MIN_OUT_CHUNK.bit_length() - 1, min(_MAX_OUT_CHUNK.bit_length() - 1,
                                                              (max(1, budget // w_cost)).bit_length() - 1))
    per_task = max(1, (budget // w_cost) // out_chunk) * out_chunk
    return out_chunk, per_task

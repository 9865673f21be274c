"""Would a CUDA graph take a bottom-up level's host cost away? Eager launches against one replayed graph, same run.

Two processes, one GPU each, one NCCL communicator (bootstrap on loopback, NVLink SHARP off). Each
replays a level shaped like :meth:`dbfs.bfs.dask.search.gpu_nccl._NcclSearch.bu_level` on its own
non-blocking stream: the counters zeroed by one memset, one kernel writing this rank's slice of the
next frontier bitmap and its counters, one NCCL group (the slices allgathered in place into the global
bitmap, the counters allreduced), the counters copied to pinned host memory, the new frontier OR-ed into
the visited bitmap, then one stream synchronisation and the counters read. ``eager`` issues those calls
each level (as the search does today); ``graph`` captures them once (``Stream.begin_capture``) and
replays the graph each level. Every level checks what it read (each rank's counter row and a word of every
rank's slice), so a graph that replays the wrong thing fails loudly.

Prints, per bitmap size, the median host microseconds a level (rank 0) eager and replayed, and their ratio;
writes ``benchmarks/results/nccl_graph_probe-<stamp>.json`` (or ``$DBFS_RESULTS``). Needs two GPUs,
CuPy with NCCL.

    python3 benchmarks/nccl_graph_probe.py --levels 400 --vertices 16 28
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path

_KERNEL = r"""
extern "C" __global__ void level(unsigned int* slice, long long words, unsigned int tag,
                                 unsigned long long* cnt) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    for (; i < words; i += (long long)gridDim.x * blockDim.x) slice[i] = tag ^ (unsigned int)i;
    if (blockIdx.x == 0 && threadIdx.x == 0) { cnt[0] = tag; cnt[1] = (unsigned long long)words; }
}
"""


def _rank(rank: int, W: int, uid, scales, levels: int, out) -> None:
    os.environ["NCCL_SOCKET_IFNAME"] = "lo"
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    import cupy as cp
    import cupyx
    import numpy as np
    from cupy.cuda import nccl

    cp.cuda.Device(rank).use()
    comm = nccl.NcclCommunicator(W, uid, rank)
    kern = cp.RawKernel(_KERNEL, "level")
    stream = cp.cuda.Stream(non_blocking=True)
    res = {}
    for s in scales:
        n = 1 << s
        words = n // 32 // W                          # this rank's uint32 words of the global bitmap
        front = cp.zeros(W * words, cp.uint32)
        visited = cp.zeros(W * words, cp.uint32)
        cnt = cp.zeros(W * 4, cp.uint64)              # every rank's counter row; this rank writes its own
        host = cupyx.empty_pinned(W * 4, np.uint64)
        mine = front[rank * words:(rank + 1) * words]
        row = cnt[rank * 4:(rank + 1) * 4]
        grid = (min(1024, max(1, -(-words // 256))),)

        def issue(tag):
            cp.cuda.runtime.memsetAsync(cnt.data.ptr, 0, cnt.nbytes, stream.ptr)
            kern(grid, (256,), (mine, np.int64(words), np.uint32(tag), row))
            nccl.groupStart()
            comm.allGather(mine.data.ptr, front.data.ptr, words, nccl.NCCL_UINT32, stream.ptr)
            comm.allReduce(cnt.data.ptr, cnt.data.ptr, cnt.size, nccl.NCCL_UINT64, nccl.NCCL_SUM, stream.ptr)
            nccl.groupEnd()
            cp.cuda.runtime.memcpyAsync(host.ctypes.data, cnt.data.ptr, cnt.nbytes,
                                        cp.cuda.runtime.memcpyDeviceToHost, stream.ptr)
            cp.bitwise_or(visited, front, out=visited)

        def check(tag):
            rows = host.reshape(W, 4)
            for j in range(W):
                if int(rows[j, 0]) != tag + j or int(rows[j, 1]) != words:
                    raise AssertionError(f"rank {rank}, scale {s}: rank {j}'s counters {rows[j, :2]} after tag "
                                         f"{tag}")
            got = [int(x) for x in front[::words].get()]
            if got != [(tag + j) & 0xFFFFFFFF for j in range(W)]:
                raise AssertionError(f"rank {rank}, scale {s}: the gathered slices start {got}, tag {tag}")

        times = {}
        with stream:
            for mode in ("eager", "graph", "eager", "graph"):      # alternating: the second pair is timed
                g = None
                if mode == "graph":
                    stream.begin_capture()
                    issue(rank)                                 # the tag a graph replays is fixed at capture
                    g = stream.end_capture()
                dt = []
                for lv in range(levels):
                    tag = rank if g is not None else 1000 * lv + rank
                    t0 = time.perf_counter()
                    if g is None:
                        issue(tag)
                    else:
                        g.launch(stream)
                    stream.synchronize()
                    dt.append(time.perf_counter() - t0)
                    check(tag - rank)
                times[mode] = statistics.median(dt[levels // 10:])
        res[s] = {"eager_us": times["eager"] * 1e6, "graph_us": times["graph"] * 1e6}
    out.put((rank, res))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", type=int, default=400)
    ap.add_argument("--vertices", type=int, nargs="+", default=[16, 28], help="log2 of the bitmap's vertices")
    args = ap.parse_args(argv)
    os.environ["NCCL_SOCKET_IFNAME"] = "lo"          # the id's bootstrap socket: loopback only
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    from cupy.cuda import nccl

    W = 2
    uid = nccl.get_unique_id()
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, W, uid, args.vertices, args.levels, out)) for r in range(W)]
    for p in procs:
        p.start()
    got = dict(out.get(timeout=300) for _ in procs)
    for p in procs:
        p.join(60)
    if any(p.exitcode for p in procs):
        print(f"a rank failed: exit codes {[p.exitcode for p in procs]}", file=sys.stderr)
        return 1
    rows = []
    for s in args.vertices:
        e, g = got[0][s]["eager_us"], got[0][s]["graph_us"]
        rows.append({"log2_vertices": s, "eager_us": e, "graph_us": g, "graph_over_eager": g / e})
        print(f"2^{s} vertices: a level {e:8.1f} us eager, {g:8.1f} us as one graph ({g / e:.3f}x)", flush=True)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from benchmarks.common import write_record

    print("record:", write_record("nccl_graph_probe", {"levels": args.levels, "rows": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

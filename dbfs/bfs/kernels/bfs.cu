// dbfs GPU BFS kernels (CUDA C, compiled at run time by cupy.RawModule).
//
// Compile-time parameters (passed as -D options by dbfs/bfs/gpu.py):
//   VID_T     vertex id type of the parents, queues and claims
//             (int while n_vertices <= 2**31, else long long)
//   ENT_T     type of the CSR neighbour array's entries (default VID_T; unsigned int
//             with long long ids while 2**31 < n_vertices <= 2**32: SCALE 32's
//             adjacency in 4 bytes an entry); every read widens it to vid_t
//   TD_BLOCK  threads per block of td_expand (a multiple of 32)
//   TD_ITEMS  edges per thread per block chunk of td_expand
//   BU_SERIAL neighbours a lane scans alone before the warp helps it
//
// Encodings:
//   indptr   int64, n + 1 entries; row v is entries indptr[v] .. indptr[v+1] of the adjacency
//   adjacency  the neighbour array in two pieces (ADJ_PARAMS): entries [0, ix_split)
//            in ix_a, entries [ix_split, nnz) in ix_b at (entry - ix_split). One piece in
//            device memory and the other in mapped pinned host memory is the device/host
//            split (dbfs/split.py); a CSR wholly in one place passes ix_b = ix_a and
//            ix_split >= nnz. Every read goes through ADJ(j): one body per kernel.
//   parent   vid_t (int32 while n < 2**31, else int64), n entries, -1 unreached, parent[root] = root
//   bitmaps  uint32 words, bit (v & 31) of word (v >> 5); `visited` has the
//            padding bits past n set, and zero-degree vertices set (they can
//            never be reached, so no step ever looks at them)
//   queue    VID_T vertex ids, unordered, each vertex at most once
//   cnt      per-level counters (uint64): [0] vertices discovered,
//            [1] sum of their degrees, [2] adjacency entries examined,
//            [3] scratch (bitmap_to_queue's cursor)
//
// Every kernel that counts reduces in registers and shared memory and makes
// one atomicAdd per block per counter: hub-heavy levels would otherwise
// serialise on the counter addresses.

#ifndef VID_T
#define VID_T int
#endif
#ifndef ENT_T
#define ENT_T VID_T
#endif
#ifndef TD_BLOCK
#define TD_BLOCK 256
#endif
#ifndef TD_ITEMS
#define TD_ITEMS 8
#endif
#ifndef BU_SERIAL
#define BU_SERIAL 8
#endif

typedef VID_T vid_t;
typedef ENT_T ent_t;
typedef long long i64;
typedef unsigned long long u64;
typedef unsigned int u32;

#define FULL_MASK 0xffffffffu
#define ADJ_PARAMS const ent_t* ix_a, const ent_t* ix_b, i64 ix_split
#define ADJ(j) ((vid_t)((j) < ix_split ? ix_a[(j)] : ix_b[(j) - ix_split]))

__device__ __forceinline__ i64 imin64(i64 a, i64 b) { return a < b ? a : b; }

__device__ __forceinline__ bool test_bit(const u32* bm, i64 v) {
    return (bm[v >> 5] >> (v & 31)) & 1u;
}

// Claim vertex v in `visited`: true for the one thread whose atomicOr set its bit
// (a plain read first skips the atomic for vertices visited already).
__device__ __forceinline__ bool claim(u32* visited, i64 v) {
    const u32 bit = 1u << (v & 31);
    u32* wp = visited + (v >> 5);
    return !(*wp & bit) && !(atomicOr(wp, bit) & bit);
}

// The warp's winners append x to q at *cursor: one atomicAdd per warp (its first
// winner's lane), slots in lane order. Every lane of the warp must call it.
__device__ __forceinline__ void warp_append(bool won, vid_t x, u64* cursor, vid_t* q) {
    const int lane = threadIdx.x & 31;
    const u32 m = __ballot_sync(FULL_MASK, won);
    if (m) {
        const int leader = __ffs(m) - 1;
        u64 base = 0;
        if (lane == leader) base = atomicAdd(cursor, (u64)__popc(m));
        base = __shfl_sync(FULL_MASK, base, leader);
        if (won) q[base + __popc(m & ((1u << lane) - 1u))] = x;
    }
}

__device__ __forceinline__ i64 warp_sum(i64 x) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_down_sync(FULL_MASK, x, o);
    return x;
}

// Sum a, b, c over the block and add them to out[0..2] (one atomic each).
// Every thread of the block must call it, once, at the end of the kernel.
__device__ void block_add3(i64 a, i64 b, i64 c, u64* out) {
    __shared__ i64 sh[3][32];
    const int lane = threadIdx.x & 31;
    const int wid = threadIdx.x >> 5;
    a = warp_sum(a);
    b = warp_sum(b);
    c = warp_sum(c);
    if (lane == 0) {
        sh[0][wid] = a;
        sh[1][wid] = b;
        sh[2][wid] = c;
    }
    __syncthreads();
    if (wid == 0) {
        const int nw = (blockDim.x + 31) >> 5;
        a = lane < nw ? sh[0][lane] : 0;
        b = lane < nw ? sh[1][lane] : 0;
        c = lane < nw ? sh[2][lane] : 0;
        a = warp_sum(a);
        b = warp_sum(b);
        c = warp_sum(c);
        if (lane == 0) {
            if (a) atomicAdd(&out[0], (u64)a);
            if (b) atomicAdd(&out[1], (u64)b);
            if (c) atomicAdd(&out[2], (u64)c);
        }
    }
}

// ------------------------------------------------------------------ setup
// base[w]: bit set for padding (v >= n) and zero-degree vertices.
extern "C" __global__ void base_visited(const i64* indptr, i64 n, i64 nwords, u32* base) {
    for (i64 w = blockIdx.x * (i64)blockDim.x + threadIdx.x; w < nwords; w += (i64)gridDim.x * blockDim.x) {
        u32 x = 0;
        for (int b = 0; b < 32; ++b) {
            i64 v = (w << 5) + b;
            if (v >= n || indptr[v + 1] == indptr[v]) x |= 1u << b;
        }
        base[w] = x;
    }
}

// One thread: root is reached, visited, in the frontier bitmap and queue.
extern "C" __global__ void start_search(vid_t* parent, u32* visited, u32* front, vid_t* queue, i64 root) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        parent[root] = (vid_t)root;
        visited[root >> 5] |= 1u << (root & 31);
        front[root >> 5] |= 1u << (root & 31);
        queue[0] = (vid_t)root;
    }
}

// ------------------------------------------------------- representations
extern "C" __global__ void queue_to_bitmap(const vid_t* queue, i64 nf, u32* bm) {
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < nf; i += (i64)gridDim.x * blockDim.x) {
        const i64 v = queue[i];
        atomicOr(&bm[v >> 5], 1u << (v & 31));
    }
}

// Set bits of bm -> queue (unordered); cursor is a zeroed counter.
// Grid-stride in whole warps so the warp scan sees every lane.
extern "C" __global__ void bitmap_to_queue(const u32* bm, i64 nwords, vid_t* queue, u64* cursor) {
    const int lane = threadIdx.x & 31;
    const i64 tid = blockIdx.x * (i64)blockDim.x + threadIdx.x;
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 base = tid - lane; base < nwords; base += stride) {
        const i64 w = base + lane;
        u32 x = w < nwords ? bm[w] : 0u;
        const int c = __popc(x);
        int incl = c;
        for (int o = 1; o < 32; o <<= 1) {
            int y = __shfl_up_sync(FULL_MASK, incl, o);
            if (lane >= o) incl += y;
        }
        const int total = __shfl_sync(FULL_MASK, incl, 31);
        u64 off = 0;
        if (lane == 31 && total) off = atomicAdd(cursor, (u64)total);
        off = __shfl_sync(FULL_MASK, off, 31);
        u64 p = off + (u64)(incl - c);
        while (x) {
            const int b = __ffs(x) - 1;
            x &= x - 1;
            queue[p++] = (vid_t)((w << 5) + b);
        }
    }
}

// ---------------------------------------------------------------- top-down
extern "C" __global__ void frontier_degrees(const vid_t* queue, i64 nf, const i64* indptr, i64* deg) {
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < nf; i += (i64)gridDim.x * blockDim.x) {
        const i64 u = queue[i];
        deg[i] = indptr[u + 1] - indptr[u];
    }
}

// first i in [a, b) with offs[i] > x, else b (offs: inclusive scan of degrees)
__device__ __forceinline__ i64 upper_bound(const i64* offs, i64 a, i64 b, i64 x) {
    while (a < b) {
        const i64 m = (a + b) >> 1;
        if (offs[m] > x) b = m; else a = m + 1;
    }
    return a;
}

// Load-balanced top-down step over the E = offs[nf-1] frontier edges.
// Block chunks of TD_BLOCK*TD_ITEMS consecutive edges; thread 0 locates the
// chunk's first and last frontier vertex; each thread then finds the owner
// of its edge by binary search inside that (short) range, so a hub's list
// is spread over many blocks and consecutive threads read consecutive
// entries. A neighbour is claimed by atomicOr on `visited`; the winner
// writes parent and appends to next_q (one atomic per warp).
// Rows are LOCAL (queue entries index indptr), neighbours GLOBAL: the
// winner writes parent[v] = u + gadd (the global id of row u; 0 for a whole
// graph). count_deg = 1 (whole graph: v is also a row) adds v's degree to
// cnt[1]; a partition's claim pass (count_deg = 0, `visited` and `parent`
// over global ids, next_q the claimed global ids) leaves degrees to the
// owner's absorb (dbfs/bfs/dask/search/gpu_search.py). parent and next_q
// null (a claim pass that keeps only the bits it sets in `visited`: the NCCL
// dense top-down level, dbfs/bfs/dask/search/gpu_dense.py) write nothing else.
extern "C" __global__ void td_expand(const vid_t* queue, i64 nf, const i64* offs, i64 E,
                                     const i64* indptr, ADJ_PARAMS, u32* visited,
                                     vid_t* parent, vid_t* next_q, u64* cnt, i64 gadd, int count_deg) {
    const i64 CH = (i64)TD_BLOCK * TD_ITEMS;
    __shared__ i64 s_lo, s_hi;
    i64 acc_deg = 0;
    for (i64 c0 = (i64)blockIdx.x * CH; c0 < E; c0 += (i64)gridDim.x * CH) {
        const i64 c1 = imin64(c0 + CH, E);
        if (threadIdx.x == 0) {
            s_lo = upper_bound(offs, 0, nf, c0);
            s_hi = upper_bound(offs, 0, nf, c1 - 1);
        }
        __syncthreads();
        const i64 lo = s_lo, hi = s_hi;
        for (int k = 0; k < TD_ITEMS; ++k) {
            const i64 e = c0 + (i64)k * TD_BLOCK + threadIdx.x;
            bool won = false;
            i64 v = 0;
            if (e < c1) {
                const i64 a = upper_bound(offs, lo, hi, e);
                const i64 excl = a > 0 ? offs[a - 1] : 0;
                const i64 u = queue[a];
                v = ADJ(indptr[u] + (e - excl));
                if (claim(visited, v)) {
                    won = true;
                    if (parent) parent[v] = (vid_t)(u + gadd);
                    if (count_deg) acc_deg += indptr[v + 1] - indptr[v];
                }
            }
            if (next_q) warp_append(won, (vid_t)v, &cnt[0], next_q);
        }
        __syncthreads();
    }
    block_add3(0, acc_deg, 0, cnt);
}

// Top-down step for a small frontier in one launch: every block loads the
// frontier's row starts and degrees into shared memory and scans them itself
// (no separate degree kernel or global scan), then expands its chunks of the
// E frontier edges exactly as td_expand does. The shared arrays are dynamic:
// launch with at least 16 * nf bytes (the caller bounds nf by the device's
// opt-in shared memory, dbfs/bfs/gpu.py td_small_limit).
// td_expand_small takes nf and E as arguments; td_expand_small_at reads them
// from nfE[0], nfE[1] on the device (a launch captured once in a CUDA graph
// and replayed for any frontier: the grid is sized for the most edges, the
// shared memory for the largest frontier).
__device__ __forceinline__ void td_small_body(const vid_t* queue, i64 nf, i64 E, const i64* indptr,
                                              ADJ_PARAMS, u32* visited, vid_t* parent,
                                              vid_t* next_q, u64* cnt, i64 gadd, int count_deg) {
    extern __shared__ i64 s_dyn[];
    i64* s_offs = s_dyn;                // inclusive scan of the degrees
    i64* s_row = s_dyn + nf;            // indptr[u] of frontier entry i
    __shared__ i64 s_part[TD_BLOCK];
    const int tid = threadIdx.x;
    for (int i = tid; i < nf; i += TD_BLOCK) {
        const i64 u = queue[i];
        const i64 a = indptr[u];
        s_row[i] = a;
        s_offs[i] = indptr[u + 1] - a;
    }
    __syncthreads();
    const int per = (int)((nf + TD_BLOCK - 1) / TD_BLOCK);
    const int b0 = tid * per;
    const int b1 = (int)imin64(b0 + per, nf);
    i64 sum = 0;
    for (int i = b0; i < b1; ++i) {
        sum += s_offs[i];
        s_offs[i] = sum;
    }
    s_part[tid] = sum;
    __syncthreads();
    for (int o = 1; o < TD_BLOCK; o <<= 1) {
        const i64 x = tid >= o ? s_part[tid - o] : 0;
        __syncthreads();
        s_part[tid] += x;
        __syncthreads();
    }
    const i64 pre = tid > 0 ? s_part[tid - 1] : 0;
    for (int i = b0; i < b1; ++i) s_offs[i] += pre;
    __syncthreads();

    const i64 CH = (i64)TD_BLOCK * TD_ITEMS;
    i64 acc_deg = 0;
    for (i64 c0 = (i64)blockIdx.x * CH; c0 < E; c0 += (i64)gridDim.x * CH) {
        const i64 c1 = imin64(c0 + CH, E);
        for (int k = 0; k < TD_ITEMS; ++k) {
            const i64 e = c0 + (i64)k * TD_BLOCK + tid;
            bool won = false;
            i64 v = 0;
            if (e < c1) {
                const i64 a = upper_bound(s_offs, 0, nf, e);
                const i64 excl = a > 0 ? s_offs[a - 1] : 0;
                const i64 u = queue[a];
                v = ADJ(s_row[a] + (e - excl));
                if (claim(visited, v)) {
                    won = true;
                    if (parent) parent[v] = (vid_t)(u + gadd);
                    if (count_deg) acc_deg += indptr[v + 1] - indptr[v];
                }
            }
            if (next_q) warp_append(won, (vid_t)v, &cnt[0], next_q);
        }
    }
    block_add3(0, acc_deg, 0, cnt);
}

extern "C" __global__ void td_expand_small(const vid_t* queue, i64 nf, i64 E, const i64* indptr,
                                           ADJ_PARAMS, u32* visited, vid_t* parent,
                                           vid_t* next_q, u64* cnt, i64 gadd, int count_deg) {
    td_small_body(queue, nf, E, indptr, ix_a, ix_b, ix_split, visited, parent, next_q, cnt, gadd, count_deg);
}

extern "C" __global__ void td_expand_small_at(const vid_t* queue, const i64* nfE, const i64* indptr,
                                              ADJ_PARAMS, u32* visited, vid_t* parent,
                                              vid_t* next_q, u64* cnt, i64 gadd, int count_deg) {
    td_small_body(queue, nfE[0], nfE[1], indptr, ix_a, ix_b, ix_split, visited, parent, next_q, cnt, gadd,
                  count_deg);
}

// --------------------------------------------------------------- hub table
// hub[v]: v's highest-degree neighbour (first in row order on ties), -1 for an
// empty row; one warp per vertex (lanes stride the row, then a warp argmax).
// Kernel-1 data for bu_step, built once per device graph.
extern "C" __global__ void hub_of(const i64* indptr, ADJ_PARAMS, i64 n, vid_t* hub) {
    const int lane = threadIdx.x & 31;
    const i64 warp = (blockIdx.x * (i64)blockDim.x + threadIdx.x) >> 5;
    const i64 nwarps = ((i64)gridDim.x * blockDim.x) >> 5;
    for (i64 v = warp; v < n; v += nwarps) {
        const i64 s = indptr[v], e = indptr[v + 1];
        i64 bd = -1, bj = -1;
        for (i64 j = s + lane; j < e; j += 32) {
            const i64 u = (i64)ADJ(j);
            const i64 d = indptr[u + 1] - indptr[u];
            if (d > bd) { bd = d; bj = j; }
        }
        for (int o = 16; o > 0; o >>= 1) {
            const i64 od = __shfl_down_sync(FULL_MASK, bd, o);
            const i64 oj = __shfl_down_sync(FULL_MASK, bj, o);
            if (od > bd || (od == bd && oj >= 0 && (bj < 0 || oj < bj))) { bd = od; bj = oj; }
        }
        if (lane == 0) hub[v] = bj >= 0 ? ADJ(bj) : (vid_t)-1;
    }
}

// --------------------------------------------------------------- bottom-up
// A warp reads 32 words of `visited` at once and searches the words that are
// not all visited, one 32-vertex word at a time. Each unvisited lane first tests
// its hub (highest-degree neighbour, read coalesced from `hub`): on Kronecker
// graphs that finds most parents without touching the adjacency row. Lanes
// whose hub missed scan their first BU_SERIAL neighbours alone and stop at the
// first one in `front`; lanes still searching are then served one at a time
// by the whole warp, 32 neighbours per step, stopping at the first hit
// (ballot). The warp owns its words of `next` and `visited`, so no atomics.
extern "C" __global__ void bu_step(const i64* indptr, ADJ_PARAMS, const vid_t* hub, const u32* front,
                                   u32* visited, u32* next, vid_t* parent, i64 nwords, u64* cnt) {
    const int lane = threadIdx.x & 31;
    const i64 warp = (blockIdx.x * (i64)blockDim.x + threadIdx.x) >> 5;
    const i64 nwarps = ((i64)gridDim.x * blockDim.x) >> 5;
    i64 acc_n = 0, acc_deg = 0, acc_exam = 0;
    // a warp takes 32 words at a time: one coalesced load, each lane clears `next`
    // for its word if that word is all visited, and only the open words are then
    // searched, one after the other (late levels are mostly visited words)
    for (i64 w0 = warp << 5; w0 < nwords; w0 += nwarps << 5) {
        const i64 wl = w0 + lane;
        const u32 lvis = wl < nwords ? visited[wl] : FULL_MASK;
        if (wl < nwords && lvis == FULL_MASK) next[wl] = 0u;
        u32 open = __ballot_sync(FULL_MASK, lvis != FULL_MASK);
        while (open) {
            const int ow = __ffs(open) - 1;
            open &= open - 1;
            const i64 w = w0 + ow;
            const u32 vis = __shfl_sync(FULL_MASK, lvis, ow);
            const i64 v = (w << 5) + lane;
            const bool todo = !((vis >> lane) & 1u);
            bool found = false;
            i64 par = -1, s = 0, e = 0, j = 0;
            if (todo) {
                // row bounds are loaded with the hub, not after its test: the kernel is
                // latency-bound, and a dependent load chain costs more than reading 16 bytes
                // a hub hit does not need (docs/GPU.md)
                s = indptr[v];
                e = indptr[v + 1];
                const vid_t h = hub[v];
                acc_exam += 1;
                if (h >= 0 && test_bit(front, h)) {
                    found = true;
                    par = h;
                }
            }
            if (todo && !found) {
                const i64 lim = imin64(e, s + BU_SERIAL);
                // probes in groups of 4: consecutive entries share a 32-byte
                // sector, so the 4 loads and 4 bitmap tests overlap instead of
                // forming a chain of dependent memory latencies
                j = s;
                while (j < lim) {
                    const vid_t u0 = ADJ(j);
                    const vid_t u1 = j + 1 < lim ? ADJ(j + 1) : (vid_t)-1;
                    const vid_t u2 = j + 2 < lim ? ADJ(j + 2) : (vid_t)-1;
                    const vid_t u3 = j + 3 < lim ? ADJ(j + 3) : (vid_t)-1;
                    const bool h0 = test_bit(front, u0);
                    const bool h1 = u1 >= 0 && test_bit(front, u1);
                    const bool h2 = u2 >= 0 && test_bit(front, u2);
                    const bool h3 = u3 >= 0 && test_bit(front, u3);
                    if (h0 | h1 | h2 | h3) {
                        found = true;
                        par = h0 ? u0 : h1 ? u1 : h2 ? u2 : u3;
                        j += h0 ? 1 : h1 ? 2 : h2 ? 3 : 4;
                        break;
                    }
                    j = imin64(j + 4, lim);
                }
                acc_exam += j - s;
            }
            u32 pend = __ballot_sync(FULL_MASK, todo && !found && j < e);
            while (pend) {
                const int src = __ffs(pend) - 1;
                pend &= pend - 1;
                const i64 js = __shfl_sync(FULL_MASK, j, src);
                const i64 je = __shfl_sync(FULL_MASK, e, src);
                i64 hitu = -1, scanned = 0;
                for (i64 b0 = js; b0 < je; b0 += 32) {
                    const i64 jj = b0 + lane;
                    bool hit = false;
                    i64 u = 0;
                    if (jj < je) {
                        u = ADJ(jj);
                        hit = test_bit(front, u);
                    }
                    const u32 hm = __ballot_sync(FULL_MASK, hit);
                    if (hm) {
                        const int f = __ffs(hm) - 1;
                        hitu = __shfl_sync(FULL_MASK, u, f);
                        scanned += f + 1;
                        break;
                    }
                    scanned += imin64(32, je - b0);
                }
                if (lane == src) {
                    acc_exam += scanned;
                    if (hitu >= 0) {
                        found = true;
                        par = hitu;
                    }
                }
            }
            const u32 nb = __ballot_sync(FULL_MASK, found);
            if (found) {
                parent[v] = (vid_t)par;
                acc_deg += e - s;
            }
            if (lane == 0) {
                next[w] = nb;
                if (nb) visited[w] = vis | nb;
                acc_n += __popc(nb);
            }
        }
    }
    block_add3(acc_n, acc_deg, acc_exam, cnt);
}

// ------------------------------------------------- Harish & Narayanan 2007
// Quadratic baseline: every level launches one thread per vertex; those at
// level L scan their whole list and claim unvisited neighbours (atomicCAS on
// the level, so each vertex is counted once and gets one parent).
extern "C" __global__ void harish_step(const i64* indptr, ADJ_PARAMS, int* level,
                                       vid_t* parent, i64 n, i64 L, u64* cnt) {
    i64 acc_n = 0, acc_deg = 0, acc_exam = 0;
    const int cur = (int)L;
    for (i64 v = blockIdx.x * (i64)blockDim.x + threadIdx.x; v < n; v += (i64)gridDim.x * blockDim.x) {
        if (level[v] != cur) continue;
        const i64 s = indptr[v], e = indptr[v + 1];
        acc_exam += e - s;
        for (i64 j = s; j < e; ++j) {
            const i64 u = ADJ(j);
            if (level[u] == -1 && atomicCAS(&level[u], -1, cur + 1) == -1) {
                parent[u] = (vid_t)v;
                acc_n += 1;
                acc_deg += indptr[u + 1] - indptr[u];
            }
        }
    }
    block_add3(acc_n, acc_deg, acc_exam, cnt);
}

extern "C" __global__ void harish_start(int* level, vid_t* parent, i64 root) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        level[root] = 0;
        parent[root] = (vid_t)root;
    }
}

// ------------------------------------------------------ Graph500 TEPS count
// nedge (3.0.1 rule): tuples that are not self-loops with both ends reached.
extern "C" __global__ void count_nedge(const i64* edges, i64 m, const vid_t* parent, u64* out) {
    i64 acc = 0;
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < m; i += (i64)gridDim.x * blockDim.x) {
        const i64 u = edges[2 * i], v = edges[2 * i + 1];
        if (u != v && parent[u] >= 0 && parent[v] >= 0) acc += 1;
    }
    block_add3(acc, 0, 0, out);
}

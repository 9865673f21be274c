// dbfs GPU kernels of the partitioned levels (dbfs/bfs/dask/search/gpu_search.py and
// gpu_nccl.py): a worker's claims absorbed by their owner partitions, claims
// bucketed by owner rank. Compiled as one
// module after bfs.cu (dbfs/bfs/gpu.py), whose parameters, encodings and
// helpers (claim, warp_append, block_add3) they use.
//
// After Bisson, Bernaschi and Mastrostefano, "Parallel Distributed Breadth
// First Search on the Kepler Architecture" (IEEE TPDS 2016): claimed
// vertices sent to their owners, counters reduced by collectives.

// ----------------------------------------------------- the root's visit
// One thread, on every worker of a partitioned search: the root's bit in the
// worker's global `visited_g`; where this worker holds the root (i >= 0: its
// row in that partition) parent[i] = root (global id), its local visited bit
// and queue[0] = i. One launch where setting each element from the host
// would take several.
extern "C" __global__ void visit_root_part(vid_t* parent, u32* visited, vid_t* queue, u32* visited_g, i64 i,
                                           i64 root) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        visited_g[root >> 5] |= 1u << (root & 31);
        if (i >= 0) {
            parent[i] = (vid_t)root;
            visited[i >> 5] |= 1u << (i & 31);
            queue[0] = (vid_t)i;
        }
    }
}

// ----------------------------------------------------- partition absorb
// The owner's side of a distributed top-down level (dbfs/bfs/dask/search/gpu_search.py):
// entries k with l = V[k] - first in [0, count) claim row i = l + pad of this
// partition by atomicOr on the local `visited` (the others belong to another
// partition: skipped); the winner writes parent[i] = u (u_by_v: U[V[k]], U a
// scratch over global ids; else U[k]), appends i to next_q (one atomic per
// warp), sets the global id base + i in the worker's `visited_g` (so the
// worker never claims it again) and adds its degree to cnt[1]. Received pairs
// come as (owner-local index, parent): first 0, u_by_v 0; a worker's own claims
// as (global id, the claim scratch): first = the partition's first vertex, u_by_v 1.
// Entry k is V[k * st] (and U[k * st]): st = 2 reads interleaved (id, parent) pairs.
__device__ __forceinline__ void absorb_body(const vid_t* V, const vid_t* U, i64 m, i64 first, i64 count,
                                            int u_by_v, i64 pad, i64 base, const i64* indptr, u32* visited,
                                            vid_t* parent, u32* visited_g, vid_t* next_q, u64* cnt,
                                            int st = 1) {
    i64 acc_deg = 0;
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 k0 = blockIdx.x * (i64)blockDim.x; k0 < m; k0 += stride) {
        const i64 k = k0 + threadIdx.x;
        bool won = false;
        i64 i = 0;
        if (k < m) {
            const i64 v = (i64)V[k * st];
            const i64 l = v - first;
            if (l >= 0 && l < count) {
                i = l + pad;
                if (claim(visited, i)) {
                    won = true;
                    parent[i] = u_by_v ? U[v] : U[k * st];
                    const i64 g = base + i;
                    atomicOr(visited_g + (g >> 5), 1u << (g & 31));
                    acc_deg += indptr[i + 1] - indptr[i];
                }
            }
        }
        warp_append(won, (vid_t)i, &cnt[0], next_q);
    }
    block_add3(0, acc_deg, 0, cnt);
}

extern "C" __global__ void absorb(const vid_t* V, const vid_t* U, i64 m, i64 first, i64 count, int u_by_v,
                                  i64 pad, i64 base, const i64* indptr, u32* visited, vid_t* parent,
                                  u32* visited_g, vid_t* next_q, u64* cnt) {
    absorb_body(V, U, m, first, count, u_by_v, pad, base, indptr, visited, parent, visited_g, next_q, cnt);
}

// absorb of the first min(m, *mp) entries: the count read on the device (a
// claim pass's counter), m its bound known on the host (the grid's size).
extern "C" __global__ void absorb_n(const vid_t* V, const vid_t* U, i64 m, const u64* mp, i64 first, i64 count,
                                    int u_by_v, i64 pad, i64 base, const i64* indptr, u32* visited,
                                    vid_t* parent, u32* visited_g, vid_t* next_q, u64* cnt) {
    const i64 n = (i64)*mp < m ? (i64)*mp : m;
    absorb_body(V, U, n, first, count, u_by_v, pad, base, indptr, visited, parent, visited_g, next_q, cnt);
}

// A small top-down level's claims of every worker (gpu_nccl.py, one rank a
// worker): m interleaved (global id, parent) pairs, -1 pairs skipped, each
// worker absorbing those of its own rank (first = its first vertex).
extern "C" __global__ void absorb_pairs(const vid_t* pairs, i64 m, i64 first, i64 count, i64 pad, i64 base,
                                        const i64* indptr, u32* visited, vid_t* parent, u32* visited_g,
                                        vid_t* next_q, u64* cnt) {
    absorb_body(pairs, pairs + 1, m, first, count, 0, pad, base, indptr, visited, parent, visited_g, next_q,
                cnt, 2);
}

// This worker's claims V[0..min(*mp, cap)) (parents in the claim scratch U over
// global ids) as interleaved (id, parent) pairs in out[0, 2 cap), the caller
// having filled out with -1 (the pairs absorb_pairs skips).
extern "C" __global__ void pack_claims(const vid_t* V, const u64* mp, const vid_t* U, i64 cap, vid_t* out) {
    const i64 m = (i64)*mp < cap ? (i64)*mp : cap;
    for (i64 k = blockIdx.x * (i64)blockDim.x + threadIdx.x; k < m; k += (i64)gridDim.x * blockDim.x) {
        const vid_t v = V[k];
        out[2 * k] = v;
        out[2 * k + 1] = U[v];
    }
}

// ------------------------------------------------- claims bucketed by owner
// A worker's claimed global ids V[0..m) go to their owning block partitions
// (m = *mp, read on the device: a claim pass's counter, so the host need not
// read it before bucketing)
// (owner: the last r with starts[r] <= v, binary search over P + 1 starts).
// bucket_count adds each owner's count to hist[owner]; bucket_scatter writes
// (owner-local index, claim scratch U[v]) pairs at cursor[owner]++ (cursor
// starts at the owners' exclusive offsets). One atomic per owner per warp
// (__match_any_sync groups a warp's lanes by owner); order inside a bucket is
// arbitrary (any parent among the claims is valid).
__device__ __forceinline__ int owner_of(const i64* starts, int P, i64 v) {
    int a = 0, b = P;
    while (b - a > 1) {
        const int mid = (a + b) >> 1;
        if (starts[mid] <= v) a = mid; else b = mid;
    }
    return a;
}

__device__ __forceinline__ u64 warp_slot(u64* ctr, int o, bool active) {
    const int lane = threadIdx.x & 31;
    const u32 act = __ballot_sync(FULL_MASK, active);
    u64 pos = 0;
    if (active) {
        const u32 grp = __match_any_sync(act, o);
        const int leader = __ffs(grp) - 1;
        u64 base = 0;
        if (lane == leader) base = atomicAdd(&ctr[o], (u64)__popc(grp));
        base = __shfl_sync(grp, base, leader);
        pos = base + __popc(grp & ((1u << lane) - 1u));
    }
    return pos;
}

extern "C" __global__ void bucket_count(const vid_t* V, const u64* mp, const i64* starts, int P, u64* hist) {
    const i64 m = (i64)*mp;
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 k0 = blockIdx.x * (i64)blockDim.x; k0 < m; k0 += stride) {
        const i64 k = k0 + threadIdx.x;
        const bool act = k < m;
        const int o = act ? owner_of(starts, P, (i64)V[k]) : 0;
        warp_slot(hist, o, act);
    }
}

extern "C" __global__ void bucket_scatter(const vid_t* V, const u64* mp, const i64* starts, int P,
                                          const vid_t* U, u64* cursor, vid_t* Lout, vid_t* Uout) {
    const i64 m = (i64)*mp;
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 k0 = blockIdx.x * (i64)blockDim.x; k0 < m; k0 += stride) {
        const i64 k = k0 + threadIdx.x;
        const bool act = k < m;
        const i64 v = act ? (i64)V[k] : 0;
        const int o = act ? owner_of(starts, P, v) : 0;
        const u64 pos = warp_slot(cursor, o, act);
        if (act) {
            Lout[pos] = (vid_t)(v - starts[o]);
            Uout[pos] = U[v];
        }
    }
}

// One thread: cursor[o] = exclusive prefix sum of hist over owners o < P (P is
// small), the bucket starts of bucket_scatter.
extern "C" __global__ void bucket_offsets(const u64* hist, int P, u64* cursor) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        u64 s = 0;
        for (int o = 0; o < P; ++o) {
            cursor[o] = s;
            s += hist[o];
        }
    }
}

// Claims into fixed regions, one per rank held by another worker (the NCCL
// top-down level of one device-to-host read, dbfs/bfs/dask/search/gpu_nccl.py).
// Region of rank o: cap_o = min(cap_m, vertices of o) slots of owner-local
// indices, then cap_o slots of parents; regions in rank order, each 2 cap_o
// long, ranks of worker `me` (worker_of[o] == me) have none. A rank's claims
// are at most its vertices and at most this worker's frontier edges cap_m, so
// slot < cap_o always holds (checked all the same). Slots are counted in
// hist[o] (one atomic per owner per warp); a slot left unwritten keeps the
// caller's -1, which `absorb` skips (no count travels with a region).
extern "C" __global__ void bucket_regions(const vid_t* V, const u64* mp, const i64* starts, int P,
                                          const vid_t* U, const int* worker_of, int me, i64 cap_m,
                                          u64* hist, vid_t* out) {
    const i64 m = (i64)*mp;
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 k0 = blockIdx.x * (i64)blockDim.x; k0 < m; k0 += stride) {
        const i64 k = k0 + threadIdx.x;
        const bool act = k < m;
        const i64 v = act ? (i64)V[k] : 0;
        const int o = act ? owner_of(starts, P, v) : 0;
        const i64 slot = (i64)warp_slot(hist, o, act);
        if (act && worker_of[o] != me) {
            i64 base = 0, cap = 0;
            for (int r = 0; r <= o; ++r) {
                if (worker_of[r] == me) continue;
                const i64 own = starts[r + 1] - starts[r];
                cap = cap_m < own ? cap_m : own;
                if (r < o) base += 2 * cap;
            }
            if (slot < cap) {
                out[base + slot] = (vid_t)(v - starts[o]);
                out[base + cap + slot] = U[v];
            }
        }
    }
}


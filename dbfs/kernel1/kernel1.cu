// GPU Kernel 1 helpers (dbfs/kernel1_gpu.py): edge list -> CSR rows.
//
// edges: int64 (M, 2), row-major. Self-loops are skipped; every other tuple
// (u, v) yields the entries u -> v and v -> u.

typedef long long i64;
typedef unsigned long long u64;

// counts[x] += number of non-self-loop tuple endpoints equal to x
extern "C" __global__ void k1_count(const i64* edges, i64 m, u64* counts) {
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < m; i += (i64)gridDim.x * blockDim.x) {
        const i64 u = edges[2 * i], v = edges[2 * i + 1];
        if (u == v) continue;
        atomicAdd(&counts[u], 1ULL);
        atomicAdd(&counts[v], 1ULL);
    }
}

// For the sources in [lo, hi): write key (src - lo) << 32 | dst at the
// source's cursor (cursor[src - lo] starts at the row's first slot), i.e. a
// counting sort by source; rows are sorted afterwards by a key sort.
extern "C" __global__ void k1_emit(const i64* edges, i64 m, i64 lo, i64 hi, u64* cursor, u64* keys) {
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < m; i += (i64)gridDim.x * blockDim.x) {
        const i64 u = edges[2 * i], v = edges[2 * i + 1];
        if (u == v) continue;
        if (u >= lo && u < hi) {
            const u64 p = atomicAdd(&cursor[u - lo], 1ULL);
            keys[p] = ((u64)(u - lo) << 32) | (u64)v;
        }
        if (v >= lo && v < hi) {
            const u64 p = atomicAdd(&cursor[v - lo], 1ULL);
            keys[p] = ((u64)(v - lo) << 32) | (u64)u;
        }
    }
}

// keep[i] = keys[i] differs from keys[i-1] (keys sorted): first of each run
extern "C" __global__ void k1_first_of_run(const u64* keys, i64 n, unsigned char* keep) {
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        keep[i] = (i == 0 || keys[i] != keys[i - 1]) ? 1 : 0;
    }
}

// Every rank's range of a pass at once (the GPU shuffle): ids first mapped by iperm where it is given (a
// relabelled build reading its span again), then an endpoint x in rank j's range [lo[j], hi[j]) (ascending,
// disjoint, P ranges) gets key (x - lo[j]) << 32 | neighbour at its cursor, cursor[cbase[j] + x - lo[j]].
#define K1_EMIT_RANGES(NAME, IT)                                                                                  \
extern "C" __global__ void NAME(const i64* edges, i64 m, const IT* iperm, int P, const i64* lo, const i64* hi,  \
                                const i64* cbase, u64* cursor, u64* keys) {                                    \
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < m; i += (i64)gridDim.x * blockDim.x) {        \
        i64 u = edges[2 * i], v = edges[2 * i + 1];                                                           \
        if (u == v) continue;                                                                                 \
        if (iperm) {                                                                                          \
            u = (i64)iperm[u];                                                                                \
            v = (i64)iperm[v];                                                                                \
        }                                                                                                     \
        for (int s = 0; s < 2; ++s) {                                                                         \
            const i64 x = s ? v : u, y = s ? u : v;                                                           \
            for (int j = 0; j < P; ++j) {                                                                     \
                if (x >= lo[j] && x < hi[j]) {                                                                \
                    const u64 p = atomicAdd(&cursor[cbase[j] + x - lo[j]], 1ULL);                             \
                    keys[p] = ((u64)(x - lo[j]) << 32) | (u64)y;                                              \
                    break;                                                                                    \
                }                                                                                             \
            }                                                                                                 \
        }                                                                                                     \
    }                                                                                                         \
}
K1_EMIT_RANGES(k1_emit_ranges_i32, int)
K1_EMIT_RANGES(k1_emit_ranges_i64, long long)

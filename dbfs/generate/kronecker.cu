// Graph500 3.0.1 Kronecker edges on the GPU, bit-exact with
// dbfs/generate/graph500.py (GRAPH500.md sections 2-5).
//
// Edge e is drawn from its own MRG stream, state A**(e * 2**64) S0 = B**e S0
// with B = A**(2**64). Thread t of block b handles the edges
// i = b*blockDim*ept + t + k*blockDim (k < ept) of the requested range, so
// the writes of a warp are contiguous: it jumps once to its first edge with
// the table btab[k] = B**(2**k) and then steps by cstep = B**blockDim.
// Arithmetic mod m = 2**31 - 1: every state and matrix entry is below 2**31,
// so it is held in 32 bits and each product is one 32 x 32 -> 64-bit multiply
// (IMAD.WIDE.U32), folded back to 32 bits at once (a product below 2**62
// folds below 2**32); the scramble is uint64 arithmetic with wrap-around and
// __brevll. A vertex id is built most significant bit first by shifts.

typedef long long i64;
typedef unsigned long long u64;
typedef unsigned int u32;

#define MRG_M 0x7FFFFFFFu
#define REJECT_LIMIT (0x7FFFFFFFu % 10000u)   // 3647 (3.0.1)

// x mod 2**31 - 1 folded once: below 2**32 for x < 2**62 (same residue)
__device__ __forceinline__ u32 fold(u64 x) { return (u32)(x & MRG_M) + (u32)(x >> 31); }

// x mod m, canonical, for 0 <= x < 2**62
__device__ __forceinline__ u32 modm(u64 x) {
    u32 y = fold(x);
    y = (y & MRG_M) + (y >> 31);
    return y >= MRG_M ? y - MRG_M : y;
}

// out = mat @ z (mod m), mat row-major 5x5 (entries below 2**31, held as int64)
__device__ __forceinline__ void matvec(const i64* __restrict__ mat, const u32* z, u32* out) {
    for (int i = 0; i < 5; ++i) {
        u64 acc = 0;
        for (int k = 0; k < 5; ++k) acc += fold((u64)(u32)mat[i * 5 + k] * z[k]);
        out[i] = modm(acc);
    }
}

__device__ __forceinline__ u64 scramble(u64 v, int shift, u64 val0, u64 val1) {
    v += val0 + val1;
    v *= (val0 | 0x4519840211493211ULL);
    v = __brevll(v) >> shift;
    v *= (val1 | 0x3050852102C843A5ULL);
    v = __brevll(v) >> shift;
    return v;
}

extern "C" __global__ void kron_edges(i64 start, i64 count, i64 scale, const i64* s0, const i64* btab,
                                      const i64* cstep, i64 ept, u64 val0, u64 val1, i64 t1, i64 t2,
                                      i64 t3, i64 do_scramble, i64* out) {
    const i64 li0 = (i64)blockIdx.x * blockDim.x * ept + threadIdx.x;
    if (li0 >= count) return;
    u32 z[5], tmp[5];
    for (int q = 0; q < 5; ++q) z[q] = (u32)s0[q];
    u64 e = (u64)(start + li0);
    for (int k = 0; e != 0; ++k, e >>= 1) {
        if (e & 1ULL) {
            matvec(btab + 25 * k, z, tmp);
            for (int q = 0; q < 5; ++q) z[q] = tmp[q];
        }
    }
    const int shift = 64 - (int)scale;
    const u32 c1 = (u32)t1, c2 = (u32)t2, c3 = (u32)t3;
    for (i64 it = 0; it < ept; ++it) {
        const i64 li = li0 + it * (i64)blockDim.x;
        if (li >= count) break;
        // make_one_edge: SCALE quadrant draws, most significant bit first
        u32 z1 = z[0], z2 = z[1], z3 = z[2], z4 = z[3], z5 = z[4];
        u64 src = 0, tgt = 0;
        for (int lev = 0; lev < (int)scale; ++lev) {
            u32 v;
            do {
                v = modm((u64)107374182u * z1 + (u64)104480u * z5);
                z5 = z4;
                z4 = z3;
                z3 = z2;
                z2 = z1;
                z1 = v;
            } while (v < REJECT_LIMIT);
            const u32 r = v % 10000u;
            const u32 k = (r >= c1) + (r >= c2) + (r >= c3);   // 0 B, 1 C, 2 A, 3 D
            u32 so = (0xAu >> k) & 1u, to = (0x9u >> k) & 1u;
            if (src == tgt && so > to) {   // clip-and-flip: src <= tgt on the diagonal (the bits so far)
                so = 0;
                to = 1;
            }
            src = (src << 1) | so;
            tgt = (tgt << 1) | to;
        }
        if (do_scramble) {
            out[2 * li] = (i64)scramble(src, shift, val0, val1);
            out[2 * li + 1] = (i64)scramble(tgt, shift, val0, val1);
        } else {
            out[2 * li] = (i64)src;
            out[2 * li + 1] = (i64)tgt;
        }
        matvec(cstep, z, tmp);
        for (int q = 0; q < 5; ++q) z[q] = tmp[q];
    }
}

// Graph500 3.0.1 Kronecker edges on the GPU, bit-exact with
// dbfs/generate/graph500.py (GRAPH500.md sections 2-5).
//
// Edge e is drawn from its own MRG stream, state A**(e * 2**64) S0 = B**e S0
// with B = A**(2**64). Thread t of block b handles the edges
// i = b*blockDim*ept + t + k*blockDim (k < ept) of the requested range, so
// the writes of a warp are contiguous: it jumps once to its first edge with
// the table btab[k] = B**(2**k) and then steps by cstep = B**blockDim.
// All arithmetic mod m = 2**31 - 1 is on 64-bit integers (products of two
// values below 2**31 stay below 2**62); the scramble is uint64 arithmetic
// with wrap-around and __brevll.

typedef long long i64;
typedef unsigned long long u64;

#define MRG_M 0x7FFFFFFFLL
#define REJECT_LIMIT (0x7FFFFFFFLL % 10000)   // 3647 (3.0.1)

__device__ __forceinline__ i64 fold(i64 x) { return (x & 0x7FFFFFFFLL) + (x >> 31); }

// x mod m for 0 <= x < 2**62
__device__ __forceinline__ i64 modm(i64 x) {
    x = fold(x);
    x = fold(x);
    if (x >= MRG_M) x -= MRG_M;
    return x;
}

// out = mat @ z (mod m), mat row-major 5x5; each folded product is < 2**32
__device__ __forceinline__ void matvec(const i64* mat, const i64* z, i64* out) {
    for (int i = 0; i < 5; ++i) {
        i64 acc = 0;
        for (int k = 0; k < 5; ++k) acc += fold(mat[i * 5 + k] * z[k]);
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
    i64 z[5], tmp[5];
    for (int q = 0; q < 5; ++q) z[q] = s0[q];
    u64 e = (u64)(start + li0);
    for (int k = 0; e != 0; ++k, e >>= 1) {
        if (e & 1ULL) {
            matvec(btab + 25 * k, z, tmp);
            for (int q = 0; q < 5; ++q) z[q] = tmp[q];
        }
    }
    const int shift = 64 - (int)scale;
    for (i64 it = 0; it < ept; ++it) {
        const i64 li = li0 + it * (i64)blockDim.x;
        if (li >= count) break;
        // make_one_edge: SCALE quadrant draws, most significant bit first
        i64 z1 = z[0], z2 = z[1], z3 = z[2], z4 = z[3], z5 = z[4];
        i64 src = 0, tgt = 0;
        for (int lev = 0; lev < (int)scale; ++lev) {
            i64 v;
            do {
                v = modm(107374182LL * z1 + 104480LL * z5);
                z5 = z4;
                z4 = z3;
                z3 = z2;
                z2 = z1;
                z1 = v;
            } while (v < REJECT_LIMIT);
            const i64 r = (i64)((unsigned)v % 10000u);   // v < 2**31: a 32-bit modulo (multiply-shift)
            const int k = (r >= t1) + (r >= t2) + (r >= t3);   // 0 B, 1 C, 2 A, 3 D
            i64 so = (0xA >> k) & 1, to = (0x9 >> k) & 1;
            if (src == tgt && so > to) {   // clip-and-flip: src <= tgt on the diagonal
                so = 0;
                to = 1;
            }
            const int bit = (int)scale - 1 - lev;
            src |= so << bit;
            tgt |= to << bit;
        }
        if (do_scramble) {
            out[2 * li] = (i64)scramble((u64)src, shift, val0, val1);
            out[2 * li + 1] = (i64)scramble((u64)tgt, shift, val0, val1);
        } else {
            out[2 * li] = src;
            out[2 * li + 1] = tgt;
        }
        matvec(cstep, z, tmp);
        for (int q = 0; q < 5; ++q) z[q] = tmp[q];
    }
}

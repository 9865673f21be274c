// dbfs GPU kernels of an NCCL top-down level exchanged as bits (dbfs/bfs/dask/search/gpu_dense.py): the
// owner's candidate rows, and the rows found marked visited. Compiled as one module after bfs.cu and
// partitioned.cu (dbfs/bfs/gpu.py), whose typedefs they use; elementwise over bitmap words, no warp
// intrinsics, so tests/test_cuda_c_build.py also builds them as C.
//
// After the bottom-up step of Beamer, Asanovic and Patterson, "Direction-Optimizing Breadth-First Search"
// (SC 2012), run over the claimed rows only.

// The owner's side of an NCCL top-down level exchanged as bits
// (dbfs/bfs/dask/search/gpu_dense.py; one rank a worker, whose local bitmap
// words are its slice of the global ones): every worker's claim pass set bits
// of its `visited_g` and sent its slice of this rank. claimed_open writes
// open[i] = visited[i] | ~(mine[i] | cl[i] | cl[stride + i] | ... k slices),
// clear only for a claimed row not visited yet: bu_step, given `open` as its
// visited bitmap, searches parents in the frontier for those rows alone, and
// finds one for each (each was claimed from a frontier vertex, and the CSR
// is symmetric).
extern "C" __global__ void claimed_open(const u32* visited, const u32* mine, const u32* cl, int k, i64 stride,
                                        i64 nw, u32* open) {
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < nw; i += (i64)gridDim.x * blockDim.x) {
        u32 c = mine[i];
        for (int s = 0; s < k; ++s) c |= cl[(i64)s * stride + i];
        open[i] = visited[i] | ~c;
    }
}

// The rows bu_step found (`next`) set in the rank's `visited` and in its slice
// `vg` of the worker's global visited bitmap.
extern "C" __global__ void visit_bits(const u32* next, i64 nw, u32* visited, u32* vg) {
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < nw; i += (i64)gridDim.x * blockDim.x) {
        const u32 b = next[i];
        if (b) {
            visited[i] |= b;
            vg[i] |= b;
        }
    }
}

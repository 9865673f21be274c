#!/usr/bin/env bash
# One device call on a box of several GPUs: every gpu test (DBFS_REQUIRE_GPU=1: a missing GPU stack fails),
# then benchmarks/multi_gpu.py (one GPU against the dask GPU workers, same call, same dataset).
#   bash benchmarks/gpu_multi_pass.sh --scale 26 --roots 16 --partitions 1 2
# PYTEST_ARGS overrides the test selection; TEST_TIMEOUT (0 skips the tests) and BENCH_TIMEOUT bound each part
# (s). Logs and records go to $OUT (the device tool's folder) or benchmarks/results. NVLink multicast stays off.
set -o pipefail
OUT=${OUT:-benchmarks/results}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 DBFS_RESULTS="$OUT" DBFS_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv 2>&1 | tee "$OUT/gpu-smi.txt"
if [ "${TEST_TIMEOUT:-300}" -gt 0 ]; then
  t0=$(date +%s)
  timeout "${TEST_TIMEOUT:-300}" python3 -m pytest -p no:cacheprovider -m gpu tests/ ${PYTEST_ARGS:--q --timeout=150} \
      2>&1 | tee "$OUT/gpu-tests.log"
  echo "tests: rc=$? in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/gpu-tests.log"
fi
[ "${BENCH_TIMEOUT:-300}" -gt 0 ] || exit 0
timeout "${BENCH_TIMEOUT:-300}" python3 benchmarks/multi_gpu.py "$@" 2>&1 | tee "$OUT/multi-gpu.log"
echo "benchmark: rc=$?"

#!/usr/bin/env bash
# One device call: the GPU tests, then the GPU benchmark. Logs and the JSON
# record go to $OUT (the device tool's folder) or benchmarks/results.
#   bash benchmarks/gpu_pass.sh [benchmark args...]
# PYTEST_ARGS overrides the test selection (default: every gpu test, stop at
# the first failure, 120 s per test); TEST_TIMEOUT / BENCH_TIMEOUT bound each
# part (s) so a hang cannot eat the device call.
set -o pipefail
OUT=${OUT:-benchmarks/results}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 DBFS_RESULTS="$OUT"
nvidia-smi --query-gpu=name,memory.total,memory.used,clocks.sm,clocks.max.sm --format=csv 2>&1 | tee "$OUT/gpu-smi.txt"
python3 -c 'import cupy, numba, numpy; print("cupy", cupy.__version__, "numba", numba.__version__, "numpy", numpy.__version__)'
t0=$(date +%s)
timeout ${TEST_TIMEOUT:-300} python3 -m pytest -p no:cacheprovider -m gpu tests/test_gpu.py ${PYTEST_ARGS:--x -q --timeout=120} 2>&1 | tee "$OUT/gpu-tests.log"
echo "tests: rc=$? in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/gpu-tests.log"
timeout ${BENCH_TIMEOUT:-280} python3 benchmarks/gpu.py "$@" 2>&1 | tee "$OUT/gpu-bench.log"
echo "benchmark: rc=$?"

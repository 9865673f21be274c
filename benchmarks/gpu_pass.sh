#!/usr/bin/env bash
# One device call: the GPU tests, `dbfs run --backend gpu` end to end, then the
# GPU benchmark. Logs and the JSON records go to $OUT (the device tool's
# folder) or benchmarks/results.
#   bash benchmarks/gpu_pass.sh [benchmark args...]
# PYTEST_ARGS overrides the test selection (default: every gpu test under
# tests/, stop at the first failure, 120 s per test); RUN_SCALE is the SCALE of
# the end-to-end run (default 26; 0 skips it); TEST_TIMEOUT / RUN_TIMEOUT /
# BENCH_TIMEOUT bound each part (s) so a hang cannot eat the device call.
set -o pipefail
OUT=${OUT:-benchmarks/results}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 DBFS_RESULTS="$OUT"
nvidia-smi --query-gpu=name,memory.total,memory.used,clocks.sm,clocks.max.sm --format=csv 2>&1 | tee "$OUT/gpu-smi.txt"
python3 -c 'import cupy, numba, numpy; print("cupy", cupy.__version__, "numba", numba.__version__, "numpy", numpy.__version__)'
t0=$(date +%s)
timeout ${TEST_TIMEOUT:-300} python3 -m pytest -p no:cacheprovider -m gpu tests/ ${PYTEST_ARGS:--x -q --timeout=120} 2>&1 | tee "$OUT/gpu-tests.log"
echo "tests: rc=$? in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/gpu-tests.log"
# end to end RUN_REPEAT times (default 1), each on an empty datasets directory: the
# first run after the tests may still compile CuPy kernels the tests never used
S=${RUN_SCALE:-26}
for k in $(seq 1 ${RUN_REPEAT:-1}); do
  [ "$S" -gt 0 ] || break
  ds=$(mktemp -d /tmp/dbfs-e2e.XXXX)
  tag="s$S-run$k"
  t1=$(date +%s.%N)
  timeout ${RUN_TIMEOUT:-150} python3 -m dbfs.cli run --scale "$S" --backend gpu --energy --datasets "$ds" \
      --json "$OUT/run-gpu-$tag.json" > "$OUT/run-gpu-$tag.txt" 2> "$OUT/run-gpu-$tag.err"
  rc=$?
  t2=$(date +%s.%N)
  echo "e2e $k: dbfs run --scale $S --backend gpu --energy: rc=$rc wall $(python3 -c "print(round($t2-$t1,2))") s" \
      | tee "$OUT/run-gpu-$tag.wall.txt"
  grep -v "chunk/s" "$OUT/run-gpu-$tag.err" | grep -v "^dbfs: search" | tail -6
  grep -E "harmonic_mean_TEPS|construction_time|graph_generation|mean_validate|MTEPS_per_W|energy_mean" "$OUT/run-gpu-$tag.txt"
  rm -rf "$ds"
done
[ "${BENCH_TIMEOUT:-280}" -gt 0 ] || exit 0
timeout ${BENCH_TIMEOUT:-280} python3 benchmarks/gpu.py "$@" 2>&1 | tee "$OUT/gpu-bench.log"
echo "benchmark: rc=$?"

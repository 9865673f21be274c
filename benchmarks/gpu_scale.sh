#!/usr/bin/env bash
# One device call: `dbfs run --backend gpu` (KIND=gpu, the default) or `dbfs run --cluster local-gpu
# --backend dask` (KIND=dask: one GPU worker, Kernel 1 in its memory) end to end at each SCALE given
# (issue #20: the SCALE 28/29/30 curve on one H200), each on an empty datasets directory, the graph relabelled by degree on the GPU with
# the low-degree rows' adjacency on the device and the rest in pinned host memory (--placement degree-low).
#   bash benchmarks/gpu_scale.sh 28 29 30
# RUN_TIMEOUT bounds each run (s, default 560); RUN_FLAGS replaces the placement flags; logs, the Graph500
# output and the JSON go to $OUT (the device tool's folder) or benchmarks/results.
set -o pipefail
OUT=${OUT:-benchmarks/results}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
FLAGS=${RUN_FLAGS:---relabel degree --placement degree-low}
KIND=${KIND:-gpu}
case $KIND in
  gpu) B="--backend gpu" ;;
  dask) B="--cluster local-gpu --backend dask" ;;
  *) echo "KIND=$KIND: use gpu or dask" >&2; exit 2 ;;
esac
nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv 2>&1   # (the device tool brings back 8 files)
for S in "$@"; do
  ds=$(mktemp -d /tmp/dbfs-scale.XXXX)
  tag="s$S"
  t1=$(date +%s.%N)
  timeout ${RUN_TIMEOUT:-560} python3 -m dbfs.cli run --scale "$S" $B $FLAGS --datasets "$ds" \
      --json "$OUT/run-$KIND-$tag.json" > "$OUT/run-$KIND-$tag.txt" 2> "$OUT/run-$KIND-$tag.err"
  rc=$?
  t2=$(date +%s.%N)
  echo "SCALE $S: dbfs run --scale $S $B $FLAGS: rc=$rc wall $(python3 -c "print(round($t2-$t1,1))") s" \
      | tee -a "$OUT/run-$KIND-$tag.err"
  grep -v "^dbfs: search" "$OUT/run-$KIND-$tag.err" | tail -12
  grep -E "harmonic_mean_TEPS|construction_time|graph_generation|mean_validate|NBFS" "$OUT/run-$KIND-$tag.txt"
  rm -rf "$ds"
done

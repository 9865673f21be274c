#!/usr/bin/env bash
# A run longer than one device command, kept up between calls on a warm machine (docs/GPU.md): the first call
# starts it with setsid and polls; a later call (the machine still warm) polls again; every call leaves the
# run's record as it goes, its Graph500 block, its stderr and an nvidia-smi memory trace in $OUT.
#   bash benchmarks/gpu_box_run.sh start TAG dbfs run --scale 31 --roots 64 --cluster local-gpu \
#        --backend dask --partitions 4 --relabel degree --datasets /tmp/ds31
#   bash benchmarks/gpu_box_run.sh poll TAG
# POLL bounds each call's wait (s, default 540; the device command's limit is 600). The run's folder is
# /tmp/dbfs-run-TAG on the device machine; the run starts from its own copy of the tree there (tree/, first on
# PYTHONPATH), since a later call may replace the tree it was started from (a run that lost its working directory
# that way failed mid-validation); NVLink multicast stays off in every process it starts. The command
# gets --json FILE in that folder (NO_JSON=1: not, for a command that writes its own record, e.g.
# NO_JSON=1 ... start scaling python3 benchmarks/gpu_scaling.py --scale 30 --gpus 1 2 4 --datasets D).
set -o pipefail
what=$1 tag=$2
shift 2
OUT=${OUT:-benchmarks/results}
R=/tmp/dbfs-run-$tag
mkdir -p "$OUT" "$R"
OUT=$(cd "$OUT" && pwd)
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
t0=$(date +%s)
case $what in
  start)
    [ -e "$R/pid" ] && { echo "run $tag already started (pid $(cat "$R/pid")): use poll" >&2; exit 2; }
    nohup nvidia-smi --query-gpu=timestamp,index,memory.used --format=csv,noheader,nounits -l 2 \
        > "$R/smi.csv" 2>&1 &
    mkdir -p "$R/tree"
    tar --exclude=./.git --exclude=./.venv --exclude=./.whl --exclude=./datasets --exclude=./benchmarks/results \
        --exclude=__pycache__ --exclude=./.clean --exclude=./.base --exclude=./.dev \
        -cf - . | tar -xf - -C "$R/tree" || exit 2
    cd "$R/tree" || exit 2
    export PYTHONPATH="$R/tree${PYTHONPATH:+:$PYTHONPATH}"
    if [ "${NO_JSON:-0}" = 1 ]; then
      setsid "$@" > "$R/run.txt" 2> "$R/run.err" < /dev/null &
    else
      setsid "$@" --json "$R/run.json" > "$R/run.txt" 2> "$R/run.err" < /dev/null &
    fi
    echo $! > "$R/pid"
    ;;
  poll) [ -e "$R/pid" ] || { echo "no run $tag on this machine (given back meanwhile?)" >&2; exit 2; } ;;
  *) echo "use: gpu_box_run.sh start|poll TAG [command ...]" >&2; exit 2 ;;
esac
while kill -0 "$(cat "$R/pid")" 2> /dev/null && [ $(( $(date +%s) - t0 )) -lt "${POLL:-540}" ]; do
  sleep 10
done
if kill -0 "$(cat "$R/pid")" 2> /dev/null; then echo "run $tag still going"; else echo "run $tag ended"; fi
grep -v "^dbfs: search " "$R/run.err" | tail -15
tail -3 "$R/run.err"
grep -E "harmonic_mean_TEPS|construction_time|mean_validate" "$R/run.txt"
[ "${NO_JSON:-0}" = 1 ] && tail -25 "$R/run.txt"
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print('complete', r['complete'], 'searches', len(r['searches']), 'stages', r.get('stages'))" "$R/run.json" 2> /dev/null
tar -czf "$OUT/run-$tag.tgz" --exclude=./tree -C "$R" .

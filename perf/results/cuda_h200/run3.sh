#!/usr/bin/env bash
# Device call 3 (one NVIDIA H200): the follow-ups of run2.sh, with kernels
# built with -lineinfo (.devrun carried as before):
#   bash perf/results/cuda_h200/run3.sh
B=.devrun
export LD_LIBRARY_PATH=$PWD/$B BRAID_TIMEOUT=20
t0=$(date +%s)
sum() { echo "$*" | tee -a $OUT/summary.txt; }
check() {  # check LOG LABEL TIMEOUT COMMAND...
  local log=$1 label=$2 limit=$3; shift 3
  if timeout $limit "$@" > /tmp/run.log 2>&1; then r=ok; else r="FAIL($?)"; fi
  { echo "=== $label: $r"; cat /tmp/run.log; } >> $OUT/$log
  sum "$label: $r $(grep -E 'Out of bounds|ERROR SUMMARY' /tmp/run.log | tr '\n' ' ') [$(( $(date +%s) - t0 )) s]"
}
# 1. racecheck's hazards, with source lines.
check race.log "racecheck all_reduce t2" 90 compute-sanitizer --tool racecheck --racecheck-report all --print-limit 6 \
  $B/perf/all_reduce_perf -t 2 -b 8 -e 256K -f 64 -n 1 -w 0 -d float
# 2. the configurations that failed in run2, twice each, with warnings on.
for cfg in "32 4 262144 4" "16 4 1048576 4" "16 4 1048576 8" "32 4 262144 2"; do
  set -- $cfg
  for rep in 1 2; do
    BRAID_DEBUG=WARN BRAID_CUDA_CHANNELS=$1 BRAID_CUDA_SLOTS=$2 BRAID_CUDA_SLOT_BYTES=$3 check channels.log \
      "all_reduce t$4 channels=$1 slots=$2 slot_bytes=$3 #$rep" 45 $B/perf/all_reduce_perf -t $4 -b 8M -e 128M -f 4 -n 10 -w 3
    grep -vE "^#" /tmp/run.log | tail -4 | tee -a $OUT/summary.txt
  done
done
# 3. the variant runs whose flags run2 got wrong.
for v in allreduce=ring allreduce=rd allreduce=stragglar; do
  BRAID_ALGO=$v check variants.log "all_reduce t4 $v" 60 $B/perf/all_reduce_perf -t 4 -b 8 -e 4M -f 8 -n 2 -w 1 -d all -o all
done
for d in float bfloat16; do
  BRAID_STRAGGLER=3 check variants.log "all_reduce t4 BRAID_STRAGGLER=3 $d" 60 $B/perf/all_reduce_perf -t 4 -b 8 -e 64M -f 8 -n 5 -w 2 -d $d
done

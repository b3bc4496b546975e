#!/usr/bin/env bash
# Device call 4 (one NVIDIA H200), after the block budget (launches of ranks
# sharing the GPU kept co-resident), the kernel's shared-flag barrier and the
# kernel-error warning (.devrun carried as before):
#   bash perf/results/cuda_h200/run4.sh
B=.devrun
export LD_LIBRARY_PATH=$PWD/$B BRAID_TIMEOUT=20
t0=$(date +%s)
sum() { echo "$*" | tee -a $OUT/summary.txt; }
check() {  # check LOG LABEL TIMEOUT COMMAND...
  local log=$1 label=$2 limit=$3; shift 3
  if timeout $limit "$@" > /tmp/run.log 2>&1; then r=ok; else r="FAIL($?)"; fi
  { echo "=== $label: $r"; cat /tmp/run.log; } >> $OUT/$log
  sum "$label: $r $(grep -E 'Out of bounds|ERROR SUMMARY|RACECHECK SUMMARY' /tmp/run.log | tr '\n' ' ') [$(( $(date +%s) - t0 )) s]"
}
# 1. the budget each rank gets, as init logs it.
for n in 2 4 8; do
  BRAID_DEBUG=INFO BRAID_DEBUG_SUBSYS=INIT BRAID_CUDA_CHANNELS=32 $B/perf/all_reduce_perf -t $n -b 8 -e 8 -n 1 -w 0 2>&1 | grep -m1 "blocks a launch" | tee -a $OUT/summary.txt
done
# 2. racecheck again.
check race.log "racecheck all_reduce t2" 90 compute-sanitizer --tool racecheck --racecheck-report all --error-exitcode 9 \
  $B/perf/all_reduce_perf -t 2 -b 8 -e 256K -f 64 -n 1 -w 0 -d float
# 3. 128 MB all_reduce against channels, 4 slots x 256 KiB (and 1 MiB slots at 16 and 32).
for n in 2 4 8; do
  for cfg in "8 262144" "16 262144" "32 262144" "64 262144" "16 1048576" "32 1048576"; do
    set -- $cfg
    BRAID_CUDA_CHANNELS=$1 BRAID_CUDA_SLOT_BYTES=$2 check tuning.log "all_reduce t$n channels=$1 slot_bytes=$2" 45 \
      $B/perf/all_reduce_perf -t $n -b 8M -e 128M -f 4 -n 10 -w 3
    grep -E "^ +134217728" /tmp/run.log | tee -a $OUT/summary.txt
  done
done
# 4. every tool, data checked, 32 channels, 2/4/8 ranks.
export BRAID_CUDA_CHANNELS=32
for n in 2 4 8; do
  for t in all_reduce reduce_scatter reduce all_gather broadcast alltoall sendrecv gather scatter; do
    [ $(( $(date +%s) - t0 )) -gt 500 ] && break 2
    ops=""; case $t in all_reduce|reduce_scatter|reduce) ops="-o all" ;; esac
    check tools.log "$t t$n channels=32" 60 $B/perf/${t}_perf -t $n -b 8 -e 8M -f 16 -n 2 -w 1 -d all $ops
  done
done

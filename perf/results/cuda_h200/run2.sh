#!/usr/bin/env bash
# Device call 2 (one NVIDIA H200), same carried .devrun as run1.sh:
#   bash perf/results/cuda_h200/run2.sh
# 8 ranks, algorithm and schedule variants, StragglAR, connection tuning,
# compute-sanitizer.  Logs in $OUT.
B=.devrun
export LD_LIBRARY_PATH=$PWD/$B BRAID_TIMEOUT=20
t0=$(date +%s)
sum() { echo "$*" | tee -a $OUT/summary.txt; }
elapsed() { echo "[$(( $(date +%s) - t0 )) s]"; }
check() {  # check LOG LABEL TIMEOUT COMMAND...: runs, appends to $OUT/LOG, one summary line
  local log=$1 label=$2 limit=$3; shift 3
  if timeout $limit "$@" > /tmp/run.log 2>&1; then r=ok; else r="FAIL($?)"; fi
  { echo "=== $label: $r"; cat /tmp/run.log; } >> $OUT/$log
  sum "$label: $r $(grep -E 'Out of bounds|ERROR SUMMARY' /tmp/run.log | tr '\n' ' ') $(elapsed)"
}
# 1. every tool with 8 ranks (threads) on the one GPU, every datatype and op.
for t in all_reduce reduce_scatter reduce all_gather broadcast alltoall sendrecv gather scatter; do
  ops=""; case $t in all_reduce|reduce_scatter|reduce) ops="-o all" ;; esac
  check tools8.log "$t t8" 90 $B/perf/${t}_perf -t 8 -b 8 -e 1M -f 32 -n 2 -w 1 -d all $ops
done
# 2. each generator forced, 4 ranks; StragglAR with rank 3 late; an MSCCL XML schedule.
for v in allreduce=ring allreduce=rd allreduce=stragglar; do
  BRAID_ALGO=$v check variants.log "all_reduce t4 $v" 60 $B/perf/all_reduce_perf -t 4 -b 8 -e 4M -f 8 -n 2 -w 1 -d all -o sum,max
done
for v in allgather=ring allgather=direct; do
  BRAID_ALGO=$v check variants.log "all_gather t4 $v" 60 $B/perf/all_gather_perf -t 4 -b 8 -e 4M -f 8 -n 2 -w 1 -d all
done
for v in alltoall=pairwise alltoall=direct; do
  BRAID_ALGO=$v check variants.log "alltoall t4 $v" 60 $B/perf/alltoall_perf -t 4 -b 8 -e 4M -f 8 -n 2 -w 1 -d all
done
BRAID_STRAGGLER=3 check variants.log "all_reduce t4 BRAID_STRAGGLER=3" 60 $B/perf/all_reduce_perf -t 4 -b 8 -e 64M -f 8 -n 5 -w 2 -d float,bfloat16
BRAID_SCHEDULES=tests/data/synth/schedules BRAID_DEBUG=INFO check variants.log "all_reduce t4 BRAID_SCHEDULES" 60 $B/perf/all_reduce_perf -t 4 -b 8 -e 4M -f 8 -n 2 -w 1 -d float
# 3. bandwidth at 128 MB against connection settings (default: 8 channels, 4 slots of 256 KiB).
for n in 2 4 8; do
  for cfg in "8 4 262144" "16 4 262144" "32 4 262144" "8 4 1048576" "16 4 1048576" "32 8 1048576"; do
    set -- $cfg
    [ $(( $(date +%s) - t0 )) -gt 400 ] && break 2
    BRAID_CUDA_CHANNELS=$1 BRAID_CUDA_SLOTS=$2 BRAID_CUDA_SLOT_BYTES=$3 check tuning.log "all_reduce t$n channels=$1 slots=$2 slot_bytes=$3" 40 \
      $B/perf/all_reduce_perf -t $n -b 8M -e 128M -f 4 -n 10 -w 3
    grep -E "^ +134217728" /tmp/run.log | tee -a $OUT/summary.txt
  done
done
# 4. compute-sanitizer: out-of-bounds and races in braid's kernels, small sizes.
for tool in memcheck racecheck synccheck; do
  [ $(( $(date +%s) - t0 )) -gt 480 ] && { sum "out of time before $tool"; break; }
  check sanitizer.log "compute-sanitizer $tool all_reduce t2" 60 compute-sanitizer --tool $tool --error-exitcode 9 \
    $B/perf/all_reduce_perf -t 2 -b 8 -e 256K -f 64 -n 1 -w 0 -d float
done

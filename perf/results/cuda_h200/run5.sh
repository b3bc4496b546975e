#!/usr/bin/env bash
# Device call 5 (one NVIDIA H200): the intermittent timeouts of run2/run4
# (all_reduce -b 8M -e 128M, 4 and 8 ranks as threads on the one GPU), with
# the kernel saying which wait gave up (.devrun carried as before):
#   bash perf/results/cuda_h200/run5.sh
B=.devrun
export LD_LIBRARY_PATH=$PWD/$B BRAID_TIMEOUT=8 BRAID_DEBUG=WARN
t0=$(date +%s)
sum() { echo "$*" | tee -a $OUT/summary.txt; }
try() {  # try LABEL COMMAND...
  local label=$1; shift
  if timeout 40 "$@" > /tmp/run.log 2>&1; then r=ok; else r="FAIL($?)"; fi
  { echo "=== $label: $r"; cat /tmp/run.log; } >> $OUT/runs.log
  sum "$label: $r [$(( $(date +%s) - t0 )) s]"
  grep -E "WARN" /tmp/run.log | grep -v "earlier asynchronous" | head -3 | tee -a $OUT/summary.txt
}
for rep in 1 2 3 4 5 6 7 8; do
  [ $(( $(date +%s) - t0 )) -gt 150 ] && break
  try "t4 channels=8 #$rep" $B/perf/all_reduce_perf -t 4 -b 8M -e 128M -f 4 -n 10 -w 3
done
for rep in 1 2 3 4 5 6; do
  [ $(( $(date +%s) - t0 )) -gt 250 ] && break
  CUDA_DEVICE_MAX_CONNECTIONS=32 try "t4 channels=8 CUDA_DEVICE_MAX_CONNECTIONS=32 #$rep" $B/perf/all_reduce_perf -t 4 -b 8M -e 128M -f 4 -n 10 -w 3
done
for rep in 1 2 3; do
  [ $(( $(date +%s) - t0 )) -gt 320 ] && break
  BRAID_CUDA_CHANNELS=32 try "t8 channels=32 #$rep" $B/perf/all_reduce_perf -t 8 -b 8M -e 128M -f 4 -n 10 -w 3
done

#!/usr/bin/env bash
# Device call 1 (one NVIDIA H200), run from the repository root with
# libnccl.so.2* and perf/*_perf from scripts/build-device carried as .devrun:
#   bash perf/results/cuda_h200/run1.sh
# Logs go to $OUT (tools.log, torch.log, sweeps.log, summary.txt).
B=.devrun   # libnccl.so.2 and perf/*_perf copied from .devbuild (the whole tree is over the 64 MiB that travels)
export LD_LIBRARY_PATH=$PWD/$B
t0=$(date +%s)
sum() { echo "$*" | tee -a $OUT/summary.txt; }
nvidia-smi -L | tee -a $OUT/summary.txt
export BRAID_TIMEOUT=20
fails=0
# 1. every perf tool, 2 and 4 ranks (threads) on the one GPU, every datatype
#    (every op for the reducing tools), data checked.
for n in 2 4; do
  for t in all_reduce reduce_scatter reduce all_gather broadcast alltoall sendrecv gather scatter; do
    ops=""; case $t in all_reduce|reduce_scatter|reduce) ops="-o all" ;; esac
    if timeout 60 $B/perf/${t}_perf -t $n -b 8 -e 1M -f 32 -n 2 -w 1 -d all $ops > /tmp/run.log 2>&1; then r=ok; else r="FAIL($?)"; fails=$((fails+1)); fi
    { echo "=== $t -t $n: $r"; cat /tmp/run.log; } >> $OUT/tools.log
    sum "$t t$n: $r $(grep 'Out of bounds' /tmp/run.log) [$(( $(date +%s) - t0 )) s]"
  done
done
sum "tool failures: $fails"
# 2. PyTorch: 2 and 4 processes on the one GPU, braid preloaded, under MPS.
nvidia-cuda-mps-control -d && sleep 1
lib=$(realpath $B/libnccl.so.2)
for np in 2 4; do
  echo "=== torchrun np$np" >> $OUT/torch.log
  if LD_PRELOAD=$lib BRAID_EXPECT_LIB=$lib PYTHONUNBUFFERED=1 timeout 120 torchrun --nproc-per-node $np tests/gpu/torch_braid.py >> $OUT/torch.log 2>&1
  then r=ok; else r="FAIL($?)"; fi
  sum "torch np$np: $r [$(( $(date +%s) - t0 )) s]"
done
echo quit | nvidia-cuda-mps-control
# 3. bandwidth sweeps, 2 ranks, to 256 MB, next to the device's copy bandwidth.
python3 -c '
import torch
n = 256 << 20
a = torch.empty(n, dtype=torch.uint8, device="cuda"); b = torch.empty_like(a)
for _ in range(5): b.copy_(a)
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
s.record()
for _ in range(20): b.copy_(a)
e.record(); torch.cuda.synchronize()
sec = s.elapsed_time(e) / 1e3 / 20
print(f"device copy 256 MB: {n / sec / 1e9:.1f} GB/s copied ({2 * n / sec / 1e9:.1f} GB/s read+written)")' 2>&1 | tee -a $OUT/summary.txt
for t in all_reduce reduce_scatter all_gather broadcast alltoall; do
  [ $(( $(date +%s) - t0 )) -gt 520 ] && { sum "out of time before $t sweep"; break; }
  echo "=== $t -t 2 sweep" >> $OUT/sweeps.log
  timeout 60 $B/perf/${t}_perf -t 2 -b 8 -e 256M -f 4 -n 20 -w 5 >> $OUT/sweeps.log 2>&1 || sum "$t sweep: FAIL($?)"
  sum "$t sweep done [$(( $(date +%s) - t0 )) s]"
done

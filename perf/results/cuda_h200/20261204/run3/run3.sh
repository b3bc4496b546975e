#!/usr/bin/env bash
# Device call 3 of 2026-12-04: the fixes (plan upload on the call's stream,
# one stream per MoE test rank), NCCL 2.30's LSA example, then issue 38's
# targets (device-check --quick --only targets) in what time is left.
export LD_LIBRARY_PATH=$PWD/.devrun BRAID_TIMEOUT=20 CUDA_DEVICE_MAX_CONNECTIONS=32
log=$OUT/run3.log
r() {
  local name=$1 lim=$2; shift 2
  echo "=== $name: $*" >> "$log"; local t0=$SECONDS
  timeout -k 5 "$lim" "$@" >> "$log" 2>&1
  echo "=== $name: exit $? ($((SECONDS - t0)) s)" | tee -a "$log"
}
r deterministic_threads_t4 40 env BRAID_DETERMINISTIC=1 .devrun/braid_gpu_deterministic 4 threads
r alltoallv_threads_t8 40 .devrun/braid_gpu_moe 8 threads alltoallv
r moe_layers_threads_t8 60 .devrun/braid_gpu_moe 8 threads layers
for n in 2 4 8; do
  r nccl_example_2.30.7_01_allreduce_lsa_t$n 20 env BRAID_DEVICES=$n NTHREADS=$n \
    LD_PRELOAD=$PWD/.devrun/libbraid-devmap.so .nccl-examples/2.30.7/01_allreduce_lsa
done
grep -E "PASSED|FAILED" "$log" | tail -3
scripts/device-check --quick --only targets --budget $((200 - SECONDS)) .devrun

#!/usr/bin/env bash
# device_check_rehearsal BUILD_DIR: scripts/device-check's bookkeeping,
# rehearsed on CPU, where --dry-run cannot reach it: a stand-in nvidia-smi,
# the hang group's perf runs on the host backend.  A run with a small budget
# must end with ok and skipped rows, and leave summary.md and logs.tar.gz in
# $OUT; a run stopped by SIGTERM mid-step (as the device tool's limit stops
# one, here once the first step has started) must leave them too, with a
# row for the stopped step.
set -uo pipefail
build=$(realpath "$1")
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin"
printf '#!/bin/sh\necho "GPU 0: stand-in (a CPU rehearsal)"\n' > "$tmp/bin/nvidia-smi"
chmod +x "$tmp/bin/nvidia-smi"
fail=0
check() {  # check WHAT COMMAND...: fails the rehearsal unless COMMAND succeeds
  local what=$1; shift
  if "$@"; then echo "ok: $what"; else echo "FAILED: $what"; fail=1; fi
}

OUT=$tmp/budget PATH=$tmp/bin:$PATH scripts/device-check --quick --budget 30 --only hang "$build" \
  > "$tmp/budget.log" 2>&1
rc=$?
check "a budgeted run exits 0 (cut and skipped steps are not failures)" test $rc = 0
check "its first step is ok" grep -q '^| hang_first_call_t4_1 | ok |' "$tmp/budget/summary.md"
check "the budget skipped the last steps" \
  grep -q '^| hang_first_call_t8_5 | skipped (budget) |' "$tmp/budget/summary.md"
check "logs.tar.gz holds the first step's log" \
  bash -c "tar -tzf '$tmp/budget/logs.tar.gz' | grep -q hang_first_call_t4_1.log"
check "only the two result files are in \$OUT" test "$(ls "$tmp/budget" | tr '\n' ' ')" = "logs.tar.gz summary.md "

# SIGTERM once the first step has started (its log is in a work folder the
# run makes under /tmp), not after a fixed second: on a loaded machine the
# run may not have reached it by then.
before=$(ls -d /tmp/device-check.* 2> /dev/null)
OUT=$tmp/signal PATH=$tmp/bin:$PATH scripts/device-check --quick --budget 60 --only hang "$build" \
  > "$tmp/signal.log" 2>&1 &
run=$!
for _ in $(seq 300); do
  started=0
  for dir in /tmp/device-check.*; do
    grep -qxF "$dir" <<< "$before" && continue
    [ -e "$dir/hang_first_call_t4_1.log" ] && started=1
  done
  [ $started = 1 ] && break
  sleep 0.1
done
kill -TERM $run 2> /dev/null
wait $run
check "a run stopped by SIGTERM leaves a row for the stopped step" \
  grep -q '| stopped (signal) |' "$tmp/signal/summary.md"
check "and says so" grep -q 'stopped by a signal during hang_first_call' "$tmp/signal/summary.md"
check "and keeps its logs" test -s "$tmp/signal/logs.tar.gz"
# The nccl_ep steps (the examples group), with stand-ins for NVIDIA's
# ep_test and ep_bench run by this machine's mpirun: a step passes only with
# every rank's Success line (ep_test) or the validation line (ep_bench) and
# no FAILED; the benchmark's summary goes into the measured part.
if command -v mpirun > /dev/null; then
  ep=$tmp/examples/nccl_ep/bin
  mkdir -p "$ep"
  # Rank 1 of a CUDA-graph run (-g) fails; every other rank succeeds.
  printf '%s\n' '#!/bin/bash' \
    '[[ " $* " == *" -g "* && $OMPI_COMM_WORLD_RANK == 1 ]] && { echo "Dispatch check failed!"; exit 1; }' \
    'echo "[MPI Rank $OMPI_COMM_WORLD_RANK] Success "' > "$ep/ep_test"
  # --validate passes; --mask-test has rank 2 report a FAILED check and
  # exit 0, as the real one does.
  printf '%s\n' '#!/bin/bash' \
    'if [[ " $* " == *" --validate "* ]]; then' \
    '  [ "$OMPI_COMM_WORLD_RANK" = 0 ] && printf "%s\n" "=== Summary (Low Latency, across 8 ranks) ===" \' \
    '    "Dispatch (BF16):  avg=1.00 us" "--- Kernel-only performance ---" \' \
    '    "Global validation: Dispatch=PASSED, Combine=PASSED"' \
    'else' \
    '  [ "$OMPI_COMM_WORLD_RANK" = 2 ] && result=FAILED || result=PASSED' \
    '  echo "Rank $OMPI_COMM_WORLD_RANK: mask clean check: $result"' \
    'fi' \
    'exit 0' > "$ep/ep_bench"
  chmod +x "$ep/ep_test" "$ep/ep_bench"
  OUT=$tmp/ep PATH=$tmp/bin:$PATH BRAID_NCCL_EXAMPLES=$tmp/examples scripts/device-check --budget 120 \
    --only examples "$build" > "$tmp/ep.log" 2>&1
  for ok in nccl_ep_test_ll_t2 nccl_ep_test_ll_t4 nccl_ep_test_ll_t8 nccl_ep_test_ht_t8 nccl_ep_bench_ll_t8; do
    check "$ok passes" grep -q "^| $ok | ok |" "$tmp/ep/summary.md"
  done
  check "a rank that fails fails its step" grep -q '^| nccl_ep_test_ll_graph_t8 | FAILED' "$tmp/ep/summary.md"
  check "a FAILED line fails its step" grep -q '^| nccl_ep_bench_mask_t8 | FAILED' "$tmp/ep/summary.md"
  check "the benchmark's summary is in the measured part" grep -q '^Dispatch (BF16):  avg=1.00 us' \
    "$tmp/ep/summary.md"
  check "without its Kernel-only part" bash -c "! grep -q 'Kernel-only' '$tmp/ep/summary.md'"
else
  echo "skipped: the nccl_ep steps (no mpirun here)"
fi
[ $fail = 0 ] || {
  echo "--- budgeted run:"; cat "$tmp/budget.log"; echo "--- stopped run:"; cat "$tmp/signal.log"
  [ -f "$tmp/ep.log" ] && { echo "--- nccl_ep run:"; cat "$tmp/ep.log"; }
}
exit $fail

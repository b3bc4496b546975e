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
[ $fail = 0 ] || { echo "--- budgeted run:"; cat "$tmp/budget.log"; echo "--- stopped run:"; cat "$tmp/signal.log"; }
exit $fail

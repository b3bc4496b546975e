#!/usr/bin/env bash
# moe_perf_smoke: small runs of moe_perf (data checked; it exits non-zero on
# any wrong token or error), every row type, skewed, with capacity overflow,
# and processes on emulated hosts (MoE over RMA between them).
set -uo pipefail
tool=$1
fail=0
run() {
  local out
  if ! out=$("$tool" "$@" 2>&1); then
    echo "FAILED: moe_perf $*"; echo "$out" | tail -20; fail=1
  else
    echo "ok: moe_perf $*"; echo "$out" | grep -E 'speedup|#wrong'
  fi
}
run -t 4 --tokens 32 --hidden 64 --topk 4 --experts 16 -n 3 -w 1
run -t 8 --tokens 16 --hidden 32 --topk 8 --experts 64 -d fp8 -n 2 -w 1 --blocks 2
run -t 3 --tokens 24 --hidden 16 --topk 2 --experts 6 -d float --skew 0.9 --layout rank -n 2 -w 1
run -t 4 --tokens 32 --hidden 16 --topk 4 --experts 16 -d half --skew 0.9 --capacity-factor 1.0 -n 2 -w 1
run -t 4 --tokens 24 --hidden 32 --topk 4 --experts 16 -n 2 -w 1 --hosts 2
run -t 3 --tokens 16 --hidden 16 --topk 2 --experts 6 -d fp8 -n 2 -w 1 --hosts 3 --capacity-factor 1.0
exit $fail

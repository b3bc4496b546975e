#!/usr/bin/env bash
# perf_smoke: runs each perf tool given on the command line with 3 ranks as
# threads over every datatype (and every op for the reducing tools); fails on
# the first non-zero exit (wrong data, error or crash).
set -uo pipefail
fail=0
run() {
  local out
  if ! out=$("$@" 2>&1); then
    echo "FAILED: $*"
    echo "$out" | tail -40
    fail=1
  else
    echo "ok: $* ($(grep -c '^ *[0-9]' <<<"$out") rows)"
  fi
}
for tool in "$@"; do
  run "$tool" -t 3 -b 8 -e 64K -f 4 -n 3 -d all
  case "$(basename "$tool")" in
    all_reduce_perf|reduce_scatter_perf|reduce_perf)
      run "$tool" -t 4 -b 8 -e 16K -f 8 -n 2 -w 0 -o all -d all -r -1 ;;
    broadcast_perf|gather_perf|scatter_perf)
      run "$tool" -t 4 -b 1K -e 16K -f 4 -n 2 -r -1 ;;
  esac
done
exit $fail

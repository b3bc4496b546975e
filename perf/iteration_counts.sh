#!/usr/bin/env bash
# perf_iteration_counts: a tool runs -n iterations per row, or --small_iters
# for rows of at most --small_bytes; the JSON output (-J) says how many each
# row ran.  Bad values for either option are refused with a message.
# Usage: iteration_counts.sh <perf tool>
set -uo pipefail
tool=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0

rows() {  # prints "size:iterations" per row of the JSON file $1
  python3 -c 'import json, sys
print(" ".join(f"{r['"'"'size'"'"']}:{r['"'"'actual_iterations'"'"']}" for r in json.load(open(sys.argv[1]))["results"]))' "$1"
}
expect() {  # expect <what> <wanted rows> <tool flags...>
  local what=$1 want=$2; shift 2
  rm -f "$dir"/out.json*  # an existing file is not overwritten (nccl-tests writes out.json.1)
  if ! "$tool" -t 2 -f 8 -w 0 -J "$dir/out.json" "$@" >"$dir/log" 2>&1; then
    echo "FAILED: $what: $tool $* exited non-zero"; tail -20 "$dir/log"; fail=1; return
  fi
  local got; got=$(rows "$dir/out.json")
  if [ "$got" != "$want" ]; then echo "FAILED: $what: rows ran $got, wanted $want"; fail=1
  else echo "ok: $what ($got)"; fi
}
refused() {  # refused <tool flags...>: must exit non-zero and name the option
  if "$tool" -t 2 -b 8 -e 8 "$@" >"$dir/log" 2>&1; then echo "FAILED: $* was accepted"; fail=1
  elif ! grep -q -- "${1%%=*}" "$dir/log"; then echo "FAILED: $*: message does not name the option"; cat "$dir/log"; fail=1
  else echo "ok: refused $* ($(head -1 "$dir/log"))"; fi
}

expect "-n alone" "8:3 64:3 512:3 4096:3" -b 8 -e 4K -n 3
expect "--small_iters, default --small_bytes 1M" "262144:5 2097152:2" -b 256K -e 2M -n 2 --small_iters 5
expect "--small_iters with --small_bytes 512" "8:4 64:4 512:4 4096:1" -b 8 -e 4K -n 1 --small_iters 4 --small_bytes 512
grep -q "^# --small_iters 4: rows of at most 512 bytes run 4 iterations, larger ones 1" "$dir/log" ||
  { echo "FAILED: header note missing"; fail=1; }
refused --small_iters 0
refused --small_iters x
refused --small_bytes 1X
exit $fail

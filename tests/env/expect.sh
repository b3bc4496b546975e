# Sourced by the env tests: run a perf tool ($tool) with some variables and
# judge its exit and output.  The caller sets `tool` and `fail=0`.
#   report WANT PATTERN RC OUTPUT WHAT...: WANT ok|fail against RC, and a
#     line of OUTPUT matching PATTERN (grep -E); says ok or FAILED, setting fail=1
#   expect WANT PATTERN ENV...: the tool as 2 thread ranks, ENV set, judged so
report() {
  local want=$1 pattern=$2 rc=$3 out=$4
  shift 4
  if [[ ($want == ok && $rc != 0) || ($want == fail && $rc == 0) ]] || ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAILED: $* (exit $rc, want $want; want a line matching '$pattern')"
    echo "$out" | tail -20
    fail=1
  else
    echo "ok: $*"
  fi
}
expect() {
  local want=$1 pattern=$2 out rc
  shift 2
  out=$(env "$@" "$tool" -t 2 -b 8 -e 1K -f 4 -n 2 -w 1 2>&1)
  rc=$?
  report "$want" "$pattern" "$rc" "$out" "$@"
}

#!/usr/bin/env bash
# -G (CUDA graph launches, as nccl-tests) on a perf tool:
#   graph_flag.sh TOOL cpu   host buffers: the flag is said to have no effect
#                            ("# -G N: ..." and "graph: 0"), the rows still run;
#                            -G with -z or --straggler is refused (exit 2)
#   graph_flag.sh TOOL gpu   device buffers: the timed calls run as graph
#                            launches ("graph: N", no note), every row exact;
#                            and -y 1 (the NULL stream), exact
# (-y, the NULL stream, is checked here too: its host half says it had no
# effect, and -G with it is refused.)
set -uo pipefail
tool=$1 mode=$2
fail=0
expect() {  # expect WANT_EXIT PATTERN ARGS...: exit status and a line of its output
  local want=$1 pattern=$2 out rc
  shift 2
  out=$("$tool" "$@" 2>&1)
  rc=$?
  if [[ $rc != "$want" ]] || ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAILED: $tool $* (exit $rc, want $want; want a line matching '$pattern')"
    echo "$out" | tail -20
    fail=1
  else
    echo "ok: $tool $*"
  fi
}
if [[ $mode == cpu ]]; then
  export BRAID_BACKEND=host
  expect 0 '^# -G 3: CUDA graphs need device buffers' -t 2 -b 8 -e 1K -f 4 -n 2 -G 3
  expect 0 'validation: 1 graph: 0 unalign: 0$' -t 2 -b 8 -e 1K -f 4 -n 2 -G 3
  expect 2 '-G 2 with -z' -t 2 -b 8 -e 1K -G 2 -z 1
  expect 2 '-G 2 with --straggler' -t 2 -b 8 -e 1K -G 2 --straggler 1:100
  expect 2 '-G 2 with -y 1' -t 2 -b 8 -e 1K -G 2 -y 1
  expect 0 '^# -y 1: host buffers have no streams' -t 2 -b 8 -e 1K -f 4 -n 2 -y 1
else
  expect 0 'validation: 1 graph: 4 unalign: 0$' -t 2 -b 8 -e 4M -f 8 -n 5 -G 4
  expect 0 '# Out of bounds values : 0 OK' -t 2 -b 8 -e 4M -f 8 -n 5 -G 4 -d all
  # -y 1: the calls on the NULL stream (one rank: thread ranks sharing a GPU
  # would serialise on it, waiting for each other; braid warns about that).
  expect 0 '# Out of bounds values : 0 OK' -t 1 -b 8 -e 1M -f 8 -n 5 -y 1
fi
exit $fail

#!/usr/bin/env bash
# `braid` on input that is wrong: every call exits with status 2 or CLI11's
# (105-109 for a value out of range), never a signal (an abort from an
# uncaught bad_alloc, a crash) and never 0, and says what is wrong.  Sizes
# that wrap, late ranks that are not numbers, rank counts a machine cannot
# build, files that are devices, FIFOs or directories, a registration that
# loads itself, and topologies with bad numbers.
set -uo pipefail
braid=$1
data=$2  # tests/data
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failed=0

# expect "WHAT IT MUST SAY" braid ARGS...
expect() {
  local says=$1
  shift
  local out rc
  out=$(timeout 60 "$braid" "$@" 2>&1)
  rc=$?
  if ! { [ "$rc" -eq 2 ] || { [ "$rc" -ge 105 ] && [ "$rc" -le 109 ]; }; }; then
    echo "FAIL braid $*: exit status $rc"
    echo "$out" | head -3
    failed=1
  elif ! grep -qF -- "$says" <<< "$out"; then
    echo "FAIL braid $*: does not say '$says':"
    echo "$out" | head -3
    failed=1
  fi
}

ring=$dir/ring.json
"$braid" show -a ring -c allreduce -n 4 --json > "$ring"
expect "bad size '-1'" sim "$ring" --sizes -1
expect "bad size '99999999999G'" sim "$ring" --sizes 99999999999G
expect "want RANK:US" sim "$ring" --late 0:nan
expect "want RANK:US" sim "$ring" --late 0:inf
expect "want RANK:US" sim "$ring" --late 0:5abc
expect "want 0 or 256 bytes" sim "$ring" --fragment 1
expect "the delay -5 us is negative" sim "$ring" --late 1:-5
expect "rank 4 is out of range" sim "$ring" --late 4:5
# Options that contradict the file are refused, not ignored.
expect "-n 8, but the file's schedule is for 4 ranks" verify "$ring" -n 8
expect "-c allgather, but the file's schedule is allreduce" verify "$ring" -c allgather
expect "-r 1, but the file's allreduce schedule has no root" verify "$ring" -r 1
expect "give a file or -a, not both" verify "$ring" -a ring
expect "not in range 1 to 1024" show -a ring -c allreduce -n 2147483647
expect "not in range 1 to 65536" tuning -n -1
expect "not in range 1 to 4096" stragglar --plan -n 100000
expect "straggler 9 out of range" stragglar --verify -n 4 -s 9
expect "not in range 0 to 4095" stragglar --verify -n 4 -s -2
expect "more than the 4096 ranks" topo dgx2 -n 1024
expect "give a schedule file" show
expect "/dev/zero is not a regular file" verify /dev/zero
expect "/dev/zero is not a regular file" topo /dev/zero
mkfifo "$dir/fifo.xml"
expect "fifo.xml is not a regular file" verify "$dir/fifo.xml"
expect "is not a regular file" verify "$dir"
# TACCL numbers braid's own topology JSON would refuse.
taccl() { printf '{"name": "t", "gpus_per_node": %s, "alpha": %s, "node_betas_list": [1]}\n' "$1" "$2" > "$dir/t.json"; }
taccl 2.5 1
expect "'gpus_per_node' must be an integer" topo "$dir/t.json"
taccl 2 -5
expect "alpha must be >= 0" topo "$dir/t.json"
taccl 100000 1
expect "gpus_per_node must be in [1, 4096]" topo "$dir/t.json"
# NCCL's XML with a negative PCIe width (it cut the GPU off every link).
sed '0,/link_width="16"/s//link_width="-16"/' "$data/synth/nccl-topo-pcie.xml" > "$dir/negative.xml"
grep -q 'link_width="-16"' "$dir/negative.xml" || { echo "FAIL: the test's sed found no link_width"; exit 1; }
expect "not a width" topo "$dir/negative.xml"

[ "$failed" -eq 0 ] && echo "braid on bad input: every call refused, saying why"
exit "$failed"

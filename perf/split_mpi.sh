#!/usr/bin/env bash
# perf_split_mpirun: NCCL_TESTS_SPLIT_MASK and NCCL_TESTS_SPLIT under mpirun,
# as nccl-tests: each colour's processes make one communicator (the table's
# counts are a group's), the device lines give each rank's group, the time
# is reduced over every process; a zero divisor and the MPI peer tools are
# refused.  Also -I's per-process rows in the JSON file.
# Usage: split_mpi.sh <mpirun> <directory of the perf tools>
set -uo pipefail
mpirun=$1 bin=$2
export BRAID_BACKEND=host
fail=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# run NP ENV TOOL ARGS...: output in $dir/out, exit status in $rc.
run() {
  local np=$1 env=$2 tool=$3
  shift 3
  # shellcheck disable=SC2086  # $env: words on purpose
  env $env "$mpirun" --allow-run-as-root --oversubscribe -np "$np" "$bin/$tool" "$@" >"$dir/out" 2>&1
  rc=$?
}
same() {
  if [[ $2 != "$3" ]]; then echo "FAILED: $1: '$2', want '$3'"; tail -20 "$dir/out"; fail=1; else echo "ok: $1"; fi
}
groups() { awk '/^#  Rank/ {printf "%s%s", sep, $5; sep=" "}' "$dir/out"; }
rows() { awk '/^ +[0-9]/ {printf "%s%s %s %s %s %s %s", sep, $1, $2, $3, $4, $5, $9; sep=";"}' "$dir/out"; }

# 4 processes: 2 groups of 2 ranks, so an AllGather of 1 KiB is 128 floats a rank (64 without the split).
run 4 "NCCL_TESTS_SPLIT_MASK=1" all_gather_perf -b 1K -e 1K -n 1 -w 0
same "MASK=1: exit" "$rc" 0
same "MASK=1: groups" "$(groups)" "0 1 0 1"
same "MASK=1: rows" "$(rows)" "1024 128 float none -1 0"
run 4 "NCCL_TESTS_SPLIT=DIV2" all_reduce_perf -t 2 -b 1K -e 1K -n 1 -w 0 -d int32
same "DIV2 -t 2: groups" "$(groups)" "0 0 0 0 1 1 1 1"
same "DIV2 -t 2: rows" "$(rows)" "1024 256 int32 sum -1 0"
run 4 "NCCL_TESTS_SPLIT=&0b10" reduce_scatter_perf -b 1K -e 1K -n 1 -w 0
same "&0b10: groups" "$(groups)" "0 0 2 2"
same "&0b10: rows" "$(rows)" "1024 128 float sum -1 0"
run 2 "NCCL_TESTS_SPLIT=MOD0" all_reduce_perf -b 8 -e 8
same "MOD0: exit" "$rc" 2
grep -q 'NCCL_TESTS_SPLIT=MOD0: divides by zero' "$dir/out" || { echo "FAILED: MOD0: no message"; fail=1; }
run 2 "NCCL_TESTS_SPLIT_MASK=1" mpi_allreduce_perf -b 8 -e 8
same "peer tool with a split: exit" "$rc" 2

# -I with 2 processes: the JSON file has each process's row as well.
run 2 "" all_reduce_perf -b 8 -e 8 -n 3 -I 1 -J "$dir/i.json"
same "-I: exit" "$rc" 0
got=$(python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))["results"][0]["out_of_place_per_iter"]
rows = r["per_process_max_times_us"]
print([len(p) for p in rows], r["times_us"] == [max(t) for t in zip(*rows)])' "$dir/i.json")
same "-I: process rows" "$got" "[3, 3] True"
exit $fail

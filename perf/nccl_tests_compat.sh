#!/usr/bin/env bash
# perf_nccl_tests_compat: the perf tools behave as nccl-tests (v2.19.6) does
# where scripts can tell: the flags it takes and how it reads their values,
# the sizes and counts of each row, the header and footer lines, and its exit
# codes.  Exact output and exit statuses only, never timings.
# Usage: nccl_tests_compat.sh <directory of the perf tools> <corrupt_shim library>
set -uo pipefail
bin=$1 shim=$2
export BRAID_BACKEND=host  # host buffers: the shim corrupts them, and no GPU is needed
fail=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# expect WANT_EXIT PATTERN TOOL ARGS...: the exit status, and a line of the
# output (stdout and stderr) matching the extended regex PATTERN.  The tool
# runs with the settings in $with (VAR=value ...) added to its environment.
with=""
expect() {
  local want=$1 pattern=$2 tool=$3 rc
  shift 3
  # shellcheck disable=SC2086  # $with: words on purpose
  env $with "$bin/$tool" "$@" >"$dir/out" 2>&1
  rc=$?
  if [[ $rc != "$want" ]] || ! grep -qE -- "$pattern" "$dir/out"; then
    echo "FAILED: $tool $* (exit $rc, want $want; want a line matching '$pattern')"
    tail -20 "$dir/out"
    fail=1
  else
    echo "ok: $tool $* ($(grep -m1 -E -- "$pattern" "$dir/out"))"
  fi
}
# lacks PATTERN: the last run's output has no line matching it.
lacks() {
  if grep -qE -- "$1" "$dir/out"; then echo "FAILED: a line matches '$1'"; grep -E -- "$1" "$dir/out"; fail=1; fi
}
# same WHAT GOT WANT: GOT must be WANT.
same() {
  if [[ $2 != "$3" ]]; then echo "FAILED: $1: '$2', want '$3'"; fail=1; else echo "ok: $1"; fi
}
# rows WANT: the last run's table rows, "size count type redop root" each, ';' between.
rows() {
  local got
  got=$(awk '/^ +[0-9]/ {printf "%s%s %s %s %s %s", sep, $1, $2, $3, $4, $5; sep=";"}' "$dir/out")
  if [[ $got != "$1" ]]; then echo "FAILED: rows '$got', want '$1'"; fail=1; else echo "ok: rows $got"; fi
}

# Values as nccl-tests reads them: sizes must be finite numbers; numeric
# flags are strtol's (the leading number, with a warning here).
expect 2 "bad value 'inf' for -e" all_reduce_perf -b 8 -e inf
expect 2 "bad value 'nan' for -b" all_reduce_perf -b nan -e 8
expect 2 "bad value '1X' for -e" all_reduce_perf -b 8 -e 1X
expect 0 '^# nThread 2 nGpus 1 minBytes 1024 maxBytes 4096 step: 2\(factor\)' \
  all_reduce_perf -t 2x -b 1KB -e 4Kib -f 2.5 -n 1 -w 0
grep -q -- '-f 2.5: read as 2' "$dir/out" || { echo "FAILED: no warning for -f 2.5"; fail=1; }
rows "1024 256 float sum -1;2048 512 float sum -1;4096 1024 float sum -1"
expect 2 "bad value 'x' for -t" all_reduce_perf -t x
# A --straggler rank the job lacks: refused, not a run where nobody sleeps.
expect 2 "--straggler 4:100: rank 4 out of range for 4 ranks" all_reduce_perf -t 4 -b 1K -e 1K --straggler 4:100
expect 0 "rank 3 sleeps 100 us" all_reduce_perf -t 4 -b 1K -e 1K -n 1 -w 0 --straggler 3:100

# Wrong data: "FAILED" on the out-of-bounds line and nccl-tests' exit code 7.
# (A sanitizer build's runtime wants to be loaded first: not before the shim.)
asan="ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
with="BRAID_PERF_TEST_CORRUPT=1 LD_PRELOAD=$shim $asan" \
  expect 7 '^# Out of bounds values : [1-9][0-9]* FAILED' all_reduce_perf -t 2 -b 64 -e 64 -n 1 -w 0

# Row sizes and counts: per-rank blocks are multiples of 16 bytes (nccl-tests'
# getCollByteCount); the whole-buffer collectives take the size as it is.
for tool in all_gather_perf alltoall_perf reduce_scatter_perf gather_perf scatter_perf \
            all_reduce_perf broadcast_perf reduce_perf sendrecv_perf; do
  expect 0 '^# Out of bounds values : 0 OK' $tool -t 3 -b 1M -e 1M -n 1 -w 0
  case $tool in
    all_gather_perf|alltoall_perf) rows "1048560 87380 float none -1" ;;
    reduce_scatter_perf) rows "1048560 87380 float sum -1" ;;
    gather_perf|scatter_perf) rows "1048560 87380 float none 0" ;;
    all_reduce_perf) rows "1048576 262144 float sum -1" ;;
    reduce_perf) rows "1048576 262144 float sum 0" ;;
    broadcast_perf) rows "1048576 262144 float none 0" ;;
    sendrecv_perf) rows "1048576 262144 float sum -1" ;;
  esac
done
expect 0 '^# Out of bounds values : 0 OK' all_gather_perf -t 3 -b 1000 -e 1000 -n 1 -w 0 -d double
rows "960 40 double none -1"
expect 0 '^# Out of bounds values : 0 OK' alltoall_perf -t 3 -b 1000 -e 1000 -n 1 -w 0 -d int8
rows "960 320 int8 none -1"

# -o all: the six ops of nccl-tests, mulsum (ncclRedOpCreatePreMulSum) last;
# sendrecv names the op and loops over -o as nccl-tests does (moving bytes).
for tool in all_reduce_perf reduce_scatter_perf reduce_perf sendrecv_perf; do
  expect 0 '^# Out of bounds values : 0 OK' $tool -t 3 -b 96 -e 96 -n 1 -w 0 -o all
  case $tool in
    all_reduce_perf) r=-1 c=24 ;; reduce_scatter_perf) r=-1 c=8 ;; reduce_perf) r=0 c=24 ;; sendrecv_perf) r=-1 c=24 ;;
  esac
  want=""
  for op in sum prod max min avg mulsum; do want+="${want:+;}96 $c float $op $r"; done
  rows "$want"
done
expect 0 '^# Out of bounds values : 0 OK' sendrecv_perf -t 2 -b 64 -e 64 -n 1 -w 0 -o mulsum -d half
rows "64 32 half mulsum -1"

# -z: nccl-tests' three blocking modes, each with its header line.
expect 0 '^# Blocking Enabled: wait and barrier after each inner iteration \(-m\) $' \
  all_reduce_perf -t 2 -b 8 -e 1K -f 32 -n 3 -m 2 -z 1
rows "8 2 float sum -1;256 64 float sum -1"
expect 0 '^# Blocking Enabled: wait after each inner iteration \(-m\), no barrier $' \
  all_reduce_perf -t 2 -b 8 -e 1K -f 32 -n 3 -m 2 -z 2
expect 0 '^# Blocking Enabled: wait and barrier after each outer iteration \(-n\); time excludes barrier $' \
  all_gather_perf -t 2 -b 8 -e 1K -f 32 -n 3 -m 2 -z 3
rows "0 0 float none -1;256 32 float none -1"
expect 2 "bad value '4' for -z" all_reduce_perf -z 4
expect 0 '^all_reduce_perf: blocking mode \(-z 3\) is incompatible with CUDA graph mode \(-G\)\. Disabling\.$' \
  all_reduce_perf -t 2 -b 8 -e 8 -n 1 -z 3 -G 2
lacks 'Blocking Enabled'

# Each timed call moves through the -e sized buffer by whole rows, as
# nccl-tests' startColl (warm-up calls too; the untimed and checked calls at
# the start).  The shim logs each call: "count:offset into the receive buffer".
with="BRAID_PERF_TEST_LOG=1 LD_PRELOAD=$shim $asan" \
  expect 0 '^# Out of bounds values : 0 OK' all_reduce_perf -t 1 -b 1K -e 4K -f 2 -n 4 -w 2
got=$(python3 -c 'import re, sys
calls = [(int(c), int(r, 16)) for r, c in re.findall(r"recv=(0x[0-9a-f]+) count=(\d+)", open(sys.argv[1]).read())]
base = min(r for _, r in calls)
print(" ".join(f"{c}:{r - base}" for c, r in calls))' "$dir/out")
row() {  # row COUNT OFFSETS...: both placements' calls, the untimed and checked ones at 0
  local c=$1 placement o
  shift
  for placement in out in; do
    echo -n " $c:0"
    for o in "$@"; do echo -n " $c:$o"; done
    echo -n " $c:0"
  done
}
want="256:0 256:1024 512:0 512:2048 1024:0 1024:0$(row 256 0 1024 2048 3072)$(row 512 0 2048 0 2048)$(row 1024 0 0 0 0)"
same "buffer offsets" "$got" "$want"

# -u: both buffers start that many elements in (data still exact), said on the header's line.
expect 0 'validation: 1 graph: 0 unalign: 3$' all_reduce_perf -t 2 -b 8 -e 64K -f 8 -n 1 -u 3 -d double
grep -q '^# Out of bounds values : 0 OK' "$dir/out" || { echo "FAILED: -u 3: data"; fail=1; }
expect 0 '^# Out of bounds values : 0 OK' all_gather_perf -t 3 -b 8 -e 64K -f 8 -n 1 -u 1 -d half
with="BRAID_PERF_TEST_LOG=1 LD_PRELOAD=$shim $asan" \
  expect 0 'unalign: 3$' all_reduce_perf -t 1 -b 64 -e 64 -n 1 -u 3 -d double
got=$(python3 -c 'import re, sys
addresses = re.findall(r"(?:send|recv)=(0x[0-9a-f]+)", open(sys.argv[1]).read())
print(sorted({int(a, 16) % 4096 for a in addresses}))' "$dir/out")
same "-u 3 -d double: offsets into a page" "$got" "[24]"
expect 0 'validation: 1 graph: 0 unalign: 0$' all_reduce_perf -t 1 -b 8 -e 8 -n 1

# -I / -K: nccl-tests' per-iteration columns (i_min i_max i_p99 i_cv%, max
# over ranks), its header lines and its JSON objects; bad values turned off
# with its messages.
rm -f "$dir/i.json"
per_iter_line='^# Per-Iteration Report: host clock timing; i_\* uses max over process rows'
expect 0 "$per_iter_line; summary skips first 2 iterations \$" \
  all_reduce_perf -t 2 -b 8 -e 1K -f 32 -n 5 -I 1 -K 2 -S 1 -J "$dir/i.json"
# shellcheck disable=SC2016  # the format is printf's
placement='  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s'
want=$(printf "# %10s  %12s  %8s  %6s  %6s$placement$placement %*s" \
  size count type redop root time algbw busbw '#wrong' i_min i_max i_p99 'i_cv%' \
  time algbw busbw '#wrong' i_min i_max i_p99 'i_cv%' 19 timestamp)
grep -qxF -- "$want" "$dir/out" || { echo "FAILED: -I column header, want '$want'"; grep size "$dir/out"; fail=1; }
[[ $(awk '/^ +[0-9]/ && NF == 23 {n++} END {print n}' "$dir/out") == 2 ]] ||
  { echo "FAILED: -I -S rows need 5 + 2 x 8 columns and a timestamp"; grep '^ ' "$dir/out"; fail=1; }
got=$(python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
c = d["config"]
print(c["per_iter_timing"], c["per_iter_skip"], *[(p, r[p]["skipped_iterations"], len(r[p]["times_us"]),
      r[p]["min_us"] <= r[p]["p50_us"] <= r[p]["max_us"])
      for r in d["results"] for p in ("out_of_place_per_iter", "in_place_per_iter")])' \
  "$dir/i.json")
want="true 2 ('out_of_place_per_iter', 2, 5, True) ('in_place_per_iter', 2, 5, True)"
want="$want ${want#true 2 }"
same "-I JSON" "$got" "$want"
# nccl-tests' JSON version 3: the environment listed, numbers as %lf.
got=$(python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
print(d["version"], any(e.startswith("PATH=") for e in d["env"]), d["out_of_bounds"]["okay"])' "$dir/i.json")
same "JSON version 3" "$got" "3 True true"
grep -qE '"alg_bw": [0-9]+\.[0-9]{6}, "bus_bw": [0-9]+\.[0-9]{6}, "nwrong": 0\.000000' "$dir/i.json" ||
  { echo "FAILED: JSON numbers not as nccl-tests' %lf"; head -c 600 "$dir/i.json"; fail=1; }
expect 0 '^# Out of bounds values : 0 OK' all_gather_perf -t 3 -b 96 -e 96 -n 4 -I 1 -z 3 -m 2
[[ $(awk '/^ +[0-9]/ && NF == 21 {n++} END {print n}' "$dir/out") == 1 ]] || { echo "FAILED: -I -z 3 row"; fail=1; }
expect 0 '^all_reduce_perf: per-iteration timing \(-I\) only supports 0=off or 1=on\. Disabling\.$' \
  all_reduce_perf -t 1 -b 8 -e 8 -n 1 -I 2
lacks 'Per-Iteration'
expect 0 '^all_reduce_perf: per-iteration skip \(-K\) must be between 0 and 4\. Disabling\.$' \
  all_reduce_perf -t 1 -b 8 -e 8 -n 5 -I 1 -K 5
expect 0 '^all_reduce_perf: per-iteration skip \(-K\) requires per-iteration timing \(-I 1\)\. Disabling\.$' \
  all_reduce_perf -t 1 -b 8 -e 8 -n 5 -K 1
expect 0 '^all_reduce_perf: per-iteration timing \(-I\) is incompatible with CUDA graph mode \(-G\)\. Disabling\.$' \
  all_reduce_perf -t 1 -b 8 -e 8 -n 5 -I 1 -G 1
expect 0 '^# Out of bounds values : 0 OK' \
  all_reduce_perf -t 1 -b 8 -e 8 -n 5 --per_iter_timing 1 --per_iter_skip 1 --unalign 1

# NCCL_TESTS_MIN_BW (GB/s): the average bus bandwidth line says OK or FAILED
# (below 90% of it), which fails the run as wrong data does.
rm -f "$dir/bw.json"
with="NCCL_TESTS_MIN_BW=1e9" expect 7 '^# Avg bus bandwidth    : [0-9.e+-]+ FAILED$' \
  all_reduce_perf -t 2 -b 8 -e 1K -f 32 -n 1 -J "$dir/bw.json"
grep -q '^# Out of bounds values : 0 OK$' "$dir/out" || { echo "FAILED: MIN_BW run had wrong data"; fail=1; }
okay=$(python3 -c 'import json, sys
print(json.load(open(sys.argv[1]))["average_bus_bandwidth"]["okay"])' "$dir/bw.json")
same "MIN_BW JSON" "$okay" false  # nccl-tests writes its booleans as strings
with="NCCL_TESTS_MIN_BW=0" expect 0 '^# Avg bus bandwidth    : [0-9.e+-]+ OK$' all_reduce_perf -t 2 -b 8 -e 1K -f 32 -n 1
expect 0 '^# Avg bus bandwidth    : [0-9.e+-]+ $' all_reduce_perf -t 2 -b 8 -e 1K -f 32 -n 1

# NCCL_TESTS_SPLIT_MASK / NCCL_TESTS_SPLIT colour processes, not threads: one
# process is one group (perf_split_mpirun splits processes).
with="NCCL_TESTS_SPLIT_MASK=1" expect 0 '^#  Rank  1 Group  0 ' all_gather_perf -t 2 -b 1K -e 1K -n 1 -w 0
rows "1024 128 float none -1"
with="NCCL_TESTS_SPLIT=XOR1" expect 0 '^all_gather_perf: warning: NCCL_TESTS_SPLIT=XOR1: no AND, OR, MOD or DIV' \
  all_gather_perf -t 2 -b 1K -e 1K -n 1 -w 0
# Processes a launcher started (BRAID_PERF_RANK/NRANKS) share one NCCL_COMM_ID: a split is refused.
port=$((20000 + RANDOM % 30000)) pids=()
for r in 0 1; do
  NCCL_TESTS_SPLIT_MASK=1 NCCL_COMM_ID=127.0.0.1:$port BRAID_PERF_RANK=$r BRAID_PERF_NRANKS=2 \
    timeout 120 "$bin/all_reduce_perf" -b 8 -e 8 >"$dir/launched$r" 2>&1 &
  pids+=($!)
done
wait "${pids[0]}"; rc0=$?
wait "${pids[1]}"; rc1=$?
same "launcher world with a split: exits" "$rc0 $rc1" "2 2"
grep -q 'only an MPI launch (mpirun) can split' "$dir/launched0" || { echo "FAILED: launcher split: message"; fail=1; }

# -e larger than the memory the buffers may take is trimmed, as nccl-tests
# ("# Reducing maxBytes"); here 512 MiB of host memory (half of it, a small
# memory) for 2 ranks x 2 buffers: 64 MiB each, minus -u's padding.
rm -f "$dir/cap.json"
with="BRAID_PERF_HOST_MEMORY=512M" expect 0 '^# Reducing maxBytes to 67108864 due to memory limitation$' \
  all_reduce_perf -t 2 -b 1K -e 1G -f 1024 -w 0 -n 1 -J "$dir/cap.json"
rows "1024 256 float sum -1;1048576 262144 float sum -1"
max=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["config"]["maximum_bytes"])' "$dir/cap.json")
same "JSON config: -e as given" "$max" 1073741824
with="BRAID_PERF_HOST_MEMORY=512M" expect 0 '^# Reducing maxBytes to 67108848 due to memory limitation$' \
  all_gather_perf -t 2 -b 1G -e 1G -w 0 -n 1 -c 0 -u 2
rows "67108832 8388604 float none -1"  # the 16-byte blocks of 67108848
with="BRAID_PERF_HOST_MEMORY=512M" \
  expect 0 '^# Out of bounds values : 0 OK' all_reduce_perf -t 2 -b 8 -e 64M -f 64M -w 0 -n 1
lacks 'Reducing maxBytes'

# alltoallv_perf is nccl-tests' (braid's A/B measurement is --ab): its
# distance-weighted sizes (the size column the largest rank's total, the
# count the per-peer block), NCCL_TESTS_ALLTOALLV_* variables, and in-place
# results left unchecked (N/A) as there.
expect 0 '^# Out of bounds values : 0 OK' alltoallv_perf -t 3 -b 1M -e 1M -n 1 -w 0
rows "1048560 87380 float none -1"
same "alltoallv in place" "$(awk '/^ +[0-9]/ {print $13}' "$dir/out")" "N/A"
expect 0 '^# Out of bounds values : 0 OK' alltoallv_perf -t 4 -b 8 -e 64K -f 8 -n 1 -d all
# spread 0.3 on 4 ranks: 0.7 x 1024 / 4 + 0.3 x d x 1024 / 6 bytes to distance d, in 16s: 176 + 224 + 272 + 320.
with="NCCL_TESTS_ALLTOALLV_SPREAD=0.3" expect 0 '^# Out of bounds values : 0 OK' alltoallv_perf -t 4 -b 1K -e 1K -n 1
rows "992 64 float none -1"
printf '100  200  150\n50   100  75\n300  150  200\n' >"$dir/matrix"
m="NCCL_TESTS_ALLTOALLV_MATRIX_FILE=$dir/matrix"
with="$m" expect 0 '^# Out of bounds values : 0 OK' alltoallv_perf -t 3 -b 1K -e 1K -n 1 -w 0
rows "624 0 float none -1"
with="$m NCCL_TESTS_ALLTOALLV_MATRIX_SCALE=2 NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY=1" \
  expect 0 '^#   rank=2 send_bytes=1280 recv_bytes=832 alg_bw=' alltoallv_perf -t 3 -b 2K -e 2K -n 1 -w 0 -d int8
grep -q '^# NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY: mode=matrix nranks=3 matrix_dim=3 scale=2.000 time_usec=' "$dir/out" ||
  { echo "FAILED: alltoallv summary line"; fail=1; }
rows "1280 0 int8 none -1"
with="$m" expect 2 'maxBytes \(-e\) must be at least 624 bytes' alltoallv_perf -t 3 -b 512 -e 512
with="$m" expect 2 '^alltoallv_perf: -b and -e options must be set to the same value' alltoallv_perf -t 3 -b 8 -e 1K
with="$m" expect 2 'requested nranks \(4\) is larger than matrix size \(3\)' alltoallv_perf -t 4 -b 1K -e 1K
expect 0 '^  +[0-9]' alltoallv_perf --ab -t 2 -b 64 -e 64 -n 1 -w 0 --rounds 1

# -T counts only calls in flight: laying out and checking 64 MiB of bfloat16
# takes seconds between calls (a timeout here before), a call that hangs does not.
expect 0 '^# Out of bounds values : 0 OK' all_reduce_perf -t 2 -b 64M -e 64M -n 1 -w 0 -d bfloat16 -T 1
with="BRAID_PERF_TEST_HANG=30 LD_PRELOAD=$shim $asan" \
  expect 4 ': Test timeout \(1s\)$' all_reduce_perf -t 2 -b 8 -e 8 -T 1
exit $fail

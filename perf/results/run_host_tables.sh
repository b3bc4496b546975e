#!/usr/bin/env bash
# Regenerates the host-backend tables in this directory: every perf tool,
# 4 ranks, as processes (mpirun -np 4) and as threads (-t 4), 8 B .. 64 MB.
# Usage: perf/results/run_host_tables.sh [build-dir]
set -euo pipefail
build=${1:-build}
out=$(dirname "$0")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
{
  echo "# host: $(uname -n), $(nproc) cores, $(date -u +%F) -- braid host backend (shm)"
  for tool in all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv gather scatter; do
    echo "## mpirun -np 4 $build/perf/${tool}_perf -b 8 -e 64M -f 2"
    mpirun --oversubscribe -np 4 "$build/perf/${tool}_perf" -b 8 -e 64M -f 2
    echo "## $build/perf/${tool}_perf -t 4 -b 8 -e 64M -f 2"
    "$build/perf/${tool}_perf" -t 4 -b 8 -e 64M -f 2
  done
} > "$out/host_4ranks_all_tools.txt" 2>&1

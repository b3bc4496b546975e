#!/usr/bin/env bash
# Regenerates a braid vs OpenMPI vs Gloo comparison in this directory:
# perf/compare on 2 and 4 ranks (processes), the five collectives issue 6
# names, 8 B .. 256 MB.  The command line is the first line of the output.
# Usage: perf/results/run_compare.sh [build-dir] [output-file] [compare args...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
out=${2:-$here/compare_$(date -u +%Y%m%d).txt}
shift $(( $# > 2 ? 2 : $# ))
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(--np 2 4)
"$here/../compare" --build "$build" "${args[@]}" -- -b 8 -e 256M -f 2 -n 20 -w 1 | tee "$out"

#!/usr/bin/env bash
# Every nccl*/pnccl* symbol the real NCCL exports must be exported by braid's
# library too (clients break on a missing symbol).  Exit 77 = skipped.
set -euo pipefail
braid_lib=$1
real_lib=${2:-/usr/local/cuda/lib64/libnccl.so.2}
if [ ! -e "$real_lib" ]; then
  echo "SKIP: no real NCCL at $real_lib to compare with"
  exit 77
fi
exported() { nm -D --defined-only "$1" | awk '$2 ~ /^[TtWwVvDdBbi]$/ {print $3}' | grep -E '^p?nccl' | sort -u; }
missing=$(comm -23 <(exported "$real_lib") <(exported "$braid_lib"))
if [ -n "$missing" ]; then
  echo "braid's $braid_lib lacks these symbols of $real_lib:"
  echo "$missing"
  exit 1
fi
echo "all $(exported "$real_lib" | wc -l) nccl/pnccl symbols of $real_lib are exported by $braid_lib"
leaked=$(nm -D --defined-only "$braid_lib" | awk '{print $3}' | grep -vE '^(p?nccl|_init|_fini|_edata|_end|__bss_start)' || true)
if [ -n "$leaked" ]; then
  echo "braid exports symbols beyond the NCCL API (visibility leak):"
  echo "$leaked" | head -20
  exit 1
fi

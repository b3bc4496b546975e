#!/usr/bin/env bash
# braid's library exports every function of NCCL's current public header
# (the list recorded in nccl_functions.txt) with its pnccl alias, every
# nccl*/pnccl* symbol the installed real NCCL exports (clients break on a
# missing symbol), braid's own extensions (braid/moe.h, braid/alltoallv.h), and nothing else.
# Usage: check_symbols.sh LIB FUNCTIONS_TXT [REAL_LIB]
set -euo pipefail
braid_lib=$1
functions=$2
real_lib=${3:-/usr/local/cuda/lib64/libnccl.so.2}
exported() { nm -D --defined-only "$1" | awk '$2 ~ /^[TtWwVvDdBbi]$/ {print $3}' | grep -E '^p?nccl' | sort -u; }
ours=$(exported "$braid_lib")

wanted=$(grep -vE '^[[:space:]]*(#|$)' "$functions" | sed 's/^\(.*\)$/\1\np\1/' | sort -u)
count=$(grep -cvE '^[[:space:]]*(#|$)' "$functions")
[ "$count" -ge 73 ] || { echo "$functions lists $count functions; NCCL 2.32's header has 73"; exit 1; }
missing=$(comm -23 <(echo "$wanted") <(echo "$ours"))
if [ -n "$missing" ]; then
  echo "braid's $braid_lib lacks these functions of NCCL's header ($functions):"
  echo "$missing"
  exit 1
fi
echo "all $count functions of $functions are exported by $braid_lib, with their pnccl aliases"

if [ -e "$real_lib" ]; then
  missing=$(comm -23 <(exported "$real_lib") <(echo "$ours"))
  if [ -n "$missing" ]; then
    echo "braid's $braid_lib lacks these symbols of $real_lib:"
    echo "$missing"
    exit 1
  fi
  echo "all $(exported "$real_lib" | wc -l) nccl/pnccl symbols of $real_lib are exported by $braid_lib"
else
  echo "no real NCCL at $real_lib: only the recorded list was checked"
fi

# braid's own C extensions (include/braid/moe.h, alltoallv.h) are exported too, and only those.
moe_functions="braidMoeCreate braidMoeGetInfo braidMoeDispatch braidMoeCombine braidMoeGetStats braidMoeDestroy"
moe_functions+=" braidMoeGetAsyncError braidMoeGetCombineBuffer braidMoeGetDispatchBuffer"
moe_functions+=" braidAlltoAllvCreate braidAlltoAllv braidAlltoAllvGetAsyncError braidAlltoAllvDestroy"
for f in $moe_functions; do
  nm -D --defined-only "$braid_lib" | awk '{print $3}' | grep -qx "$f" ||
    { echo "braid's $braid_lib lacks $f (braid/*.h)"; exit 1; }
done
echo "the $(wc -w <<<"$moe_functions") functions of braid/moe.h and braid/alltoallv.h are exported"

leaked=$(nm -D --defined-only "$braid_lib" | awk '{print $3}' | grep -vE '^(p?nccl|_init|_fini|_edata|_end|__bss_start)' |
         grep -vxF -f <(tr ' ' '\n' <<<"$moe_functions") || true)
if [ -n "$leaked" ]; then
  echo "braid exports symbols beyond the NCCL API (visibility leak):"
  echo "$leaked" | head -20
  exit 1
fi

#!/usr/bin/env bash
# braid's libraries load where rdma-core is not installed (most GPU
# containers without InfiniBand): libibverbs is opened at run time
# (src/transport/ibverbs/ib_verbs_loader.h), never needed to load.
#
#   tests/no_hard_deps.sh BUILD_DIR MP_TESTS
#
# 1. libnccl.so.2 and libnccl-net-braid.so name no libibverbs among their
#    needed libraries and leave no ibv_ symbol undefined.
# 2. As root, in a mount namespace where libibverbs.so.1 reads as an empty
#    file: the library preloads into a program, three ranks on emulated
#    hosts run their collectives over sockets (the automatic choice), and
#    BRAID_TRANSPORT=ib fails saying libibverbs cannot be loaded.
# Exit 77 (skip) only when part 2 cannot run here (not root, no unshare)
# and part 1 passed.
set -u
build=$(realpath "$1") mp_tests=$(realpath "$2")
fail=0
for lib in "$build/libnccl.so.2" "$build/libnccl-net-braid.so"; do
  needed=$(readelf -d "$lib" | awk '/NEEDED/ {print $5}' | tr -d '[]' | tr '\n' ' ')
  case " $needed" in *" libibverbs"*) echo "FAIL: $lib needs libibverbs ($needed)"; fail=1;; esac
  undefined=$(nm -D --undefined-only "$lib" | awk '$2 ~ /^_?ibv_/ {print $2}' | tr '\n' ' ')
  [ -z "$undefined" ] || { echo "FAIL: $lib leaves verbs symbols to the loader: $undefined"; fail=1; }
done
[ $fail = 0 ] || exit 1
echo "ok: no load-time dependency on libibverbs"

if [ "$(id -u)" != 0 ] || ! command -v unshare > /dev/null; then
  echo "skip: hiding libibverbs needs root and unshare"; exit 77
fi
verbs=$(ldconfig -p | awk '/libibverbs\.so\.1 / {print $NF; exit}')
# Runs "$@" with libibverbs.so.1 hidden (where it is installed at all).
without_verbs() {
  if [ -n "$verbs" ]; then
    unshare --mount --propagation private bash -c 'mount --bind /dev/null "$0" && exec "${@:1}"' "$verbs" "$@"
  else
    "$@"
  fi
}
hosts_case="sockets between processes that act as different hosts"

out=$(without_verbs env LD_PRELOAD="$build/libnccl.so.2" true 2>&1) ||
  { echo "FAIL: preloading libnccl.so.2 without libibverbs: $out"; exit 1; }
out=$(without_verbs env BRAID_TRANSPORT=auto NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET "$mp_tests" "$hosts_case" 2>&1)
rc=$?
if [ $rc != 0 ]; then echo "$out" | tail -20; echo "FAIL: ranks on emulated hosts without libibverbs (rc $rc)"; exit 1; fi
if [ -n "$verbs" ] && ! echo "$out" | grep -q "cannot load libibverbs.so.1"; then
  echo "$out" | grep -i "between hosts" | head -3
  echo "FAIL: the automatic choice did not say why InfiniBand was left out"; exit 1
fi
out=$(without_verbs env BRAID_TRANSPORT=ib BRAID_TIMEOUT=30 "$mp_tests" "$hosts_case" 2>&1)
rc=$?
if [ $rc = 0 ] || ! echo "$out" | grep -q "cannot load libibverbs.so.1"; then
  echo "$out" | tail -20; echo "FAIL: BRAID_TRANSPORT=ib without libibverbs: rc $rc, no clear error"; exit 1
fi
echo "ok: without libibverbs the library loads, sockets serve, and BRAID_TRANSPORT=ib says why it cannot"

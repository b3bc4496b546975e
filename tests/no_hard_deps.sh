#!/usr/bin/env bash
# braid's libraries load on any Linux machine, as NCCL's do: they need only
# the C and C++ runtimes.  pugixml is linked in; libibverbs and OpenSSL 3
# are opened at run time, when InfiniBand or TLS is asked for
# (src/base/dl_forward.h): most GPU containers have no rdma-core, and older
# distributions have OpenSSL 1.1.
#
#   tests/no_hard_deps.sh BUILD_DIR MP_TESTS
#
# 1. libnccl.so.2 and libnccl-net-braid.so need no library but libc, libm,
#    libstdc++, libgcc_s and the dynamic loader, no symbol version newer
#    than Ubuntu 22.04's (glibc 2.35, GCC 12's libstdc++), and leave no
#    verbs or OpenSSL symbol undefined.
# 2. As root, in a mount namespace where libibverbs.so.1 and libssl.so.3
#    read as empty files: the library preloads into a program, three ranks
#    on emulated hosts run their collectives over sockets (the automatic
#    choice), and BRAID_TRANSPORT=ib and ncclSetEncryption each fail saying
#    which library cannot be loaded.
# Exit 77 (skip) only when part 2 cannot run here (not root, no unshare)
# and part 1 passed.
set -u
build=$(realpath "$1") mp_tests=$(realpath "$2")
base_libs='^(ld-linux-x86-64|libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt)\.so'
fail=0
for lib in "$build/libnccl.so.2" "$build/libnccl-net-braid.so"; do
  for needed in $(readelf -d "$lib" | awk '/NEEDED/ {print $5}' | tr -d '[]'); do
    [[ "$needed" =~ $base_libs ]] || { echo "FAIL: $lib needs $needed"; fail=1; }
  done
  undefined=$(nm -D --undefined-only "$lib" | awk '$2 ~ /^(_?ibv_|SSL|TLS_|BIO_|ERR_|EVP_|OPENSSL_)/ {print $2}' |
    tr '\n' ' ')
  [ -z "$undefined" ] || { echo "FAIL: $lib leaves these to the dynamic loader: $undefined"; fail=1; }
done
# ...and Ubuntu 22.04's runtimes serve them (glibc 2.35, GCC 12's
# libstdc++): the newest symbol versions they need stay within those.
for lib in "$build/libnccl.so.2" "$build/libnccl-net-braid.so"; do
  for floor in GLIBC_2.35 GLIBCXX_3.4.30 CXXABI_1.3.13; do
    family=${floor%_*} newest_ok=${floor##*_}
    have=$(objdump -T "$lib" | grep -o "${family}_[0-9.]*" | sed "s/^${family}_//" | sort -V | tail -1)
    [ -z "$have" ] || [ "$(printf '%s\n' "$have" "$newest_ok" | sort -V | tail -1)" = "$newest_ok" ] ||
      { echo "FAIL: $lib needs ${family}_$have, newer than Ubuntu 22.04's ${floor}"; fail=1; }
  done
done
[ $fail = 0 ] || exit 1
echo "ok: only the C and C++ runtimes are needed to load, Ubuntu 22.04's will do"

if [ "$(id -u)" != 0 ] || ! command -v unshare > /dev/null; then
  echo "skip: hiding the libraries needs root and unshare"; exit 77
fi
# Runs "$@" with libibverbs.so.1 and libssl.so.3 hidden (those installed).
hidden=$(ldconfig -p | awk '/(libibverbs\.so\.1|libssl\.so\.3) / {print $NF}' | sort -u | tr '\n' ' ')
without_libs() {
  unshare --mount --propagation private bash -c \
    'for f in $0; do mount --bind /dev/null "$f" || exit 1; done; exec "$@"' "$hidden" "$@"
}
hosts_case="sockets between processes that act as different hosts"

out=$(without_libs env LD_PRELOAD="$build/libnccl.so.2" true 2>&1) ||
  { echo "FAIL: preloading libnccl.so.2 without the libraries: $out"; exit 1; }
out=$(without_libs env BRAID_TRANSPORT=auto NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET "$mp_tests" "$hosts_case" 2>&1)
rc=$?
if [ $rc != 0 ]; then
  echo "$out" | tail -20; echo "FAIL: ranks on emulated hosts without the libraries (rc $rc)"; exit 1
fi
if [[ "$hidden" == *libibverbs* ]] && ! echo "$out" | grep -q "cannot load libibverbs.so.1"; then
  echo "$out" | grep -i "between hosts" | head -3
  echo "FAIL: the automatic choice did not say why InfiniBand was left out"; exit 1
fi
out=$(without_libs env BRAID_TRANSPORT=ib BRAID_TIMEOUT=30 "$mp_tests" "$hosts_case" 2>&1)
rc=$?
if [ $rc = 0 ] || ! echo "$out" | grep -q "cannot load libibverbs.so.1"; then
  echo "$out" | tail -20; echo "FAIL: BRAID_TRANSPORT=ib without libibverbs: rc $rc, no clear error"; exit 1
fi
out=$(without_libs "$mp_tests" "TLS without OpenSSL: ncclSetEncryption says why it cannot" 2>&1) ||
  { echo "$out" | tail -20; echo "FAIL: ncclSetEncryption without OpenSSL"; exit 1; }
echo "ok: without them the library loads, sockets serve, and InfiniBand and TLS say why they cannot"

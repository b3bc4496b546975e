#!/usr/bin/env bash
# NCCL's configuration files through a real client (a perf tool, ranks as
# threads): NCCL_CONF_FILE and ~/.nccl.conf set variables the environment
# lacks, the environment wins, and NCCL_CONF_FILE replaces ~/.nccl.conf.
# A file's NCCL_ALGO=bogus must fail init; the same value from the
# environment's NCCL_ALGO=ring must not.  (/etc/nccl.conf, read last, is
# the unit tests' part: a test does not write the system's file.)
#   nccl_conf.sh ALL_REDUCE_PERF
set -uo pipefail
tool=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/home"
printf 'NCCL_ALGO=bogus\n' >"$dir/bogus.conf"
printf 'NCCL_ALGO=bogus\n' >"$dir/home/.nccl.conf"
printf '# braid test\nNCCL_DEBUG=INFO\nNCCL_DEBUG_SUBSYS=INIT,ENV\n' >"$dir/good.conf"
export BRAID_BACKEND=host HOME="$dir/empty"
unset NCCL_ALGO NCCL_DEBUG NCCL_DEBUG_SUBSYS NCCL_CONF_FILE BRAID_DEBUG BRAID_DEBUG_SUBSYS
fail=0
. "$(dirname "$0")/expect.sh"
expect fail 'NCCL_ALGO' NCCL_CONF_FILE="$dir/bogus.conf"
expect ok 'Out of bounds values : 0 OK' NCCL_CONF_FILE="$dir/bogus.conf" NCCL_ALGO=ring
expect fail 'NCCL_ALGO' HOME="$dir/home"
expect ok "NCCL_DEBUG=INFO set by $dir/good.conf" NCCL_CONF_FILE="$dir/good.conf" HOME="$dir/home"
expect ok 'Out of bounds values : 0 OK' HOME="$dir/empty"
exit $fail

#!/usr/bin/env bash
# NCCL_ENV_PLUGIN through a real client (a perf tool; ranks as threads, and
# as processes): a variable only the plugin holds takes effect (a file's
# NCCL_ALGO=bogus fails init), one it hides does not (the environment's
# NCCL_ALGO=bogus is then unset), its log lines come out, =none loads none,
# a bare name is libnccl-env-NAME.so, libnccl-env.so is loaded unasked, a
# configuration file may name the plugin, an init that fails fails the job
# naming the plugin, and the plugin is finalized at exit.
# A client whose first call is ncclGetUniqueId (FIRST_CALL) must see the
# plugin a configuration file names too.
# braid's net plugin library (NET_PLUGIN) reads its variables through braid's
# ncclParamEnvPluginGet, so the env plugin's answers reach it.
#   env_plugin.sh ALL_REDUCE_PERF PLUGIN_LIB FAILING_PLUGIN_LIB FIRST_CALL NET_PLUGIN
set -uo pipefail
tool=$1 plugin=$2 failing=$3 first_call=$4 net_plugin=$5
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/bare" "$dir/default" "$dir/empty"
ln -s "$plugin" "$dir/bare/libnccl-env-site.so"
ln -s "$plugin" "$dir/default/libnccl-env.so"
printf 'NCCL_ALGO=bogus\n' >"$dir/bogus.txt"
printf 'NCCL_ALGO=\n' >"$dir/hides.txt"
printf 'NCCL_DEBUG=INFO\nNCCL_DEBUG_SUBSYS=INIT,ENV\n' >"$dir/debug.txt"
printf 'NCCL_ENV_PLUGIN=%s\n' "$plugin" >"$dir/names_plugin.conf"
export BRAID_BACKEND=host HOME="$dir/empty"
unset NCCL_ALGO NCCL_DEBUG NCCL_DEBUG_SUBSYS NCCL_CONF_FILE NCCL_ENV_PLUGIN BRAID_DEBUG BRAID_DEBUG_SUBSYS
fail=0
. "$(dirname "$0")/expect.sh"
expect fail 'NCCL_ALGO' NCCL_ENV_PLUGIN="$plugin" BRAID_TEST_ENV_FILE="$dir/bogus.txt"
expect ok 'Out of bounds values : 0 OK' NCCL_ENV_PLUGIN="$plugin" BRAID_TEST_ENV_FILE="$dir/hides.txt" \
  NCCL_ALGO=bogus
expect ok 'env plugin: braidtest env plugin serving 2 variables' NCCL_ENV_PLUGIN="$plugin" \
  BRAID_TEST_ENV_FILE="$dir/debug.txt"
expect ok 'env plugin braidtest-v2 \(ncclEnvPlugin_v2, .*\) answers every variable' NCCL_ENV_PLUGIN="$plugin" \
  BRAID_TEST_ENV_FILE="$dir/debug.txt"
expect ok 'Out of bounds values : 0 OK' NCCL_ENV_PLUGIN=none BRAID_TEST_ENV_FILE="$dir/bogus.txt" \
  LD_LIBRARY_PATH="$dir/default"
expect fail 'NCCL_ALGO' NCCL_ENV_PLUGIN=site BRAID_TEST_ENV_FILE="$dir/bogus.txt" LD_LIBRARY_PATH="$dir/bare"
expect fail 'NCCL_ALGO' BRAID_TEST_ENV_FILE="$dir/bogus.txt" LD_LIBRARY_PATH="$dir/default"
expect fail 'NCCL_ALGO' NCCL_CONF_FILE="$dir/names_plugin.conf" BRAID_TEST_ENV_FILE="$dir/bogus.txt"
expect fail "env plugin braidtest-v2 \(ncclEnvPlugin_v2, $failing\): its init returned ncclSystemError" \
  NCCL_ENV_PLUGIN="$failing" NCCL_DEBUG=WARN
expect ok 'Out of bounds values : 0 OK' NCCL_ENV_PLUGIN="$plugin" BRAID_TEST_ENV_FINALIZED="$dir/finalized"
if [[ "$(cat "$dir/finalized" 2>/dev/null)" == finalized ]]; then echo "ok: finalized at exit"
else echo "FAILED: the plugin was not finalized at exit"; fail=1; fi

# The configuration file's plugin, where ncclGetUniqueId reads nothing before.
printf 'NCCL_ENV_PLUGIN=%s\n' "$failing" >"$dir/names_failing.conf"
out=$(env NCCL_CONF_FILE="$dir/names_plugin.conf" BRAID_TEST_ENV_FILE="$dir/bogus.txt" "$first_call" 2>&1)
report fail 'ncclCommInitRank: .*NCCL_ALGO' $? "$out" "first call ncclGetUniqueId, the plugin from a conf file"
out=$(env NCCL_CONF_FILE="$dir/names_failing.conf" "$first_call" 2>&1)
report fail 'ncclGetUniqueId: .*its init returned ncclSystemError' $? "$out" \
  "first call ncclGetUniqueId, a failing plugin from a conf file"
out=$(env BRAID_TEST_ENV_FILE="$dir/debug.txt" NCCL_ENV_PLUGIN="$plugin" "$first_call" 2>&1)
report ok '^ok$' $? "$out" "first call ncclGetUniqueId, a plugin that serves no bogus value"

# Two processes (the perf tools' environment launcher): each loads the
# plugin, and the variable only it holds reaches both.
two_processes() {  # two_processes ENV...: both ranks' output in $out, the first failure's exit in $rc
  local port=$((20000 + RANDOM % 20000)) pids=() rank p
  for rank in 0 1; do
    env "$@" BRAID_PERF_NRANKS=2 BRAID_PERF_RANK=$rank NCCL_COMM_ID=127.0.0.1:$port \
      "$tool" -b 8 -e 1K -f 4 -n 2 -w 1 >"$dir/rank$rank.log" 2>&1 &
    pids+=($!)
  done
  rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  out=$(cat "$dir/rank0.log" "$dir/rank1.log")
}
two_processes NCCL_ENV_PLUGIN="$plugin" BRAID_TEST_ENV_FILE="$dir/debug.txt"
loaded=$(grep -cE 'env plugin braidtest-v2 \(ncclEnvPlugin_v2, .*\) answers every variable' <<<"$out")
report ok 'Out of bounds values : 0 OK' "$rc" "$out" "two processes"
if [[ $loaded == 2 ]]; then echo "ok: both processes loaded the plugin"
else echo "FAILED: $loaded of 2 processes said the plugin answers"; fail=1; fi
# braid's net plugin library, loaded by braid, reads through the host's
# ncclParamEnvPluginGet: a variable only the env plugin holds reaches it.
printf 'NCCL_SOCKET_IFNAME=lo\nNCCL_DEBUG=INFO\nNCCL_DEBUG_SUBSYS=NET\n' >"$dir/ifname.txt"
two_processes NCCL_ENV_PLUGIN="$plugin" BRAID_TEST_ENV_FILE="$dir/ifname.txt" BRAID_TRANSPORT=plugin \
  NCCL_NET_PLUGIN="$net_plugin"
report ok 'braid net plugin: using interface lo \(127\.0\.0\.1\), NCCL_SOCKET_IFNAME=lo' "$rc" "$out" \
  "braid's net plugin library under the env plugin"
exit $fail

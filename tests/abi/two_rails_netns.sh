#!/usr/bin/env bash
# Two hosts with two NICs each, on two rails: network namespaces A and B
# joined by two veth pairs, rail0 (10.198.0.0/24) and rail1 (10.198.1.0/24).
# One rank per host runs all_reduce_perf (4-16 MB, every result checked)
# over braid's TCP sockets with NCCL_NSOCKS_PERTHREAD=2 (two slices):
#  - NCCL_SOCKET_IFNAME=rail: each rank listens on both rails and its
#    connections spread over them, so each rail carries at least a quarter
#    of what host A sends;
#  - NCCL_SOCKET_IFNAME=rail0: rail1 carries nothing.
# Then the same over a net transport (BRAID_TRANSPORT=plugin with braid's
# own plugin library, whose TCP net makes each interface a device), one
# slice stream each:
#  - NCCL_SOCKET_IFNAME=rail: each rank alone on its host uses both devices,
#    a call runs in two slices, and each rail carries at least a quarter;
#  - NCCL_NETDEVS_POLICY=MAX:1: one device, rail1 carries nothing.
# Skips (77) where namespaces cannot be created (not root, no CAP_NET_ADMIN).
set -u
tool=$1 plugin=$2
tag=$$
. "$(dirname "$0")/netns_pair.sh"
netns_pair r
for k in 0 1; do
  ip link add "r${k}a$tag" type veth peer name "r${k}b$tag"
  ip link set "r${k}a$tag" netns "$ns_a"
  ip link set "r${k}b$tag" netns "$ns_b"
  ip -n "$ns_a" link set "r${k}a$tag" name "rail$k"
  ip -n "$ns_b" link set "r${k}b$tag" name "rail$k"
  ip -n "$ns_a" addr add "10.198.$k.1/24" dev "rail$k"
  ip -n "$ns_b" addr add "10.198.$k.2/24" dev "rail$k"
  ip -n "$ns_a" link set "rail$k" up
  ip -n "$ns_b" link set "rail$k" up
done
for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up; done

sent() { ip netns exec "$ns_a" cat "/sys/class/net/rail$1/statistics/tx_bytes"; }

# run IFNAME [ENV...]: both ranks, every result checked; sets rail0/rail1 to the bytes A sent on each.
run() {
  local ifname=$1; shift
  local before0 before1 pids=() status=0 out
  before0=$(sent 0) before1=$(sent 1)
  out=$(mktemp)
  for rank in 0 1; do
    if [ "$rank" -eq 0 ]; then ns=$ns_a; else ns=$ns_b; fi
    ip netns exec "$ns" env BRAID_HOSTID=host-$rank BRAID_PERF_RANK=$rank BRAID_PERF_NRANKS=2 \
      NCCL_COMM_ID=10.198.0.1:$((20000 + (tag + ${#ifname} + $#) % 20000)) BRAID_TRANSPORT=socket BRAID_TIMEOUT=60 \
      NCCL_SOCKET_IFNAME="$ifname" NCCL_NSOCKS_PERTHREAD=2 "$@" \
      "$tool" -b 4M -e 16M -f 2 -n 3 -w 1 -c 1 > "$out.$rank" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || status=1; done
  if [ $status -ne 0 ] || ! grep -q "Out of bounds values : 0 OK" "$out.0"; then
    echo "NCCL_SOCKET_IFNAME=$ifname $*: failed"; cat "$out.0" "$out.1"; rm -f "$out" "$out".*; exit 1
  fi
  rm -f "$out" "$out".*
  rail0=$(($(sent 0) - before0)) rail1=$(($(sent 1) - before1))
  echo "NCCL_SOCKET_IFNAME=$ifname $*: host A sent $rail0 bytes on rail0, $rail1 on rail1"
}

spread() {
  local total=$((rail0 + rail1))
  if [ $((rail0 * 4)) -lt $total ] || [ $((rail1 * 4)) -lt $total ]; then
    echo "the connections did not spread over both rails"; exit 1
  fi
}
one_rail() {
  if [ "$rail1" -gt 100000 ]; then echo "rail1 carried data: $*"; exit 1; fi
}
run rail
spread
run rail0
one_rail "NCCL_SOCKET_IFNAME=rail0"
net="BRAID_TRANSPORT=plugin NCCL_NET_PLUGIN=$plugin NCCL_NSOCKS_PERTHREAD=1"
# shellcheck disable=SC2086
run rail $net
spread
# shellcheck disable=SC2086
run rail $net NCCL_NETDEVS_POLICY=MAX:1
one_rail "NCCL_NETDEVS_POLICY=MAX:1"
echo "two rails (netns + veth pairs): exact, and the slices spread over both NICs, by sockets and by a net"

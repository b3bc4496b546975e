#!/usr/bin/env bash
# Two hosts on one machine: network namespaces A and B joined by a veth pair.
# Four ranks of the real-header C program, two per "host", with distinct
# BRAID_HOSTID values: ranks on one host talk over shared memory, across hosts
# over TCP through the veth link, and bootstrap through NCCL_COMM_ID.
# With "ipv6" the link has IPv6 addresses only and NCCL_COMM_ID is
# [fd99::1]:port: every socket, the root's and the ranks', is IPv6.
# With "decoy" each host also has an interface "ib0" that the other cannot
# reach, which the default interface order prefers: the roots of the split's
# communicators must listen where the parent's bootstrap does, not there.
# Skips (77) where namespaces cannot be created (not root, no CAP_NET_ADMIN).
set -u
exe=$1 family=${2:-ipv4} decoy=${3:-}
tag=$$
. "$(dirname "$0")/netns_pair.sh"
netns_pair h
ip link add "va$tag" type veth peer name "vb$tag"
ip link set "va$tag" netns "$ns_a"
ip link set "vb$tag" netns "$ns_b"
if [ "$family" = ipv6 ]; then
  # nodad: usable at once, not after duplicate address detection's second.
  ip -n "$ns_a" addr add fd99::1/64 dev "va$tag" nodad || { echo "SKIP: no IPv6 in this kernel"; exit 77; }
  ip -n "$ns_b" addr add fd99::2/64 dev "vb$tag" nodad
  root="[fd99::1]"
else
  ip -n "$ns_a" addr add 10.199.0.1/24 dev "va$tag"
  ip -n "$ns_b" addr add 10.199.0.2/24 dev "vb$tag"
  root=10.199.0.1
fi
for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up; done
if [ "$decoy" = decoy ]; then
  n=1
  for ns in "$ns_a" "$ns_b"; do
    ip -n "$ns" link add ib0 type veth peer name ibx  # a link to nowhere
    ip -n "$ns" addr add 10.98.0.$n/24 dev ib0
    ip -n "$ns" link set ib0 up
    ip -n "$ns" link set ibx up
    n=$((n + 1))
  done
fi
ip -n "$ns_a" link set "va$tag" up
ip -n "$ns_b" link set "vb$tag" up

export NCCL_COMM_ID=$root:$((20000 + tag % 20000)) BRAID_TIMEOUT=60
pids=()
for rank in 0 1 2 3; do
  if [ "$rank" -lt 2 ]; then ns=$ns_a host=host-a; else ns=$ns_b host=host-b; fi
  ip netns exec "$ns" env BRAID_HOSTID=$host "$exe" "$rank" 4 &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
[ $status -eq 0 ] && echo "two hosts (netns + veth, $family${decoy:+, $decoy}): 4 ranks exact"
exit $status

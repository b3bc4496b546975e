#!/usr/bin/env bash
# One guest's part of tests/rdma/run.sh rails: the guest has two RoCE ports,
# rxe0 and rxe1, on subnets of their own, and one rank, which runs
# cross_host_ranks' rails suite (large collectives and send/recv, exact)
# with the other guest's over braid's verbs:
#  - NCCL_NETDEVS_POLICY unset: the rank, alone on its host, uses both ports
#    (its NET line says so), a call runs in two slices, and each port sends
#    at least a quarter of the guest's packets;
#  - NCCL_NETDEVS_POLICY=MAX:1: one port; the other sends almost nothing;
#    with NCCL_IB_PCI_RELAXED_ORDERING=0 beside it, whose ports say strict
#    ordering (relaxed by default: rdma-core 44 has ibv_reg_mr_iova2);
#  - NCCL_IB_HCA with rails (NCCL 2.30's name:port:rail) against the ports'
#    order: the rank takes them in rail order, and both still carry calls;
#    with three queue pairs a connection, messages round robin over them
#    (NCCL_IB_SPLIT_DATA_ON_QPS=0).
#   rails_guest.sh BUILD_DIR   (VM_ID from scripts/verbs-vm)
set -u
build=$1
sent() { cat "/sys/class/infiniband/rxe$1/ports/1/hw_counters/sent_pkts"; }

# run PORT LOG_TEXT [ENV...]: this guest's rank, exact, its NET line holding
# LOG_TEXT; sets sent0/sent1 to the packets each port sent.
run() {
  local port=$1 expect=$2 before0 before1
  shift 2
  before0=$(sent 0) before1=$(sent 1)
  rm -f /tmp/cross_host_ranks.*.log
  if ! env NCCL_COMM_ID=10.78.0.1:"$port" BRAID_TIMEOUT=60 NCCL_DEBUG=WARN BRAID_TRANSPORT=ib \
      NCCL_SOCKET_IFNAME=eth0 EXPECT_TRANSPORT=IB EXPECT_LOG="$expect" "$@" \
      "$build/tests/rdma/cross_host_ranks" rails "$VM_ID" 1 2; then
    echo "guest $VM_ID $*: failed"; exit 1
  fi
  grep -ho "transport on device.*" /tmp/cross_host_ranks.*.log
  sent0=$(($(sent 0) - before0)) sent1=$(($(sent 1) - before1))
  echo "guest $VM_ID $*: rxe0 sent $sent0 packets, rxe1 $sent1"
}

run 29610 "transport on devices 0 (rxe0, port 1, ;), 1 (rxe1, port 1, ;calls between hosts in 2 slices;\
(index 0), relaxed ordering"
total=$((sent0 + sent1))
if [ $((sent0 * 4)) -lt $total ] || [ $((sent1 * 4)) -lt $total ]; then
  echo "guest $VM_ID: the calls did not spread over both ports"; exit 1
fi
run 29611 "transport on device 0 (rxe0, port 1, ;(index 0), strict ordering" NCCL_NETDEVS_POLICY=MAX:1 \
  NCCL_IB_PCI_RELAXED_ORDERING=0
if [ $((sent1 * 50)) -gt "$sent0" ]; then
  echo "guest $VM_ID: rxe1 sent $sent1 packets though NCCL_NETDEVS_POLICY=MAX:1"; exit 1
fi
# NCCL 2.30's rails in NCCL_IB_HCA (name:port:rail), numbered against the
# ports' order on both guests: each rank takes rxe1 first, so index 0 is
# rail 0 at both ends and every connection stays on its rail, exact.
run 29612 "transport on devices 1 (rxe1, port 1, ; Mbps, rail 0), 0 (rxe0, port 1, ; Mbps, rail 1); the nearest;\
in rail order;3 queue pairs each, each message whole on the next in turn" NCCL_IB_HCA=rxe0:1:1,rxe1:1:0 \
  NCCL_IB_QPS_PER_CONNECTION=3 NCCL_IB_SPLIT_DATA_ON_QPS=0
total=$((sent0 + sent1))
if [ $((sent0 * 4)) -lt $total ] || [ $((sent1 * 4)) -lt $total ]; then
  echo "guest $VM_ID: the calls did not spread over both rails"; exit 1
fi
echo "guest $VM_ID: two ports, exact; both used by default, one under MAX:1, both in rail order with rails"

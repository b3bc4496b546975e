#!/usr/bin/env bash
# braid's multi-process tests across two qemu guests with a kernel verbs
# stack (scripts/verbs-vm): 2 ranks per guest, 4 in all, InfiniBand verbs
# (soft-RoCE) between the guests, shared memory within each.
#
#   tests/rdma/run.sh BUILD_DIR CASE
#
# CASE:
#   short     every collective, every datatype and op, send/recv: exact (ctest rdma.short)
#   full      short plus every collective at 4 MB and 16 MB (ctest rdma.full)
#   plugin    short, through braid's own net plugin library over InfiniBand; then
#             short under NCCL_NET=ib (braid's verbs, the plugin loaded; with
#             NCCL_IB_SL, NCCL_IB_TC over a config's trafficClass,
#             NCCL_IB_ADDR_RANGE and NCCL_IB_PKEY),
#             NCCL_IB_DISABLE=1 (sockets beside a port), the plugin with a
#             communicator config's trafficClass, the plugin again with
#             every socket on IPv6 (NCCL_COMM_ID=[fd78::1]:port), and
#             braid's verbs with IPv6 sockets and RoCE v2 over an IPv6 GID
#             (NCCL_IB_ADDR_FAMILY=AF_INET6) (ctest rdma.plugin)
#   external  short, through the external NCCL net plugin $RDMA_PLUGIN (a
#             libnccl-net*.so built elsewhere, e.g. Mellanox's
#             nccl-rdma-sharp-plugins; not in ctest: nothing here builds one)
#   failover  two RoCE ports on each guest, one rank each,
#             NCCL_IB_RESILIENCY_PORT_FAILOVER=1: rank 0 takes the port its
#             connections use down mid-run, and every AllReduce and
#             AlltoAll must still be exact, each end having failed over
#             (three queue pairs a connection, messages round robin over
#             them: NCCL_IB_SPLIT_DATA_ON_QPS=0);
#             then with NCCL_IB_RESILIENCY_PORT_RECOVERY=1 the port down,
#             up again and the other down, every call exact; then the
#             same port down, and after 10 more rounds, with no call
#             between, up again and the other down: the connections must
#             wait for their first port and move back to it; then rank 1
#             streams messages to rank 0, which takes its port down while
#             it only waits (its credits out): once with
#             NCCL_IB_RETURN_ASYNC_EVENTS=0, where rank 1's writes run out
#             of retries first (BRAID_IB_RETRY_CNT=6: soft-RoCE retries
#             forever at 7), and once with the port's asynchronous event,
#             which must fail over at once; then one port each
#             (NCCL_IB_HCA==rxe0:1) and port recovery: rank 0's port
#             flaps (down, up 3 s later) after the 10th round and after
#             the 20th, every call exact, the connections on the standby
#             queue pairs of the same port and back; then two ports each
#             again and port recovery: rank 0's first port down, its
#             second 0.5 s later, the first back 3 s later and the second
#             2 s after it, every call exact (in most runs connections
#             that failed over to the second port fail there too and are
#             stranded, then made anew; before that was done, two runs in
#             three failed); then both of rank 0's ports down for good
#             before a call: each rank's call fails within 40 s, naming
#             BRAID_TIMEOUT (10 s), or the peer's process gone (rank 0's
#             ended first); then one port each and rank 0's RoCE address
#             changed (its GID gone, the new one added 1 s later at
#             another index), every call exact, rank 0's connections
#             stranded and then on paths made anew with the new GID; the
#             same with NCCL_IB_RETURN_ASYNC_EVENTS=0 (a failed send shows
#             the change: soft-RoCE fails a send from a removed address
#             locally, the standby's GID gone too, so both strand); then
#             two ports each, recovery on, rank 0's second port's address
#             changed after the 10th round (the new one 5 s later) and its
#             first port down for good 50 ms into the 21st round, every call
#             exact (connections stranded, made anew in place on the second
#             port with its new GID); last, without port recovery, rank 0's
#             second port's address gone for good and its first port down
#             before a call, with and without the ports' asynchronous
#             events: rank 0's call fails at once, saying its standby was
#             stopped when its GID left, and rank 1's sees rank 0 go
#             (ctest rdma.failover)
#   rails     two RoCE ports on each guest, one rank each: both ports carry a
#             large AllReduce (two slices), exact; NCCL_NETDEVS_POLICY=MAX:1
#             keeps to one; relaxed ordering by default, strict under
#             NCCL_IB_PCI_RELAXED_ORDERING=0; rails in NCCL_IB_HCA, with
#             messages round robin over three queue pairs
#             (tests/rdma/rails_guest.sh; ctest rdma.rails)
#   faults    a killed rank (during collectives; and holding a devComm whose
#             GIN crosses to it), a wrong NCCL_IB_HCA, an NCCL_IB_PKEY past
#             the port's table, a GID the peer cannot reach: each a clear
#             error in bounded time (ctest rdma.faults)
# Exits 77 (skip) where the guests cannot be had (scripts/verbs-vm).
set -u
build=$(realpath "$1") case=$2
here=$(cd "$(dirname "$0")" && pwd)
ranks="$build/tests/rdma/cross_host_ranks"
[ -x "$ranks" ] || { echo "no $ranks"; exit 1; }
# Every guest: rank 2*VM_ID and the next; rank 0's guest runs the bootstrap root.
common="cd $build && export NCCL_COMM_ID=10.78.0.1:29500 BRAID_TIMEOUT=60 NCCL_DEBUG=WARN"
job() {  # SUITE [ENV...]: the command for a guest
  local suite=$1; shift
  echo "($common $*; $ranks $suite \$((VM_ID * 2)) 2 4)"
}
# Runs the two guests; once more where one's emulated NIC stopped sending
# (the guest kernel's NETDEV WATCHDOG: qemu no longer takes its transmit
# queue, so every call then waits out BRAID_TIMEOUT).  Seen on 2026-12-07
# in rdma.failover, 3 runs in 14, all within half an hour, in steps that
# braid's changes of that day do not alter; its cause is not known
# (perf/results/rdma_tests.txt).  Any other failure is the test's.
pair() {
  local out rc try
  out=$(mktemp)
  for try in 1 2; do
    "$here/../../scripts/verbs-vm" --timeout "${VM_TIMEOUT:-900}" -- "$1" "$2" 2>&1 | tee "$out"
    rc=${PIPESTATUS[0]}
    [ "$rc" = 0 ] || [ "$rc" = 77 ] || ! grep -q 'NETDEV WATCHDOG' "$out" && break
    [ $try = 1 ] && echo "run.sh: a guest's emulated NIC stopped sending (NETDEV WATCHDOG); running the case again"
  done
  rm -f "$out"
  return "$rc"
}
# Two RoCE ports per guest: rxe0 and rxe1 on two macvlans of eth0, each its
# own subnet (rxe0 moves off eth0, which keeps the sockets).  The macvlans
# share one wire, so each answers ARP only for its own address
# (arp_ignore=1, arp_announce=2, as RoCE hosts with several ports on one
# network are set up): else the peer may learn the other macvlan's MAC for
# an address, and its packets reach the wrong port until the entry ages out.
# reach: waits until the peer answers on both.
reach='for k in 1 2; do for i in $(seq 60); do ping -c1 -W1 10.78.$k.$((2 - VM_ID)) >/dev/null && break; sleep 0.5;
  done; ping -c1 -W1 10.78.$k.$((2 - VM_ID)) >/dev/null || exit 1; done'
ports="echo 1 >/proc/sys/net/ipv4/conf/all/arp_ignore && echo 2 >/proc/sys/net/ipv4/conf/all/arp_announce &&
  rdma link delete rxe0 && for k in 1 2; do ip link add link eth0 name mv\$k type macvlan mode bridge &&
  ip addr add 10.78.\$k.\$((VM_ID + 1))/24 dev mv\$k && ip link set mv\$k up &&
  rdma link add rxe\$((k - 1)) type rxe netdev mv\$k || exit 1; done && $reach"

case "$case" in
  short|full)
    cmd=$(job "$case" BRAID_TRANSPORT=auto EXPECT_TRANSPORT=shm+IB)
    pair "$cmd" "$cmd";;
  plugin)
    # Then NCCL's choices with the plugin loaded: NCCL_NET=ib takes braid's
    # verbs by name, NCCL_IB_DISABLE=1 (no plugin) sockets beside a port.
    cmd="$(job short BRAID_TRANSPORT=auto NCCL_NET_PLUGIN="$build/libnccl-net-braid.so" \
      "EXPECT_TRANSPORT='shm+BraidIB (net plugin v12'") &&
      $(job short NCCL_NET_PLUGIN="$build/libnccl-net-braid.so" NCCL_NET=ib NCCL_IB_SL=3 NCCL_IB_TC=104 \
        NCCL_IB_ADDR_RANGE=10.78.0.0/16 NCCL_IB_PKEY=0 TRAFFIC_CLASS=40 EXPECT_TRANSPORT=shm+IB \
        "EXPECT_LOG='service level 3, traffic class 104, P_Key 0xffff (index 0);traffic class 104 (NCCL_IB_TC, over the communicator'") &&
      $(job short NCCL_NET_PLUGIN=none NCCL_IB_DISABLE=1 EXPECT_TRANSPORT=shm+socket) &&
      $(job short NCCL_NET_PLUGIN="$build/libnccl-net-braid.so" TRAFFIC_CLASS=40 \
        "EXPECT_TRANSPORT='shm+BraidIB (net plugin v12'" "EXPECT_LOG='traffic class 40 (the communicator'") &&
      ip -6 addr add fd78::\$((VM_ID + 1))/64 dev eth0 nodad &&
      $(job short "NCCL_COMM_ID='[fd78::1]:29501'" NCCL_SOCKET_FAMILY=AF_INET6 \
        NCCL_NET_PLUGIN="$build/libnccl-net-braid.so" "EXPECT_TRANSPORT='shm+BraidIB (net plugin v12'" \
        "EXPECT_LOG='braid net plugin: using interface eth0 (fd78::'") &&
      $(job short "NCCL_COMM_ID='[fd78::1]:29502'" NCCL_SOCKET_FAMILY=AF_INET6 NCCL_IB_ADDR_FAMILY=AF_INET6 \
        NCCL_IB_ADDR_RANGE=fd78::/64 EXPECT_TRANSPORT=shm+IB 'EXPECT_LOG="fd78::$((VM_ID + 1)) (v2), "')"
    pair "$cmd" "$cmd";;
  external)
    [ -f "${RDMA_PLUGIN:-}" ] || { echo "external: set RDMA_PLUGIN to a net plugin library"; exit 77; }
    plugin=$(realpath "$RDMA_PLUGIN")
    # The plugin for every peer (forced: init fails without it), and no
    # log: nccl-rdma-sharp-plugins 2.7 passes a char for a %s in a WARN on
    # a device without a PCI path (rxe's), which crashes any logger that
    # prints warnings (NCCL's with NCCL_DEBUG=WARN too).
    cmd=$(job short BRAID_TRANSPORT=plugin NCCL_NET_PLUGIN="$plugin" NCCL_DEBUG=VERSION)
    "$here/../../scripts/verbs-vm" --timeout "${VM_TIMEOUT:-900}" --share "$build" --share "$(dirname "$plugin")" \
      -- "$cmd" "$cmd";;
  failover)
    # One rank per guest, whose connections' first port is the same on both
    # guests; rank 0 takes its first port's macvlan down mid-run.  Then,
    # with NCCL_IB_RESILIENCY_PORT_RECOVERY=1 and both ports up again, the
    # same port down, up again after 10 more rounds, and the other port
    # down after 10 more: the connections that failed over must have moved
    # back, or the last step would leave them no path.  Then the stream
    # (cross_host_ranks.cc), without and with the ports' asynchronous
    # events.  Then flaps of a guest's only port, both ports down at once,
    # a changed address, and the second port's address changed before the
    # first port goes for good; then the second port's address gone without
    # recovery.
    netdev='$(rdma link show %s/1 | sed -n "s/.* netdev \\([^ ]*\\).*/\\1/p")'
    down="ip link set $netdev down" up="ip link set $netdev up" other_down="ip link set ${netdev/\%s/%o} down"
    # A flap: down, and up again 3 s later, in the background (the call after it waits for the port).
    flap="ip link set $netdev down && (sleep 3 && ip link set $netdev up) >/dev/null 2>&1 &"
    # Both ports: the second goes while the connections that failed over to it carry data.
    both="ip link set $netdev down && (sleep 0.5 && $other_down && sleep 3 && $up && sleep 2 &&
      ip link set ${netdev/\%s/%o} up) >/dev/null 2>&1 &"
    # Rank 0's (guest 0's) RoCE address changed: its GID leaves the table, the new one comes 1 s later.
    readdress="ip addr del 10.78.1.1/24 dev $netdev &&
      (sleep 1 && ip addr add 10.78.1.11/24 dev $netdev) >/dev/null 2>&1 &"
    # Its second port's, whatever its address then (mvK), the new one (10.78.K.21) 5 s later.
    readdress_other='n=NETDEV && a=$(ip -4 -o addr show dev $n | sed -n "s/.* inet \([^ ]*\).*/\1/p") &&
      ip addr del $a dev $n && (sleep 5 && ip addr add 10.78.${n#mv}.21/24 dev $n) >/dev/null 2>&1 &'
    readdress_other=${readdress_other/NETDEV/${netdev/\%s/%o}}
    # Both ports up, each with its first address; then both guests reach each other on both.
    restore='ip link set mv1 up && ip link set mv2 up && for k in 1 2; do ip -4 addr flush dev mv$k &&
      ip addr add 10.78.$k.$((VM_ID + 1))/24 dev mv$k || exit 1; done && '"$reach"
    # Without port recovery, rank 0's second port's address gone for good and then its first port down:
    # rank 0's connections must end, saying that the standby lost its GID, rank 1's seeing them go.
    lost_gid_error="$common; if [ \$VM_ID = 0 ]; then e='stopped when its GID left'; else
      e='stopped when its GID left|process is gone'; fi; export BRAID_TRANSPORT=ib NCCL_IB_RESILIENCY_PORT_FAILOVER=1 \
      NCCL_SOCKET_IFNAME=eth0 EXPECT_TRANSPORT=IB BRAID_TIMEOUT=40 EXPECT_WITHIN=60 EXPECT_ERROR=\"\$e\" \
      FAILOVER_DOWN='ip -4 addr flush dev ${netdev/\%s/%o} && sleep 1 && $down'"
    logs=/tmp/cross_host_ranks.*.log
    cmd="$ports && ($common; export BRAID_TRANSPORT=ib NCCL_IB_RESILIENCY_PORT_FAILOVER=1 \
      NCCL_IB_QPS_PER_CONNECTION=3 NCCL_IB_SPLIT_DATA_ON_QPS=0 NCCL_SOCKET_IFNAME=eth0 EXPECT_TRANSPORT=IB \
      EXPECT_LOG='standby on;3 queue pairs each, each message whole on the next in turn' FAILOVER_DOWN='$down';
      $ranks failover \$VM_ID 1 2) && grep -h 'failing over' $logs && rm -f $logs &&
      ip link set mv1 up && ip link set mv2 up && $reach &&
      ($common; export NCCL_COMM_ID=10.78.0.1:29501 BRAID_TRANSPORT=ib NCCL_IB_RESILIENCY_PORT_FAILOVER=1 \
      NCCL_IB_RESILIENCY_PORT_RECOVERY=1 NCCL_DEBUG_TIMESTAMP_LEVELS=INFO,WARN NCCL_SOCKET_IFNAME=eth0 \
      EXPECT_TRANSPORT=IB EXPECT_LOG='standby on' FAILOVER_DOWN='$down' FAILOVER_UP='$up' \
      FAILOVER_OTHER_DOWN='$other_down';
      $ranks failover \$VM_ID 1 2) && grep -h 'failing over\|again (NCCL\|moving from' $logs && rm -f $logs &&
      ip link set mv1 up && ip link set mv2 up && $reach &&
      ($common; export NCCL_COMM_ID=10.78.0.1:29502 BRAID_TRANSPORT=ib NCCL_IB_RESILIENCY_PORT_FAILOVER=1 \
      NCCL_IB_RESILIENCY_PORT_RECOVERY=1 NCCL_SOCKET_IFNAME=eth0 EXPECT_TRANSPORT=IB EXPECT_LOG='standby on' \
      FAILOVER_DOWN='$down' FAILOVER_UP='$up && sleep 1 && $other_down';
      $ranks failover \$VM_ID 1 2) && grep -h 'failing over\|moving from' $logs && grep -q ' to rxe0:1' $logs &&
      rm -f $logs && ip link set mv1 up && ip link set mv2 up && $reach &&
      ($common; export NCCL_COMM_ID=10.78.0.1:29503 BRAID_TRANSPORT=ib NCCL_IB_RESILIENCY_PORT_FAILOVER=1 \
      NCCL_IB_RETURN_ASYNC_EVENTS=0 BRAID_IB_RETRY_CNT=6 NCCL_SOCKET_IFNAME=eth0 EXPECT_TRANSPORT=IB \
      FAILOVER_DOWN='$down';
      $ranks stream \$VM_ID 1 2) && grep -h 'failing over\|InfiniBand port' $logs && rm -f $logs &&
      ip link set mv1 up && ip link set mv2 up && $reach &&
      ($common; export NCCL_COMM_ID=10.78.0.1:29504 BRAID_TRANSPORT=ib NCCL_IB_RESILIENCY_PORT_FAILOVER=1 \
      NCCL_SOCKET_IFNAME=eth0 EXPECT_TRANSPORT=IB FAILOVER_DOWN='$down' EXPECT_SLOWEST=4 \
      FAILOVER_SAYS='went down (asynchronous event)';
      $ranks stream \$VM_ID 1 2) && grep -h 'failing over\|InfiniBand port' $logs && rm -f $logs &&
      ip link set mv1 up && ip link set mv2 up && $reach &&
      ($common; export NCCL_COMM_ID=10.78.0.1:29505 BRAID_TRANSPORT=ib NCCL_IB_HCA==rxe0:1 \
      NCCL_IB_RESILIENCY_PORT_FAILOVER=1 NCCL_IB_RESILIENCY_PORT_RECOVERY=1 NCCL_SOCKET_IFNAME=eth0 \
      EXPECT_TRANSPORT=IB EXPECT_LOG='standby on' FAILOVER_DOWN='$flap' FAILOVER_UP='$flap';
      $ranks failover \$VM_ID 1 2) && grep -h 'failing over\|moving from\|waiting for\|is active' $logs &&
      grep -q 'moving from' $logs && rm -f $logs && ip link set mv1 up && ip link set mv2 up && $reach &&
      ($common; export NCCL_COMM_ID=10.78.0.1:29506 BRAID_TRANSPORT=ib NCCL_IB_RESILIENCY_PORT_FAILOVER=1 \
      NCCL_IB_RESILIENCY_PORT_RECOVERY=1 NCCL_SOCKET_IFNAME=eth0 EXPECT_TRANSPORT=IB EXPECT_LOG='standby on' \
      FAILOVER_DOWN='$both';
      $ranks failover \$VM_ID 1 2) && grep -h 'failing over\|nothing stands by\|made anew\|moving from' $logs &&
      rm -f $logs && ip link set mv1 up && ip link set mv2 up && $reach &&
      ($common; export NCCL_COMM_ID=10.78.0.1:29508 BRAID_TRANSPORT=ib NCCL_IB_RESILIENCY_PORT_FAILOVER=1 \
      NCCL_IB_RESILIENCY_PORT_RECOVERY=1 NCCL_SOCKET_IFNAME=eth0 EXPECT_TRANSPORT=IB BRAID_TIMEOUT=10 \
      FAILOVER_DOWN='$down && $other_down' EXPECT_WITHIN=40 EXPECT_ERROR='BRAID_TIMEOUT|process is gone';
      $ranks call-fails \$VM_ID 1 2) && rm -f $logs && ip link set mv1 up && ip link set mv2 up && $reach &&
      ($common; export NCCL_COMM_ID=10.78.0.1:29507 BRAID_TRANSPORT=ib NCCL_IB_HCA==rxe0:1 \
      NCCL_IB_RESILIENCY_PORT_FAILOVER=1 NCCL_IB_RESILIENCY_PORT_RECOVERY=1 NCCL_SOCKET_IFNAME=eth0 \
      EXPECT_TRANSPORT=IB EXPECT_LOG='standby on' FAILOVER_DOWN='$readdress';
      $ranks failover \$VM_ID 1 2) && grep -h 'left rxe\|nothing stands by\|now has GID' $logs &&
      { [ \$VM_ID = 1 ] || { grep -q 'nothing stands by' $logs && grep -q 'now has GID' $logs; }; } &&
      rm -f $logs && $restore &&
      ($common; export NCCL_COMM_ID=10.78.0.1:29513 BRAID_TRANSPORT=ib NCCL_IB_HCA==rxe0:1 \
      NCCL_IB_RESILIENCY_PORT_FAILOVER=1 NCCL_IB_RESILIENCY_PORT_RECOVERY=1 NCCL_IB_RETURN_ASYNC_EVENTS=0 \
      BRAID_IB_RETRY_CNT=6 NCCL_SOCKET_IFNAME=eth0 EXPECT_TRANSPORT=IB EXPECT_LOG='standby on' \
      FAILOVER_DOWN='$readdress';
      $ranks failover \$VM_ID 1 2) && { grep -h 'nothing stands by\|now has GID\|failing over' $logs || true; } &&
      { [ \$VM_ID = 1 ] || { grep -q 'nothing stands by' $logs && grep -q 'now has GID' $logs; }; } &&
      rm -f $logs && ip link set mv1 up && ip link set mv2 up &&
      ($common; export NCCL_COMM_ID=10.78.0.1:29509 BRAID_TRANSPORT=ib NCCL_IB_RESILIENCY_PORT_FAILOVER=1 \
      NCCL_IB_RESILIENCY_PORT_RECOVERY=1 NCCL_SOCKET_IFNAME=eth0 EXPECT_TRANSPORT=IB EXPECT_LOG='standby on' \
      FAILOVER_DOWN='$readdress_other' FAILOVER_UP='(sleep 0.05 && $down) &';
      $ranks failover \$VM_ID 1 2) && grep -h 'nothing stands by\|again, writing\|again, receiving' $logs &&
      rm -f $logs && $restore &&
      ($lost_gid_error; export NCCL_COMM_ID=10.78.0.1:29510 NCCL_IB_RETURN_ASYNC_EVENTS=0;
      $ranks call-fails \$VM_ID 1 2) && rm -f $logs && $restore &&
      ($lost_gid_error; export NCCL_COMM_ID=10.78.0.1:29511; $ranks call-fails \$VM_ID 1 2)"
    pair "$cmd" "$cmd";;
  rails)
    cmd="$ports && $here/rails_guest.sh $build"
    pair "$cmd" "$cmd";;
  faults)
    # One boot of the pair for the three, one after the other.  Each guest
    # sets up the unreachable GID itself: an address on a subnet of its
    # own, and the RoCE v2 GID rxe gives it.  (rxe sends out of its netdev
    # even without a route, as on a link, so the guests also stop
    # answering ARP for addresses outside the asker's subnet.)
    gid_setup='ip addr add 10.79.$VM_ID.1/24 dev eth0; sleep 1;
      echo 2 >/proc/sys/net/ipv4/conf/all/arp_ignore; echo 2 >/proc/sys/net/ipv4/conf/eth0/arp_ignore;
      for f in /sys/class/infiniband/rxe0/ports/1/gids/*; do
        i=${f##*/}; [ "$(cat $f)" = "0000:0000:0000:0000:0000:ffff:0a4f:0$VM_ID""01" ] || continue
        [ "$(cat /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/$i 2>/dev/null)" = "RoCE v2" ] && gid=$i
      done; echo "guest $VM_ID: unreachable GID index ${gid:-none}"'
    cmd="echo '== a killed rank'; $(job kill BRAID_TRANSPORT=ib BRAID_TIMEOUT=20) || exit 1;
      echo '== a killed rank that GIN reaches'; $(job gin-kill BRAID_TRANSPORT=ib BRAID_TIMEOUT=20 \
        EXPECT_TRANSPORT=IB) || exit 4;
      echo '== a wrong NCCL_IB_HCA'; $(job init-fails BRAID_TRANSPORT=ib NCCL_IB_HCA=mlx5_0 \
        EXPECT_ERROR="'NCCL_IB_HCA=mlx5_0 matches no active port'") || exit 2;
      echo '== an NCCL_IB_PKEY past the table'; $(job init-fails BRAID_TRANSPORT=ib NCCL_IB_PKEY=1000 \
        EXPECT_ERROR="'NCCL_IB_PKEY=1000: not an index of the port'") || exit 5;
      echo '== a GID the peer cannot reach'; $gid_setup;
      $(job call-fails BRAID_TRANSPORT=ib 'BRAID_IB_GID_INDEX=$gid' BRAID_IB_TIMEOUT=14 BRAID_TIMEOUT=30 \
        EXPECT_WITHIN=60 "EXPECT_ERROR='reachable|closed|reset by peer|gone'") || exit 3"
    pair "$cmd" "$cmd";;
  *) echo "unknown case $case"; exit 2;;
esac

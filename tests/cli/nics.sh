#!/usr/bin/env bash
# `braid nics` on a sysfs tree made here, like a 2-socket machine with a GPU
# and a NIC under each of two PCI switches on socket 0, and a GPU and two
# NICs under one root port on socket 1, a third node with no device, and an
# Ethernet NIC and loopback: the exact listing, each GPU's nearest devices
# and each NUMA node's; and with --xml the same machine in NCCL's topology
# XML, read back by `braid topo`.
set -euo pipefail
braid=$1
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT

pci() {  # pci PATH-BELOW-devices VENDOR CLASS NUMA
  local dir=$root/devices/$1
  mkdir -p "$dir" "$root/bus/pci/devices"
  echo "$2" > "$dir/vendor"
  echo "$3" > "$dir/class"
  echo "$4" > "$dir/numa_node"
  ln -s "../../../devices/$1" "$root/bus/pci/devices/$(basename "$1")"
}
nic() {  # nic NAME PATH-BELOW-devices NUMA
  pci "$2" 0x15b3 0x020700 "$3"
  mkdir -p "$root/class/infiniband/$1/ports/1"
  ln -s "../../../devices/$2" "$root/class/infiniband/$1/device"
  echo "4: ACTIVE" > "$root/class/infiniband/$1/ports/1/state"
  echo "400 Gb/sec (4X NDR)" > "$root/class/infiniband/$1/ports/1/rate"
}
sw_a=pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0
sw_b=pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:10.0
port1=pci0000:80/0000:80:01.0
pci $sw_a/0000:03:00.0 0x10de 0x030200 0
nic mlx5_0 $sw_a/0000:04:00.0 0
pci $sw_b/0000:05:00.0 0x10de 0x030200 0
nic mlx5_1 $sw_b/0000:06:00.0 0
pci $port1/0000:81:00.0 0x10de 0x030200 1
nic mlx5_2 $port1/0000:82:00.0 1
nic mlx5_3 $port1/0000:83:00.0 1
pci pci0000:00/0000:00:1f.0 0x8086 0x060100 0  # not a GPU
pci pci0000:00/0000:00:03.0 0x8086 0x020000 0  # an Ethernet NIC
mkdir -p "$root/class/net/eth0" "$root/class/net/lo"  # lo: no PCI device
ln -s "../../../devices/pci0000:00/0000:00:03.0" "$root/class/net/eth0/device"
for node in 0 1 2; do mkdir -p "$root/devices/system/node/node$node"; done
echo 0-7 > "$root/devices/system/node/node0/cpulist"
echo 8-15 > "$root/devices/system/node/node1/cpulist"
echo 16-23 > "$root/devices/system/node/node2/cpulist"  # no device on it

got=$("$braid" nics --sysfs "$root")
expected="InfiniBand/RoCE devices ($root/class/infiniband; NCCL_IB_HCA picks among them):
  mlx5_0       NUMA 0   $root/devices/$sw_a/0000:04:00.0
  mlx5_1       NUMA 0   $root/devices/$sw_b/0000:06:00.0
  mlx5_2       NUMA 1   $root/devices/$port1/0000:82:00.0
  mlx5_3       NUMA 1   $root/devices/$port1/0000:83:00.0
Network interfaces ($root/class/net; NCCL_SOCKET_IFNAME picks among them for TCP):
  eth0         NUMA 0   $root/devices/pci0000:00/0000:00:03.0
  lo           NUMA -   (no PCI device)
NVIDIA GPUs ($root/bus/pci/devices) and the devices a rank on each takes as nearest:
  0000:03:00.0 NUMA 0   mlx5_0 (2 PCI hops)
  0000:05:00.0 NUMA 0   mlx5_1 (2 PCI hops)
  0000:81:00.0 NUMA 1   mlx5_2, mlx5_3 (2 PCI hops)
NUMA nodes and the devices a rank without a GPU, bound to the node, takes as nearest:
  node0        CPUs 0-7       mlx5_0, mlx5_1
  node1        CPUs 8-15      mlx5_2, mlx5_3
  node2        CPUs 16-23     mlx5_0, mlx5_1, mlx5_2, mlx5_3 (none on the node)
(ranks that take the same devices share them out in rank order, one or more each: a rank alone on
 them uses all; NCCL_NETDEVS_POLICY=ALL or MAX:N widens a rank's share)"
if [ "$got" != "$expected" ]; then
  diff <(echo "$expected") <(echo "$got") || true
  exit 1
fi

# --xml: the same machine in NCCL's topology XML, which braid's own reader takes.
"$braid" nics --sysfs "$root" --xml > "$root/node.xml"
for line in '<gpu dev="0" sm="0" rank="0" gdr="0"/>' '<gpu dev="2" sm="0" rank="2" gdr="0"/>' \
            '<net name="mlx5_3" dev="3" speed="400000" port="1"' '<pci busid="0000:02:10.0"'; do
  grep -qF "$line" "$root/node.xml" || { echo "braid nics --xml lacks $line:"; cat "$root/node.xml"; exit 1; }
done
"$braid" topo "$root/node.xml" | grep -q "1 nodes x 3 GPUs, 4 NICs per node" ||
  { echo "braid topo does not read braid nics --xml as 3 GPUs and 4 NICs:"; "$braid" topo "$root/node.xml"; exit 1; }
echo "braid nics: as expected"

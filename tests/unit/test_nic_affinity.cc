// Which net devices a rank uses (src/transport/net/nic_affinity.h): PCI hops,
// the nearest devices to a GPU or a NUMA node, their share-out and
// NCCL_NETDEVS_POLICY, NCCL_TOPO_FILE's placing of a VM's devices, the
// sysfs readers on trees of files made here, and ranks (threads, each with
// its own bootstrap) on two hosts choosing together.
#include <catch2/catch.hpp>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "src/bootstrap/bootstrap.h"
#include "src/transport/net/nic_affinity.h"
#include "scoped_env.h"
#include "src/transport/net/topo_file.h"

using namespace braid;
namespace fs = std::filesystem;

namespace {

// A PCI tree like an 8-GPU machine's, a switch per GPU pair and NIC:
// root complexes pci0000:00 (NUMA node 0) and pci0000:80 (node 1).
const std::string kRoot0 = "/sys/devices/pci0000:00/0000:00:01.0";
const std::string kSwitchA = kRoot0 + "/0000:01:00.0/0000:02:00.0";
const std::string kSwitchB = kRoot0 + "/0000:01:00.0/0000:02:10.0";
const std::string kRoot1 = "/sys/devices/pci0000:80/0000:80:01.0";

struct TempTree {
  fs::path root;
  TempTree() {
    char name[] = "/tmp/braid-nic-affinity-XXXXXX";
    REQUIRE(mkdtemp(name));
    root = name;
  }
  ~TempTree() { fs::remove_all(root); }
  void write(const std::string& relative, const std::string& text) const {
    fs::create_directories((root / relative).parent_path());
    std::ofstream(root / relative) << text;
  }
};

}  // namespace

TEST_CASE("PCI hops count both paths below their common ancestor", "[nic_affinity]") {
  CHECK(pci_hops(kSwitchA + "/0000:03:00.0", kSwitchA + "/0000:03:00.0") == 0);
  CHECK(pci_hops(kSwitchA + "/0000:03:00.0", kSwitchA + "/0000:04:00.0") == 2);  // one switch
  CHECK(pci_hops(kSwitchA + "/0000:03:00.0", kSwitchB + "/0000:05:00.0") == 4);
  CHECK(pci_hops(kSwitchA + "/0000:03:00.0", kRoot1 + "/0000:81:00.0") == 8);
  CHECK(pci_hops("", kRoot1) == -1);
  CHECK(pci_hops(kRoot1, "") == -1);
}

TEST_CASE("A GPU's nearest devices: its switch, then its root complex, then its NUMA node", "[nic_affinity]") {
  RankPlace gpu;
  gpu.gpu_pci_path = kSwitchA + "/0000:03:00.0";
  gpu.gpu_numa_node = 0;
  std::vector<DevicePlace> devices = {
      {kRoot1 + "/0000:81:00.0", 1},         // another socket's root, close to its own root
      {kSwitchB + "/0000:05:00.0", 0},       // the GPU's root, another switch
      {kSwitchA + "/0000:04:00.0", 0},       // the GPU's switch: port 1
      {kSwitchA + "/0000:04:00.0", 0},       // and port 2 of that NIC
      {"", -1},                              // nothing known
  };
  NearestDevices n = nearest_devices(devices, gpu);
  CHECK(n.by == NearBy::Gpu);
  CHECK(n.hops == 2);
  CHECK(n.devices == std::vector<int>{2, 3});

  devices.erase(devices.begin() + 2, devices.begin() + 4);  // no NIC on its switch
  n = nearest_devices(devices, gpu);
  CHECK(n.devices == std::vector<int>{1});
  CHECK(n.hops == 4);

  // Only devices under other roots: the one on the GPU's NUMA node first,
  // though the other is fewer hops away.
  devices = {{"/sys/devices/pci0000:80/0000:80:01.0", 1},
             {"/sys/devices/pci0000:40/0000:40:01.0/0000:41:00.0/0000:42:00.0", 0}};
  n = nearest_devices(devices, gpu);
  CHECK(n.devices == std::vector<int>{1});
  gpu.gpu_numa_node = -1;  // unknown: the fewest hops
  n = nearest_devices(devices, gpu);
  CHECK(n.devices == std::vector<int>{0});
}

TEST_CASE("Without a GPU the devices on the rank's NUMA node, else every device", "[nic_affinity]") {
  const std::vector<DevicePlace> devices = {{"a", 1}, {"b", 0}, {"c", 1}, {"", -1}};
  RankPlace host;
  host.numa_node = 1;
  NearestDevices n = nearest_devices(devices, host);
  CHECK(n.by == NearBy::Numa);
  CHECK(n.devices == std::vector<int>{0, 2});
  host.numa_node = 2;  // no device there
  n = nearest_devices(devices, host);
  CHECK(n.by == NearBy::Any);
  CHECK(n.devices == std::vector<int>{0, 1, 2, 3});
  host.numa_node = -1;
  CHECK(nearest_devices(devices, host).devices == std::vector<int>{0, 1, 2, 3});
  // A GPU where no device's path is known: the NUMA node decides.
  host.gpu_pci_path = kSwitchA;
  host.numa_node = 0;
  n = nearest_devices({{"", 1}, {"", 0}, {"", -1}}, host);
  CHECK(n.by == NearBy::Numa);
  CHECK(n.devices == std::vector<int>{1});
  CHECK(nearest_devices({}, host).devices.empty());
}

TEST_CASE("Ranks with the same nearest devices share them out", "[nic_affinity]") {
  const NetDevsPolicy automatic;
  // Ranks outnumber devices: one each, in turn.
  CHECK(rank_devices({1, 3}, 4, 0, 3, automatic) == std::vector<int>{1});
  CHECK(rank_devices({1, 3}, 4, 1, 3, automatic) == std::vector<int>{3});
  CHECK(rank_devices({1, 3}, 4, 2, 3, automatic) == std::vector<int>{1});
  CHECK(rank_devices({0, 1, 2, 3}, 4, 5, 8, automatic) == std::vector<int>{1});  // no locality: k mod n
  // Devices outnumber ranks: every m-th, so that all are used.
  CHECK(rank_devices({1, 3}, 4, 0, 1, automatic) == std::vector<int>{1, 3});
  CHECK(rank_devices({0, 1, 2, 3, 4, 5, 6, 7}, 8, 1, 4, automatic) == std::vector<int>{1, 5});
  CHECK(rank_devices({0, 1, 2}, 3, 0, 2, automatic) == std::vector<int>{0, 2});
  CHECK(rank_devices({0, 1, 2}, 3, 1, 2, automatic) == std::vector<int>{1});
  // Nothing known nearer: every device; none at all: none.
  CHECK(rank_devices({}, 2, 0, 1, automatic) == std::vector<int>{0, 1});
  CHECK(rank_devices({}, 0, 0, 1, automatic).empty());
}

TEST_CASE("NCCL_NETDEVS_POLICY: ALL and MAX:N widen a rank's share, nearest first", "[nic_affinity]") {
  bool recognized = false;
  const NetDevsPolicy all = parse_netdevs_policy("all", &recognized);
  CHECK((recognized && all.kind == NetDevsPolicy::Kind::All));
  const NetDevsPolicy two = parse_netdevs_policy("MAX:2", &recognized);
  CHECK((recognized && two.kind == NetDevsPolicy::Kind::Max && two.max == 2));
  CHECK((parse_netdevs_policy("AUTO", &recognized).kind == NetDevsPolicy::Kind::Auto && recognized));
  for (const char* bad : {"MAX:0", "MAX:-1", "MAX:", "MAX:2x", "most", ""}) {
    CHECK(parse_netdevs_policy(bad, &recognized).kind == NetDevsPolicy::Kind::Auto);
    CHECK_FALSE(recognized);
  }
  // Rank 1 of 2 sharing {1, 3} of 4: its share, the other nearest, then the rest from its place on.
  CHECK(rank_devices({1, 3}, 4, 1, 2, all) == std::vector<int>{3, 1, 2, 0});
  CHECK(rank_devices({1, 3}, 4, 0, 2, all) == std::vector<int>{1, 3, 0, 2});
  CHECK(rank_devices({1, 3}, 4, 1, 2, two) == std::vector<int>{3, 1});
  CHECK(rank_devices({1, 3}, 4, 0, 1, two) == std::vector<int>{1, 3});
  NetDevsPolicy one{NetDevsPolicy::Kind::Max, 1};
  CHECK(rank_devices({1, 3}, 4, 0, 1, one) == std::vector<int>{1});  // MAX below the share cuts it
}

TEST_CASE("CPU lists as sysfs writes them", "[nic_affinity]") {
  CHECK(parse_cpu_list("0-3,8,10-11\n") == std::vector<int>{0, 1, 2, 3, 8, 10, 11});
  CHECK(parse_cpu_list("5") == std::vector<int>{5});
  CHECK(parse_cpu_list("").empty());
  CHECK(parse_cpu_list("\n").empty());
  CHECK(parse_cpu_list("3-1").empty());
  CHECK(parse_cpu_list("a-b").empty());
  CHECK(parse_cpu_list("0-3,x").empty());
}

TEST_CASE("sysfs readers: NUMA nodes of CPUs and devices, a bus id's device", "[nic_affinity]") {
  TempTree t;
  t.write("devices/system/node/node0/cpulist", "0-3\n");
  t.write("devices/system/node/node2/cpulist", "4-7\n");  // nodes may have gaps
  t.write("devices/system/node/online", "0,2\n");
  const std::string root = t.root.string();
  CHECK(numa_node_of_cpus({1, 2}, root) == 0);
  CHECK(numa_node_of_cpus({4, 7}, root) == 2);
  CHECK(numa_node_of_cpus({3, 4}, root) == -1);  // spans two
  CHECK(numa_node_of_cpus({}, root) == -1);
  CHECK(numa_node_of_cpus({0}, root + "/nothing") == -1);

  t.write("devices/pci0000:00/0000:00:01.0/0000:1b:00.0/numa_node", "2\n");
  t.write("devices/pci0000:00/0000:00:01.0/0000:1c:00.0/numa_node", "-1\n");
  fs::create_directories(t.root / "bus/pci/devices");
  fs::create_symlink("../../../devices/pci0000:00/0000:00:01.0/0000:1b:00.0", t.root / "bus/pci/devices/0000:1b:00.0");
  const std::string gpu = pci_bus_id_path("0000:1B:00.0", root);  // CUDA's upper case
  CHECK(gpu == root + "/devices/pci0000:00/0000:00:01.0/0000:1b:00.0");
  CHECK(read_numa_node(gpu) == 2);
  CHECK(read_numa_node(root + "/devices/pci0000:00/0000:00:01.0/0000:1c:00.0") == -1);
  CHECK(read_numa_node(root + "/devices/none") == -1);
  CHECK(read_numa_node("") == -1);
  CHECK(pci_bus_id_path("0000:99:00.0", root).empty());
  CHECK(pci_bus_id_path("", root).empty());
}

namespace {

// A net's devices: as many as the longest list, with those sysfs paths,
// rails and planes ("" and -1 past a list's end).
std::vector<NetProperties> nets(const std::vector<std::string>& paths, const std::vector<int>& rails = {},
                                const std::vector<int>& planes = {}) {
  std::vector<NetProperties> out(std::max({paths.size(), rails.size(), planes.size()}));
  for (size_t d = 0; d < out.size(); ++d) {
    if (d < paths.size()) out[d].pci_path = paths[d];
    if (d < rails.size()) out[d].rail = rails[d];
    if (d < planes.size()) out[d].plane = planes[d];
  }
  return out;
}

// `hosts[r]` is rank r's host; each rank a thread bound to CPU 0 with a
// bootstrap of its own, choosing among `paths`.  Empty where CPU 0 could not be had.
std::vector<NetDeviceChoice> choose_on_cpu0(const std::vector<int>& hosts, const std::vector<NetProperties>& devices,
                                            const std::vector<std::string>& gpus = {}) {
  const int n = int(hosts.size());
  ncclUniqueId id;
  REQUIRE(bootstrap_create_root(&id).is_ok());
  std::vector<NetDeviceChoice> chosen(static_cast<size_t>(n));
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r)
    ranks.emplace_back([&, r] {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(0, &one);
      if (sched_setaffinity(0, sizeof one, &one) != 0) return;  // this thread only
      TransportContext ctx;
      ctx.rank = r;
      ctx.nranks = n;
      if (size_t(r) < gpus.size()) ctx.gpu_pci_bus_id = gpus[size_t(r)];
      for (int p = 0; p < n; ++p) ctx.peers.push_back(PeerInfo{.host_hash = uint64_t(hosts[size_t(p)])});
      std::unique_ptr<Bootstrap> bs;
      if (!Bootstrap::connect(id, r, n, Deadline::after(std::chrono::seconds(30)), &bs).is_ok()) return;
      if (!choose_net_devices(ctx, bs.get(), devices, &chosen[size_t(r)]).is_ok()) chosen[size_t(r)].why = "failed";
    });
  for (auto& th : ranks) th.join();
  return chosen;
}

}  // namespace

TEST_CASE("Ranks on two hosts share the devices on their NUMA node", "[nic_affinity]") {
  // Every rank thread runs on CPU 0, so its node is CPU 0's; devices 1 and 3
  // are on that node, 0 and 2 on another.
  const int node = numa_node_of_cpus({0});
  if (node < 0) {
    WARN("not run: this machine's sysfs gives CPU 0 no NUMA node");
    return;
  }
  TempTree t;
  std::vector<std::string> paths;
  for (int d = 0; d < 4; ++d) {
    const std::string dev = fmt::format("devices/pci0000:00/0000:00:0{}.0", d);
    t.write(dev + "/numa_node", std::to_string(d % 2 ? node : node + 1));
    paths.push_back((t.root / dev).string());
  }
  unsetenv("NCCL_NETDEVS_POLICY");
  // Ranks 0-2 on one host, 3-4 on another: each host's ranks take 1, 3, 1...
  std::vector<NetDeviceChoice> c = choose_on_cpu0({11, 11, 11, 22, 22}, nets(paths));
  std::vector<std::vector<int>> got;
  for (const NetDeviceChoice& x : c) got.push_back(x.devices);
  CHECK(got == std::vector<std::vector<int>>{{1}, {3}, {1}, {1}, {3}});
  CHECK(c[0].most_devices == 1);
  CHECK(c[0].why == fmt::format("2 of 4 devices, on its NUMA node {}, shared by 3 ranks", node));
  CHECK(c[3].why == fmt::format("2 of 4 devices, on its NUMA node {}, shared by 2 ranks", node));

  // A rank alone on its host takes both; calls between hosts then run in 2 slices on every rank.
  c = choose_on_cpu0({11, 22, 22}, nets(paths));
  got.clear();
  for (const NetDeviceChoice& x : c) got.push_back(x.devices);
  CHECK(got == std::vector<std::vector<int>>{{1, 3}, {1}, {3}});
  for (const NetDeviceChoice& x : c) CHECK(x.most_devices == 2);
  CHECK(c[0].why == fmt::format("2 of 4 devices, on its NUMA node {}", node));

  // NCCL_NETDEVS_POLICY=MAX:3: the nearest, then the next device on.
  setenv("NCCL_NETDEVS_POLICY", "MAX:3", 1);
  c = choose_on_cpu0({11, 22}, nets(paths));
  unsetenv("NCCL_NETDEVS_POLICY");
  CHECK(c[0].devices == std::vector<int>{1, 3, 0});
  CHECK(c[1].most_devices == 3);

  // Rails: device 3 on rail 0, device 1 on rail 1: a rank alone takes them in rail order.
  c = choose_on_cpu0({11, 22, 22}, nets(paths, {-1, 1, -1, 0}));
  CHECK(c[0].devices == std::vector<int>{3, 1});
  CHECK(c[0].why == fmt::format("2 of 4 devices, on its NUMA node {}, in rail order", node));
}

TEST_CASE("Rails and planes order a rank's devices where every one has a rail, or every one a plane",
          "[nic_affinity]") {
  std::vector<int> devices{2, 0, 1};
  CHECK(order_by_rail(&devices, nets({}, {5, 3, 3})));  // devices 1 and 2 share rail 3: their order stays
  CHECK(devices == std::vector<int>{2, 1, 0});
  devices = {2, 0, 1};
  CHECK(order_by_rail(&devices, nets({}, {5, 3, 3}, {-1, 1, 0})));  // rail 3's two by plane
  CHECK(devices == std::vector<int>{2, 1, 0});
  devices = {0, 1};
  CHECK(order_by_rail(&devices, nets({}, {}, {1, 0})));  // NCCL's example: one rail, no rail given, two planes
  CHECK(devices == std::vector<int>{1, 0});
  devices = {0, 1};
  CHECK_FALSE(order_by_rail(&devices, nets({}, {1, -1})));  // one without a rail: as shared out
  CHECK(devices == std::vector<int>{0, 1});
  CHECK_FALSE(order_by_rail(&devices, nets({"", ""})));  // a net that gives neither
  CHECK(devices == std::vector<int>{0, 1});
  std::vector<int> none;
  CHECK_FALSE(order_by_rail(&none, nets({}, {0}, {0})));
}

namespace {

// An Azure-style file (ndv4-topo.xml's shape): in the VM every GPU and NIC
// sits on one flat PCI bus; the file puts each GPU beside one NIC under a
// switch, the pairs crossed over against bus id order (GPU 0001 with NIC 0103).
const char* kVmTopology = R"(<system version="1">
  <cpu numaid="0" affinity="0000ffff" arch="x86_64" vendor="AuthenticAMD" familyid="23" modelid="49">
    <pci busid="ffff:ff:01.0" class="0x060400" link_speed="16 GT/s" link_width="16">
      <pci busid="0001:00:00.0" class="0x030200" link_speed="16 GT/s" link_width="16"/>
      <pci busid="0103:00:00.0" class="0x020700" link_speed="16 GT/s" link_width="16"/>
    </pci>
    <pci busid="ffff:ff:02.0" class="0x060400" link_speed="16 GT/s" link_width="16">
      <pci busid="0002:00:00.0" class="0x030200" link_speed="16 GT/s" link_width="16"/>
      <pci busid="0104:00:00.0" class="0x020700" link_speed="16 GT/s" link_width="16"/>
    </pci>
  </cpu>
  <cpu numaid="1" affinity="ffff0000" arch="x86_64" vendor="AuthenticAMD" familyid="23" modelid="49">
    <pci busid="ffff:ff:03.0" class="0x060400" link_speed="16 GT/s" link_width="16">
      <pci busid="0003:00:00.0" class="0x030200" link_speed="16 GT/s" link_width="16"/>
      <pci busid="0101:00:00.0" class="0x020700" link_speed="16 GT/s" link_width="16"/>
    </pci>
    <pci busid="ffff:ff:04.0" class="0x060400" link_speed="16 GT/s" link_width="16">
      <pci busid="0004:00:00.0" class="0x030200" link_speed="16 GT/s" link_width="16"/>
      <pci busid="0102:00:00.0" class="0x020700" link_speed="16 GT/s" link_width="16"/>
    </pci>
  </cpu>
</system>
)";

}  // namespace

TEST_CASE("NCCL_TOPO_FILE's tree: each bus id's path under its CPU, and its NUMA node", "[nic_affinity]") {
  TopologyPlaces places;
  std::string error;
  REQUIRE(topology_file_places(kVmTopology, &places, &error));
  CHECK(places.size() == 12);
  CHECK(places.at("0001:00:00.0").path == "/ncclTopoFile/pci-numa0/ffff:ff:01.0/0001:00:00.0");
  CHECK(places.at("0101:00:00.0").numa_node == 1);
  CHECK(pci_hops(places.at("0001:00:00.0").path, places.at("0103:00:00.0").path) == 2);
  CHECK(pci_hops(places.at("0001:00:00.0").path, places.at("0104:00:00.0").path) == 4);
  CHECK_FALSE(topology_file_places("<system><cpu>", &places, &error));
  CHECK(error.find("not XML") != std::string::npos);
  CHECK_FALSE(topology_file_places("<topology/>", &places, &error));
  CHECK(error.find("no <system>") != std::string::npos);
  CHECK(bus_id_of_path("/sys/devices/pci0000:00/0000:00:01.0/0101:00:00.0") == "0101:00:00.0");
  CHECK(bus_id_of_path("/sys/devices/pci0000:00/0000:00:03.0/virtio0").empty());
  CHECK(is_pci_bus_id("0000:1b:00.0"));
  CHECK_FALSE(is_pci_bus_id("0000:1g:00.0"));
}

TEST_CASE("NCCL_TOPO_FILE places a VM's GPUs and NICs where its flat sysfs cannot", "[nic_affinity]") {
  // The VM's sysfs: four NICs side by side on one bus, NUMA unknown, as in Azure's and AWS's VMs.
  TempTree t;
  std::vector<std::string> paths;
  for (int d = 1; d <= 4; ++d) {
    const std::string dev = fmt::format("devices/pci0000:00/010{}:00:00.0", d);
    t.write(dev + "/numa_node", "-1");
    paths.push_back((t.root / dev).string());
  }
  const std::vector<std::string> gpus = {"0001:00:00.0", "0002:00:00.0", "0003:00:00.0", "0004:00:00.0"};
  unsetenv("NCCL_NETDEVS_POLICY");
  unsetenv("NCCL_TOPO_FILE");
  // Without the file every NIC is as near as every other: the ranks share them out in turn.
  std::vector<NetDeviceChoice> c = choose_on_cpu0({11, 11, 11, 11}, nets(paths), gpus);
  for (int r = 0; r < 4; ++r) CHECK(c[size_t(r)].devices == std::vector<int>{r});
  // With it, each GPU's NIC under its switch: GPU 1 with 0103, 2 with 0104, 3 with 0101, 4 with 0102.
  t.write("topo.xml", kVmTopology);
  std::optional<ScopedEnv> topo_file(std::in_place, "NCCL_TOPO_FILE", (t.root / "topo.xml").string());
  c = choose_on_cpu0({11, 11, 11, 11}, nets(paths), gpus);
  CHECK(c[0].devices == std::vector<int>{2});
  CHECK(c[1].devices == std::vector<int>{3});
  CHECK(c[2].devices == std::vector<int>{0});
  CHECK(c[3].devices == std::vector<int>{1});
  const std::string file = (t.root / "topo.xml").string();
  CHECK(c[0].why == fmt::format("1 of 4 devices, 2 PCI hops from its GPU, placed by {}", file));
  // A file that is not NCCL's XML is warned of and left out: sysfs decides again.
  t.write("bad.xml", "<system><cpu>");
  topo_file.emplace("NCCL_TOPO_FILE", (t.root / "bad.xml").string());
  c = choose_on_cpu0({11, 11, 11, 11}, nets(paths), gpus);
  CHECK(c[0].devices == std::vector<int>{0});
}

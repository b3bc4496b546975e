// NCCL_TOPO_DUMP_FILE's writer (src/transport/net/topo_xml.h,
// src/runtime/topo_dump.h) on a sysfs tree made here: two root complexes
// on two NUMA nodes, a GPU and a NIC behind one PCI switch, a second GPU
// on the other node, an InfiniBand device with an active and a down port,
// and network interfaces (a virtio one, loopback, a docker bridge, one
// down).  The text is checked line by line where it does not depend on
// this machine's CPU, and read back by braid's own reader of NCCL's XML
// (synth/nccl_topology.cc) into the node model `braid synth` uses.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "braid/topology.h"
#include "src/exec/nvml_links.h"
#include "src/runtime/topo_dump.h"
#include "src/transport/net/topo_xml.h"

using namespace braid;
namespace fs = std::filesystem;

namespace {

const std::string kSwitch = "devices/pci0000:00/0000:00:01.0/0000:01:00.0";
const std::string kGpu0 = kSwitch + "/0000:02:00.0/0000:03:00.0";
const std::string kNic = kSwitch + "/0000:02:01.0/0000:04:00.0";
const std::string kGpu1 = "devices/pci0000:80/0000:80:01.0/0000:81:00.0";

struct FakeSysfs {
  fs::path root;
  explicit FakeSysfs(bool with_infiniband = true) {
    char name[] = "/tmp/braid-topo-dump-XXXXXX";
    REQUIRE(mkdtemp(name));
    root = name;
    write("devices/system/node/node0/cpumap", "00000000,0000000f");
    write("devices/system/node/node1/cpumap", "00000000,000000f0");
    fs::create_directories(root / "bus/pci");
    fs::create_directories(root / "bus/virtio");
    pci("devices/pci0000:00/0000:00:01.0", "0x060400", "0x8086", "32.0 GT/s PCIe", 16, 0);
    pci(kSwitch, "0x060400", "0x1000", "32.0 GT/s PCIe", 16, 0);
    pci(kSwitch + "/0000:02:00.0", "0x060400", "0x1000", "32.0 GT/s PCIe", 16, 0);
    pci(kSwitch + "/0000:02:01.0", "0x060400", "0x1000", "32.0 GT/s PCIe", 16, 0);
    pci(kGpu0, "0x030200", "0x10de", "32.0 GT/s PCIe", 16, 0);
    pci(kNic, "0x020700", "0x15b3", "16.0 GT/s PCIe", 16, 0);
    pci("devices/pci0000:80/0000:80:01.0", "0x060400", "0x8086", "32.0 GT/s PCIe", 16, 1);
    pci(kGpu1, "0x030200", "0x10de", "8.0 GT/s PCIe", 8, 1);
    if (with_infiniband) {
      write("class/infiniband/mlx5_0/node_guid", "a088:c203:00e1:f200");
      write("class/infiniband/mlx5_0/ports/1/state", "4: ACTIVE");
      write("class/infiniband/mlx5_0/ports/1/rate", "400 Gb/sec (4X NDR)");
      write("class/infiniband/mlx5_0/ports/2/state", "1: DOWN");
      write("class/infiniband/mlx5_0/ports/2/rate", "400 Gb/sec (4X NDR)");
      fs::create_directory_symlink(root / kNic, root / "class/infiniband/mlx5_0/device");
    }
    const std::string virtio = "devices/pci0000:00/0000:00:03.0/virtio0";
    write(virtio + "/numa_node", "0");
    fs::create_directory_symlink(root / "bus/virtio", root / virtio / "subsystem");
    interface("eth0", "0x1003", "25000", virtio);
    interface("eth1", "0x1002", "25000", "");  // down
    interface("lo", "0x9", "", "");
    interface("docker0", "0x1003", "", "");
  }
  ~FakeSysfs() { fs::remove_all(root); }
  void write(const std::string& relative, const std::string& text) const {
    fs::create_directories((root / relative).parent_path());
    std::ofstream(root / relative) << text << "\n";
  }
  void pci(const std::string& path, const std::string& cls, const std::string& vendor, const std::string& speed,
           int width, int numa) const {
    write(path + "/class", cls);
    write(path + "/vendor", vendor);
    write(path + "/device", "0x1021");
    write(path + "/subsystem_vendor", vendor);
    write(path + "/subsystem_device", "0x0023");
    write(path + "/max_link_speed", speed);
    write(path + "/max_link_width", std::to_string(width));
    write(path + "/numa_node", std::to_string(numa));
    fs::create_directory_symlink(root / "bus/pci", root / path / "subsystem");
    fs::create_directories(root / "bus/pci/devices");
    fs::create_directory_symlink(root / path, root / "bus/pci/devices" / fs::path(path).filename());
  }
  void interface(const std::string& name, const std::string& flags, const std::string& speed,
                 const std::string& device) const {
    write("class/net/" + name + "/flags", flags);
    if (!speed.empty()) write("class/net/" + name + "/speed", speed);
    if (!device.empty()) fs::create_directory_symlink(root / device, root / "class/net" / name / "device");
  }
};

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}

}  // namespace

TEST_CASE("The host's network devices as NCCL's nets list them: active InfiniBand ports, else the interfaces",
          "[topology_dump]") {
  FakeSysfs ib;
  std::vector<TopoNet> nets = sysfs_topology_nets("", ib.root.string());
  REQUIRE(nets.size() == 1);  // port 2 is down; the interfaces are not listed beside InfiniBand
  CHECK(nets[0].name == "mlx5_0");
  CHECK(nets[0].port == 1);
  CHECK(nets[0].speed_mbps == 400000);
  CHECK(nets[0].guid == 0x00f2e10003c288a0ull);  // the node GUID's bytes as the verbs API holds them
  CHECK(nets[0].max_comms == 131072);
  CHECK(nets[0].device_path == fs::canonical(ib.root / kNic).string());

  FakeSysfs plain(false);
  nets = sysfs_topology_nets("", plain.root.string());
  REQUIRE(nets.size() == 1);  // eth1 is down, lo is loopback, docker0 a local bridge
  CHECK(nets[0].name == "eth0");
  CHECK(nets[0].speed_mbps == 25000);
  CHECK(sysfs_topology_nets("^eth0", plain.root.string()).empty());
  CHECK(sysfs_topology_nets("eth", plain.root.string()).size() == 1);
  CHECK(sysfs_topology_nets("=eth", plain.root.string()).empty());
}

TEST_CASE("A GPU's NVML index is its place among the host's NVIDIA GPUs in bus id order", "[topology_dump]") {
  FakeSysfs tree;
  CHECK(gpu_pci_index("0000:03:00.0", tree.root.string()) == 0);
  CHECK(gpu_pci_index("0000:81:00.0", tree.root.string()) == 1);
  CHECK(gpu_pci_index("0000:04:00.0", tree.root.string()) == -1);  // the NIC
  CHECK(gpu_pci_index("0000:81:00.0", "/nonexistent") == -1);
}

TEST_CASE("The topology is written as NCCL writes it, and braid's reader of NCCL's XML takes it", "[topology_dump]") {
  FakeSysfs tree;
  const std::string root = tree.root.string();
  const std::vector<TopoNvLink> to_switch = {{"fffffff:ffff:ff", 18, "0x068000"}};
  std::vector<TopoGpu> gpus = {{"0000:03:00.0", 0, 90, 0, to_switch}, {"0000:81:00.0", 1, 90, 2, to_switch}};
  const std::string xml = topology_xml(gpus, sysfs_topology_nets("", root), 0x1234, root);
  INFO(xml);
  CHECK(xml.rfind("<system version=\"1\">\n", 0) == 0);
  CHECK(xml.find("\n  <cpu host_hash=\"0x1234\" numaid=\"0\" affinity=\"00000000,0000000f\"") != std::string::npos);
  CHECK(xml.find("\n  <cpu host_hash=\"0x1234\" numaid=\"1\" affinity=\"00000000,000000f0\"") != std::string::npos);
  // On a root complex there is no upstream port: NCCL's width 0 and the device's own speed.
  CHECK(has_line(xml, "    <pci busid=\"0000:00:01.0\" class=\"0x060400\" vendor=\"0x8086\" device=\"0x1021\" "
                      "subsystem_vendor=\"0x8086\" subsystem_device=\"0x0023\" link_speed=\"32.0 GT/s PCIe\" "
                      "link_width=\"0\">"));
  // The slower of the device and its port: the NIC's own 16 GT/s, the second GPU's x8 at 8 GT/s.
  CHECK(has_line(xml, "          <pci busid=\"0000:04:00.0\" class=\"0x020700\" vendor=\"0x15b3\" device=\"0x1021\" "
                      "subsystem_vendor=\"0x15b3\" subsystem_device=\"0x0023\" link_speed=\"16.0 GT/s PCIe\" "
                      "link_width=\"16\">"));
  CHECK(has_line(xml, "      <pci busid=\"0000:81:00.0\" class=\"0x030200\" vendor=\"0x10de\" device=\"0x1021\" "
                      "subsystem_vendor=\"0x10de\" subsystem_device=\"0x0023\" link_speed=\"8.0 GT/s PCIe\" "
                      "link_width=\"8\">"));
  CHECK(has_line(xml, "            <gpu dev=\"0\" sm=\"90\" rank=\"0\" gdr=\"0\">"));
  CHECK(has_line(xml, "              <nvlink target=\"fffffff:ffff:ff\" count=\"18\" tclass=\"0x068000\"/>"));
  CHECK(has_line(xml, "        <gpu dev=\"1\" sm=\"90\" rank=\"2\" gdr=\"0\">"));
  CHECK(has_line(xml, "            <nic>"));
  CHECK(has_line(xml, "              <net name=\"mlx5_0\" dev=\"0\" speed=\"400000\" port=\"1\" latency=\"0.000000\" "
                      "guid=\"0xf2e10003c288a0\" maxconn=\"131072\" gdr=\"0\"/>"));
  CHECK(xml.find("0000:02:00.0") < xml.find("0000:02:01.0"));  // siblings by bus id
  CHECK(xml.substr(xml.size() - 10) == "</system>\n");

  NodeProfile node;
  std::vector<std::string> notes;
  std::string error;
  REQUIRE(nccl_topology_profile(xml, "dumped", &node, &notes, &error));
  CHECK(node.gpus_per_node == 2);
  CHECK(node.switched);
  CHECK(node.switch_kind == LinkKind::NVSwitch);
  CHECK(node.nics_per_node == 1);
  CHECK(node.remote_beta_us_per_mb == Approx(1000.0 / 50.0));  // 400 Gb/s is 50 GB/s

  // Without NVLinks (no NVML), the reader's PCIe model, at each GPU's PCIe link.
  for (TopoGpu& g : gpus) g.nvlinks.clear();
  REQUIRE(nccl_topology_profile(topology_xml(gpus, {}, 0x1234, root), "dumped", &node, &notes, &error));
  CHECK(node.switch_kind == LinkKind::Pcie);
}

TEST_CASE("A network device sysfs does not place on PCI hangs under the first CPU", "[topology_dump]") {
  FakeSysfs tree(false);
  const std::string root = tree.root.string();
  const std::string xml = topology_xml({}, sysfs_topology_nets("", root), 7, root);
  INFO(xml);
  CHECK(xml.find("<pci") == std::string::npos);  // eth0 is a virtio device
  CHECK(xml.find("\n  <cpu host_hash=\"0x7\" numaid=\"0\"") != std::string::npos);
  CHECK(has_line(xml, "    <nic>"));
  CHECK(has_line(xml, "      <net name=\"eth0\" dev=\"0\" speed=\"25000\" port=\"0\" latency=\"0.000000\" guid=\"0x0\" "
                      "maxconn=\"65536\" gdr=\"0\"/>"));
}

TEST_CASE("The dumping rank writes its own host's GPUs, one each, at the lowest rank on it", "[topology_dump]") {
  FakeSysfs tree;
  const std::vector<TopoDumpRank> ranks = {
      {1, "0000:03:00.0", 90}, {1, "0000:03:00.0", 90}, {2, "0000:03:00.0", 90}, {1, "0000:81:00.0", 80}};
  const std::string xml = host_topology_of(1, ranks, tree.root.string());
  INFO(xml);
  CHECK(has_line(xml, "            <gpu dev=\"0\" sm=\"90\" rank=\"0\" gdr=\"0\"/>"));  // ranks 0 and 1 share it
  CHECK(has_line(xml, "        <gpu dev=\"1\" sm=\"80\" rank=\"3\" gdr=\"0\"/>"));
  CHECK(xml.find("<gpu", xml.find("<gpu", xml.find("<gpu") + 1) + 1) == std::string::npos);  // two in all
  // Rank 2's host (2) has the first GPU only, at rank 2.
  const std::string other = host_topology_of(2, ranks, tree.root.string());
  CHECK(has_line(other, "            <gpu dev=\"0\" sm=\"90\" rank=\"2\" gdr=\"0\"/>"));
  CHECK(other.find("0000:81:00.0") == std::string::npos);
}

TEST_CASE("NVLink targets take their class from sysfs, the NVSwitch's where hidden, and NVML's absence is said",
          "[topology_dump]") {
  FakeSysfs tree;
  CHECK(nvlink_target_class("0000:03:00.0", tree.root.string()) == "0x030200");
  CHECK(nvlink_target_class("fffffff:ffff:ff", tree.root.string()) == "0x068000");
  std::vector<TopoNvLink> links = {{"x", 1, "y"}};
  std::string why;
  // No GPU has this bus id: without NVML (this machine) or with it (a GPU machine) no links, and why.
  CHECK_FALSE(nvml_nvlinks("0000:ff:1f.7", 90, &links, &why));
  CHECK(links.empty());
  CHECK_FALSE(why.empty());
}

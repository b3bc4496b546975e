#include "src/transport/net/topo_file.h"

#include <fmt/format.h>

#include <cctype>
#include <fstream>
#include <pugixml.hpp>
#include <sstream>
#include <unistd.h>

#include "src/base/env.h"
#include "src/base/log.h"

namespace braid {
namespace {

constexpr const char* kNvidiaDefault = "/var/run/nvidia-topologyd/virtualTopology.xml";

void place_subtree(const pugi::xml_node& node, const std::string& path, int numa, TopologyPlaces* out) {
  for (const pugi::xml_node& child : node.children("pci")) {
    const std::string bus = lower_bus_id(child.attribute("busid").as_string());
    if (bus.empty()) continue;
    const std::string here = path + "/" + bus;
    out->emplace(bus, FilePlace{here, numa});
    place_subtree(child, here, numa, out);
  }
}

}  // namespace

bool topology_file_places(const std::string& text, TopologyPlaces* out, std::string* error) {
  out->clear();
  pugi::xml_document doc;
  const pugi::xml_parse_result parsed = doc.load_string(text.c_str());
  if (!parsed) {
    *error = fmt::format("not XML: {} at offset {}", parsed.description(), parsed.offset);
    return false;
  }
  const pugi::xml_node system = doc.child("system");
  if (!system) {
    *error = "no <system> element: not NCCL's topology XML";
    return false;
  }
  int unnamed = 0;
  for (const pugi::xml_node& cpu : system.children("cpu")) {
    const pugi::xml_attribute id = cpu.attribute("numaid");
    const int numa = id ? id.as_int(-1) : -1;
    // A <cpu> without a numaid still roots its own tree.
    const std::string root = numa >= 0 ? fmt::format("/ncclTopoFile/pci-numa{}", numa)
                                       : fmt::format("/ncclTopoFile/pci-cpu{}", unnamed++);
    place_subtree(cpu, root, numa, out);
  }
  return true;
}

TopologyPlaces topology_file(std::string* file) {
  file->clear();
  std::string path = env_raw("NCCL_TOPO_FILE");
  if (path.empty() && ::access(kNvidiaDefault, R_OK) == 0) path = kNvidiaDefault;
  if (path.empty()) return {};
  std::ifstream in(path);
  std::stringstream text;
  if (!(in && text << in.rdbuf())) {
    BRAID_WARN("NCCL_TOPO_FILE={}: cannot read it; devices are placed by sysfs alone", path);
    return {};
  }
  TopologyPlaces places;
  std::string error;
  if (!topology_file_places(text.str(), &places, &error)) {
    BRAID_WARN("NCCL_TOPO_FILE={}: {}; devices are placed by sysfs alone", path, error);
    return {};
  }
  *file = path;
  return places;
}

std::string lower_bus_id(std::string bus_id) {
  for (char& c : bus_id) c = char(std::tolower(static_cast<unsigned char>(c)));
  return bus_id;
}

bool is_pci_bus_id(const std::string& name) {
  if (name.size() != 12 || name[4] != ':' || name[7] != ':' || name[10] != '.') return false;
  for (size_t i : {0, 1, 2, 3, 5, 6, 8, 9, 11})
    if (!std::isxdigit(static_cast<unsigned char>(name[i]))) return false;
  return true;
}

std::string bus_id_of_path(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const std::string last = lower_bus_id(slash == std::string::npos ? path : path.substr(slash + 1));
  return is_pci_bus_id(last) ? last : "";
}

}  // namespace braid

#include "src/transport/ibverbs/ib_select.h"

#include <arpa/inet.h>

#include <cstdlib>

namespace braid {

bool HcaFilter::passes(const std::string& device, int port) const {
  if (entries.empty()) return true;
  bool matched = false;
  for (const HcaEntry& e : entries) {
    const bool name_matches = exact ? device == e.name : device.compare(0, e.name.size(), e.name) == 0;
    if (name_matches && (e.port < 0 || e.port == port)) {
      matched = true;
      break;
    }
  }
  return matched != exclude;
}

Status parse_hca_filter(const std::string& spec_name, const std::string& spec, HcaFilter* out) {
  *out = HcaFilter{};
  std::string rest = spec;
  if (!rest.empty() && rest[0] == '^') {
    out->exclude = true;
    rest.erase(0, 1);
  }
  if (!rest.empty() && rest[0] == '=') {
    out->exact = true;
    rest.erase(0, 1);
  }
  if (rest.empty()) {
    if (spec.empty()) return Status::ok();
    return BRAID_ERROR(ncclInvalidArgument, "{}={}: no device named", spec_name, spec);
  }
  size_t begin = 0;
  while (begin <= rest.size()) {
    size_t end = rest.find(',', begin);
    if (end == std::string::npos) end = rest.size();
    std::string item = rest.substr(begin, end - begin);
    HcaEntry e;
    size_t colon = item.find(':');
    e.name = item.substr(0, colon);
    if (colon != std::string::npos) {
      std::string port = item.substr(colon + 1);
      char* stop = nullptr;
      long p = std::strtol(port.c_str(), &stop, 10);
      if (port.empty() || *stop || p <= 0 || p > 255)
        return BRAID_ERROR(ncclInvalidArgument, "{}={}: '{}' is not a port number (device:port)", spec_name, spec,
                           port);
      e.port = int(p);
    }
    if (e.name.empty())
      return BRAID_ERROR(ncclInvalidArgument, "{}={}: an entry without a device name", spec_name, spec);
    out->entries.push_back(std::move(e));
    begin = end + 1;
  }
  return Status::ok();
}

bool gid_is_empty(const uint8_t raw[16]) {
  for (int i = 0; i < 16; ++i)
    if (raw[i]) return false;
  return true;
}

bool gid_is_ipv4(const uint8_t raw[16]) {
  for (int i = 0; i < 10; ++i)
    if (raw[i]) return false;
  return raw[10] == 0xff && raw[11] == 0xff;
}

std::string gid_to_string(const uint8_t raw[16]) {
  char text[INET6_ADDRSTRLEN] = {};
  inet_ntop(AF_INET6, raw, text, sizeof(text));
  return text;
}

Status choose_gid(const std::vector<GidEntry>& table, int forced, const std::string& setting, GidEntry* out) {
  if (forced >= 0) {
    for (const GidEntry& e : table)
      if (e.index == forced) {
        *out = e;
        return Status::ok();
      }
    std::string have;
    for (const GidEntry& e : table) have += fmt::format("{}{}", have.empty() ? "" : ", ", e.index);
    return BRAID_ERROR(ncclSystemError, "{}={}: no such GID on this port (non-empty indices: {})", setting, forced,
                       have.empty() ? "none" : have);
  }
  const GidEntry* best = nullptr;
  auto rank = [](const GidEntry& e) { return e.type == GidType::RoceV2 ? (gid_is_ipv4(e.raw) ? 0 : 1) : 2; };
  for (const GidEntry& e : table)
    if (!best || rank(e) < rank(*best)) best = &e;
  if (!best) return BRAID_ERROR(ncclSystemError, "the port's GID table is empty (no IP address on its netdev?)");
  *out = *best;
  return Status::ok();
}

}  // namespace braid

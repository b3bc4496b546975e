#include "src/transport/ibverbs/ib_select.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>

namespace braid {

namespace {

const HcaEntry* first_match(const HcaFilter& f, const std::string& device, int port) {
  for (const HcaEntry& e : f.entries) {
    const bool name_matches = f.exact ? device == e.name : device.compare(0, e.name.size(), e.name) == 0;
    if (name_matches && (e.port < 0 || e.port == port)) return &e;
  }
  return nullptr;
}

// One ':' field of an entry: -1 where empty, else a number in [low, high].
bool parse_field(const std::string& text, long low, long high, int* out) {
  if (text.empty()) return *out = -1, true;
  char* stop = nullptr;
  const long v = std::strtol(text.c_str(), &stop, 10);
  if (*stop || v < low || v > high) return false;
  *out = int(v);
  return true;
}

}  // namespace

bool HcaFilter::passes(const std::string& device, int port) const {
  if (entries.empty()) return true;
  return (first_match(*this, device, port) != nullptr) != exclude;
}

const HcaEntry* HcaFilter::entry_for(const std::string& device, int port) const {
  return exclude ? nullptr : first_match(*this, device, port);
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
    // name[:port[:rail[:plane]]]
    std::vector<std::string> fields;
    for (size_t at = 0;;) {
      const size_t colon = item.find(':', at);
      fields.push_back(item.substr(at, colon == std::string::npos ? std::string::npos : colon - at));
      if (colon == std::string::npos) break;
      at = colon + 1;
    }
    HcaEntry e;
    e.name = fields[0];
    static constexpr struct {
      const char* what;
      long low, high;
      int HcaEntry::*field;
    } kFields[] = {{"a port number", 1, 255, &HcaEntry::port},
                   {"a rail", 0, 32767, &HcaEntry::rail},
                   {"a plane", 0, 32767, &HcaEntry::plane}};
    if (fields.size() > 4)
      return BRAID_ERROR(ncclInvalidArgument, "{}={}: '{}' has more than name:port:rail:plane", spec_name, spec, item);
    for (size_t i = 1; i < fields.size(); ++i)
      if (!parse_field(fields[i], kFields[i - 1].low, kFields[i - 1].high, &(e.*kFields[i - 1].field)))
        return BRAID_ERROR(ncclInvalidArgument, "{}={}: '{}' is not {} (name:port:rail:plane)", spec_name, spec,
                           fields[i], kFields[i - 1].what);
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

bool GidPreference::matches(const GidEntry& e) const {
  const uint8_t* raw = e.raw;
  const bool link_local = raw[0] == 0xfe && raw[1] == 0x80;
  if (gid_is_empty(raw) || link_local || gid_is_ipv4(raw) == ipv6) return false;
  // The prefix's leading bits, of the IPv4 address (its last 4 bytes) or of the whole GID.
  const int first = ipv6 ? 0 : 12;
  for (int bit = 0; bit < prefix_bits; ++bit) {
    const int byte = first + bit / 8, mask = 0x80 >> (bit % 8);
    if ((raw[byte] & mask) != (prefix[byte] & mask)) return false;
  }
  return true;
}

GidPreference parse_gid_preference(const std::string& family, const std::string& range, const std::string& version,
                                   std::string* ignored) {
  GidPreference p;
  ignored->clear();
  p.ipv6 = family == "AF_INET6";
  char* end = nullptr;
  const long v = std::strtol(version.c_str(), &end, 0);
  if (!version.empty() && *end == '\0') p.roce_version = int(v);
  const size_t slash = range.find('/');
  if (range.empty()) return p;
  if (slash == std::string::npos) {
    *ignored = fmt::format("NCCL_IB_ADDR_RANGE={} has no /mask", range);
    return p;
  }
  const std::string address = range.substr(0, slash), mask = range.substr(slash + 1);
  const long bits = std::strtol(mask.c_str(), &end, 10);
  const int max_bits = p.ipv6 ? 128 : 32;
  bool parsed = false;
  if (p.ipv6) {
    parsed = inet_pton(AF_INET6, address.c_str(), p.prefix) == 1;
  } else {
    p.prefix[10] = p.prefix[11] = 0xff;
    parsed = inet_pton(AF_INET, address.c_str(), p.prefix + 12) == 1;
  }
  if (!parsed || mask.empty() || *end != '\0' || bits < 0 || bits > max_bits) {
    *ignored = fmt::format("NCCL_IB_ADDR_RANGE={} is not a range of {}", range, p.ipv6 ? "AF_INET6" : "AF_INET");
    std::fill(std::begin(p.prefix), std::end(p.prefix), 0);
    return p;
  }
  p.prefix_bits = int(bits);
  return p;
}

Status choose_gid(const std::vector<GidEntry>& table, int forced, const std::string& setting,
                  const GidPreference& preference, GidEntry* out) {
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
  auto rank = [&](const GidEntry& e) {
    const int version = e.type == GidType::RoceV2 ? 2 : e.type == GidType::RoceV1 ? 1 : 0;
    if (preference.matches(e)) return version == preference.roce_version ? 0 : 1;
    return 2 + (e.type == GidType::RoceV2 ? (gid_is_ipv4(e.raw) ? 0 : 1) : 2);
  };
  for (const GidEntry& e : table)
    if (!best || rank(e) < rank(*best)) best = &e;
  if (!best) return BRAID_ERROR(ncclSystemError, "the port's GID table is empty (no IP address on its netdev?)");
  *out = *best;
  return Status::ok();
}

Status choose_gid_again(const std::vector<GidEntry>& table, int forced, const std::string& setting,
                        const GidPreference& preference, const GidEntry& before, GidEntry* out) {
  GidEntry now;
  BRAID_TRY(choose_gid(table, forced, setting, preference, &now));
  if (now.type != before.type || gid_is_ipv4(now.raw) != gid_is_ipv4(before.raw))
    return BRAID_ERROR(ncclSystemError, "the port has no GID like index {} {} now (best: index {} {})", before.index,
                       gid_to_string(before.raw), now.index, gid_to_string(now.raw));
  *out = now;
  return Status::ok();
}

Status check_pkey(int64_t index, int table_length, uint16_t value) {
  if (index < 0 || index >= table_length)
    return BRAID_ERROR(ncclInvalidArgument, "NCCL_IB_PKEY={}: not an index of the port's P_Key table (0 to {})", index,
                       table_length - 1);
  if ((value & 0x7fff) == 0)
    return BRAID_ERROR(ncclSystemError, "NCCL_IB_PKEY={}: that entry of the port's P_Key table is empty ({:#06x})",
                       index, value);
  return Status::ok();
}

bool pkeys_reach(uint16_t mine, uint16_t theirs, std::string* why) {
  if ((mine & 0x7fff) != (theirs & 0x7fff)) {
    *why = fmt::format("P_Key {:#06x} here and {:#06x} at the peer are different partitions (NCCL_IB_PKEY picks an "
                       "entry of each port's table)", mine, theirs);
    return false;
  }
  if (!(mine & 0x8000) && !(theirs & 0x8000)) {
    *why = fmt::format("P_Key {:#06x} here and {:#06x} at the peer are both limited members of the partition, which "
                       "cannot reach each other", mine, theirs);
    return false;
  }
  return true;
}

Status relaxed_ordering_setting(std::optional<int64_t> mode, bool have_reg_mr_iova2, bool* use) {
  const int64_t m = mode.value_or(2);
  *use = (m == 1 || m == 2) && have_reg_mr_iova2;
  if (m == 1 && !have_reg_mr_iova2)
    return BRAID_ERROR(ncclSystemError, "NCCL_IB_PCI_RELAXED_ORDERING=1, but this libibverbs has no "
                       "ibv_reg_mr_iova2 (IBVERBS_1.8, rdma-core 29 or later), which relaxed ordering needs");
  return Status::ok();
}

}  // namespace braid

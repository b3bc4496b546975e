// Which InfiniBand/RoCE ports and which GID braid's verbs network uses:
// the parts of the choice that need no device, so they are tested without
// one (tests/unit/test_ib_select.cc).
//
// NCCL_IB_HCA's syntax (BRAID_IB_HCA mirrors it):
//
//   "mlx5_0:1,mlx5_1"   devices whose names start with mlx5_0 (port 1 only)
//                       or with mlx5_1 (any port)
//   "=mlx5_0"           exact names instead of prefixes
//   "^mlx5_2"           every device but these ("^=" for exact names)
//
// An empty spec passes every device and port.
//
// The GID (RoCE ports are reached only through one: an IP address in the
// port's GID table): BRAID_IB_GID_INDEX (else NCCL_IB_GID_INDEX) when set,
// else chosen as NCCL does: the first RoCE v2 GID that holds an IPv4
// address (routable, unlike RoCE v1 or a link-local IPv6 address), else the
// first RoCE v2 one, else the first non-empty one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/base/status.h"

namespace braid {

struct HcaEntry {
  std::string name;
  int port = -1;  // -1: any port
};

struct HcaFilter {
  std::vector<HcaEntry> entries;
  bool exclude = false;  // "^"
  bool exact = false;    // "="
  bool passes(const std::string& device, int port) const;
};

// A malformed spec (an empty name, a port that is not a positive number) is
// ncclInvalidArgument naming `spec_name`.
Status parse_hca_filter(const std::string& spec_name, const std::string& spec, HcaFilter* out);

enum class GidType { IB, RoceV1, RoceV2 };
struct GidEntry {
  int index = 0;
  GidType type = GidType::IB;
  uint8_t raw[16] = {};
};
bool gid_is_empty(const uint8_t raw[16]);
bool gid_is_ipv4(const uint8_t raw[16]);  // ::ffff:a.b.c.d
std::string gid_to_string(const uint8_t raw[16]);

// The GID to use among a port's non-empty entries; `forced` >= 0 is the
// configured index (`setting` names it in the error).  ncclSystemError when
// forced names no entry, or when the table is empty.
Status choose_gid(const std::vector<GidEntry>& table, int forced, const std::string& setting, GidEntry* out);

}  // namespace braid

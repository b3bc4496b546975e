// Which InfiniBand/RoCE ports and which GID braid's verbs network uses:
// the parts of the choice that need no device, so they are tested without
// one (tests/unit/test_ib_select.cc).
//
// NCCL_IB_HCA's syntax (BRAID_IB_HCA mirrors it):
//
//   "mlx5_0:1,mlx5_1"   devices whose names start with mlx5_0 (port 1 only)
//                       or with mlx5_1 (any port)
//   "mlx5_0:1:0:1"      NCCL 2.30's name:port:rail:plane: the port's rail
//                       and network plane (any of the three empty or
//                       absent: none, any port)
//   "=mlx5_0"           exact names instead of prefixes
//   "^mlx5_2"           every device but these ("^=" for exact names)
//
// An empty spec passes every device and port.  A port's rail keeps its
// connections to the same rail on the peer (net_transport.h).
//
// The GID (RoCE ports are reached only through one: an IP address in the
// port's GID table): BRAID_IB_GID_INDEX (else NCCL_IB_GID_INDEX) when set,
// else chosen as NCCL does, by its three preferences (GidPreference):
// the first GID of the address family (NCCL_IB_ADDR_FAMILY, AF_INET by
// default), within NCCL_IB_ADDR_RANGE where set, not link-local, of the
// RoCE version NCCL_IB_ROCE_VERSION_NUM (2 by default); else the first of
// that family and range of another version; else the first RoCE v2 GID
// that holds an IPv4 address, else the first RoCE v2 one, else the first.
//
// The P_Key (check_pkey, pkeys_reach): NCCL_IB_PKEY's entry of the table.
//
// Relaxed ordering (relaxed_ordering_setting): NCCL_IB_PCI_RELAXED_ORDERING.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "src/base/status.h"

namespace braid {

struct HcaEntry {
  std::string name;
  int port = -1;   // -1: any port
  int rail = -1;   // -1: none given
  int plane = -1;  // -1: none given
};

struct HcaFilter {
  std::vector<HcaEntry> entries;
  bool exclude = false;  // "^"
  bool exact = false;    // "="
  bool passes(const std::string& device, int port) const;
  // The entry that lists the port (null for none, and for "^" specs, whose
  // entries are the ports not used).
  const HcaEntry* entry_for(const std::string& device, int port) const;
};

// A malformed spec (an empty name; a port that is not a number 1..255, a
// rail or plane not 0..32767) is ncclInvalidArgument naming `spec_name`.
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

struct GidPreference {
  int roce_version = 2;      // NCCL_IB_ROCE_VERSION_NUM
  bool ipv6 = false;         // NCCL_IB_ADDR_FAMILY=AF_INET6
  uint8_t prefix[16] = {};   // NCCL_IB_ADDR_RANGE's address (IPv4 as ::ffff:a.b.c.d)
  int prefix_bits = 0;       // of the address itself (IPv4: up to 32); 0: any
  bool matches(const GidEntry& e) const;  // family, range, not empty nor link-local
};
// NCCL's values of the three variables ("" where unset).  As NCCL: a
// family other than AF_INET6 is AF_INET; a range that does not parse for
// the family, or whose mask is too long, is ignored (*ignored says why);
// a version that is not a number is 2.
GidPreference parse_gid_preference(const std::string& family, const std::string& range, const std::string& version,
                                   std::string* ignored);

// The GID to use among a port's non-empty entries; `forced` >= 0 is the
// configured index (`setting` names it in the error).  ncclSystemError when
// forced names no entry, or when the table is empty.
Status choose_gid(const std::vector<GidEntry>& table, int forced, const std::string& setting,
                  const GidPreference& preference, GidEntry* out);

// The GID for queue pairs made anew (port recovery) on a port whose GID
// table may have changed since: after a flap the kernel can add a RoCE
// address back at another index, or the address itself changed (NCCL
// issues #1333, #1819, #2157).  choose_gid's choice on the table as it is
// now, kept only if it is like `before` (the same type, and an IPv4 address
// where that was one): a table that lost its address for now would
// otherwise put the path on a link-local GID the peer cannot reach.
// ncclSystemError where it is not: the caller tries again later.
Status choose_gid_again(const std::vector<GidEntry>& table, int forced, const std::string& setting,
                        const GidPreference& preference, const GidEntry& before, GidEntry* out);

// The partition key (P_Key) every queue pair carries: the entry of the
// port's P_Key table at NCCL_IB_PKEY (NCCL's default 0; NCCL reads it as an
// index).  A P_Key's low 15 bits are the partition (0: an empty entry), its
// top bit full membership.  ncclInvalidArgument for an index outside the
// table (of `table_length` entries), ncclSystemError for an empty entry;
// `value` is the entry's (host order), read only for a valid index.
Status check_pkey(int64_t index, int table_length, uint16_t value);
// Whether ports with these P_Keys reach each other (InfiniBand's rule): the
// same partition, and at least one of the two a full member.  *why says why
// not.
bool pkeys_reach(uint16_t mine, uint16_t theirs, std::string* why);

// Whether data buffers are registered with IBV_ACCESS_RELAXED_ORDERING, which
// lets the NIC's PCIe writes into them pass each other (which, NCCL
// documents, can greatly help in virtual machines).
// Safe for braid's data: a receiver reads a buffer only after the
// completion of the write that filled it, and the completion queue entry is
// written in strict order, after every earlier write.  `mode` is
// NCCL_IB_PCI_RELAXED_ORDERING (nullopt: unset, NCCL's default 2):
//   2  where libibverbs can (`have_reg_mr_iova2`: IBVERBS_1.8, the entry
//      point for optional access flags; a kernel that does not know the flag
//      drops it, as it is optional);
//   1  the same, and ncclSystemError where libibverbs cannot (NCCL documents
//      1 as failing then; its code quietly goes without);
//   anything else: not used, as in NCCL.
Status relaxed_ordering_setting(std::optional<int64_t> mode, bool have_reg_mr_iova2, bool* use);

}  // namespace braid

// Reading a caller's versioned structs: ncclConfig_t of any release since
// 2.14 (when it appeared) and ncclCollConfig_t since 2.31.
//
// A struct names the header it was built with twice: `size` (its sizeof)
// and `version` (that header's NCCL_VERSION_CODE).  Members are only ever
// appended, so the library reads the first `size` bytes and leaves every
// member the caller's header did not have at its default.  The two must
// also agree: a 2.31 header's ncclConfig_t is 112 bytes, so a struct that
// says 2.31 and is 80 bytes long did not come from NCCL_CONFIG_INITIALIZER
// (or was copied into a smaller struct), and reading it would run past the
// caller's memory.  Members a release added inside its struct's tail
// padding (graphStreamOrdering: first in 2.30.7's header) are read only
// from structs of that release on: an earlier 2.30 struct holds padding
// there.
//
// A struct from a newer header than this library's is read up to this
// library's size: its extra members are ones braid does not know.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "src/base/env.h"
#include "src/base/log.h"
#include "src/base/nccl_version.h"
#include "src/shim/api.h"

namespace braid {
namespace {

// The release whose header first had each member after `version`.
struct Member {
  size_t offset, bytes;
  unsigned since;
};
#define BRAID_MEMBER(name, since) Member{offsetof(ncclConfig_t, name), sizeof(ncclConfig_t::name), since}
constexpr Member kConfigMembers[] = {
    BRAID_MEMBER(blocking, NCCL_VERSION(2, 14, 0)),
    BRAID_MEMBER(cgaClusterSize, NCCL_VERSION(2, 17, 0)),
    BRAID_MEMBER(minCTAs, NCCL_VERSION(2, 17, 0)),
    BRAID_MEMBER(maxCTAs, NCCL_VERSION(2, 17, 0)),
    BRAID_MEMBER(netName, NCCL_VERSION(2, 17, 0)),
    BRAID_MEMBER(splitShare, NCCL_VERSION(2, 14, 0)),  // by size alone, as NCCL reads it
    BRAID_MEMBER(trafficClass, NCCL_VERSION(2, 25, 0)),
    BRAID_MEMBER(commName, NCCL_VERSION(2, 14, 0)),    // by size alone, as NCCL reads it
    BRAID_MEMBER(collnetEnable, NCCL_VERSION(2, 27, 0)),
    BRAID_MEMBER(CTAPolicy, NCCL_VERSION(2, 27, 0)),
    BRAID_MEMBER(shrinkShare, NCCL_VERSION(2, 27, 0)),
    BRAID_MEMBER(nvlsCTAs, NCCL_VERSION(2, 27, 0)),
    BRAID_MEMBER(nChannelsPerNetPeer, NCCL_VERSION(2, 28, 0)),
    BRAID_MEMBER(nvlinkCentricSched, NCCL_VERSION(2, 28, 0)),
    BRAID_MEMBER(graphUsageMode, NCCL_VERSION(2, 29, 0)),
    BRAID_MEMBER(numRmaCtx, NCCL_VERSION(2, 29, 0)),
    BRAID_MEMBER(maxP2pPeers, NCCL_VERSION(2, 30, 0)),
    BRAID_MEMBER(graphStreamOrdering, NCCL_VERSION(2, 30, 7)),
    BRAID_MEMBER(launchOrderImplicit, NCCL_VERSION(2, 31, 0)),
    BRAID_MEMBER(numRmaSig, NCCL_VERSION(2, 31, 0)),
    BRAID_MEMBER(rmaEagerInit, NCCL_VERSION(2, 31, 0)),
    BRAID_MEMBER(hostCftMode, NCCL_VERSION(2, 31, 0)),
    BRAID_MEMBER(nvlsHostMode, NCCL_VERSION(2, 32, 0)),
};
#undef BRAID_MEMBER

// sizeof(ncclConfig_t) in each release's header from 2.28 on (the releases
// this library was checked against; earlier ones are read by `version` alone).
struct ReleaseSize {
  unsigned since;
  size_t bytes;
};
constexpr ReleaseSize kConfigSizes[] = {
    {NCCL_VERSION(2, 28, 0), 80}, {NCCL_VERSION(2, 29, 0), 88}, {NCCL_VERSION(2, 30, 0), 96},
    {NCCL_VERSION(2, 31, 0), 112}, {NCCL_VERSION(2, 32, 0), 120},
};
static_assert(sizeof(ncclConfig_t) == 120, "ncclConfig_t of 2.32");
static_assert(offsetof(ncclConfig_t, nvlinkCentricSched) + sizeof(int) == 80, "2.28's ncclConfig_t ends here");
static_assert(offsetof(ncclConfig_t, hostCftMode) + sizeof(int) == 112, "2.31's ncclConfig_t ends here");
static_assert(sizeof(ncclCollConfig_t) == 72 && offsetof(ncclCollConfig_t, launchCompletionEvent) == 64,
              "ncclCollConfig_t of 2.32; 2.31's is the first 64 bytes");

size_t release_size(unsigned version) {
  size_t bytes = 0;
  for (const ReleaseSize& r : kConfigSizes)
    if (version >= r.since) bytes = r.bytes;
  return bytes;
}

bool is_unset_or(int value, std::initializer_list<int> allowed) {
  if (value == NCCL_CONFIG_UNDEF_INT) return true;
  for (int a : allowed)
    if (value == a) return true;
  return false;
}

Status check_values(const ncclConfig_t& c) {
  if (!is_unset_or(c.blocking, {0, 1}))
    return BRAID_ERROR(ncclInvalidArgument, "config blocking = {} (expected 0 or 1)", c.blocking);
  // NCCL's bounds (parseCommConfig), with NCCL's MAXCHANNELS (64).
  if (c.cgaClusterSize != NCCL_CONFIG_UNDEF_INT && c.cgaClusterSize < 0)
    return BRAID_ERROR(ncclInvalidArgument, "config cgaClusterSize = {} (expected 0 or more)", c.cgaClusterSize);
  const bool min_set = c.minCTAs != NCCL_CONFIG_UNDEF_INT, max_set = c.maxCTAs != NCCL_CONFIG_UNDEF_INT;
  auto shown = [](bool set, int value) { return set ? fmt::format("{}", value) : std::string("unset"); };
  if ((min_set && c.minCTAs <= 0) || (max_set && c.maxCTAs <= 0) || (min_set && max_set && c.minCTAs > c.maxCTAs))
    return BRAID_ERROR(ncclInvalidArgument, "config minCTAs/maxCTAs = {}/{} (expected 1 or more each, min <= max)",
                       shown(min_set, c.minCTAs), shown(max_set, c.maxCTAs));
  for (const auto& [value, name] : {std::pair{c.splitShare, "splitShare"}, {c.collnetEnable, "collnetEnable"},
                                    {c.shrinkShare, "shrinkShare"}, {c.nvlinkCentricSched, "nvlinkCentricSched"},
                                    {c.graphStreamOrdering, "graphStreamOrdering"},
                                    {c.launchOrderImplicit, "launchOrderImplicit"}})
    if (!is_unset_or(value, {0, 1}))
      return BRAID_ERROR(ncclInvalidArgument, "config {} = {} (expected 0 or 1)", name, value);
  if (c.CTAPolicy != NCCL_CONFIG_UNDEF_INT &&
      (c.CTAPolicy < 0 || c.CTAPolicy > (NCCL_CTA_POLICY_EFFICIENCY | NCCL_CTA_POLICY_ZERO)))
    return BRAID_ERROR(ncclInvalidArgument, "config CTAPolicy = {} (expected NCCL_CTA_POLICY_* flags)", c.CTAPolicy);
  for (const auto& [value, name] : {std::pair{c.nvlsCTAs, "nvlsCTAs"}, {c.maxP2pPeers, "maxP2pPeers"}})
    if (value != NCCL_CONFIG_UNDEF_INT && value <= 0)
      return BRAID_ERROR(ncclInvalidArgument, "config {} = {} (expected 1 or more)", name, value);
  if (c.nChannelsPerNetPeer != NCCL_CONFIG_UNDEF_INT && (c.nChannelsPerNetPeer <= 0 || c.nChannelsPerNetPeer > 64))
    return BRAID_ERROR(ncclInvalidArgument, "config nChannelsPerNetPeer = {} (expected 1..64)", c.nChannelsPerNetPeer);
  const int nvls_bits = ncclNvlsHostModeDisableTransport | ncclNvlsHostModeDisableSymmetricMultimem;
  if (c.nvlsHostMode != NCCL_CONFIG_UNDEF_INT && c.nvlsHostMode != ncclNvlsHostModeDisable &&
      (c.nvlsHostMode < 0 || c.nvlsHostMode > nvls_bits))
    return BRAID_ERROR(ncclInvalidArgument, "config nvlsHostMode = {} (expected an ncclNvlsHostMode_t)",
                       c.nvlsHostMode);
  // 0: no one-sided RMA on this communicator (its calls say so), as NCCL's.
  if (c.numRmaCtx != NCCL_CONFIG_UNDEF_INT && c.numRmaCtx < 0)
    return BRAID_ERROR(ncclInvalidArgument, "config numRmaCtx = {} (expected 0 or more)", c.numRmaCtx);
  if (c.numRmaSig != NCCL_CONFIG_UNDEF_INT && c.numRmaSig < 1)
    return BRAID_ERROR(ncclInvalidArgument, "config numRmaSig = {} (expected at least 1)", c.numRmaSig);
  if (!is_unset_or(c.rmaEagerInit, {0, 1}))
    return BRAID_ERROR(ncclInvalidArgument, "config rmaEagerInit = {} (expected 0 or 1)", c.rmaEagerInit);
  if (!is_unset_or(c.graphUsageMode, {0, 1, 2}))
    return BRAID_ERROR(ncclInvalidArgument, "config graphUsageMode = {} (expected 0, 1 or 2)", c.graphUsageMode);
  // NCCL checks nothing here; a value that cannot be a traffic class would
  // be cut to 8 bits in the queue pairs.
  if (c.trafficClass != NCCL_CONFIG_UNDEF_INT && (c.trafficClass < 0 || c.trafficClass > 255))
    return BRAID_ERROR(ncclInvalidArgument, "config trafficClass = {} (expected 0..255)", c.trafficClass);
  if (!is_unset_or(c.hostCftMode, {ncclHostCftEnable, ncclHostCftDisable, ncclHostCftFallback}))
    return BRAID_ERROR(ncclInvalidArgument, "config hostCftMode = {} (expected an ncclHostCftMode_t)", c.hostCftMode);
  return Status::ok();
}

}  // namespace

void apply_nccl_env_to_config(ncclConfig_t* config) {
  if (const auto blocking = env_nccl_int("NCCL_COMM_BLOCKING"); blocking && (*blocking == 0 || *blocking == 1)) {
    if (config->blocking != NCCL_CONFIG_UNDEF_INT && config->blocking != int(*blocking))
      BRAID_INFO(kInit | kEnv, "config blocking reset to NCCL_COMM_BLOCKING={}", *blocking);
    config->blocking = int(*blocking);
  }
  // NCCL_MAX_CTAS over the config's maxCTAs (positive only, as NCCL).
  if (const auto ctas = env_nccl_int("NCCL_MAX_CTAS")) {
    const int ctas_or_max = int(std::min<int64_t>(*ctas, INT32_MAX));
    if (ctas_or_max <= 0) {
      BRAID_INFO(kInit | kEnv, "NCCL_MAX_CTAS {} is too low, leaving it set at {}", *ctas, config->maxCTAs);
    } else {
      if (config->maxCTAs != NCCL_CONFIG_UNDEF_INT && config->maxCTAs != ctas_or_max)
        BRAID_INFO(kInit | kEnv, "config maxCTAs reset to NCCL_MAX_CTAS={}", ctas_or_max);
      config->maxCTAs = ctas_or_max;
    }
  }
  if (const auto contexts = env_nccl_int("NCCL_NUM_RMA_CTX")) {
    if (*contexts >= 0 && *contexts <= INT32_MAX) config->numRmaCtx = int(*contexts);
    else BRAID_INFO(kInit | kEnv, "NCCL_NUM_RMA_CTX={} is not served (expected 0 or more), leaving {}", *contexts,
                    config->numRmaCtx);
  }
}

Status read_config(const ncclConfig_t* user, ncclConfig_t* out) {
  *out = ncclConfig_t NCCL_CONFIG_INITIALIZER;
  if (!user) return Status::ok();
  // The header's three members first: every release has them.
  const auto [size, magic, version] = versioned_header(user);
  if (magic != NCCL_API_MAGIC)
    return BRAID_ERROR(ncclInvalidArgument, "config was not initialised with NCCL_CONFIG_INITIALIZER (bad magic {:#x})",
                       magic);
  if (version < NCCL_VERSION(2, 14, 0))
    return BRAID_ERROR(ncclInvalidArgument, "config version {} is not the code of an NCCL release with ncclConfig_t "
                       "(2.14.0 = {} or later)", version, NCCL_VERSION(2, 14, 0));
  const size_t prefix = offsetof(ncclConfig_t, blocking) + sizeof(int);
  const size_t expected = release_size(version);
  if (size < prefix || size < expected)
    return BRAID_ERROR(ncclInvalidArgument, "config size {} is too small for version {} (NCCL {}'s ncclConfig_t is "
                       "{} bytes)", size, version, nccl_version_name(version), std::max(prefix, expected));
  for (const Member& m : kConfigMembers)
    if (version >= m.since && m.offset + m.bytes <= size)
      std::memcpy(reinterpret_cast<char*>(out) + m.offset, reinterpret_cast<const char*>(user) + m.offset, m.bytes);
  // What the struct now is: this library's, whatever the caller's was.
  return check_values(*out);
}

Status check_config(const ncclConfig_t* config) {
  ncclConfig_t read;
  return read_config(config, &read);
}

Status read_coll_config(const ncclCollConfig_t* user, ncclCollConfig_t* out) {
  *out = ncclCollConfig_t NCCL_COLLCONFIG_INITIALIZER;
  if (!user) return Status::ok();
  const auto [size, magic, version] = versioned_header(user);
  if (magic != NCCL_API_MAGIC)
    return BRAID_ERROR(ncclInvalidArgument,
                       "collective config was not initialised with NCCL_COLLCONFIG_INITIALIZER (bad magic {:#x})", magic);
  constexpr size_t kFirst = offsetof(ncclCollConfig_t, launchCompletionEvent);  // 2.31's struct
  if (version < NCCL_VERSION(2, 31, 0) || size < kFirst || (version >= NCCL_VERSION(2, 32, 0) && size < sizeof(*out)))
    return BRAID_ERROR(ncclInvalidArgument, "collective config of size {} and version {} is not an ncclCollConfig_t "
                       "(2.31's is {} bytes, 2.32's {})", size, version, kFirst, sizeof(*out));
  std::memcpy(out, user, std::min(size, sizeof(*out)));
  out->size = sizeof(*out);
  out->version = NCCL_VERSION_CODE;
  if (out->forceAlgSelection != 0 && out->forceAlgSelection != 1)
    return BRAID_ERROR(ncclInvalidArgument, "collective config forceAlgSelection = {} (expected 0 or 1)",
                       out->forceAlgSelection);
  constexpr int kPolicies = NCCL_CTA_POLICY_EFFICIENCY | NCCL_CTA_POLICY_ZERO;
  if (out->CTAPolicy != NCCL_CONFIG_UNDEF_INT && (out->CTAPolicy < 0 || (out->CTAPolicy & ~kPolicies)))
    return BRAID_ERROR(ncclInvalidArgument, "collective config CTAPolicy = {} (expected NCCL_CTA_POLICY_* bits)",
                       out->CTAPolicy);
  return Status::ok();
}

}  // namespace braid

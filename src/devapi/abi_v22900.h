// NCCL 2.29's device API, as far as braid serves it: its requirements and
// devComms for LSA, as NCCL's own compatibility layer serves 2.29 clients
// (src/devcomm/devcomm_v22902.cc and devcomm_v22907.cc of NCCL 2.30.7), which
// serves them no GIN either.
//
// 2.29 put the versioned header in front of the requirements (size, then
// NCCL_API_MAGIC and the client's NCCL_VERSION_CODE), and each release
// appended fields, so a 2.29 struct is a prefix of 2.30's
// (abi_v23000.h): 72 bytes in 2.29.2-2.29.3 (ending at ginCounterCount),
// 88 from 2.29.5 (ginConnectionType, ginExclusiveContexts and ginQueueDepth
// end at 84; the struct is padded to 8, so 2.30's ginTrafficClass at 84
// is padding there).
// The devComm was not versioned: in 2.29.2-2.29.3 it is 2.28.9's 200 bytes;
// from 2.29.5 it is 224, 2.28.9's and four members.  Sizes measured by
// compiling a probe against NCCL's v2.29.2-1 and v2.29.7-1 headers (github
// NVIDIA/nccl); nothing of them is committed.  NCCL serves 2.29.2-2.29.3
// (its v22902) and 2.29.5-2.29.7 (v22907); so does braid, and no other 2.29.
#pragma once

#include <cstddef>
#include <cstdint>

#include "src/devapi/abi_v22809.h"
#include "src/devapi/abi_v23000.h"

namespace braid::devapi::v22900 {

constexpr uint32_t kNarrowFirst = 22902, kNarrowLast = 22903;  // 2.29.2-2.29.3: 72 bytes, 200
constexpr uint32_t kWideFirst = 22905, kWideLast = 22907;      // 2.29.5-2.29.7: 88 bytes, 224
constexpr size_t kRequirementsBytes = offsetof(v23000::DevCommRequirements, ginConnectionType);         // 72
constexpr size_t kWideRequirementsBytes = offsetof(v23000::DevCommRequirements, worldGinBarrierCount);  // 88

struct DevCommWide {       // ncclDevComm of 2.29.5 to 2.29.7
  v22809::DevComm v22809;  // ginContextCount (byte 136) renamed ginConnectionCount
  uint32_t ginContextCount;
  uint32_t ginContextBase;
  bool ginIsRailed;
  uint32_t* abortFlag;
};

static_assert(kRequirementsBytes == 72 && kWideRequirementsBytes == 88);
static_assert(sizeof(DevCommWide) == 224 && offsetof(DevCommWide, ginContextCount) == 200 &&
              offsetof(DevCommWide, ginIsRailed) == 208 && offsetof(DevCommWide, abortFlag) == 216);

}  // namespace braid::devapi::v22900

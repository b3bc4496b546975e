// The Status of one of NCCL's public calls made by braid's libraries on the
// public API (MoE, AlltoAllv): ok, or the code and ncclGetLastError's
// message after `what`.
#pragma once

#include <string>

#include "nccl.h"
#include "src/base/status.h"

namespace braid::moe {

inline Status nccl_status(ncclComm_t comm, ncclResult_t r, const std::string& what) {
  if (r == ncclSuccess) return Status::ok();
  return BRAID_ERROR(r, "{} failed: {}", what, ncclGetLastError(comm));
}

}  // namespace braid::moe

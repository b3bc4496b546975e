#include "src/exec/cuda/kernel_errors.h"

#include "src/base/log.h"
#include "src/exec/cuda/device_plan.h"

namespace braid::cuda {

void warn_kernel_error(int code, const volatile int* f, uint64_t comm_hash, int rank, uint64_t timeout_s) {
  switch (code) {
    case kDevTimeout: {
      static const char* const kinds[] = {"?", "its lane's dependency", "data from the peer",
                                          "a free slot at the peer"};
      const int kind = f[kFlagWaitKind];
      if (kind == kWaitLL) {
        BRAID_WARN(
            "comm {:#x} rank {}: an LL kernel waited {} s without progress (BRAID_TIMEOUT): a peer is late "
            "or gone; first wait to give up: the line of word {} from rank {} (flag {}, wanted {})",
            comm_hash, rank, timeout_s, f[kFlagWaitTile], f[kFlagWaitOp], unsigned(f[kFlagWaitSeen]),
            unsigned(f[kFlagWaitWant]));
        break;
      }
      BRAID_WARN(
          "comm {:#x} rank {}: a kernel waited {} s without progress (BRAID_TIMEOUT): a peer is late or gone, "
          "or its launch is held behind this one; first wait to give up: block ({}, {}) "
          "op {} tile {} (p2p: byte offset), waiting for {} (counter {}, wanted {})",
          comm_hash, rank, timeout_s, f[kFlagWaitBlockX], f[kFlagWaitBlockY], f[kFlagWaitOp], f[kFlagWaitTile],
          kinds[kind >= 0 && kind <= 3 ? kind : 0], unsigned(f[kFlagWaitSeen]), unsigned(f[kFlagWaitWant]));
      break;
    }
    case kDevAborted:
      BRAID_WARN("comm {:#x} rank {}: a kernel stopped because the communicator was aborted", comm_hash, rank);
      break;
    case kDevMismatch:
      BRAID_WARN(
          "comm {:#x} rank {}: a kernel received a message whose size does not match the call on this rank "
          "(ranks called with different counts or peers)",
          comm_hash, rank);
      break;
    case kDevBadPlan:
      BRAID_WARN("comm {:#x} rank {}: the schedule touches a buffer this rank passed as NULL", comm_hash, rank);
      break;
    default:
      BRAID_WARN("comm {:#x} rank {}: a kernel reported error code {}", comm_hash, rank, code);
  }
}

}  // namespace braid::cuda

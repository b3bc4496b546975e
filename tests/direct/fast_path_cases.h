// Shared by the host fast-path tests (direct, one-shot, eager).
#pragma once

#include <cstdlib>

#include "nccl.h"

namespace mp {

struct TypeOp {
  ncclDataType_t type;
  ncclRedOp_t op;
};

// The host backend with the default board limit, whatever other tests here set.
inline void set_board_env() {
  setenv("BRAID_BACKEND", "host", 1);
  setenv("BRAID_ONESHOT_MAX_BYTES", "4096", 1);
}

}  // namespace mp

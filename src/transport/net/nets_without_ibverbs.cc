// braid built without libibverbs: its InfiniBand net says so.
#ifndef BRAID_WITH_IBVERBS
#include "src/transport/net/nets.h"

namespace braid {

Status braid_ib_net(Net** out) {
  *out = nullptr;
  return BRAID_ERROR(ncclSystemError, "braid was built without libibverbs (install libibverbs-dev and rebuild)");
}

}  // namespace braid
#endif

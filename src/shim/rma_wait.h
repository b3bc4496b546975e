// ncclWaitSignal with a bound of the caller's choosing, for braid's own
// libraries over the public API: MoE waits within its handle's timeout
// (braidMoeConfig_t::timeoutMs), where ncclWaitSignal waits BRAID_TIMEOUT.
#pragma once

#include <cstdint>

#include "nccl.h"
#include "src/base/status.h"

namespace braid {

// As ncclWaitSignal, bounded by bound_ms (0: BRAID_TIMEOUT); on the host
// backend, ncclTimeout past it, naming the signals still missing.  On the
// CUDA backend it enqueues the bounded wait on the legacy stream and
// returns (its timeout comes later, from ncclCommGetAsyncError).
Status wait_signals_within(ncclComm_t comm, int ndesc, const ncclWaitSignalDesc_t* descs, int64_t bound_ms);

}  // namespace braid

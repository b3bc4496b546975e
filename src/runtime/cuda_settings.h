// The CUDA backend's communicator settings at init: BRAID_CUDA_* as this
// rank sets them (checked, and agreed with the other ranks' through
// AgreedValues), then resolved against the tuning table
// (src/plan/device_tuning.h) for the communicator's devices.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "src/base/status.h"
#include "src/plan/device_tuning.h"
#include "src/runtime/agreement.h"

namespace braid {

// This rank's BRAID_CUDA_* and tuning table hash into `a` (unset: 0, or
// UINT64_MAX for the LL limit); an out-of-range value is ncclInvalidArgument.
Status read_cuda_requests(const TuningTable& table, AgreedValues* a);

// What every rank resolves alike from the agreed values and every rank's
// device (indexed by rank: the GPU's identity and name).
struct CudaSettings {
  CommTuning comm;
  std::shared_ptr<const DeviceTuning> calls;
};
CudaSettings resolve_cuda_settings(std::shared_ptr<const TuningTable> table, const AgreedValues& agreed,
                                   const std::vector<uint64_t>& gpus, const std::vector<std::string>& names);

}  // namespace braid

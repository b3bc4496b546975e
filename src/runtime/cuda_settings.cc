#include "src/runtime/cuda_settings.h"

#include <cstdlib>

#include "src/base/env.h"

namespace braid {
namespace {

// A set variable's value, which must be a number in lo..hi (and a multiple
// of `step`); `unset` when it is not set.
Status requested(EnvName name, uint64_t lo, uint64_t hi, uint64_t step, uint64_t unset, uint64_t* out) {
  *out = unset;
  if (!env_is_set(name)) return Status::ok();
  const std::string text = env_string(name);
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 0);
  if (end == text.c_str() || *end != '\0' || v < (long long)(lo) || uint64_t(v) > hi || uint64_t(v) % step)
    return BRAID_ERROR(ncclInvalidArgument, "{}={} ({}..{}{})", name.name(), text, lo, hi,
                       step > 1 ? fmt::format(", a multiple of {}", step) : "");
  *out = uint64_t(v);
  return Status::ok();
}

}  // namespace

Status read_cuda_requests(const TuningTable& table, AgreedValues* a) {
  uint64_t v = 0;
  BRAID_TRY(requested("BRAID_CUDA_CHANNELS", 1, kCudaMaxChannels, 1, 0, &v));
  a->cuda_channels = uint32_t(v);
  BRAID_TRY(requested("BRAID_CUDA_SLOTS", 2, kCudaMaxSlots, 1, 0, &v));
  a->cuda_slots = uint32_t(v);
  BRAID_TRY(requested("BRAID_CUDA_SLOT_BYTES", kCudaMinSlotBytes, uint64_t(1) << 30, 256, 0, &a->cuda_slot_bytes));
  BRAID_TRY(requested("BRAID_CUDA_LL_MAX_BYTES", 0, kCudaLLMaxBytesLimit, 1, UINT64_MAX, &a->cuda_ll_max_bytes));
  a->tuning_table = table.hash();
  return Status::ok();
}

CudaSettings resolve_cuda_settings(std::shared_ptr<const TuningTable> table, const AgreedValues& agreed,
                                   const std::vector<uint64_t>& gpus, const std::vector<std::string>& names) {
  const TuningKey key = tuning_key(gpus, names);
  const CudaRequests requests{agreed.cuda_channels, agreed.cuda_slots, agreed.cuda_slot_bytes,
                              agreed.cuda_ll_max_bytes};
  CudaSettings s;
  s.comm = resolve_comm_tuning(*table, key, requests);
  s.calls = std::make_shared<const DeviceTuning>(std::move(table), key);
  return s;
}

}  // namespace braid

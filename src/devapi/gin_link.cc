// The direct link: a copy into the target's mapped window, then the signal
// add with release order, both from the proxy's one thread, so every earlier
// copy to the target is ordered before the add.
#include "src/devapi/gin_link.h"

#include <cstring>

namespace braid::devapi {

Status DirectGinLink::put(uint64_t dst_handle, uint64_t dst_off, const void* src, uint64_t bytes,
                          const GinSignalAdd* signal) {
  if (signal && signal->word >= signals_.count)  // before the payload: all or nothing
    return BRAID_ERROR(ncclInvalidArgument, "GIN signal word {} out of range [0, {})", signal->word, signals_.count);
  if (bytes) {
    char* dst = nullptr;
    BRAID_TRY(windows_->resolve(dst_handle, dst_off, bytes, &dst));
    BRAID_TRY(signals_.ops->copy(dst, src, bytes));  // a put to this rank may overlap: see GinMemoryOps::copy
  }
  if (signal) BRAID_TRY(signals_.add(signal->word, signal->value));
  return Status::ok();
}

Status DirectGinLink::add_at(uint64_t handle, uint64_t off, uint64_t value) {
  char* word = nullptr;
  BRAID_TRY(windows_->resolve(handle, off, sizeof(uint64_t), &word));
  return add_to_word(*signals_.ops, word, value);
}

Status DirectGinLink::get(uint64_t src_handle, uint64_t src_off, void* dst, uint64_t bytes) {
  if (bytes) {
    char* src = nullptr;
    BRAID_TRY(windows_->resolve(src_handle, src_off, bytes, &src));
    BRAID_TRY(signals_.ops->copy(dst, src, bytes));  // so may a get from it: see GinMemoryOps::copy
  }
  ++gets_issued_;
  ++gets_landed_;
  return Status::ok();
}

}  // namespace braid::devapi

// How a GIN proxy reaches one target rank: a put of bytes into a window of
// the target, optionally followed by a signal add there; a 64-bit add to
// a word of a window there (2.30's VA signal); a get of bytes from a window
// there.
//
// The ordering contract of nccl_device/gin.h is the link's: a signal becomes
// visible only after the payload of its put and of every earlier put on the
// same link.  Both links keep it by doing everything in issue order: the
// direct link in the calling thread (copy, then a release add), the TCP link
// through one stream whose receiver applies frames in order.  When put()
// returns, the source bytes have been consumed and may be reused: what the
// proxy's counters and consumer indices report.  A get has landed once
// gets_landed() counts it (the direct link's at once; the TCP link's when
// the answer has arrived, through progress()): what a flush waits for.
#pragma once

#include <cstdint>
#include <memory>

#include "src/base/status.h"
#include "src/devapi/gin_memory.h"

namespace braid::devapi {

struct GinSignalAdd {
  uint32_t word = 0;  // in the target's signal array (its context's signals start at the context's base)
  uint64_t value = 0;
};

class GinLink {
 public:
  virtual ~GinLink() = default;
  // bytes may be 0 (then dst is not touched, and the handle may be 0).
  virtual Status put(uint64_t dst_handle, uint64_t dst_off, const void* src, uint64_t bytes,
                     const GinSignalAdd* signal) = 0;
  // Adds `value` to the 8-byte-aligned word at (handle, off) of the
  // target's windows, after every earlier put.
  virtual Status add_at(uint64_t handle, uint64_t off, uint64_t value) = 0;
  // Starts copying `bytes` at (src_handle, src_off) of the target's
  // windows into `dst`, after every earlier put: get number gets_issued()
  // (after the call), landed once gets_landed() reaches it.
  virtual Status get(uint64_t src_handle, uint64_t src_off, void* dst, uint64_t bytes) = 0;
  // Lands what has arrived for earlier gets, without waiting; a refused or
  // stalled get is an error of the link.
  virtual Status progress() { return Status::ok(); }
  uint64_t gets_issued() const { return gets_issued_; }
  uint64_t gets_landed() const { return gets_landed_; }
  // Tells the target no more puts come (a closed link is then no error there).
  virtual Status close() { return Status::ok(); }
  // Ends the link without that promise, after this rank failed: the target
  // reports the link's end as an error instead of waiting out its deadline.
  virtual void abort() {}

 protected:
  uint64_t gets_issued_ = 0, gets_landed_ = 0;  // the proxy's thread's alone
};

// The target's windows and signals mapped into this process: the rank
// itself, a rank that is a thread of this process, or a process of this
// host whose memory is mapped here (the flat LSA range).  The table is
// shared with whoever maps the target's windows as they are registered,
// so a window registered after the link was made is found.  Bytes and
// adds go through the signals' GinMemoryOps (the host's, or a device's).
class DirectGinLink : public GinLink {
 public:
  DirectGinLink(std::shared_ptr<const GinWindowTable> windows, GinSignals signals)
      : windows_(std::move(windows)), signals_(signals) {}
  Status put(uint64_t dst_handle, uint64_t dst_off, const void* src, uint64_t bytes,
             const GinSignalAdd* signal) override;
  Status add_at(uint64_t handle, uint64_t off, uint64_t value) override;
  Status get(uint64_t src_handle, uint64_t src_off, void* dst, uint64_t bytes) override;

 private:
  std::shared_ptr<const GinWindowTable> windows_;  // never null
  GinSignals signals_;
};

}  // namespace braid::devapi

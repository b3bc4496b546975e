// How a GIN proxy reaches one target rank: a put of bytes into a window of
// the target, optionally followed by a signal add there.
//
// The ordering contract of nccl_device/gin.h is the link's: a signal becomes
// visible only after the payload of its put and of every earlier put on the
// same link.  Both links keep it by doing everything in issue order: the
// direct link in the calling thread (copy, then a release add), the TCP link
// through one stream whose receiver applies frames in order.  When put()
// returns, the source bytes have been consumed and may be reused: what the
// proxy's counters and consumer indices report.
#pragma once

#include <cstdint>
#include <memory>

#include "src/base/status.h"
#include "src/devapi/gin_memory.h"

namespace braid::devapi {

struct GinSignalAdd {
  uint16_t id = 0;
  uint64_t value = 0;
};

class GinLink {
 public:
  virtual ~GinLink() = default;
  // bytes may be 0 (then dst is not touched, and the handle may be 0).
  virtual Status put(uint64_t dst_handle, uint64_t dst_off, const void* src, uint64_t bytes,
                     const GinSignalAdd* signal) = 0;
  // Tells the target no more puts come (a closed link is then no error there).
  virtual Status close() { return Status::ok(); }
  // Ends the link without that promise, after this rank failed: the target
  // reports the link's end as an error instead of waiting out its deadline.
  virtual void abort() {}
};

// The target's windows and signals mapped into this process: the rank
// itself, a rank that is a thread of this process, or a process of this
// host whose memory is mapped here (src/transport/host_memory.h).  The
// table is shared with whoever maps the target's windows as they are
// registered, so a window registered after the link was made is found.
class DirectGinLink : public GinLink {
 public:
  DirectGinLink(std::shared_ptr<const GinWindowTable> windows, GinSignals signals)
      : windows_(std::move(windows)), signals_(signals) {}
  Status put(uint64_t dst_handle, uint64_t dst_off, const void* src, uint64_t bytes,
             const GinSignalAdd* signal) override;

 private:
  std::shared_ptr<const GinWindowTable> windows_;  // never null
  GinSignals signals_;
};

}  // namespace braid::devapi

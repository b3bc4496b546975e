// What a GIN descriptor's handles and ids name, on the rank that applies it.
//
// braid makes a window's ginWins[ctx] a symmetric token (the same number on
// every rank for the same collective registration), so a descriptor's
// (handle, offset) resolves on any rank with no address exchange: the
// source on the posting rank, the destination on the target.  Every
// resolution is bounds-checked, since the numbers come from a kernel
// braid did not write.  Windows come and go (collective registration on
// the user's threads) while a proxy resolves (its own thread): the table
// is locked, shared for resolving.  GinFault keeps the first error of a proxy's
// threads, for its bounded waits and for ncclCommGetAsyncError.
//
// GinMemoryOps is how the proxy's threads touch window and signal memory:
// plain copies and atomics where the host reaches it (the host backend), a
// device's copy engines and atomics where it does not (CUDA,
// src/exec/cuda/cuda_gin_memory.h).  Every call is complete when it
// returns, so an add is ordered after every copy before it: the order the
// links promise (src/devapi/gin_link.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <shared_mutex>

#include "src/base/deadline.h"
#include "src/base/status.h"

namespace braid::devapi {

class GinMemoryOps {
 public:
  virtual ~GinMemoryOps() = default;
  // Whether host code may load and store window memory itself (then TCP
  // payloads go straight between the socket and the window).
  virtual bool host_direct() const = 0;
  // Either side may be window memory or plain host memory.  The host's may
  // overlap (memmove); the CUDA backend's copy engines take no overlap.
  virtual Status copy(void* dst, const void* src, uint64_t bytes) const = 0;
  // Whether add() reaches window memory (2.30's VA signals); signal
  // arrays are host memory, which it always reaches.
  virtual bool adds_in_windows() const = 0;
  // A 64-bit add to an 8-byte-aligned word, with release order: a reader
  // that acquires it sees every earlier copy.
  virtual Status add(uint64_t* word, uint64_t value) const = 0;
};

// The host's: memmove and __atomic_fetch_add.
const GinMemoryOps& host_gin_memory();
// Host memory served as a GPU's is (cuda_gin_memory.h): the host does not
// load or store windows itself (TCP stages through a buffer) and adds only
// to signal memory, not to windows.  For testing those paths on a CPU.
const GinMemoryOps& host_gin_memory_as_device();

class GinWindowTable {
 public:
  // token: non-zero and under 2^63 (it travels in 63 bits of a GFD).
  Status add(uint64_t token, char* base, uint64_t bytes);
  Status remove(uint64_t token);
  // [offset, offset + bytes) of window `token`, refused unless inside it.
  Status resolve(uint64_t token, uint64_t offset, uint64_t bytes, char** out) const;

 private:
  struct Memory {
    char* base;
    uint64_t bytes;
  };
  mutable std::shared_mutex mu_;
  std::map<uint64_t, Memory> windows_;  // under mu_
};

// A rank's signal array (ncclGinProxyGpuCtx_t::signals): 64-bit adds land here.
struct GinSignals {
  uint64_t* words = nullptr;
  uint32_t count = 0;
  const GinMemoryOps* ops = &host_gin_memory();
  // Adds with release order, so a reader that acquires the new value sees
  // every byte written before it.
  Status add(uint32_t id, uint64_t value) const;
};

// A 64-bit add with release order to a word of a window (2.30's VA
// signals), which must be 8-byte aligned.
Status add_to_word(const GinMemoryOps& ops, char* word, uint64_t value);

class GinFault {
 public:
  void set(const Status& s);  // keeps the first
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  Status get() const;
  // Called with the first fault, on the thread that sets it, before
  // failed() says so (given before any thread may set one).
  void notify(std::function<void(const Status&)> on_first) { on_first_ = std::move(on_first); }

 private:
  std::atomic<bool> failed_{false};
  mutable std::mutex mu_;
  Status first_;
  std::function<void(const Status&)> on_first_;
};

// Waits until signal `id` reaches `at_least` (rolling 64-bit compare, as the
// device's waitSignal), bounded: a fault of the proxy or the deadline ends
// it with an error naming the signal.
Status wait_signal(const GinSignals& signals, uint32_t id, uint64_t at_least, Deadline deadline,
                   const GinFault* fault);

}  // namespace braid::devapi

// The host's memory model for the MoE protocol (include/braid/moe/protocol.h):
// ranks that are threads of one process, or processes of one host, load and
// store each other's windows directly (ncclMemAlloc memory registered with
// ncclCommWindowRegister and mapped by every rank, as NCCL's LSA windows are
// over NVLink).  A put is a memcpy into the mapped window, a signal a
// release store of the word, a fence a full fence, an arrival an acq_rel
// fetch-add.  The GCC builtins work on plain memory (a window shared by
// processes is not a std::atomic) and are what ThreadSanitizer models.
// A peer whose window this process cannot map (another host) is reached
// through one-sided RMA instead: puts and signal words go through
// WindowRoutes (window_routes.h), which says why the ordering still holds.
//
// Each agent (block thread) has its own instance, whose counters of bytes,
// signals and fences the caller adds up: the statistics are what the
// protocol actually did, not what it should have done.
#pragma once

#include <cstdint>
#include <cstring>

#include "braid/moe/counters.h"
#include "src/base/deadline.h"
#include "src/moe/window_routes.h"

namespace braid::moe {

class HostMemory {
 public:
  // Signal words raise `word_signal` where they go over RMA.
  HostMemory(int self, WindowRoutes* routes, int word_signal = WindowRoutes::kWordSignal)
      : self_(self), word_signal_(word_signal), routes_(routes), runs_(routes), waiter_(routes->idle_spins()) {}

  char* window(int peer) const { return routes_->base(peer); }
  void put(int peer, void* remote, const void* local, size_t bytes) {
    if (routes_->direct(peer))
      std::memcpy(remote, local, bytes);
    else
      runs_.add(peer, static_cast<char*>(remote), local, bytes);
    counters_.put(peer == self_, bytes);
  }
  void fence() {
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    ++counters_.fences;
  }
  void signal_words(int peer, uint64_t* remote, const uint64_t* words, int32_t n) {
    if (routes_->direct(peer)) {
      for (int32_t i = 0; i < n; ++i) __atomic_store_n(remote + i, words[i], __ATOMIC_RELEASE);
    } else {
      routes_->put(peer, remote, words, size_t(n) * sizeof(uint64_t), word_signal_);
    }
    counters_.signals(peer == self_, n);
  }
  uint64_t load(const uint64_t* word) { return __atomic_load_n(word, __ATOMIC_ACQUIRE); }
  // Gathered RMA puts leave first: the leader's signals must follow them.
  uint32_t arrive(uint32_t* counter) {
    flush();
    return __atomic_fetch_add(counter, 1u, __ATOMIC_ACQ_REL);
  }
  // Issues the gathered RMA puts (a caller without arrivals calls it before its signals).
  void flush() { runs_.flush(); }
  void pause() { waiter_.pause(); }
  void progressed() { waiter_.reset(); }

  const Counters& counters() const { return counters_; }
  void clear() { counters_ = {}; }

 private:
  int self_;
  int word_signal_;
  WindowRoutes* routes_;
  PutRuns runs_;
  Counters counters_;
  Waiter waiter_;
};

}  // namespace braid::moe

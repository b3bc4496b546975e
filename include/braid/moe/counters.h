// What a MoE memory model moved (issue 40), written once for host C++ and
// CUDA: each agent counts the bytes, signal words and fences it issued, and
// the handle adds them up, so the statistics are what the protocol did, not
// what it should have done.
#pragma once

#include <stdint.h>

#include "braid/hd.h"

namespace braid::moe {

struct Counters {
  uint64_t bytes_remote = 0, signal_bytes_remote = 0, bytes_local = 0;
  uint64_t signals_remote = 0, signals_local = 0, fences = 0;

  BRAID_HD void put(bool local, uint64_t bytes) { (local ? bytes_local : bytes_remote) += bytes; }
  BRAID_HD void signals(bool local, int32_t n) {
    if (local) {
      signals_local += uint64_t(n);
      bytes_local += uint64_t(n) * sizeof(uint64_t);
    } else {
      signals_remote += uint64_t(n);
      signal_bytes_remote += uint64_t(n) * sizeof(uint64_t);
    }
  }
};

}  // namespace braid::moe

// Where things lie in a CUDA-backend rank's arena, the one device
// allocation its peers map: the receive FIFOs of every (sender, channel)
// pair (channels + 1: the last is the point-to-point channel), each a
// control block and its slots; then the LL region (src/ops/ll_oneshot.h);
// then the one-sided signals (src/exec/cuda/cuda_rma.h): a counter per
// (sender, ctx, sigIdx) that each sender stores its count into, this
// rank's count of those it consumed, and its own count sent per
// (receiver, ctx, sigIdx); then this rank's LL call counter.  Plain C++ (no
// CUDA), so the CLI can say what a tuning costs (braid tuning) and tests
// can check it.
#pragma once

#include <cstdint>

#include "src/ops/ll_oneshot.h"
#include "src/plan/device_tuning.h"

namespace braid {

struct CudaArenaLayout {
  static constexpr uint64_t kCtrlBytes = 256;       // a FIFO's tail, head, lengths[8], totals[8]
  static constexpr uint64_t kLLCounterBytes = 256;  // the arena's last bytes: the LL call counter
  // One-sided (ctx, sigIdx) pairs a sender has per receiver, at most:
  // pairs past it are refused by the calls, not given arena space.
  static constexpr uint64_t kMaxRmaPairs = 4096;
  uint64_t conn_stride = 0;  // one FIFO: control block and slots
  uint64_t ll_offset = 0;    // the LL region
  uint64_t rma_pairs = 0;    // (ctx, sigIdx) pairs per sender: numRmaCtx x numRmaSig, within kMaxRmaPairs
  uint64_t rma_offset = 0;   // arrived, consumed and sent, each [nranks][rma_pairs] of 8 bytes
  uint64_t bytes = 0;        // the whole arena

  CudaArenaLayout(int nranks, const CommTuning& t, uint64_t pairs = 1)
      : conn_stride(kCtrlBytes + uint64_t(t.slots) * t.slot_bytes),
        ll_offset(uint64_t(nranks) * (t.channels + 1) * conn_stride),
        rma_pairs(pairs < kMaxRmaPairs ? pairs : kMaxRmaPairs),
        rma_offset(ll_offset + (t.ll_max_bytes ? ll_region_lines(nranks, t.ll_max_bytes) * sizeof(LLLine) : 0)),
        bytes(rma_offset + round_up_256(3 * uint64_t(nranks) * rma_pairs * 8) + kLLCounterBytes) {}

 private:
  static uint64_t round_up_256(uint64_t n) { return (n + 255) & ~uint64_t(255); }
};

}  // namespace braid

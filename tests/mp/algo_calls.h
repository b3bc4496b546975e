// The calls the algorithm-choice tests make (NCCL_ALGO, NCCL_PROTO, tuner
// plugins), and counting what their log says about them.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "harness.h"

namespace mp {

// A small and a large AllReduce, and an AllGather, exact: the small one
// is what braid's fast paths take, the large one a schedule.
inline void run_algo_calls(int rank, int n, ncclComm_t comm, Failures& f) {
  for (size_t count : {size_t(8), size_t(300000)}) {
    std::vector<float> in(count, float(rank + 1)), out(count, -1.0f);
    MP_NCCL(f, ncclAllReduce(in.data(), out.data(), count, ncclFloat, ncclSum, comm, nullptr));
    if (std::count(out.begin(), out.end(), float(n * (n + 1) / 2)) != ptrdiff_t(count))
      f.fail(fmt::format("allreduce of {}: wrong sums", count));
  }
  std::vector<int32_t> mine(64, rank * 7), all(64 * size_t(n), -1);
  MP_NCCL(f, ncclAllGather(mine.data(), all.data(), mine.size(), ncclInt32, comm, nullptr));
  for (int r = 0; r < n; ++r)
    if (all[size_t(r) * 64 + 63] != r * 7) f.fail("allgather");
}

inline size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace mp

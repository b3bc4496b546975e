// A rank that runs collectives until one fails, for the fault tests: every
// call that succeeded must be exact, the failing one must come within
// BRAID_TIMEOUT of the last good one with ncclRemoteError or ncclSystemError,
// GetAsyncError must say so, and ncclCommAbort must be prompt.  Its exit
// code says which of those went wrong.
#pragma once

#include <chrono>
#include <vector>

#include "nccl.h"

namespace mp {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Exit codes of a survivor, so the parent can say what went wrong.
enum : int { kOk = 0, kSucceededWrong = 10, kNoError = 11, kBadCode = 12, kSlow = 13, kAsync = 14, kAbort = 15,
             kInit = 16 };

// What the ranks run until one dies: AllReduce, or Broadcast from rank 0.
enum class Call { AllReduce, Broadcast };

// Survivor: run `call` until it fails.  Every successful call must be exact.
inline int survivor(int rank, int n, const ncclUniqueId& id, double timeout_s, size_t count, Call call) {
  ncclComm_t comm = nullptr;
  if (ncclCommInitRank(&comm, n, id, rank) != ncclSuccess) return kInit;
  std::vector<float> in(count), out(count);
  for (size_t i = 0; i < in.size(); ++i) in[i] = float(rank + 1) * float(i % 13);
  const float expected = call == Call::AllReduce ? float(n * (n + 1) / 2) : 1.f;  // sum, or rank 0's factor
  ncclResult_t r = ncclSuccess;
  auto deadline = Clock::now() + std::chrono::seconds(60);
  Clock::time_point last_ok = Clock::now();
  while (Clock::now() < deadline) {
    r = call == Call::AllReduce
            ? ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat, ncclSum, comm, nullptr)
            : ncclBroadcast(in.data(), out.data(), in.size(), ncclFloat, 0, comm, nullptr);
    if (r != ncclSuccess) break;
    for (size_t i = 0; i < out.size(); ++i)
      if (out[i] != expected * float(i % 13)) return kSucceededWrong;
    last_ok = Clock::now();
  }
  if (r == ncclSuccess) return kNoError;
  if (r != ncclRemoteError && r != ncclSystemError) return kBadCode;
  // The failing call took at most BRAID_TIMEOUT (+ slack) after the last good one.
  if (seconds_since(last_ok) > timeout_s + 5) return kSlow;
  ncclResult_t async = ncclSuccess;
  if (ncclCommGetAsyncError(comm, &async) != ncclSuccess || (async != ncclRemoteError && async != ncclSystemError))
    return kAsync;
  auto t = Clock::now();
  if (ncclCommAbort(comm) != ncclSuccess || seconds_since(t) > 2) return kAbort;
  return kOk;
}

}  // namespace mp

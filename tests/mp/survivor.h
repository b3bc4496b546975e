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

// What the ranks run until one dies: AllReduce, Broadcast from rank 0, or
// a ring of send/recv (each rank sends to the next, receives from the last).
enum class Call { AllReduce, Broadcast, SendRecv };

// Survivor: run `call` until it fails.  Every successful call must be exact.
inline int survivor(int rank, int n, const ncclUniqueId& id, double timeout_s, size_t count, Call call) {
  ncclComm_t comm = nullptr;
  if (ncclCommInitRank(&comm, n, id, rank) != ncclSuccess) return kInit;
  std::vector<float> in(count), out(count);
  for (size_t i = 0; i < in.size(); ++i) in[i] = float(rank + 1) * float(i % 13);
  const int from = (rank + n - 1) % n;
  // The sum, rank 0's factor, or the last rank's.
  const float expected = call == Call::AllReduce ? float(n * (n + 1) / 2) : call == Call::Broadcast ? 1.f : float(from + 1);
  ncclResult_t r = ncclSuccess;
  auto deadline = Clock::now() + std::chrono::seconds(60);
  Clock::time_point last_ok = Clock::now();
  while (Clock::now() < deadline) {
    switch (call) {
      case Call::AllReduce:
        r = ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat, ncclSum, comm, nullptr);
        break;
      case Call::Broadcast: r = ncclBroadcast(in.data(), out.data(), in.size(), ncclFloat, 0, comm, nullptr); break;
      case Call::SendRecv:
        r = ncclGroupStart();
        if (r == ncclSuccess) r = ncclSend(in.data(), in.size(), ncclFloat, (rank + 1) % n, comm, nullptr);
        if (r == ncclSuccess) r = ncclRecv(out.data(), out.size(), ncclFloat, from, comm, nullptr);
        const ncclResult_t ended = ncclGroupEnd();
        if (r == ncclSuccess) r = ended;
        break;
    }
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

#include "src/exec/cuda_kernel_errors.h"

#include <fmt/format.h>

#include <chrono>
#include <string>
#include <thread>

#include "src/base/log.h"

namespace braid::cuda {

namespace {

ncclResult_t result_of(int code) {
  switch (code) {
    case kDevTimeout: return ncclRemoteError;
    case kDevPeerExited: return ncclRemoteError;
    case kDevAborted: return ncclInvalidUsage;
    case kDevMismatch: return ncclInvalidUsage;
    default: return ncclInternalError;
  }
}

}  // namespace

// What the kernels' error word `code` says, and where the first timed-out
// wait was.
std::string KernelErrors::describe(int code) const {
  const volatile int* f = host_;
  const uint64_t timeout_s = timeout_s_;
  switch (code) {
    case kDevTimeout: {
      static const char* const kinds[] = {"?", "its lane's dependency", "data from the peer",
                                          "a free slot at the peer"};
      const int kind = f[kFlagWaitKind];
      if (kind == kWaitSignal)
        return fmt::format(
            "ncclWaitSignal's kernel waited {} s (BRAID_TIMEOUT): rank {} did not signal (ctx, sigIdx) pair {} (ctx x "
            "numRmaSig + sigIdx) enough (at {}, wanted {}): it is late or gone, or sent fewer signals than opCnt",
            timeout_s, f[kFlagWaitOp], f[kFlagWaitTile], unsigned(f[kFlagWaitSeen]), unsigned(f[kFlagWaitWant]));
      if (kind == kWaitLL)
        return fmt::format(
            "an LL kernel waited {} s without progress (BRAID_TIMEOUT): a peer is late or gone; first wait to give "
            "up: the line of word {} from rank {} (flag {}, wanted {})",
            timeout_s, f[kFlagWaitTile], f[kFlagWaitOp], unsigned(f[kFlagWaitSeen]), unsigned(f[kFlagWaitWant]));
      return fmt::format(
          "a kernel waited {} s without progress (BRAID_TIMEOUT): a peer is late or gone, or its launch is held "
          "behind this one; first wait to give up: block ({}, {}) op {} tile {} (p2p: byte offset), waiting for {} "
          "(counter {}, wanted {})",
          timeout_s, f[kFlagWaitBlockX], f[kFlagWaitBlockY], f[kFlagWaitOp], f[kFlagWaitTile],
          kinds[kind >= 0 && kind <= 3 ? kind : 0], unsigned(f[kFlagWaitSeen]), unsigned(f[kFlagWaitWant]));
    }
    case kDevAborted:
      return "a kernel stopped because the communicator was aborted";
    case kDevPeerExited: {
      std::string ranks;
      for (int r = 0; r < nranks_; ++r)
        if (__atomic_load_n(host_ + kFlagWords + r, __ATOMIC_ACQUIRE))
          ranks += fmt::format("{}{}", ranks.empty() ? "" : ", ", r);
      return fmt::format("a kernel stopped waiting for a peer whose process exited (exited: rank {})", ranks);
    }
    case kDevMismatch:
      return "a kernel received a message whose size does not match the call on this rank (ranks called with "
             "different counts or peers)";
    case kDevBadPlan:
      return "the schedule touches a buffer this rank passed as NULL";
    default:
      return fmt::format("a kernel reported error code {}", code);
  }
}

void KernelErrors::init(int* host, int* device, int nranks, uint64_t comm_hash, int rank, uint64_t timeout_s) {
  host_ = host;
  device_ = device;
  nranks_ = nranks;
  comm_hash_ = comm_hash;
  rank_ = rank;
  timeout_s_ = timeout_s;
}

Status KernelErrors::watch_peers(const std::vector<WatchedProcess>& peers) {
  return ProcessWatch::start(
      peers, fmt::format("comm {:#x} rank {}", comm_hash_, rank_),
      [this](int rank, const Status& why) {
        BRAID_INFO(kInit, "comm {:#x} rank {}: {}; this rank's kernels stop waiting for it", comm_hash_, rank_,
                   why.message());
        if (host_ && rank >= 0 && rank < nranks_) __atomic_store_n(host_ + kFlagWords + rank, 1, __ATOMIC_RELEASE);
      },
      &watch_);
}

void KernelErrors::release() {
  watch_.reset();  // no store after this
  host_ = device_ = nullptr;
}

void KernelErrors::raise_abort_flag() {
  if (host_) __atomic_store_n(host_ + kFlagAbort, 1, __ATOMIC_RELEASE);
}

void KernelErrors::abort() { raise_abort_flag(); }

void KernelErrors::revoke() {
  revoked_.store(true);
  raise_abort_flag();
}

Status KernelErrors::poll() {
  if (!host_) return Status::ok();
  const int code = __atomic_load_n(host_ + kFlagError, __ATOMIC_ACQUIRE);
  if (code == kDevOk) return Status::ok();
  if (code == kDevAborted && revoked_.load()) return Status::ok();  // stopped on purpose
  if (code == kDevTimeout) {  // the wait that gave up publishes where it was right after the code
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
    while (__atomic_load_n(host_ + kFlagWaitTaken, __ATOMIC_ACQUIRE) != 2 && std::chrono::steady_clock::now() < until)
      std::this_thread::yield();
  }
  // A one-sided wait that gave up is ncclTimeout, as the host backend's
  // (a collective's stays ncclRemoteError: a peer is dead or stuck).
  const ncclResult_t result = code == kDevTimeout && __atomic_load_n(host_ + kFlagWaitKind, __ATOMIC_ACQUIRE) ==
                                  kWaitSignal ? ncclTimeout : result_of(code);
  // Described once: the communicator keeps the first error it is told.
  if (warned_.exchange(true)) return Status::error(result, "a kernel failed earlier (reported then)");
  Status error = Status::error(result, describe(code));
  BRAID_WARN("comm {:#x} rank {}: {}", comm_hash_, rank_, error.message());
  return error;
}

}  // namespace braid::cuda

// KernelErrors (src/exec/cuda_kernel_errors.h), the host side of the CUDA
// kernels' error words, abort flag and exited words, driven by host threads
// that wait as the kernels' spin_until does (src/exec/cuda/kernels.cu): a
// peer process that exits stops the waits for it, reported as
// ncclRemoteError naming it, and no other wait (nor anything while no
// kernel waits); a revoke stops kernels with no error; an abort is
// ncclInvalidUsage; a timeout ncclRemoteError saying where it waited, or
// ncclTimeout for a one-sided wait (ncclWaitSignal's kernel).
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "src/exec/cuda/device_plan.h"
#include "src/exec/cuda_kernel_errors.h"
#include "sleeper.h"

using namespace braid;
using namespace braid::cuda;

namespace {

constexpr int kRanks = 4;

// One wait of a kernel for `peer`, who never sends: as spin_until, every
// 1024 spins wait_stop (the kernels' own), then the timeout; the reason goes
// into the error word with a compare-and-swap, and a timeout's place is
// published after it as record_timeout does.
int kernel_wait(int* words, int peer, std::chrono::milliseconds timeout, int kind = kWaitData) {
  const auto start = std::chrono::steady_clock::now();
  auto fail = [&](int code) {
    int ok = kDevOk;
    __atomic_compare_exchange_n(words + kFlagError, &ok, code, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    return code;
  };
  for (uint32_t i = 1;; ++i) {
    if ((i & 1023) != 0) continue;
    if (const int stop = wait_stop(words + kFlagAbort, exited_word(words + kFlagWords, peer)); stop != kDevOk)
      return fail(stop);
    if (std::chrono::steady_clock::now() - start > timeout) {
      fail(kDevTimeout);
      words[kFlagWaitKind] = kind;
      words[kFlagWaitOp] = 6;
      words[kFlagWaitSeen] = 41;
      words[kFlagWaitWant] = 42;
      __atomic_store_n(words + kFlagWaitTaken, 2, __ATOMIC_RELEASE);
      return kDevTimeout;
    }
  }
}

struct Words {
  int w[kFlagWords + kRanks] = {};
  KernelErrors errors;
  Words() { errors.init(w, w, kRanks, 0x5eed, 1, 10); }
  ~Words() { errors.release(); }
  bool exited(int rank) const { return __atomic_load_n(w + kFlagWords + rank, __ATOMIC_ACQUIRE) != 0; }
};

}  // namespace

TEST_CASE("kernel errors: a peer's exit stops the waits for it and names the rank", "[kernel_errors]") {
  const pid_t peer = sleeper();
  REQUIRE(peer > 0);
  Words k;
  REQUIRE(k.errors.watch_peers({{3, int(peer)}}).is_ok());
  int seen = -1;
  std::thread kernel([&] { seen = kernel_wait(k.w, 3, std::chrono::seconds(60)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(k.errors.poll().is_ok());  // waiting, nobody gone
  const auto killed = std::chrono::steady_clock::now();
  ::kill(peer, SIGKILL);
  kernel.join();
  CHECK(std::chrono::steady_clock::now() - killed < std::chrono::seconds(10));  // not the 60 s timeout
  CHECK(seen == kDevPeerExited);
  const Status first = k.errors.poll();
  CHECK(first.code() == ncclRemoteError);
  CHECK_THAT(first.message(), Catch::Contains("exited: rank 3"));
  CHECK(k.errors.poll().code() == ncclRemoteError);  // sticky
  ::waitpid(peer, nullptr, 0);
}

TEST_CASE("kernel errors: a peer's exit stops no other wait and is no error by itself", "[kernel_errors]") {
  const pid_t peer = sleeper();
  REQUIRE(peer > 0);
  Words k;
  REQUIRE(k.errors.watch_peers({{0, int(peer)}}).is_ok());
  ::kill(peer, SIGKILL);
  ::waitpid(peer, nullptr, 0);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!k.exited(0) && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(k.exited(0));
  CHECK_FALSE(k.exited(2));
  CHECK(k.errors.poll().is_ok());  // a job's end: a rank gone after its last call
  // Rank 2 is alive, only slow: the wait for it goes on to its own end.
  CHECK(kernel_wait(k.w, 2, std::chrono::milliseconds(50)) == kDevTimeout);
  const Status first = k.errors.poll();
  CHECK(first.code() == ncclRemoteError);
  CHECK_THAT(first.message(), Catch::Contains("without progress (BRAID_TIMEOUT)"));
}

TEST_CASE("kernel errors: a revoke stops a waiting kernel with no error", "[kernel_errors]") {
  Words k;
  int seen = -1;
  std::thread kernel([&] { seen = kernel_wait(k.w, 2, std::chrono::seconds(60)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  k.errors.revoke();
  kernel.join();
  CHECK(seen == kDevAborted);
  CHECK(k.errors.poll().is_ok());
}

TEST_CASE("kernel errors: an abort is invalid usage, a timeout a remote error saying where (one-sided: ncclTimeout)",
          "[kernel_errors]") {
  {
    Words k;
    k.errors.abort();
    CHECK(kernel_wait(k.w, 2, std::chrono::seconds(60)) == kDevAborted);
    CHECK(k.errors.poll().code() == ncclInvalidUsage);
  }
  {
    Words k;
    CHECK(kernel_wait(k.w, 2, std::chrono::milliseconds(20)) == kDevTimeout);
    const Status first = k.errors.poll();
    CHECK(first.code() == ncclRemoteError);
    CHECK_THAT(first.message(), Catch::Contains("waiting for data from the peer (counter 41, wanted 42)"));
    k.errors.revoke();  // later: the timeout stays the answer
    CHECK(k.errors.poll().code() == ncclRemoteError);
  }
  {
    Words k;
    CHECK(kernel_wait(k.w, 2, std::chrono::milliseconds(20), kWaitSignal) == kDevTimeout);
    const Status first = k.errors.poll();
    CHECK(first.code() == ncclTimeout);
    CHECK_THAT(first.message(), Catch::Contains("ncclWaitSignal's kernel waited 10 s (BRAID_TIMEOUT): rank 6 did not "
                                                "signal (ctx, sigIdx) pair 0 (ctx x numRmaSig + sigIdx) enough (at "
                                                "41, wanted 42)"));
    CHECK(k.errors.poll().code() == ncclTimeout);
  }
}

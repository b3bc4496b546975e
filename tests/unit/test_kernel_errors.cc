// KernelErrors (src/exec/cuda_kernel_errors.h), the host side of the CUDA
// kernels' error words and abort flag, driven by host threads that wait as
// the kernels' spin_until does (src/exec/cuda/kernels.cu): a peer process
// that exits stops a waiting kernel and is reported as ncclRemoteError
// naming its rank, but reports nothing while no kernel waits; a revoke
// stops kernels with no error; an abort is ncclInvalidUsage; a timeout
// ncclRemoteError.
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

using namespace braid;
using namespace braid::cuda;

namespace {

// A process that lives until it is killed.
pid_t sleeper() {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::pause();
    ::_exit(0);
  }
  return pid;
}

// One wait of a kernel for a peer that never comes: as spin_until, the
// abort flag every 1024 spins, then the timeout; the reason goes into the
// error word with a compare-and-swap.
int kernel_wait(int* words, std::chrono::milliseconds timeout) {
  const auto start = std::chrono::steady_clock::now();
  for (uint32_t i = 1;; ++i) {
    if ((i & 1023) != 0) continue;
    int ok = kDevOk;
    if (__atomic_load_n(words + kFlagAbort, __ATOMIC_ACQUIRE)) {
      __atomic_compare_exchange_n(words + kFlagError, &ok, int(kDevAborted), false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
      return kDevAborted;
    }
    if (std::chrono::steady_clock::now() - start > timeout) {
      __atomic_compare_exchange_n(words + kFlagError, &ok, int(kDevTimeout), false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
      return kDevTimeout;
    }
  }
}

struct Words {
  int w[kFlagWords] = {};
  KernelErrors errors;
  Words() { errors.init(w, w, 0x5eed, 1, 10); }
  ~Words() { errors.release(); }
};

}  // namespace

TEST_CASE("kernel errors: a peer's exit stops a waiting kernel and names the rank", "[kernel_errors]") {
  const pid_t peer = sleeper();
  REQUIRE(peer > 0);
  Words k;
  REQUIRE(k.errors.watch_peers({{3, int(peer)}}).is_ok());
  int seen = -1;
  std::thread kernel([&] { seen = kernel_wait(k.w, std::chrono::seconds(60)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(k.errors.poll().is_ok());  // waiting, nobody gone
  const auto killed = std::chrono::steady_clock::now();
  ::kill(peer, SIGKILL);
  kernel.join();
  CHECK(std::chrono::steady_clock::now() - killed < std::chrono::seconds(10));  // not the 60 s timeout
  CHECK(seen == kDevAborted);
  CHECK(k.errors.poll().code() == ncclRemoteError);
  CHECK_THAT(k.errors.poll().message(), Catch::Contains("rank 3 (process " + std::to_string(peer) + ") exited"));
  ::waitpid(peer, nullptr, 0);
}

TEST_CASE("kernel errors: a peer that exits while no kernel waits is no error until one waits", "[kernel_errors]") {
  const pid_t peer = sleeper();
  REQUIRE(peer > 0);
  Words k;
  REQUIRE(k.errors.watch_peers({{2, int(peer)}}).is_ok());
  ::kill(peer, SIGKILL);
  ::waitpid(peer, nullptr, 0);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!__atomic_load_n(k.w + kFlagAbort, __ATOMIC_ACQUIRE) && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(__atomic_load_n(k.w + kFlagAbort, __ATOMIC_ACQUIRE) != 0);
  CHECK(k.errors.poll().is_ok());  // the job's end: a peer gone after its last call
  CHECK(kernel_wait(k.w, std::chrono::seconds(60)) == kDevAborted);  // a later call stops at once
  CHECK(k.errors.poll().code() == ncclRemoteError);
}

TEST_CASE("kernel errors: a revoke stops a waiting kernel with no error", "[kernel_errors]") {
  Words k;
  int seen = -1;
  std::thread kernel([&] { seen = kernel_wait(k.w, std::chrono::seconds(60)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  k.errors.revoke();
  kernel.join();
  CHECK(seen == kDevAborted);
  CHECK(k.errors.poll().is_ok());
}

TEST_CASE("kernel errors: an abort is invalid usage and a timeout a remote error", "[kernel_errors]") {
  {
    Words k;
    k.errors.abort();
    CHECK(kernel_wait(k.w, std::chrono::seconds(60)) == kDevAborted);
    CHECK(k.errors.poll().code() == ncclInvalidUsage);
  }
  {
    Words k;
    CHECK(kernel_wait(k.w, std::chrono::milliseconds(20)) == kDevTimeout);
    CHECK(k.errors.poll().code() == ncclRemoteError);
    CHECK_THAT(k.errors.poll().message(), Catch::Contains("without progress (BRAID_TIMEOUT)"));
    k.errors.revoke();  // later: the timeout stays the answer
    CHECK(k.errors.poll().code() == ncclRemoteError);
  }
}

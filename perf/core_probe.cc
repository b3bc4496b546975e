// Core-to-core hand-over probe: how far apart the cores that ranks run on
// are right now, the other physical reference perf/compare prints.
//
// Two threads pinned to CPUs a and b pass a counter back and forth through
// one cache line; the time per round trip is what every fragment hand-over
// of a shared-memory transport pays, and, per line, what moving data that
// one core wrote to the other costs.  On one chip cluster (cores sharing an
// L3) it is ~50-60 ns; across clusters or sockets several times that.  On a
// VM the host may move the virtual CPUs between the two at any moment:
// measured on this project's 2-core VM, the round trip switches between
// ~54 ns and ~340 ns in phases of about 10 s, and a pipe of 64 KiB
// fragments between two processes moves ~11 GB/s in the first state and
// ~3 GB/s in the second.  perf/compare runs this before and after every
// tool run so a table says which state each number was taken in.
//
//   core_probe [-c a,b] [-m ms]
// CPUs a and b (default: the first two this process may run on); measures
// for -m milliseconds (default 30), best of three thirds.
// prints: "round_trip_ns <ns> cpus <a>,<b>"
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace {

alignas(64) std::atomic<uint64_t> ball{0};
alignas(64) std::atomic<bool> stop{false};

bool pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

inline void relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// The far side: answers every odd value with the next even one.
void answer(int cpu) {
  pin(cpu);
  uint64_t expect = 1;
  while (!stop.load(std::memory_order_relaxed)) {
    if (ball.load(std::memory_order_acquire) != expect) {
      relax();
      continue;
    }
    ball.store(expect + 1, std::memory_order_release);
    expect += 2;
  }
}

}  // namespace

int main(int argc, char** argv) {
  int a = -1, b = -1;
  long ms = 30;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "-c") && std::sscanf(argv[i + 1], "%d,%d", &a, &b) != 2) {
      std::fprintf(stderr, "core_probe: -c wants two CPUs, a,b\n");
      return 2;
    }
    if (!std::strcmp(argv[i], "-m")) ms = std::max(3L, std::atol(argv[i + 1]));
  }
  if (a < 0) {
    cpu_set_t cpus;
    if (sched_getaffinity(0, sizeof cpus, &cpus) != 0) return 2;
    for (int c = 0; c < CPU_SETSIZE && b < 0; ++c) {
      if (!CPU_ISSET(c, &cpus)) continue;
      if (a < 0) a = c;
      else b = c;
    }
    if (b < 0) {
      std::fprintf(stderr, "core_probe: needs two CPUs\n");
      return 2;
    }
  }
  std::thread far(answer, b);
  if (!pin(a)) {
    std::fprintf(stderr, "core_probe: cannot run on CPU %d\n", a);
    stop = true;
    far.join();
    return 2;
  }
  double best = 1e30;
  uint64_t value = 0;
  for (int third = 0; third < 3; ++third) {
    auto start = std::chrono::steady_clock::now(), until = start + std::chrono::milliseconds(ms / 3);
    uint64_t trips = 0;
    auto now = start;
    while (now < until) {
      for (int i = 0; i < 256; ++i, ++trips) {
        ball.store(value + 1, std::memory_order_release);
        value += 2;
        while (ball.load(std::memory_order_acquire) != value) relax();
      }
      now = std::chrono::steady_clock::now();
    }
    best = std::min(best, std::chrono::duration<double, std::nano>(now - start).count() / double(trips));
  }
  stop = true;
  far.join();
  std::printf("round_trip_ns %.0f cpus %d,%d\n", best, a, b);
  return 0;
}

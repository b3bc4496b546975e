// STREAM-style memory bandwidth probe: the physical reference perf/compare
// prints next to the collectives.
//
// T threads (default: the cores this process may run on) each own a slice
// of three arrays of -s bytes (default 256 MiB, far beyond any cache) and
// run two kernels, best of -n repetitions:
//   copy  c = a        (counted as 2 streams: read a, write c)
//   add   c = a + b    (3 streams)
// Bytes are counted as STREAM does (every array access, no write-allocate
// traffic).  B = the larger of the two; a 2-rank allreduce that reads each
// input once and writes both outputs moves 4S bytes, so its busbw limit is
// about B/4.
//
//   stream_probe [-s bytes] [-t threads] [-n reps]
// prints: "copy <GB/s> add <GB/s> B <GB/s> threads <T> bytes <S>"
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

struct Slice {
  float* a;
  float* b;
  float* c;
  size_t n;
};

void copy_kernel(const Slice& s) {
  for (size_t i = 0; i < s.n; ++i) s.c[i] = s.a[i];
}
void add_kernel(const Slice& s) {
  for (size_t i = 0; i < s.n; ++i) s.c[i] = s.a[i] + s.b[i];
}

// Seconds for one run of `kernel` over all slices, threads started first
// and released together so thread start-up is not timed.
template <typename K>
double timed(std::vector<Slice>& slices, K kernel) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<double> secs(slices.size());
  std::vector<std::thread> threads;
  for (size_t t = 0; t < slices.size(); ++t)
    threads.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load()) std::this_thread::yield();
      auto start = std::chrono::steady_clock::now();
      kernel(slices[t]);
      secs[t] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    });
  while (ready.load() < int(slices.size())) std::this_thread::yield();
  auto start = std::chrono::steady_clock::now();
  go.store(true);
  for (auto& th : threads) th.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  size_t bytes = size_t(256) << 20;
  int threads = 0, reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "-s")) bytes = std::strtoull(argv[i + 1], nullptr, 0);
    else if (!std::strcmp(argv[i], "-t")) threads = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "-n")) reps = std::atoi(argv[i + 1]);
  }
  if (threads <= 0) {
    cpu_set_t cpus;
    threads = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
  }
  const size_t n = bytes / sizeof(float);
  std::vector<float> a(n, 1.0f), b(n, 2.0f), c(n, 0.0f);  // touched: pages are mapped before timing
  std::vector<Slice> slices;
  for (int t = 0; t < threads; ++t) {
    size_t lo = n * size_t(t) / size_t(threads), hi = n * size_t(t + 1) / size_t(threads);
    slices.push_back({a.data() + lo, b.data() + lo, c.data() + lo, hi - lo});
  }
  double best_copy = 1e30, best_add = 1e30;
  for (int r = 0; r < reps; ++r) {
    best_copy = std::min(best_copy, timed(slices, copy_kernel));
    best_add = std::min(best_add, timed(slices, add_kernel));
  }
  const double copy_gbs = 2.0 * double(bytes) / best_copy / 1e9;
  const double add_gbs = 3.0 * double(bytes) / best_add / 1e9;
  if (c[n / 2] != 3.0f) {
    std::fprintf(stderr, "stream_probe: wrong result\n");
    return 1;
  }
  std::printf("copy %.1f add %.1f B %.1f threads %d bytes %zu\n", copy_gbs, add_gbs, std::max(copy_gbs, add_gbs),
              threads, bytes);
  return 0;
}

// MoE dispatch and combine on real ranks (threads, forked processes), 2 to 8
// of them: every received row, count and combined token checked exactly
// (moe_layer.h), over many random routings, with zero-token experts and
// empty ranks, heavily skewed routing, capacity overflow, every output
// layout and row type, several blocks per rank; the bytes and signals each
// rank put counted by the library and checked against the routed payload
// plus L signal words per destination; 100 layers back to back; zero-copy
// dispatch and combine; the window's untouched pages costing no memory.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdio>

#include "moe_layer.h"

using namespace moe_test;
using mp::Mode;

namespace {

void run(Mode mode, int n, const Case& c, int layers, bool expect_drops = false) {
  INFO(mp::mode_name(mode) << " n=" << n << " " << describe(c));
  const mp::RankBody body = layers_body(c, layers, expect_drops);
  const int failures =
      mode == Mode::Threads ? mp::run_ranks_as_threads(n, body) : mp::run_ranks_as_processes(n, body, 240);
  CHECK(failures == 0);
}

}  // namespace

TEST_CASE("moe dispatch+combine exact over random routings, ranks as threads, 2..8 ranks", "[moe][threads]") {
  for (int n : {2, 3, 4, 5, 8})
    for (uint64_t seed = 1; seed <= 6; ++seed) run(Mode::Threads, n, random_case(n, seed * 100 + n), 4);
}

TEST_CASE("moe dispatch+combine exact over random routings, ranks as processes, 2..8 ranks", "[moe][processes]") {
  for (int n : {2, 4, 8})
    for (uint64_t seed = 1; seed <= 3; ++seed) run(Mode::Processes, n, random_case(n, seed * 1000 + n), 3);
}

TEST_CASE("moe experts with zero tokens, masked choices and ranks that send nothing", "[moe][threads]") {
  Case c;
  c.experts = 16;
  c.top_k = 3;
  c.cold = true;
  c.masked = 0.3;
  c.empty_ranks = true;
  for (int n : {2, 4, 8}) run(Mode::Threads, n, c, 5);
  c.masked = 1.0;  // every choice -1: nothing routed, every signal still sent
  run(Mode::Threads, 4, c, 3);
  run(Mode::Processes, 3, Case{.experts = 6, .top_k = 2, .masked = 0.5, .cold = true, .empty_ranks = true}, 3);
}

TEST_CASE("moe heavily skewed routing at worst-case capacity: exact, nothing dropped", "[moe][threads]") {
  Case c;
  c.experts = 32;
  c.top_k = 4;
  c.skew = 0.95;
  c.max_tokens = 64;
  c.blocks = 2;
  c.dtype = ncclBfloat16;
  for (int n : {2, 4, 8}) run(Mode::Threads, n, c, 4);
}

TEST_CASE("moe capacity overflow: rows past capacity are counted, reported and left out of combine",
          "[moe][threads][processes]") {
  Case c;
  c.experts = 16;
  c.top_k = 4;
  c.skew = 0.9;
  c.factor = 1.0f;
  c.tile = 2;
  c.max_tokens = 48;
  for (int n : {2, 4, 8}) run(Mode::Threads, n, c, 4, /*expect_drops=*/true);
  c.layout = braidMoeRankMajor;
  c.blocks = 3;
  run(Mode::Processes, 4, c, 3, true);
}

TEST_CASE("moe 100 layers back to back, no reset (epochs), threads and processes", "[moe][threads][processes]") {
  Case c;
  c.experts = 8;
  c.top_k = 2;
  c.hidden = 8;
  c.max_tokens = 16;
  c.blocks = 2;
  c.skew = 0.3;
  run(Mode::Threads, 4, c, 100);
  run(Mode::Processes, 3, Case{.experts = 6, .top_k = 3, .hidden = 4, .max_tokens = 12}, 100);
}

// Zero-copy: as threads here (which ThreadSanitizer runs), as processes below.
TEST_CASE("moe zero-copy dispatch and combine, threads: rows and results read in place, exact, 100 layers",
          "[moe][threads]") {
  for (int n : {2, 4, 8}) {
    for (int zero_copy : {1, 2, 3}) {
      Case c = random_case(n, uint64_t(n * 10 + zero_copy));
      c.zero_copy = zero_copy;
      run(Mode::Threads, n, c, 4);
    }
    for (int zero_copy_dispatch : {1, 2}) {
      Case c = random_case(n, uint64_t(n * 10 + 5 + zero_copy_dispatch));
      c.zero_copy_dispatch = zero_copy_dispatch;
      c.zero_copy = zero_copy_dispatch == 1 ? 0 : 3;
      run(Mode::Threads, n, c, 4);
    }
  }
  const Case overflow{.experts = 16, .top_k = 4, .max_tokens = 48, .tile = 2, .factor = 1.0f, .blocks = 3,
                      .skew = 0.9, .zero_copy = 1, .zero_copy_dispatch = 1};
  run(Mode::Threads, 4, overflow, 4, /*expect_drops=*/true);
  // The buffers are rewritten every layer while peers may still be reading
  // the last one's, were the protocol's ordering wrong.
  Case layers{.experts = 8, .top_k = 3, .hidden = 24, .max_tokens = 16, .blocks = 2, .zero_copy = 2,
              .zero_copy_dispatch = 1};
  run(Mode::Threads, 4, layers, 100);
}

TEST_CASE("moe zero-copy dispatch and combine, processes: rows and results read in place, exact, 100 layers",
          "[moe][processes]") {
  const Case layers{.experts = 6, .top_k = 3, .hidden = 24, .max_tokens = 16, .blocks = 2, .zero_copy = 3,
                    .zero_copy_dispatch = 2};
  run(Mode::Processes, 3, layers, 100);
  for (int zero_copy : {1, 3}) {
    Case c = random_case(4, uint64_t(4000 + zero_copy));
    c.zero_copy = zero_copy;
    c.zero_copy_dispatch = zero_copy == 1 ? 1 : 2;
    run(Mode::Processes, 4, c, 3);
  }
}

namespace {

int threads_of_this_process() {
  int threads = -1;
  FILE* f = std::fopen("/proc/self/status", "r");
  char line[256];
  while (f && std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "Threads: %d", &threads) == 1) break;
  if (f) std::fclose(f);
  return threads;
}

// Resident memory of this process: private pages and shared ones (memfd).
int64_t resident_kb() {
  int64_t kb = 0, v = 0;
  FILE* f = std::fopen("/proc/self/status", "r");
  char line[256];
  while (f && std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "RssAnon: %ld", &v) == 1 || std::sscanf(line, "RssShmem: %ld", &v) == 1) kb += v;
  if (f) std::fclose(f);
  return kb;
}

}  // namespace

TEST_CASE("moe window pages cost memory only where written: worst-case capacity never used is free",
          "[moe][threads]") {
  // Two ranks' windows of 3 x 512 MB each (worst case for 8192 tokens of 16
  // KB: the two halves and the combine buffer) and the 128 MB dispatch buffer.
  Case c{.experts = 4, .top_k = 1, .hidden = 4096, .max_tokens = 8192, .zero_copy = 1, .zero_copy_dispatch = 1};
  const int64_t before = resident_kb();
  std::atomic<int64_t> grew{0};
  CHECK(mp::run_ranks_as_threads(2, [&](int rank, int, ncclComm_t comm, mp::Failures& f) {
          braidMoeConfig_t cfg = config_of(c);
          braidMoe_t moe = nullptr;
          MP_NCCL(f, braidMoeCreate(comm, &cfg, &moe));
          size_t rows = 0;
          if (moe) MP_NCCL(f, braidMoeGetInfo(moe, &rows, nullptr));
          if (rows * 16384 < (size_t(512) << 20)) f.fail(fmt::format("rank {}: {} output rows", rank, rows));
          float one = 1, sum = 0;
          MP_NCCL(f, ncclAllReduce(&one, &sum, 1, ncclFloat, ncclSum, comm, nullptr));  // both created
          if (rank == 0) grew = resident_kb() - before;
          MP_NCCL(f, ncclAllReduce(&one, &sum, 1, ncclFloat, ncclSum, comm, nullptr));
          if (moe) MP_NCCL(f, braidMoeDestroy(moe));
        }) == 0);
  INFO("resident memory grew by " << grew.load() << " KB with two 1.5 GB windows");
  CHECK(grew.load() < 64 * 1024);
}

TEST_CASE("moe handles on one host cost no thread each: windows on the caller's communicator, no split",
          "[moe][processes]") {
  CHECK(mp::run_ranks_as_processes(3, [](int rank, int n, ncclComm_t comm, mp::Failures& f) {
          const int before = threads_of_this_process();
          Case c;
          c.experts = 2 * n;
          std::vector<braidMoe_t> handles(8, nullptr);
          for (braidMoe_t& h : handles) {
            braidMoeConfig_t cfg = config_of(c);
            MP_NCCL(f, braidMoeCreate(comm, &cfg, &h));
          }
          // At most the caller's communicator's one RMA receiver, started by the first window.
          const int after = threads_of_this_process();
          if (after > before + 1)
            f.fail(fmt::format("rank {}: {} threads before 8 MoE handles, {} after", rank, before, after));
          for (braidMoe_t h : handles)
            if (h) MP_NCCL(f, braidMoeDestroy(h));
        }) == 0);
}

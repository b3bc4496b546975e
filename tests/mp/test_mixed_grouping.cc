// Ranks that group alike calls differently still run the same call: NCCL
// lets one thread drive several ranks of a communicator in a group while
// other ranks' threads call alone, and lets a rank put a lone call, or
// another communicator's work, in a group where its peers do not.  Small
// calls were the risk: alone they run on a shared board, in a group they
// ran their schedule, and the two sides never met (src/exec/host/
// board_task.h).  Random mixes (random_calls.h) sized mostly for the
// boards, every result exact.
#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

#include "random_calls.h"
#include "scoped_env.h"

using namespace mp;
using random_calls::seeds;
using random_calls::Sequence;

namespace {

constexpr int kCalls = 80;
constexpr size_t kMaxBytes = 64 << 10;

// One thread drives `ranks` of an n-rank communicator, each of its groups
// holding the same call of every one of them; returns the failures.
int drive_in_groups(const ncclUniqueId& id, int n, const std::vector<int>& ranks, uint64_t seed) {
  Failures f;
  std::vector<ncclComm_t> comms(ranks.size());
  MP_NCCL(f, ncclGroupStart());
  for (size_t k = 0; k < ranks.size(); ++k) MP_NCCL(f, ncclCommInitRank(&comms[k], n, id, ranks[k]));
  MP_NCCL(f, ncclGroupEnd());
  if (f.count) return f.count;
  std::vector<Sequence> sequences;
  for (size_t k = 0; k < ranks.size(); ++k) sequences.emplace_back(seed, kCalls, kMaxBytes, ranks[k], n, comms[k]);
  std::vector<Sequence*> all;
  for (Sequence& s : sequences) all.push_back(&s);
  while (!sequences[0].done() && !f.count) random_calls::run_together(all, f);
  for (ncclComm_t c : comms) MP_NCCL(f, ncclCommDestroy(c));
  return f.count;
}

}  // namespace

TEST_CASE("one thread drives two ranks in groups, the others call alone", "[mp][threads][groups]") {
  for (uint64_t seed : seeds({1, 2})) {
    INFO("seed " << seed);
    const int n = 4;
    ncclUniqueId id;
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    int grouped_failures = 0;
    std::vector<int> failures(n, 0);
    std::vector<std::thread> threads;
    threads.emplace_back([&] { grouped_failures = drive_in_groups(id, n, {0, 2}, seed); });
    for (int r : {1, 3})
      threads.emplace_back([&, r] {
        Failures f;
        ncclComm_t comm = nullptr;
        MP_NCCL(f, ncclCommInitRank(&comm, n, id, r));
        if (comm) {
          Sequence s(seed, kCalls, kMaxBytes, r, n, comm);
          while (!s.done() && !f.count) s.run_group(f);
          MP_NCCL(f, ncclCommDestroy(comm));
        }
        failures[r] = f.count;
      });
    for (std::thread& t : threads) t.join();
    CHECK(grouped_failures == 0);
    for (int r : {1, 3}) CHECK(failures[r] == 0);
  }
}

TEST_CASE("ranks that put lone calls in groups meet ranks that do not", "[mp][processes][groups]") {
  for (int n : {2, 3}) {
    INFO("nranks " << n);
    const uint64_t seed = seeds({10 + uint64_t(n)})[0];
    CHECK(run_ranks_as_processes(n, [seed](int rank, int nr, ncclComm_t comm, Failures& f) {
            Sequence s(seed, kCalls, kMaxBytes, rank, nr, comm);
            s.group_lone_calls(rank % 2 == 0);
            while (!s.done() && !f.count) s.run_group(f);
          }) == 0);
  }
}

TEST_CASE("a rank whose communicator is nonblocking meets blocking peers", "[mp][processes][groups][nonblocking]") {
  // Rank 0's calls run in the background and return ncclInProgress; its
  // peers' small calls run on the boards at once.
  auto init = [](ncclComm_t* comm, int n, const ncclUniqueId& id, int rank) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = rank == 0 ? 0 : 1;
    ncclResult_t r = ncclCommInitRankConfig(comm, n, id, rank, &config);
    ncclResult_t state = r;
    while (r == ncclInProgress && ncclCommGetAsyncError(*comm, &state) == ncclSuccess && state == ncclInProgress) {
    }
    return r == ncclInProgress ? state : r;
  };
  const uint64_t seed = seeds({20})[0];
  CHECK(run_ranks_as_processes(3, [seed](int rank, int n, ncclComm_t comm, Failures& f) {
          Sequence s(seed, kCalls, kMaxBytes, rank, n, comm);
          s.nonblocking(rank == 0);
          while (!s.done() && !f.count) s.run_group(f);
        }, 60, {}, init) == 0);
}

namespace {

// Even ranks put a large AllReduce (where ring would run, so StragglAR may)
// in a group with a small one; odd ranks call both alone.  Rank 1 is late
// for the first rounds (auto then plans StragglAR for it), then nobody.
RankBody large_allreduce_grouped_on_even_ranks(int rounds) {
  return [rounds](int rank, int n, ncclComm_t comm, Failures& f) {
    constexpr size_t kCount = (size_t(8) << 20) / sizeof(float) + 5;
    std::vector<float> in(kCount), out(kCount), small_in(8, float(rank + 1)), small_out(8);
    for (int round = 0; round < rounds && !f.count; ++round) {
      for (size_t i = 0; i < kCount; ++i) in[i] = float((size_t(rank) * 5 + i + size_t(round)) % 13);
      if (rank == 1 && round < rounds / 2) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (rank % 2 == 0) MP_NCCL(f, ncclGroupStart());
      MP_NCCL(f, ncclAllReduce(in.data(), out.data(), kCount, ncclFloat, ncclSum, comm, nullptr));
      MP_NCCL(f, ncclAllReduce(small_in.data(), small_out.data(), 8, ncclFloat, ncclSum, comm, nullptr));
      if (rank % 2 == 0) MP_NCCL(f, ncclGroupEnd());
      size_t wrong = 0;
      for (size_t i = 0; i < kCount; ++i) {
        float want = 0;
        for (int r = 0; r < n; ++r) want += float((size_t(r) * 5 + i + size_t(round)) % 13);
        wrong += out[i] != want;
      }
      if (wrong) f.fail(fmt::format("round {}: {} wrong in the large AllReduce", round, wrong));
      if (small_out[7] != float(n * (n + 1) / 2)) f.fail(fmt::format("round {}: the small AllReduce", round));
    }
  };
}

}  // namespace

TEST_CASE("BRAID_STRAGGLER: an AllReduce grouped with other work on some ranks only", "[mp][processes][groups]") {
  // A fixed late rank is planned for in any group.  auto and eager decide
  // the late rank as the call starts, on every rank at the same point of
  // the communicator's calls however they were grouped (before, only a
  // lone AllReduce was decided: the ranks that grouped it ran ring, their
  // peers waited for them on the duration exchange or the arrival board).
  for (const char* setting : {"1", "auto", "eager"}) {
    INFO("BRAID_STRAGGLER=" << setting);
    CHECK(run_ranks_as_processes(4, large_allreduce_grouped_on_even_ranks(12), 120, [setting](int) {
            setenv("BRAID_STRAGGLER", setting, 1);
            setenv("BRAID_TIMEOUT", "30", 1);
          }) == 0);
  }
}

TEST_CASE("BRAID_STRAGGLER=auto and eager: one thread drives the even ranks in groups", "[mp][threads][groups]") {
  for (const char* setting : {"auto", "eager"}) {
    INFO("BRAID_STRAGGLER=" << setting);
    ScopedEnv env("BRAID_STRAGGLER", setting);
    ScopedEnv timeout("BRAID_TIMEOUT", "30");
    const int n = 4;
    ncclUniqueId id;
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    std::vector<int> failures(n, 0);
    std::vector<std::thread> threads;
    // Ranks 0 and 2 on one thread: each step, the same call of both in one group.
    threads.emplace_back([&] {
      Failures f;
      ncclComm_t comms[2] = {};
      MP_NCCL(f, ncclGroupStart());
      for (int k = 0; k < 2; ++k) MP_NCCL(f, ncclCommInitRank(&comms[k], n, id, 2 * k));
      MP_NCCL(f, ncclGroupEnd());
      constexpr size_t kCount = 300001;
      std::vector<std::vector<float>> in(2, std::vector<float>(kCount)), out = in;
      for (int call = 0; call < 10 && !f.count; ++call) {
        MP_NCCL(f, ncclGroupStart());
        for (int k = 0; k < 2; ++k) {
          for (size_t i = 0; i < kCount; ++i) in[k][i] = float((size_t(2 * k) + i + size_t(call)) % 7);
          MP_NCCL(f, ncclAllReduce(in[k].data(), out[k].data(), kCount, ncclFloat, ncclSum, comms[k], nullptr));
        }
        MP_NCCL(f, ncclGroupEnd());
        for (int k = 0; k < 2; ++k)
          for (size_t i = 0; i < kCount; ++i) {
            float want = 0;
            for (int r = 0; r < n; ++r) want += float((size_t(r) + i + size_t(call)) % 7);
            if (out[k][i] != want) {
              f.fail(fmt::format("rank {} call {}: element {} is {}, not {}", 2 * k, call, i, out[k][i], want));
              break;
            }
          }
      }
      for (ncclComm_t c : comms) MP_NCCL(f, ncclCommDestroy(c));
      failures[0] = f.count;
    });
    for (int r : {1, 3})
      threads.emplace_back([&, r] {
        Failures f;
        ncclComm_t comm = nullptr;
        MP_NCCL(f, ncclCommInitRank(&comm, n, id, r));
        constexpr size_t kCount = 300001;
        std::vector<float> in(kCount), out(kCount);
        for (int call = 0; call < 10 && comm && !f.count; ++call) {
          if (r == 3 && call < 6) std::this_thread::sleep_for(std::chrono::milliseconds(20));
          for (size_t i = 0; i < kCount; ++i) in[i] = float((size_t(r) + i + size_t(call)) % 7);
          MP_NCCL(f, ncclAllReduce(in.data(), out.data(), kCount, ncclFloat, ncclSum, comm, nullptr));
        }
        if (comm) MP_NCCL(f, ncclCommDestroy(comm));
        failures[r] = f.count;
      });
    for (std::thread& t : threads) t.join();
    for (int r : {0, 1, 3}) CHECK(failures[r] == 0);
  }
}

// BRAID_STRAGGLER=auto: the detector's decisions on synthetic durations, and
// the whole path (duration exchange beside the AllReduce, agreement, switch
// to StragglAR) on ranks as threads through braid's internal API.
#include <catch2/catch.hpp>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <random>
#include <thread>

#include <unistd.h>

#include "src/bootstrap/bootstrap.h"
#include "src/runtime/comm.h"
#include "src/runtime/group.h"
#include "src/runtime/init.h"
#include "src/plan/planner.h"
#include "src/plan/straggler.h"
#include "scoped_env.h"

using namespace braid;

namespace {

constexpr int64_t kMs = 1'000'000;

// Durations of one call where `late` arrived `delay` after everyone else.
std::vector<int64_t> call_with(int n, int late, int64_t delay, std::mt19937& rng) {
  std::uniform_int_distribution<int64_t> jitter(0, kMs / 2);
  std::vector<int64_t> d(n);
  for (int r = 0; r < n; ++r) d[r] = 3 * kMs + jitter(rng) + (r == late ? 0 : delay);
  return d;
}

}  // namespace

TEST_CASE("BRAID_STRAGGLER parses off, auto and a rank", "[stragglar][auto]") {
  {
    ScopedEnv e("BRAID_STRAGGLER", "auto");
    CHECK(straggler_setting(4).mode == StragglerMode::Auto);
  }
  {
    ScopedEnv e("BRAID_STRAGGLER", "eager");
    CHECK(straggler_setting(4).mode == StragglerMode::Eager);
    CHECK(straggler_setting(65).mode == StragglerMode::Off);  // one 64-bit arrival word
  }
  {
    ScopedEnv e("BRAID_STRAGGLER", "3");
    StragglerSetting s = straggler_setting(4);
    CHECK(s.mode == StragglerMode::Fixed);
    CHECK(s.rank == 3);
  }
  for (const char* bad : {"4", "-1", "x", "2x"}) {
    ScopedEnv e("BRAID_STRAGGLER", bad);
    CHECK(straggler_setting(4).mode == StragglerMode::Off);
  }
  CHECK(straggler_setting(4).mode == StragglerMode::Off);
}

TEST_CASE("BRAID_STRAGGLER as the number the ranks agree on, and back", "[stragglar][agree]") {
  const StragglerSetting settings[] = {{}, {StragglerMode::Auto, -1}, {StragglerMode::Eager, -1},
                                       {StragglerMode::Fixed, 0}, {StragglerMode::Fixed, 5}};
  std::vector<int32_t> codes;
  for (const StragglerSetting& s : settings) {
    const int32_t code = straggler_code(s);
    CHECK(std::find(codes.begin(), codes.end(), code) == codes.end());  // settings apart never agree
    codes.push_back(code);
    const StragglerSetting back = straggler_of_code(code);
    CHECK(back.mode == s.mode);
    CHECK(back.rank == s.rank);
  }
  // A tracker takes the setting it is given, not this process's variable.
  ScopedEnv e("BRAID_STRAGGLER", "auto");
  const StragglerTracker fixed(4, 0, StragglerSetting{StragglerMode::Fixed, 2});
  CHECK(fixed.fixed_straggler() == 2);
  CHECK_FALSE(fixed.tracks(1 << 20));
  CHECK(StragglerTracker(4, 0).tracks(1 << 20));
}

TEST_CASE("the detector picks a persistent straggler within persist_calls", "[stragglar][auto]") {
  std::mt19937 rng(1);
  StragglerDetector d;
  for (int call = 0; call < 2; ++call) {
    d.observe(call_with(8, 5, 20 * kMs, rng), kMs);
    CHECK(d.current() == -1);
  }
  d.observe(call_with(8, 5, 20 * kMs, rng), kMs);
  CHECK(d.current() == 5);
  // A delay below the break-even threshold is not worth switching for.
  StragglerDetector small;
  for (int call = 0; call < 20; ++call) small.observe(call_with(8, 5, kMs / 2, rng), 2 * kMs);
  CHECK(small.current() == -1);
}

TEST_CASE("the detector never picks anyone without a straggler", "[stragglar][auto]") {
  // Jitter up to 4x the threshold, no persistent late rank.
  std::mt19937 rng(7);
  std::uniform_int_distribution<int64_t> jitter(0, 4 * kMs);
  StragglerDetector d;
  for (int call = 0; call < 2000; ++call) {
    std::vector<int64_t> v(6);
    for (int64_t& x : v) x = 10 * kMs + jitter(rng);
    d.observe(v, kMs);
    CHECK(d.current() == -1);
  }
}

TEST_CASE("the detector follows a changing straggler and lets go", "[stragglar][auto]") {
  std::mt19937 rng(3);
  StragglerDetector d;
  for (int call = 0; call < 5; ++call) d.observe(call_with(4, 1, 10 * kMs, rng), kMs);
  CHECK(d.current() == 1);
  // One late call by someone else, or one on-time call, changes nothing.
  d.observe(call_with(4, 2, 10 * kMs, rng), kMs);
  d.observe(call_with(4, -1, 0, rng), kMs);
  d.observe(call_with(4, 1, 10 * kMs, rng), kMs);
  CHECK(d.current() == 1);
  // Another rank persistently late: switch straight to it.
  for (int call = 0; call < 3; ++call) d.observe(call_with(4, 3, 10 * kMs, rng), kMs);
  CHECK(d.current() == 3);
  // The pattern goes away: back to none after release_calls.
  for (int call = 0; call < 2; ++call) d.observe(call_with(4, -1, 0, rng), kMs);
  CHECK(d.current() == 3);
  d.observe(call_with(4, -1, 0, rng), kMs);
  CHECK(d.current() == -1);
  // Incomplete data (a rank's first call) is no evidence either way.
  d.observe({-1, 5 * kMs, 5 * kMs, 5 * kMs}, kMs);
  CHECK(d.current() == -1);
}

TEST_CASE("agreement: ranks with different local views decide alike", "[stragglar][auto]") {
  // Every rank feeds the same gathered vector to its own detector; what it
  // measured locally enters only through that vector, so the decisions
  // match call for call even when the evidence is borderline.
  std::mt19937 rng(11);
  std::vector<StragglerDetector> ranks(5);
  for (int call = 0; call < 300; ++call) {
    int late = (call / 17) % 6 - 1;  // -1 (none) or a rank, changing every 17 calls
    int64_t delay = (call % 5) * kMs / 2;  // sometimes under, sometimes over the threshold
    std::vector<int64_t> gathered = call_with(5, late, delay, rng);
    for (StragglerDetector& d : ranks) d.observe(gathered, kMs);
    for (StragglerDetector& d : ranks) CHECK(d.current() == ranks[0].current());
  }
}

TEST_CASE("threshold: the model's break-even delay grows with the message", "[stragglar][auto]") {
  CHECK(straggler_threshold_ns(4, 1 << 20) <= straggler_threshold_ns(4, 64 << 20));
  CHECK(straggler_threshold_ns(8, 256 << 20) > 10 * kMs);
  CHECK(straggler_threshold_ns(4, 4096) >= 200'000);  // the noise floor
  // On GPUs: the launch-skew floor, and a faster link's smaller break-even.
  CHECK(device_straggler_threshold_ns(4, 4096) == 100'000);
  CHECK(device_straggler_threshold_ns(8, 1ull << 30) > device_straggler_threshold_ns(8, 1 << 20));
  CHECK(device_straggler_threshold_ns(8, 256 << 20) < straggler_threshold_ns(8, 256 << 20));
}

TEST_CASE("auto end to end: a late rank is picked, every rank agrees", "[stragglar][auto][threads]") {
  ScopedEnv e("BRAID_STRAGGLER", "auto");
  const int n = 4, late = 2, calls = 14;
  ncclUniqueId id;
  REQUIRE(bootstrap_create_root(&id).is_ok());
  std::vector<std::unique_ptr<ncclComm>> comms(n);
  std::vector<std::vector<int>> decisions(n);
  std::vector<int> failures(n, 0);
  std::vector<std::thread> threads;
  const size_t count = 1 << 16;  // 256 KiB of floats: a tracked call
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      comms[r] = std::make_unique<ncclComm>();
      comms[r]->rank = r;  // comm_init expects the caller to have set these
      comms[r]->nranks = n;
      if (!comm_init(comms[r].get(), id).is_ok()) {
        ++failures[r];
        return;
      }
      comm_register(comms[r].get());  // groups only run on live communicators
      std::vector<float> buf(count);
      for (int call = 0; call < calls; ++call) {
        for (size_t i = 0; i < count; ++i) buf[i] = float(r + 1 + (i % 7));
        // 80 ms: far above the break-even delay and above scheduling noise
        // on a loaded two-core machine.
        if (r == late) std::this_thread::sleep_for(std::chrono::milliseconds(80));
        CollectiveCall c;
        c.sendbuff = buf.data();
        c.recvbuff = buf.data();
        c.count = count;
        if (!enqueue(comms[r].get(), c).is_ok()) ++failures[r];
        for (size_t i = 0; i < count; ++i)
          if (buf[i] != float(n * (n + 1) / 2 + n * (i % 7))) {
            ++failures[r];
            break;
          }
        decisions[r].push_back(comms[r]->plans->straggler(n, r).detector().current());
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) CHECK(failures[r] == 0);
  for (int r = 1; r < n; ++r) CHECK(decisions[r] == decisions[0]);
  // Durations travel one call late and persist_calls = 3: picked after call
  // 4 at the earliest; allow noise to cost a few calls.
  REQUIRE(decisions[0].size() == size_t(calls));
  CHECK(decisions[0].back() == late);
  CHECK(decisions[0][2] == -1);
  // The pick is for the calls it tracks: small ones keep their fast paths
  // (the CUDA backend's LL protocol, which a straggler would turn off).
  const StragglerTracker& tracker = comms[0]->plans->straggler(n, 0);
  CHECK(tracker.straggler_for(count * sizeof(float)) == late);
  CHECK(tracker.straggler_for(8) == -1);
  for (auto& c : comms)
    if (c) comm_unregister(c.get());
  comms.clear();
}

TEST_CASE("host calls decided as they start: large AllReduces from 3 ranks, eager on one host only",
          "[stragglar][auto][eager]") {
  auto comm_of = [](int n, bool one_host) {
    TransportContext comm;
    comm.nranks = n;
    comm.peers.resize(size_t(n));
    for (int r = 0; r < n; ++r) comm.peers[size_t(r)].host_hash = one_host ? 7 : uint64_t(r);
    return comm;
  };
  const uint64_t large = 1 << 20, small = 32 << 10;
  for (const char* mode : {"auto", "eager"}) {
    INFO(mode);
    ScopedEnv e("BRAID_STRAGGLER", mode);
    StragglerTracker three(3, 0), two(2, 0);
    CHECK(three.decides_at_start(comm_of(3, true), large));
    CHECK_FALSE(three.decides_at_start(comm_of(3, true), small));  // its fast paths
    // Two ranks: StragglAR has nothing to hide and moves more than ring.
    CHECK_FALSE(two.decides_at_start(comm_of(2, true), large));
    // Across hosts auto still exchanges durations; eager needs the shared board.
    StragglerTracker spread(4, 0);
    CHECK(spread.decides_at_start(comm_of(4, false), large) == (std::string(mode) == "auto"));
  }
  ScopedEnv fixed("BRAID_STRAGGLER", "1");
  StragglerTracker tracker(3, 0);
  CHECK_FALSE(tracker.decides_at_start(comm_of(3, true), large));  // planned with the group
  CHECK(tracker.fixed_straggler() == 1);
}

TEST_CASE("eager on a device backend: one thread arrives for its ranks before any of them waits",
          "[stragglar][eager][threads]") {
  // run_cuda_group's order: a thread driving ranks 0-2 of 4 in a group
  // arrives for all three, then plans each; rank 3's thread comes late.
  // Arriving and waiting rank by rank, rank 0 would wait for 3 arrivals
  // with only itself and (eventually) rank 3 able to make them.
  ScopedEnv e("BRAID_STRAGGLER", "eager");
  ScopedEnv t("BRAID_TIMEOUT", "20");
  constexpr int n = 4, kCalls = 6;
  constexpr uint64_t kBytes = 1 << 20;
  std::vector<TransportContext> comms(n);
  std::vector<std::unique_ptr<StragglerTracker>> trackers;
  for (int r = 0; r < n; ++r) {
    comms[r].comm_hash = 0xea6e0000u + uint64_t(::getpid());
    comms[r].rank = r;
    comms[r].nranks = n;
    comms[r].peers.resize(n);
    for (PeerInfo& p : comms[r].peers) p.pid = ::getpid();  // ranks as threads of one process
    trackers.push_back(std::make_unique<StragglerTracker>(n, r));
  }
  std::vector<std::vector<int>> named(kCalls, std::vector<int>(n, -2));
  std::vector<Status> failed(n);
  // Stands in for the AllReduce: no rank leaves a call before all entered it.
  std::barrier call_done(2);
  std::thread late([&] {
    for (int call = 0; call < kCalls; ++call) {
      // Late by far more than a loaded machine delays the others (20 ms lost
      // to an ASan run beside a build: another rank came last).
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      if (failed[3].is_ok()) failed[3] = trackers[3]->plan_call(comms[3], nullptr, kBytes, &named[call][3]);
      call_done.arrive_and_wait();
    }
  });
  for (int call = 0; call < kCalls; ++call) {
    for (int r = 0; r < 3 && failed[0].is_ok(); ++r) failed[0] = trackers[r]->arrive_ahead(comms[r], nullptr, kBytes);
    for (int r = 0; r < 3 && failed[0].is_ok(); ++r)
      failed[0] = trackers[r]->plan_call(comms[r], nullptr, kBytes, &named[call][r]);
    call_done.arrive_and_wait();
  }
  late.join();
  INFO(failed[0].message());
  REQUIRE(failed[0].is_ok());
  REQUIRE(failed[3].is_ok());
  for (int call = 0; call < kCalls; ++call)
    for (int r = 0; r < n; ++r) CHECK(named[call][r] == 3);
}

// The lock-free live-communicator table (src/runtime/live_comms.h).  Handles
// here are fake addresses: the table stores and compares them, never
// dereferences them.
#include <atomic>
#include <catch2/catch.hpp>
#include <memory>
#include <thread>
#include <vector>

#include "src/runtime/live_comms.h"

using braid::LiveComms;

namespace {

// n distinct, never-dereferenced handles, 16-byte aligned like allocations.
std::vector<const ncclComm*> fake_handles(size_t n, uintptr_t base = 0x7f0000000000) {
  std::vector<const ncclComm*> out;
  for (size_t i = 0; i < n; ++i) out.push_back(reinterpret_cast<const ncclComm*>(base + 16 * i));
  return out;
}

}  // namespace

TEST_CASE("live comms: insert, find, erase once, and garbage is never live", "[live_comms]") {
  auto table = std::make_unique<LiveComms>();
  auto h = fake_handles(3);
  table->insert(h[0]);
  table->insert(h[1]);
  CHECK(table->contains(h[0]));
  CHECK(table->contains(h[1]));
  CHECK_FALSE(table->contains(h[2]));
  CHECK_FALSE(table->contains(nullptr));
  CHECK_FALSE(table->contains(reinterpret_cast<const ncclComm*>(uintptr_t(1))));  // the tombstone's value
  int ran = 0;
  CHECK(table->if_live(h[1], [&] { ++ran; }));
  CHECK_FALSE(table->if_live(h[2], [&] { ++ran; }));
  CHECK(ran == 1);
  CHECK(table->erase(h[0]));
  CHECK_FALSE(table->erase(h[0]));  // destroyed twice
  CHECK_FALSE(table->contains(h[0]));
  CHECK(table->contains(h[1]));
}

TEST_CASE("live comms: more communicators than slots, and many lifetimes through the same slots", "[live_comms]") {
  auto table = std::make_unique<LiveComms>();
  auto h = fake_handles(LiveComms::kSlots + 100);
  for (auto* c : h) table->insert(c);
  for (auto* c : h) REQUIRE(table->contains(c));
  int ran = 0;
  CHECK(table->if_live(h.back(), [&] { ++ran; }));  // one of the overflow
  CHECK(ran == 1);
  // A full table: every probe run now has tombstones in it, and the
  // communicators past them must still be found.
  for (size_t i = 0; i < h.size(); i += 2) REQUIRE(table->erase(h[i]));
  for (size_t i = 0; i < h.size(); ++i) REQUIRE(table->contains(h[i]) == (i % 2 == 1));
  for (size_t i = 1; i < h.size(); i += 2) REQUIRE(table->erase(h[i]));
  // Create and destroy far more communicators than the table holds: the
  // tombstones are reused and every new one is found.
  auto later = fake_handles(20 * LiveComms::kSlots, 0x7e0000000000);
  for (size_t i = 0; i < later.size(); ++i) {
    table->insert(later[i]);
    REQUIRE(table->contains(later[i]));
    if (i >= 8) REQUIRE(table->erase(later[i - 8]));  // a few alive at a time
  }
  for (size_t i = later.size() - 8; i < later.size(); ++i) CHECK(table->contains(later[i]));
  CHECK_FALSE(table->contains(later[0]));
}

TEST_CASE("live comms: a Use lasts its scope, nested beyond the thread's hazards too, and outlives an erase",
          "[live_comms]") {
  auto table = std::make_unique<LiveComms>();
  auto h = fake_handles(3);
  table->insert(h[0]);
  table->insert(h[1]);
  {
    LiveComms::Use outer(*table, h[0]);
    CHECK(outer.live());
    CHECK(table->in_use(h[0]));
    CHECK_FALSE(table->in_use(h[1]));
    std::vector<std::unique_ptr<LiveComms::Use>> nested;  // popped from the back: innermost first
    for (int i = 0; i < LiveComms::kHazardsPerThread + 2; ++i) {
      nested.push_back(std::make_unique<LiveComms::Use>(*table, h[1]));
      CHECK(nested.back()->live());
    }
    CHECK(table->in_use(h[1]));
    CHECK(table->erase(h[1]));
    CHECK_FALSE(LiveComms::Use(*table, h[1]).live());  // no use starts after the erase
    CHECK(table->in_use(h[1]));                         // the ones before still count
    while (nested.size() > 1) {
      nested.pop_back();
      CHECK(table->in_use(h[1]));
    }
    nested.pop_back();
    CHECK_FALSE(table->in_use(h[1]));
    CHECK(table->in_use(h[0]));
  }
  CHECK_FALSE(table->in_use(h[0]));
  CHECK_FALSE(LiveComms::Use(*table, h[2]).live());  // never inserted
  CHECK_FALSE(table->in_use(h[2]));
}

TEST_CASE("live comms: after erase no use starts, and in_use covers every use that did", "[live_comms]") {
  // Many lifetimes of one handle under readers that keep trying to use it:
  // once erase returned and in_use says no, nothing may run on it until it
  // is inserted again.
  for (bool membarrier : {true, false}) {
    INFO("membarrier " << membarrier);
    auto table = std::make_unique<LiveComms>(membarrier);
    auto h = fake_handles(2);
    table->insert(h[1]);
    std::atomic<bool> stop{false};
    std::atomic<int> inside{0};
    std::atomic<uint64_t> runs{0}, other_runs{0};
    std::vector<std::thread> readers;
    for (int t = 0; t < 3; ++t)
      readers.emplace_back([&] {
        while (!stop.load()) {
          table->if_live(h[0], [&] {
            inside.fetch_add(1);
            std::this_thread::yield();  // stay inside a while
            runs.fetch_add(1);
            inside.fetch_sub(1);
          });
          table->if_live(h[1], [&] { other_runs.fetch_add(1); });
        }
      });
    int ran_inside = 0, ran_after = 0;
    for (int round = 0; round < 100; ++round) {
      table->insert(h[0]);
      const uint64_t before = runs.load();
      while (runs.load() < before + 20) std::this_thread::yield();
      REQUIRE(table->erase(h[0]));
      while (table->in_use(h[0])) std::this_thread::yield();  // what freeing a communicator waits for
      ran_inside += inside.load() != 0;
      const uint64_t runs_when_unused = runs.load();
      const uint64_t other = other_runs.load();
      while (other_runs.load() < other + 50) std::this_thread::yield();  // readers keep trying
      ran_after += runs.load() != runs_when_unused;
    }
    stop.store(true);
    for (auto& t : readers) t.join();
    CHECK(ran_inside == 0);
    CHECK(ran_after == 0);
  }
}

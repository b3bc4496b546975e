// The shared-memory connection's slot rings (src/transport/shm.cc), both
// ends driven by one thread: two thread ranks of one process, so no timing
// decides what is tested.  use_slots shrinks or grows the part of the ring a
// sender cycles through, between any two fragments; nothing may be lost,
// reordered or overwritten before the receiver released it.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <random>
#include <set>

#include "braid/verify.h"
#include "src/transport/transport.h"

using namespace braid;

namespace {

struct PipePair {
  std::unique_ptr<Transport> a, b;
  SendPipe* send = nullptr;
  RecvPipe* recv = nullptr;

  explicit PipePair(uint64_t comm_hash) {
    TransportContext ctx;
    ctx.comm_hash = comm_hash;
    ctx.nranks = 2;
    ctx.peers.resize(2);
    for (PeerInfo& p : ctx.peers) p.pid = getpid();
    ctx.rank = 0;
    REQUIRE(make_shm_transport(ctx, &a).is_ok());
    ctx.rank = 1;
    REQUIRE(make_shm_transport(ctx, &b).is_ok());
    REQUIRE(a->send_pipe(1, 0, &send).is_ok());
    REQUIRE(b->recv_pipe(0, 0, &recv).is_ok());
  }

  // Polls until the connection is set up (both ends attach on first use).
  void* acquire_first() {
    void* slot = nullptr;
    const void* data = nullptr;
    size_t bytes = 0;
    for (int i = 0; i < 1000 && !slot; ++i) {
      REQUIRE(send->try_acquire(&slot).is_ok());
      REQUIRE(recv->try_acquire(&data, &bytes).is_ok());
    }
    REQUIRE(slot);
    return slot;
  }
};

uint64_t unique_hash() { return (uint64_t(getpid()) << 32) ^ uint64_t(std::random_device{}()); }

}  // namespace

TEST_CASE("shm pipe: use_slots(2) cycles through the ring's first two slots only", "[shm]") {
  PipePair p(unique_hash());
  REQUIRE(p.a->slots() > 2);
  p.send->use_slots(2);
  std::set<void*> used{p.acquire_first()};
  uint64_t next_received = 0;
  for (uint64_t k = 0; k < 20; ++k) {
    void* slot = nullptr;
    REQUIRE(p.send->try_acquire(&slot).is_ok());
    if (k >= 2 && k - next_received >= 2) {  // two fragments in flight: the ring of two is full
      CHECK(slot == nullptr);
      const void* data = nullptr;
      size_t bytes = 0;
      REQUIRE(p.recv->try_acquire(&data, &bytes).is_ok());
      REQUIRE(data);
      REQUIRE(bytes == sizeof k);
      CHECK(*static_cast<const uint64_t*>(data) == next_received++);
      REQUIRE(p.recv->release().is_ok());
      REQUIRE(p.send->try_acquire(&slot).is_ok());
    }
    REQUIRE(slot);
    used.insert(slot);
    std::memcpy(slot, &k, sizeof k);
    REQUIRE(p.send->commit(sizeof k).is_ok());
  }
  CHECK(used.size() == 2);
  // Take the last two, so the sender's transport has nothing to wait for when it closes.
  for (; next_received < 20; ++next_received) {
    const void* data = nullptr;
    size_t bytes = 0;
    REQUIRE(p.recv->try_acquire(&data, &bytes).is_ok());
    REQUIRE(data);
    CHECK(*static_cast<const uint64_t*>(data) == next_received);
    REQUIRE(p.recv->release().is_ok());
  }
}

TEST_CASE("shm pipe: the sender changes the slots in use mid-stream, nothing is lost or overwritten", "[shm]") {
  PipePair p(unique_hash());
  p.acquire_first();
  const int slots = p.a->slots();
  std::mt19937 rng(7);
  std::deque<uint64_t> in_flight;
  uint64_t sent = 0, received = 0;
  const uint64_t total = 3000;
  const size_t bytes = p.a->slot_bytes();
  std::vector<uint64_t> fill(bytes / sizeof(uint64_t));
  for (uint64_t step = 0; step < 20 * total && received < total; ++step) {
    if (rng() % 17 == 0) p.send->use_slots(int(rng() % (slots + 2)));  // also out of range: clamped
    if (sent < total && rng() % 2) {
      void* slot = nullptr;
      REQUIRE(p.send->try_acquire(&slot).is_ok());
      if (in_flight.empty()) CHECK(slot);  // every slot is free
      if (!slot) CHECK(in_flight.size() >= size_t(kMinSlots));
      if (slot) {
        // Whole slot, so a later overwrite of an unreleased fragment shows anywhere in it.
        std::fill(fill.begin(), fill.end(), sent);
        std::memcpy(slot, fill.data(), bytes);
        REQUIRE(p.send->commit(bytes).is_ok());
        in_flight.push_back(sent++);
        CHECK(in_flight.size() <= size_t(slots));
      }
    } else {
      const void* data = nullptr;
      size_t got = 0;
      REQUIRE(p.recv->try_acquire(&data, &got).is_ok());
      if (!data) {
        REQUIRE(in_flight.empty());  // a committed fragment is visible at once (one thread)
        continue;
      }
      REQUIRE(got == bytes);
      const auto* words = static_cast<const uint64_t*>(data);
      REQUIRE(!in_flight.empty());
      for (size_t i = 0; i < fill.size(); i += 97) REQUIRE(words[i] == received);
      REQUIRE(words[fill.size() - 1] == received);
      in_flight.pop_front();
      ++received;
      REQUIRE(p.recv->release().is_ok());
    }
  }
  CHECK(received == total);  // and so nothing is left for the sender's transport to wait for
}

TEST_CASE("shm transport: a sender's close does not wait for fragments a receiver that closed will never take",
          "[shm]") {
  // The receiving rank closes first with a fragment untaken (an RMA goodbye
  // to a rank whose transport is gone).  Its sender closes without waiting
  // for it: before, 1 s after an abort, and BRAID_TIMEOUT otherwise.
  setenv("BRAID_TIMEOUT", "30", 1);
  for (const bool aborted : {false, true}) {
    INFO("aborted " << aborted);
    PipePair p(unique_hash());
    void* slot = p.acquire_first();
    std::memcpy(slot, "bye", 4);
    REQUIRE(p.send->commit(4).is_ok());
    p.b.reset();
    if (aborted) p.a->abort();
    const auto start = std::chrono::steady_clock::now();
    p.a.reset();
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::milliseconds(500));
  }
  unsetenv("BRAID_TIMEOUT");
}

// A device communicator's resource buffer (src/devapi/resources.h): the
// requirement calls' formulas (NCCL 2.28.9's), ncclDevCommCreate's layout
// of the devComm's own barriers and the user's list, and bad input refused
// with nothing written.
#include <catch2/catch.hpp>

#include <climits>
#include <cstring>

#include "src/devapi/resources.h"

using namespace braid;
using namespace braid::devapi;
namespace v = braid::devapi::v22809;

namespace {

// A requirement full of junk, to see that the calls clear what they do not set.
v::DevResourceRequirements junk() {
  v::DevResourceRequirements r;
  std::memset(&r, 0x5a, sizeof r);
  return r;
}

}  // namespace

TEST_CASE("device resources: the requirement calls give NCCL's sizes", "[devapi][resources]") {
  v::LsaBarrierHandle lsa{};
  v::DevResourceRequirements r = junk();
  REQUIRE(lsa_barrier_requirement(v::Team{4, 1, 1}, 3, &lsa, &r).is_ok());
  CHECK(r.bufferSize == (3 * 3 + 3 * 4) * 4);  // saved epochs, inbox counters, then one inbox slot per peer
  CHECK(r.bufferAlign == 4);
  CHECK(r.outBufferHandle == &lsa.bufHandle);
  CHECK(lsa.nBarriers == 3);
  CHECK(r.next == nullptr);
  CHECK(r.ginSignalCount == 0);
  CHECK(r.outGinSignalStart == nullptr);

  v::GinBarrierHandle gin{};
  r = junk();
  REQUIRE(gin_barrier_requirement(2, &gin, &r).is_ok());
  CHECK(r.bufferSize == 2 * 4 * 4);  // a saved epoch per barrier and GIN context
  CHECK(r.bufferAlign == 4);
  CHECK(r.ginSignalCount == 2);
  CHECK(r.ginCounterCount == 0);
  CHECK(r.outGinSignalStart == &gin.signal0);
  CHECK(r.outBufferHandle == &gin.bufHandle);
  CHECK(r.outGinCounterStart == nullptr);

  v::LLA2AHandle a2a{};
  r = junk();
  REQUIRE(ll_a2a_requirement(3, 5, &a2a, &r).is_ok());
  CHECK(r.bufferSize == 3 * (1 + 2 * 5) * 16);  // per block a header and two banks of slots
  CHECK(r.bufferAlign == 16);
  CHECK(a2a.nSlots == 5);
  CHECK(r.outBufferHandle == &a2a.bufHandle);

  int slots = -1;
  REQUIRE(ll_a2a_slots(100, 12, &slots).is_ok());
  CHECK(slots == 200);  // 12-byte elements take two 8-byte slots
  REQUIRE(ll_a2a_slots(100, 8, &slots).is_ok());
  CHECK(slots == 100);
  REQUIRE(ll_a2a_slots(0, 1, &slots).is_ok());
  CHECK(slots == 0);
}

TEST_CASE("device resources: bad requirement arguments are refused", "[devapi][resources]") {
  v::LsaBarrierHandle lsa{};
  v::GinBarrierHandle gin{};
  v::LLA2AHandle a2a{};
  v::DevResourceRequirements r{};
  int slots = 7;
  CHECK(lsa_barrier_requirement(v::Team{2, 0, 1}, 1, nullptr, &r).code() == ncclInvalidArgument);
  CHECK(lsa_barrier_requirement(v::Team{2, 0, 1}, 1, &lsa, nullptr).code() == ncclInvalidArgument);
  CHECK(lsa_barrier_requirement(v::Team{2, 0, 1}, -1, &lsa, &r).code() == ncclInvalidArgument);
  CHECK(lsa_barrier_requirement(v::Team{0, 0, 1}, 1, &lsa, &r).code() == ncclInvalidArgument);
  CHECK(gin_barrier_requirement(-2, &gin, &r).code() == ncclInvalidArgument);
  CHECK(gin_barrier_requirement(1, nullptr, &r).code() == ncclInvalidArgument);
  CHECK(ll_a2a_requirement(-1, 4, &a2a, &r).code() == ncclInvalidArgument);
  CHECK(ll_a2a_requirement(1, -4, &a2a, &r).code() == ncclInvalidArgument);
  CHECK(ll_a2a_requirement(1, 4, &a2a, nullptr).code() == ncclInvalidArgument);
  CHECK(ll_a2a_slots(-1, 8, &slots).code() == ncclInvalidArgument);
  CHECK(ll_a2a_slots(8, -1, &slots).code() == ncclInvalidArgument);
  Status overflow = ll_a2a_slots(INT_MAX, 16, &slots);
  CHECK(overflow.code() == ncclInvalidArgument);
  CHECK_THAT(overflow.message(), Catch::Contains("ncclLLA2ACalcSlots"));
  CHECK(slots == 7);
  REQUIRE(ll_a2a_slots(8, 0, &slots).is_ok());  // as NCCL: no bytes, no slots
  CHECK(slots == 0);
  // Sizes past what a resource buffer addresses, where 64 bits would wrap.
  CHECK(ll_a2a_requirement(1 << 30, 1 << 29, &a2a, &r).code() == ncclInvalidArgument);
  CHECK(lsa_barrier_requirement(v::Team{INT_MAX, 0, 1}, INT_MAX, &lsa, &r).code() == ncclInvalidArgument);
}

TEST_CASE("device resources: the devComm's barriers, then the user's list, each at its alignment",
          "[devapi][resources]") {
  v::DevCommRequirements reqs{};
  reqs.barrierCount = 2;
  reqs.lsaBarrierCount = 1;       // the larger of the two counts wins
  reqs.railGinBarrierCount = 3;
  reqs.ginSignalCount = 5;        // the devComm's own signals come first
  reqs.ginCounterCount = 4;
  v::LLA2AHandle a2a{};
  v::DevResourceRequirements a2a_req{};
  REQUIRE(ll_a2a_requirement(2, 3, &a2a, &a2a_req).is_ok());  // 224 bytes, 16-aligned
  uint32_t custom_handle = 77, custom_signal = 77, custom_counter = 77;
  v::DevResourceRequirements custom{};
  custom.bufferSize = 1000;
  custom.bufferAlign = 4096;
  custom.ginSignalCount = 2;
  custom.ginCounterCount = 1;
  custom.outBufferHandle = &custom_handle;
  custom.outGinSignalStart = &custom_signal;
  custom.outGinCounterStart = &custom_counter;
  a2a_req.next = &custom;
  reqs.resourceRequirementsList = &a2a_req;

  v::LsaBarrierHandle lsa{};
  v::GinBarrierHandle rail{};
  ResourceLayout layout;
  REQUIRE(layout_resources(reqs, v::Team{4, 1, 1}, 2, 2 << 20, &lsa, &rail, &layout).is_ok());
  // Rail GIN barrier: offset 0, 3 x 4 x 4 = 48 bytes, signals 5..7.
  CHECK(rail.bufHandle == 0);
  CHECK(rail.signal0 == 5);
  // LSA barrier: at 128 (handle 1), (3 x 2 + 2 x 4) x 4 = 56 bytes.
  CHECK(lsa.bufHandle == 1);
  CHECK(lsa.nBarriers == 2);
  // LL AlltoAll: at 256 (handle 2), to 480.
  CHECK(a2a.bufHandle == 2);
  // The custom one: at 4096 (handle 32), signals from 8, counters from 4.
  CHECK(custom_handle == 32);
  CHECK(custom_signal == 8);
  CHECK(custom_counter == 4);
  CHECK(layout.signals == 10);
  CHECK(layout.counters == 5);
  CHECK(layout.shadows_offset == 5120);  // 4096 + 1000, to 128
  CHECK(layout.bytes == 2 << 20);        // 5120 + 2 contexts x 10 signals x 8, to the granularity

  // Nothing asked for: no buffer at all.
  v::DevCommRequirements none{};
  REQUIRE(layout_resources(none, v::Team{2, 0, 1}, 0, 4096, &lsa, &rail, &layout).is_ok());
  CHECK(layout.bytes == 0);
  CHECK(layout.signals == 0);
  CHECK(lsa.nBarriers == 0);
}

TEST_CASE("device resources: a bad list is refused and nothing is written", "[devapi][resources]") {
  uint32_t handle = 99;
  v::DevResourceRequirements r{};
  r.bufferSize = 64;
  r.bufferAlign = 8;
  r.outBufferHandle = &handle;
  v::DevCommRequirements reqs{};
  reqs.resourceRequirementsList = &r;
  v::LsaBarrierHandle lsa{123, 456};
  v::GinBarrierHandle rail{789, 1011};
  ResourceLayout layout;
  layout.bytes = 4242;
  auto refused = [&](const char* why) {
    Status s = layout_resources(reqs, v::Team{2, 0, 1}, 1, 4096, &lsa, &rail, &layout);
    INFO(why << ": " << s.message());
    CHECK(s.code() == ncclInvalidArgument);
    CHECK(handle == 99);
    CHECK(lsa.bufHandle == 123);
    CHECK(rail.signal0 == 789);
    CHECK(layout.bytes == 4242);
  };
  r.next = &r;
  refused("a list that loops");
  r.next = nullptr;
  r.bufferAlign = 48;
  refused("an alignment that is not a power of two");
  r.bufferAlign = 8;
  r.bufferSize = uint64_t(1) << 40;
  refused("more than handles can address");
  r.bufferSize = 64;
  // Two requirements that fit apart but put the second one's start where a
  // 32-bit handle (offset / 128) cannot reach.
  v::DevResourceRequirements second{};
  second.outBufferHandle = &handle;
  r.bufferSize = (uint64_t(1) << 39) - 64;
  r.next = &second;
  refused("a start past what a handle addresses");
  r.next = nullptr;
  r.bufferSize = 64;
  r.ginSignalCount = -1;
  refused("negative signals");
  r.ginSignalCount = 0;
  reqs.barrierCount = -1;
  refused("negative barriers");
  reqs.barrierCount = 0;
  CHECK(layout_resources(reqs, v::Team{2, 0, 1}, 5, 4096, &lsa, &rail, &layout).code() == ncclInvalidArgument);
  CHECK(layout_resources(reqs, v::Team{2, 0, 1}, 1, 3000, &lsa, &rail, &layout).code() == ncclInvalidArgument);
  CHECK(layout_resources(reqs, v::Team{2, 0, 1}, 1, 4096, nullptr, &rail, &layout).code() == ncclInvalidArgument);
  REQUIRE(layout_resources(reqs, v::Team{2, 0, 1}, 1, 4096, &lsa, &rail, &layout).is_ok());
  CHECK(handle == 0);  // the barriers (none) take no bytes: it starts the buffer
  CHECK(layout.bytes == 4096);
}

TEST_CASE("device resources: 2.30's GIN barrier, and the requirement that serves either ABI", "[devapi][resources]") {
  v::GinBarrierHandle gin{};
  v::DevResourceRequirements r = junk();
  REQUIRE(gin_barrier_requirement_v23000(v::Team{3, 0, 1}, 2, &gin, &r).is_ok());
  CHECK(r.bufferSize == 0);  // 2.30: no saved epochs, a signal per barrier and peer
  CHECK(r.ginSignalCount == 2 * 3);
  CHECK(r.outGinSignalStart == &gin.signal0);
  CHECK(r.outBufferHandle == nullptr);
  r = junk();
  REQUIRE(gin_barrier_requirement_any(v::Team{3, 0, 1}, 2, &gin, &r).is_ok());
  CHECK(r.bufferSize == 2 * 4 * 4);  // 2.28.9's epochs
  CHECK(r.ginSignalCount == 2 * 3);  // 2.30's signals, of which 2.28.9 uses the first 2
  CHECK(r.outBufferHandle == &gin.bufHandle);
  CHECK(gin_barrier_requirement_v23000(v::Team{INT_MAX, 0, 1}, 4, &gin, &r).code() == ncclInvalidArgument);
  CHECK(gin_barrier_requirement_any(v::Team{0, 0, 1}, 1, &gin, &r).code() == ncclInvalidArgument);
}

// NCCL 2.30's ncclDevrCommCreateInternal: the world, rail and LSA barriers,
// then the hybrid world, rail and LSA barriers of barrierCount, then the
// user's list; signals after the devComm's own ginSignalCount.
TEST_CASE("device resources: 2.30's layout of the devComm's six barriers", "[devapi][resources][v230]") {
  namespace v30 = braid::devapi::v23000;
  v30::DevCommRequirements reqs{};
  reqs.barrierCount = 2;
  reqs.lsaBarrierCount = 1;
  reqs.railGinBarrierCount = 3;
  reqs.worldGinBarrierCount = 1;
  reqs.ginSignalCount = 4;
  reqs.ginCounterCount = 2;
  reqs.ginConnectionType = v30::kGinConnectionFull;
  uint32_t mine_handle = 99, mine_signal = 99;
  v::DevResourceRequirements mine{};
  mine.bufferSize = 64;
  mine.ginSignalCount = 1;
  mine.outBufferHandle = &mine_handle;
  mine.outGinSignalStart = &mine_signal;
  reqs.resourceRequirementsList = &mine;
  // 8 ranks: 2 hosts of 4; this rank is world 5, LSA rank 1, rail rank 1.
  const v::Team world{8, 5, 1}, lsa{4, 1, 1}, rail{2, 1, 4};
  DevCommTeams teams{world, lsa, rail, world};
  DevCommBarriers dev{};
  ResourceLayout layout;
  REQUIRE(layout_resources_v23000(reqs, teams, 3, 4096, &dev, &layout).is_ok());
  CHECK(dev.world.signal0 == 4);         // 1 x 8 signals: 4..11
  CHECK(dev.rail.signal0 == 12);         // 3 x 2: 12..17
  CHECK(dev.lsa.bufHandle == 0);         // the first bytes: (3 + 4) x 4
  CHECK(dev.lsa.nBarriers == 1);
  CHECK(dev.hybrid_dense.signal0 == 18);  // 2 x 8: 18..33
  CHECK(dev.hybrid_rail.signal0 == 34);   // 2 x 2: 34..37
  CHECK(dev.hybrid_lsa.bufHandle == 1);   // at 128
  CHECK(dev.hybrid_lsa.nBarriers == 2);
  CHECK(mine_handle == 2);                                 // (3 x 2 + 2 x 4) x 4 = 56 bytes later, at 256
  CHECK(mine_signal == 38);
  CHECK(layout.signals == 39);
  CHECK(layout.counters == 2);
  CHECK(layout.shadows_offset == 384);
  CHECK(layout.bytes == 4096);  // 384 + 3 contexts x 39 x 8 = 1320, to the granularity

  // A rail connection has no hybrid world barrier; more than 1024 contexts,
  // negative counts: refused, nothing written.
  reqs.ginConnectionType = v30::kGinConnectionRail;
  reqs.worldGinBarrierCount = 0;
  REQUIRE(layout_resources_v23000(reqs, teams, 1, 4096, &dev, &layout).is_ok());
  CHECK(dev.hybrid_dense.signal0 == dev.hybrid_rail.signal0);  // it took no signals
  CHECK(layout_resources_v23000(reqs, teams, 1025, 4096, &dev, &layout).code() == ncclInvalidArgument);
  reqs.worldGinBarrierCount = -1;
  mine_handle = 99;
  Status negative = layout_resources_v23000(reqs, teams, 1, 4096, &dev, &layout);
  CHECK(negative.code() == ncclInvalidArgument);
  CHECK_THAT(negative.message(), Catch::Contains("worldGinBarrierCount is -1"));
  CHECK(mine_handle == 99);
}

// 2.31's hybrid dense barrier spans the team its GIN connection asks for:
// with a custom stride of 2 on 8 ranks, the 4 ranks of this rank's residue
// mod 2, so barrierCount x 4 signals.
TEST_CASE("device resources: 2.31's dense barrier spans the custom stride's team", "[devapi][resources][v231]") {
  namespace v30 = braid::devapi::v23000;
  v30::DevCommRequirements reqs{};
  reqs.barrierCount = 2;
  reqs.ginSignalCount = 1;
  reqs.ginConnectionType = v30::kGinConnectionFull;
  const v::Team world{8, 5, 1}, lsa{4, 1, 1}, rail{2, 1, 4}, dense{4, 2, 2};
  DevCommBarriers dev{};
  ResourceLayout layout;
  REQUIRE(layout_resources_v23000(reqs, DevCommTeams{world, lsa, rail, dense}, 1, 4096, &dev, &layout).is_ok());
  CHECK(dev.world.signal0 == 1);         // no world or rail barriers asked for: they take no signals
  CHECK(dev.hybrid_dense.signal0 == 1);  // 2 x 4: 1..8
  CHECK(dev.hybrid_rail.signal0 == 9);   // 2 x 2: 9..12
  CHECK(layout.signals == 13);
}

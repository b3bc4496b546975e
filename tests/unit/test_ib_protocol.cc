// The InfiniBand credit protocol (ib_protocol.h) against an in-memory wire:
// credits travel in order, each queue pair delivers its writes in order,
// and the queue pairs interleave at random.  Every message must land whole,
// in the receive its credit named, with its exact length, split over the
// queue pairs or round robin over them.
#include <algorithm>
#include <catch2/catch.hpp>

#include <cstring>
#include <deque>
#include <random>

#include "src/transport/ibverbs/ib_protocol.h"

using namespace braid;

namespace {

struct Write {
  uint64_t addr;      // where in the receiver's memory
  std::vector<char> bytes;
};

// One connection: `nqps` queue pairs, receives of `room` bytes each.  With
// `fail_over`, once, halfway: each queue pair delivers a random part of
// what it carries and loses the rest, the credits in flight are lost, and
// both ends go on over a new wire as ib_failover.cc does (the receiver
// rewinds to its first incomplete receive and gives credit again from
// there; the sender writes again from that message).
void run_wire(IbSpread spread, uint64_t seed, int messages, bool fail_over = false) {
  const int nqps = spread.nqps;
  std::mt19937_64 rng(seed);
  constexpr size_t kRoom = 300000;
  std::vector<std::vector<char>> buffers(kIbMaxRequests, std::vector<char>(kRoom));  // the receiver's
  IbCredits credits;
  IbReceives receives(spread);
  std::deque<IbCredit> credit_wire;
  std::vector<std::deque<Write>> qp_wire(static_cast<size_t>(nqps));
  std::deque<uint64_t> posted;       // receives not yet complete, in order
  std::vector<std::vector<char>> sent;  // message k's bytes
  size_t next_to_send = 0;                // sent.size(), or less after a failover
  bool failed_over = false;
  int received = 0;
  auto deliver = [&](int j) {  // queue pair j's oldest write lands
    Write w = std::move(qp_wire[size_t(j)].front());
    qp_wire[size_t(j)].pop_front();
    std::copy(w.bytes.begin(), w.bytes.end(), buffers[w.addr / kRoom].begin() + long(w.addr % kRoom));
    REQUIRE(receives.part_arrived(j, uint32_t(w.bytes.size())).is_ok());
  };
  auto finish_in_order = [&] {  // the oldest receive completes first, whole and exact
    uint64_t bytes = 0;
    while (!posted.empty() && receives.finish(posted.front(), &bytes)) {
      const uint64_t seq = posted.front();
      posted.pop_front();
      const std::vector<char>& m = sent[seq];
      REQUIRE(bytes == m.size());
      CHECK(std::equal(m.begin(), m.end(), buffers[seq % kIbMaxRequests].begin()));
      ++received;
    }
  };
  auto message = [&](int k) {
    // Sizes across the split threshold, zero included.
    static const size_t sizes[] = {0, 1, 4095, kIbSplitMinBytes - 1, kIbSplitMinBytes, 100001, kRoom};
    std::vector<char> m(sizes[size_t(k) % std::size(sizes)]);
    for (size_t i = 0; i < m.size(); ++i) m[i] = char((k * 131 + int(i)) & 0xff);
    return m;
  };
  while (received < messages) {
    if (fail_over && !failed_over && received >= messages / 2) {
      failed_over = true;
      for (int j = 0; j < nqps; ++j) {
        for (size_t landed = rng() % (qp_wire[size_t(j)].size() + 1); landed > 0; --landed) deliver(j);
        qp_wire[size_t(j)].clear();
      }
      credit_wire.clear();
      const uint64_t resume = receives.rewind();
      REQUIRE(resume <= next_to_send);
      next_to_send = resume;
      credits.restart(resume);
      for (uint64_t seq = resume; seq < receives.next(); ++seq)
        credit_wire.push_back(IbCredit{seq % kIbMaxRequests, 0, uint32_t(kRoom), seq});
      finish_in_order();
      continue;
    }
    switch (rng() % 4) {
      case 0: {  // the receiver posts a receive: a credit goes out
        uint64_t seq = 0;
        if (int(posted.size()) + received >= messages || !receives.start(&seq)) break;
        credit_wire.push_back(IbCredit{seq % kIbMaxRequests, 0, uint32_t(kRoom), seq});
        posted.push_back(seq);
        break;
      }
      case 1:  // a credit arrives at the sender
        if (credit_wire.empty()) break;
        REQUIRE(credits.add(credit_wire.front()).is_ok());
        credit_wire.pop_front();
        break;
      case 2: {  // the sender sends its next message, spread over the queue pairs
        if (credits.empty()) break;
        const int k = int(next_to_send++);
        if (size_t(k) == sent.size()) sent.push_back(message(k));
        const std::vector<char>& m = sent[size_t(k)];
        IbCredit c;
        REQUIRE(credits.take(m.size(), &c).is_ok());
        CHECK(c.seq == uint64_t(k));
        uint64_t covered = 0;
        for (int j = 0; j < spread.parts(); ++j) {
          IbPart p = spread.part(m.size(), j);
          CHECK(p.offset + p.length <= m.size());
          covered += p.length;
          qp_wire[size_t(spread.qp(c.seq, j))].push_back(
              Write{c.addr * kRoom + p.offset, {m.begin() + long(p.offset), m.begin() + long(p.offset + p.length)}});
        }
        CHECK(covered == m.size());
        break;
      }
      default: {  // one queue pair, chosen at random, delivers its oldest write
        const int j = int(rng() % uint64_t(nqps));
        if (qp_wire[size_t(j)].empty()) break;
        deliver(j);
        finish_in_order();
        break;
      }
    }
  }
}

}  // namespace

TEST_CASE("credit protocol: every message whole, in order, exact, over 1..4 queue pairs in any interleaving",
          "[unit][ib]") {
  for (bool round_robin : {false, true})
    for (int nqps : {1, 2, 3, 4})
      for (uint64_t seed = 1; seed <= 5; ++seed) {
        INFO("queue pairs " << nqps << (round_robin ? " round robin" : " split") << " seed " << seed);
        run_wire({nqps, round_robin}, seed, 200);
      }
}

TEST_CASE("credit protocol: after a port failover every message still lands once, whole and exact",
          "[unit][ib]") {
  for (bool round_robin : {false, true})
    for (int nqps : {1, 2, 3, 4})
      for (uint64_t seed = 1; seed <= 8; ++seed) {
        INFO("queue pairs " << nqps << (round_robin ? " round robin" : " split") << " seed " << seed);
        run_wire({nqps, round_robin}, seed, 200, true);
      }
}

TEST_CASE("credit protocol, round robin: message k on queue pair k mod Q, and a rewind re-aims each queue pair",
          "[unit][ib]") {
  const IbSpread spread{3, true};
  CHECK(spread.parts() == 1);
  CHECK(spread.qp(7, 0) == 1);
  CHECK(spread.part(100000, 0).offset == 0);
  CHECK(spread.part(100000, 0).length == 100000);  // whole, however large
  CHECK(spread.first_on(0, 7) == 9);
  CHECK(spread.first_on(1, 7) == 7);
  CHECK(spread.first_on(2, 7) == 8);
  IbReceives r(spread);
  uint64_t seq = 0;
  for (int i = 0; i < 5; ++i) REQUIRE(r.start(&seq));
  uint64_t bytes = 0;
  REQUIRE(r.part_arrived(1, 11).is_ok());  // message 1 before message 0: another queue pair
  CHECK(r.finish(1, &bytes));
  CHECK(bytes == 11);
  REQUIRE(r.part_arrived(0, 10).is_ok());  // message 0
  REQUIRE(r.part_arrived(0, 13).is_ok());  // message 3 (queue pair 0's second)
  CHECK(r.rewind() == 2);                  // message 2 never came
  CHECK(r.finish(0, &bytes));
  CHECK(bytes == 10);
  CHECK_FALSE(r.finish(3, &bytes));        // forgotten: it comes again
  REQUIRE(r.part_arrived(0, 23).is_ok());  // queue pair 0 now carries message 3
  REQUIRE(r.part_arrived(2, 22).is_ok());  // queue pair 2 message 2
  REQUIRE(r.part_arrived(1, 24).is_ok());  // queue pair 1 message 4
  CHECK(r.finish(2, &bytes));
  CHECK(bytes == 22);
  CHECK(r.finish(3, &bytes));
  CHECK(bytes == 23);
  CHECK(r.finish(4, &bytes));
  CHECK(bytes == 24);
  CHECK(r.part_arrived(1, 1).code() == ncclInternalError);  // message 7: no receive awaits it
}

TEST_CASE("credit protocol: a failover rewinds to the first incomplete receive, forgetting later parts",
          "[unit][ib]") {
  IbReceives r(IbSpread{2, false});
  uint64_t seq = 0;
  for (int i = 0; i < 3; ++i) REQUIRE(r.start(&seq));
  REQUIRE(r.part_arrived(0, 10).is_ok());  // message 0 whole
  REQUIRE(r.part_arrived(1, 10).is_ok());
  REQUIRE(r.part_arrived(0, 5).is_ok());   // message 1: one part of two
  REQUIRE(r.part_arrived(0, 5).is_ok());   // message 2: one part of two
  CHECK(r.rewind() == 1);
  uint64_t bytes = 0;
  CHECK(r.finish(0, &bytes));  // what was whole stays whole
  CHECK(bytes == 20);
  REQUIRE(r.part_arrived(1, 7).is_ok());  // message 1 again, parts in any order
  REQUIRE(r.part_arrived(0, 8).is_ok());
  CHECK(r.finish(1, &bytes));
  CHECK(bytes == 15);
  CHECK_FALSE(r.finish(2, &bytes));
  CHECK(r.next() == 3);
  IbReceives idle(IbSpread{1, false});
  CHECK(idle.rewind() == 0);  // nothing outstanding: from the next receive on
  IbCredits credits;
  REQUIRE(credits.add(IbCredit{0, 0, 1, 0}).is_ok());
  credits.restart(5);
  CHECK(credits.empty());
  CHECK(credits.add(IbCredit{0, 0, 1, 1}).code() == ncclInternalError);
  CHECK(credits.add(IbCredit{0, 0, 1, 5}).is_ok());
}

TEST_CASE("credit protocol: at most kIbMaxRequests receives outstanding, slots reused after finishing", "[unit][ib]") {
  IbReceives r(IbSpread{2, false});
  uint64_t seq = 0;
  for (int i = 0; i < kIbMaxRequests; ++i) REQUIRE(r.start(&seq));
  CHECK_FALSE(r.start(&seq));  // the sender has every credit there is
  uint64_t bytes = 0;
  CHECK_FALSE(r.finish(0, &bytes));
  REQUIRE(r.part_arrived(1, 7).is_ok());  // queue pairs may arrive in either order
  REQUIRE(r.part_arrived(0, 5).is_ok());
  REQUIRE(r.finish(0, &bytes));
  CHECK(bytes == 12);
  CHECK(r.start(&seq));
  CHECK(seq == uint64_t(kIbMaxRequests));
}

TEST_CASE("credit protocol: misuse is an error, not a wrong delivery", "[unit][ib]") {
  IbCredits credits;
  CHECK(credits.add(IbCredit{0, 0, 100, 1}).code() == ncclInternalError);  // out of order
  REQUIRE(credits.add(IbCredit{0, 0, 100, 0}).is_ok());
  IbCredit c;
  Status s = credits.take(101, &c);  // larger than the receive: the caller's error, and the credit stays
  CHECK(s.code() == ncclInvalidUsage);
  CHECK(s.message().find("101 bytes for a receive of 100") != std::string::npos);
  REQUIRE(credits.take(100, &c).is_ok());
  CHECK(c.seq == 0);
  CHECK(credits.empty());

  CHECK(IbReceives(IbSpread{2, false}).part_arrived(0, 1).code() == ncclInternalError);  // no receive awaits it
  IbReceives r(IbSpread{2, false});
  uint64_t seq;
  REQUIRE(r.start(&seq));
  CHECK(r.part_arrived(2, 1).code() == ncclInternalError);  // no such queue pair
  REQUIRE(r.part_arrived(0, 1).is_ok());
  CHECK(r.part_arrived(0, 1).code() == ncclInternalError);  // queue pair 0's second write: message 1, not posted
}

TEST_CASE("credit protocol: large messages are split in page-aligned parts, small ones go whole", "[unit][ib]") {
  CHECK(ib_part(100, 4, 0).length == 100);
  CHECK(ib_part(100, 4, 3).length == 0);
  const uint64_t big = 1 << 20;
  uint64_t sum = 0;
  for (int j = 0; j < 3; ++j) {
    IbPart p = ib_part(big + 3, 3, j);
    CHECK(p.offset % 4096 == 0);
    sum += p.length;
  }
  CHECK(sum == big + 3);
}

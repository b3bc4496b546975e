// Every built-in generator verifies for n = 1..16 and every root, in place
// and out of place, and has the shape its file's comment promises.
#include <catch2/catch.hpp>

#include <set>

#include "braid/algorithms.h"
#include "braid/verify.h"
#include "verify_text.h"

using namespace braid;

namespace {

// Chunks rank r sends (or receives) in total.
uint64_t chunks_sent(const Schedule& s, int r) {
  uint64_t total = 0;
  for (const Lane& lane : s.ranks[r].lanes)
    for (const Op& op : lane.ops)
      if (op_sends(op.type)) total += op.count;
  return total;
}
uint64_t chunks_received(const Schedule& s, int r) {
  uint64_t total = 0;
  for (const Lane& lane : s.ranks[r].lanes)
    for (const Op& op : lane.ops)
      if (op_receives(op.type)) total += op.count;
  return total;
}

int ceil_log2(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}

}  // namespace

TEST_CASE("the registry lists every generator once", "[algorithms]") {
  std::set<std::pair<std::string, Collective>> seen;
  for (const AlgorithmInfo& a : algorithm_registry()) {
    CHECK(seen.insert({a.name, a.collective}).second);
    bool rooted = a.collective == Collective::Broadcast || a.collective == Collective::Reduce ||
                  a.collective == Collective::Gather || a.collective == Collective::Scatter;
    CHECK(a.rooted == rooted);
  }
  for (auto [name, c] : std::vector<std::pair<std::string, Collective>>{
           {"ring", Collective::AllReduce},     {"rd", Collective::AllReduce},
           {"ring", Collective::AllGather},     {"ring", Collective::ReduceScatter},
           {"binomial", Collective::Broadcast}, {"binomial", Collective::Reduce},
           {"direct", Collective::Gather},      {"direct", Collective::Scatter},
           {"pairwise", Collective::AlltoAll},  {"direct", Collective::AllGather},
           {"direct", Collective::AlltoAll},    {"oneshot", Collective::AllReduce},
           {"twoshot", Collective::AllReduce},  {"oneshot", Collective::AllGather},
           {"oneshot", Collective::ReduceScatter}, {"oneshot", Collective::Broadcast},
           {"oneshot", Collective::AlltoAll},   {"chain", Collective::AllReduce},
           {"chain", Collective::ReduceScatter}, {"chain", Collective::Reduce},
           {"direct", Collective::AllReduce},   {"direct", Collective::ReduceScatter},
           {"twoshot_ordered", Collective::AllReduce}, {"oneshot_ordered", Collective::ReduceScatter},
           {"allgather_fold", Collective::AllReduce}})
    CHECK(seen.count({name, c}) == 1);
}

TEST_CASE("every built-in schedule verifies for n = 1..16 and every root", "[algorithms][verify]") {
  for (const AlgorithmInfo& algo : algorithm_registry())
    for (int n = 1; n <= 16; ++n)
      for (int root = algo.rooted ? 0 : -1; root < (algo.rooted ? n : 0); ++root) {
        Schedule s = algo.make(n, root);
        INFO(algo.name << " " << to_string(algo.collective) << " n=" << n << " root=" << root);
        CHECK(s.collective == algo.collective);
        CHECK(s.nranks == n);
        CHECK(int(s.ranks.size()) == n);
        CHECK(s.in_place);
        CHECK(s.out_of_place);
        if (algo.rooted) CHECK(s.root == root);
        VerifyResult r = verify(s);
        INFO(joined(r));
        CHECK(r.ok);
        // More buffering never hurts.
        CHECK(verify(s, {.slots = 16}).ok);
      }
}

TEST_CASE("ring algorithms move the bandwidth-optimal number of chunks", "[algorithms]") {
  for (int n = 2; n <= 9; ++n) {
    Schedule ar = ring_allreduce(n), ag = ring_allgather(n), rs = ring_reducescatter(n);
    for (int r = 0; r < n; ++r) {
      CHECK(ar.ranks[r].input_chunks == uint32_t(n));
      CHECK(chunks_sent(ar, r) == uint64_t(2 * (n - 1)));
      CHECK(chunks_received(ar, r) == uint64_t(2 * (n - 1)));
      CHECK(chunks_sent(ag, r) == uint64_t(n - 1));
      CHECK(chunks_sent(rs, r) == uint64_t(n - 1));
      for (const Schedule* s : {&ar, &ag, &rs})
        for (const Op& op : s->ranks[r].lanes[0].ops) {
          if (op_sends(op.type)) CHECK(op.send_peer == (r + 1) % n);
          if (op_receives(op.type)) CHECK(op.recv_peer == (r + n - 1) % n);
        }
    }
  }
}

TEST_CASE("recursive doubling takes log2 steps plus one fold for extra ranks", "[algorithms]") {
  for (int n = 1; n <= 16; ++n) {
    Schedule s = recursive_doubling_allreduce(n);
    int p = 1, k = 0;
    while (p * 2 <= n) p *= 2, ++k;
    uint64_t most = 0;
    for (int r = 0; r < n; ++r) most = std::max(most, chunks_sent(s, r));
    INFO("n=" << n);
    CHECK(most == uint64_t(k + (n > p ? 1 : 0)));
    for (int r = 0; r < n; ++r) CHECK(s.ranks[r].input_chunks == 1);
  }
}

TEST_CASE("binomial trees have depth ceil(log2 n)", "[algorithms]") {
  for (int n = 1; n <= 16; ++n)
    for (int root = 0; root < n; ++root) {
      Schedule b = binomial_broadcast(n, root), red = binomial_reduce(n, root);
      INFO("n=" << n << " root=" << root);
      CHECK(chunks_sent(b, root) == uint64_t(ceil_log2(n)));
      CHECK(chunks_received(red, root) == uint64_t(ceil_log2(n)));
      for (int r = 0; r < n; ++r) {
        CHECK(chunks_received(b, r) == (r == root ? 0u : 1u));
        CHECK(chunks_sent(red, r) == (r == root ? 0u : 1u));
      }
    }
}

TEST_CASE("direct and pairwise exchange exactly one block per peer", "[algorithms]") {
  for (int n = 1; n <= 12; ++n) {
    Schedule a2a = pairwise_alltoall(n);
    for (int r = 0; r < n; ++r) {
      CHECK(chunks_sent(a2a, r) == uint64_t(n - 1));
      std::set<int> peers;
      for (const Op& op : a2a.ranks[r].lanes[0].ops)
        if (op.type == OpType::Send) CHECK(peers.insert(op.send_peer).second);
    }
    for (int root = 0; root < n; ++root) {
      Schedule g = direct_gather(n, root), sc = direct_scatter(n, root);
      CHECK(chunks_received(g, root) == uint64_t(n - 1));
      CHECK(chunks_sent(sc, root) == uint64_t(n - 1));
    }
  }
}

TEST_CASE("chain folds in rank order and moves each chunk once per link and direction",
          "[algorithms][deterministic]") {
  for (int n = 1; n <= 12; ++n) {
    for (int root = 0; root < n; ++root) {
      INFO("n=" << n << " root=" << root);
      CHECK(verify(chain_reduce(n, root), {.rank_order = true}).ok);
    }
    INFO("n=" << n);
    const Schedule all = chain_allreduce(n), scatter = chain_reducescatter(n);
    CHECK(verify(all, {.rank_order = true}).ok);
    CHECK(verify(scatter, {.rank_order = true}).ok);
    if (n == 1) continue;
    // AllReduce: n chunks down the chain and back; the ends send or receive one way only.
    for (int r = 0; r < n; ++r) {
      CHECK(chunks_sent(all, r) == uint64_t(r == 0 || r == n - 1 ? n : 2 * n));
      CHECK(chunks_received(all, r) == uint64_t(r == 0 || r == n - 1 ? n : 2 * n));
    }
    // ReduceScatter: every block down the chain, then each to its owner.
    CHECK(chunks_sent(scatter, n - 1) == uint64_t(n - 1));
    CHECK(chunks_received(scatter, 0) == 1);
  }
}

TEST_CASE("direct folds in rank order with ring's bytes", "[algorithms][deterministic]") {
  for (int n = 1; n <= 12; ++n) {
    INFO("n=" << n);
    const Schedule all = direct_allreduce(n), scatter = direct_reducescatter(n);
    CHECK(verify(all, {.rank_order = true}).ok);
    CHECK(verify(scatter, {.rank_order = true}).ok);
    for (int r = 0; r < n; ++r) {  // n chunks: (n-1) out and in per half, as ring
      CHECK(chunks_sent(all, r) == uint64_t(2 * (n - 1)));
      CHECK(chunks_received(all, r) == uint64_t(2 * (n - 1)));
      CHECK(chunks_sent(scatter, r) == uint64_t(n - 1));
    }
  }
}

TEST_CASE("allgather_fold folds in rank order in one hop: every input to every peer", "[algorithms][deterministic]") {
  for (int n = 1; n <= 12; ++n) {
    INFO("n=" << n);
    const Schedule s = allgather_fold_allreduce(n);
    CHECK(verify(s, {.rank_order = true}).ok);
    for (int r = 0; r < n; ++r) {  // one chunk, the whole input, to and from every peer
      CHECK(chunks_sent(s, r) == uint64_t(n - 1));
      CHECK(chunks_received(s, r) == uint64_t(n - 1));
      // One message per peer lane, each sent before anything is received: one hop.
      for (size_t lane = 0; lane + 1 < s.ranks[size_t(r)].lanes.size(); ++lane) {
        const std::vector<Op>& ops = s.ranks[size_t(r)].lanes[lane].ops;
        REQUIRE(ops.size() == 2);
        CHECK((ops[0].type == OpType::Send && ops[1].type == OpType::Recv));
      }
    }
  }
}

TEST_CASE("only the rings need the second slot", "[algorithms][verify]") {
  // The generators' comments promise one buffered chunk per connection is
  // enough for these; rings hold a chunk in a fused op (see kMinSlots), and
  // so does StragglAR's phase 0, a ring ReduceScatter.
  for (const AlgorithmInfo& algo : algorithm_registry()) {
    if (algo.name == "ring" || algo.name == "stragglar") continue;
    for (int n : {2, 3, 5, 6, 8, 11})
      for (int root : algo.rooted ? std::vector<int>{0, n - 1} : std::vector<int>{-1}) {
        Schedule s = algo.make(n, root);
        VerifyResult r = verify(s, {.slots = 1});
        INFO(s.name << " n=" << n << " root=" << root << "\n" << joined(r));
        CHECK(r.ok);
      }
  }
}

// The simulator's cost model on cases small enough to compute by hand.
#include <catch2/catch.hpp>

#include "algorithms/builder.h"
#include "braid/algorithms.h"
#include "braid/sim.h"

using namespace braid;

namespace {

// n GPUs, all pairs linked, alpha 1 us, beta 10 us/MB, free local copies.
Topology clique(int n, bool switched) {
  NodeProfile p;
  p.name = switched ? "switch" : "mesh";
  p.gpus_per_node = n;
  p.switched = switched;
  p.alpha_us = 1;
  p.betas.assign(n, std::vector<double>(n, 10));
  for (int i = 0; i < n; ++i) p.betas[i][i] = 0;
  Topology t = replicate(p, 1);
  t.local_beta_us_per_mb = 0;
  return t;
}

Schedule two_to_one() {  // ranks 0 and 1 each send a chunk to rank 2
  ScheduleBuilder b("two_to_one", Collective::Custom, 3, -1, 1, 2);
  b.send(0, 2, in(0));
  b.send(1, 2, in(0));
  Schedule s = b.take();
  Op r0, r1;
  r0.type = r1.type = OpType::Recv;
  r0.recv_peer = 0, r0.dst = out(0);
  r1.recv_peer = 1, r1.dst = out(1);
  s.ranks[2].lanes = {Lane{0, {r0}}, Lane{0, {r1}}};
  return s;
}

}  // namespace

TEST_CASE("sim: one message costs alpha + beta * bytes", "[synth][sim]") {
  SimResult r;
  std::string error;
  // AllGather of 2 MB total on 2 ranks: each sends its 1 MB once.
  REQUIRE(simulate(ring_allgather(2), clique(2, false), 2000000, &r, &error));
  CHECK(r.time_us == Approx(11.0));
  REQUIRE(r.transfers.size() == 2);
  CHECK(r.transfers[0].end_us - r.transfers[0].start_us == Approx(11.0));  // alpha holds the link too
  CHECK(bus_bandwidth_gbps(Collective::AllGather, 2, 2000000, r.time_us) == Approx(2e6 / 11e3 / 2));
  CHECK(bus_bandwidth_gbps(Collective::AllReduce, 4, 1000000, 10) == Approx(100.0 * 1.5));
}

TEST_CASE("sim: a shared switch port serialises, separate links do not", "[synth][sim]") {
  SimResult mesh, sw;
  std::string error;
  // A custom schedule's size is its per-rank buffer: one 1 MB chunk each.
  REQUIRE(simulate(two_to_one(), clique(3, false), 1000000, &mesh, &error));
  CHECK(mesh.time_us == Approx(11.0));  // two links, in parallel
  REQUIRE(simulate(two_to_one(), clique(3, true), 1000000, &sw, &error));
  CHECK(sw.time_us == Approx(22.0));  // rank 2's switch ingress port takes one after the other
}

TEST_CASE("sim: ring AllReduce time matches the alpha-beta formula", "[synth][sim]") {
  SimResult r;
  std::string error;
  const int n = 4;
  // 4 MB buffer, chunks of 1 MB; 2(n-1) steps, each alpha + beta*1MB = 11 us.
  REQUIRE(simulate(ring_allreduce(n), clique(n, false), 4000000, &r, &error));
  CHECK(r.time_us == Approx(2 * (n - 1) * 11.0));
}

TEST_CASE("sim: multi-hop routes and refusals", "[synth][sim]") {
  NodeProfile line;
  line.name = "line";
  line.gpus_per_node = 3;
  line.alpha_us = 1;
  line.betas = {{0, 10, 0}, {10, 0, 10}, {0, 10, 0}};
  Topology t = replicate(line, 1);
  t.local_beta_us_per_mb = 0;
  ScheduleBuilder b("far", Collective::Custom, 3, -1, 1, 1);
  b.send(0, 2, in(0));
  b.recv(2, 0, out(0));
  SimResult r;
  std::string error;
  REQUIRE(simulate(b.take(), t, 1000000, &r, &error));
  CHECK(r.time_us == Approx(22.0));  // store and forward through rank 1
  CHECK(r.transfers.size() == 2);
  CHECK_FALSE(simulate(ring_allreduce(5), t, 1000, &r, &error));
  CHECK(error.find("5 ranks") != std::string::npos);
}

TEST_CASE("sim: the SVG has a bar per message hop", "[synth][sim]") {
  SimResult r;
  std::string error;
  Schedule s = ring_allgather(3);
  Topology t = clique(3, true);
  REQUIRE(simulate(s, t, 3000, &r, &error));
  std::string svg = render_svg(s, t, r);
  CHECK(svg.rfind("<svg", 0) == 0);
  size_t bars = 0;
  for (size_t p = svg.find("<rect"); p != std::string::npos; p = svg.find("<rect", p + 1)) ++bars;
  CHECK(bars == r.transfers.size());
  CHECK(svg.find("</svg>") != std::string::npos);
}

TEST_CASE("sim: an op of k chunks is one message, paying alpha once", "[synth][sim]") {
  // Rank 0 sends its two 1 MB input chunks to rank 1: as two ops they hold
  // the link 2 * (alpha + beta); as one op of count 2, alpha + 2 * beta.
  auto two_chunks = [](bool one_op) {
    ScheduleBuilder b("two_chunks", Collective::Custom, 2, -1, 2, 2);
    Op send = make_op(OpType::Send, 1, -1, in(0), {}), recv = make_op(OpType::Recv, -1, 0, {}, out(0));
    Schedule s = b.take();
    if (one_op) {
      send.count = recv.count = 2;
      s.ranks[0].lanes = {Lane{0, {send}}};
      s.ranks[1].lanes = {Lane{0, {recv}}};
    } else {
      Op send1 = send, recv1 = recv;
      send1.src = in(1), recv1.dst = out(1);
      s.ranks[0].lanes = {Lane{0, {send, send1}}};
      s.ranks[1].lanes = {Lane{0, {recv, recv1}}};
    }
    return s;
  };
  SimResult split, merged;
  std::string error;
  // A custom schedule's size is its per-rank buffer: 2 MB in two chunks.
  REQUIRE(simulate(two_chunks(false), clique(2, false), 2000000, &split, &error));
  CHECK(split.time_us == Approx(2 * 11.0));
  CHECK(split.transfers.size() == 2);
  REQUIRE(simulate(two_chunks(true), clique(2, false), 2000000, &merged, &error));
  CHECK(merged.time_us == Approx(1 + 2 * 10.0));
  REQUIRE(merged.transfers.size() == 1);
  CHECK(merged.transfers[0].chunks == 2);
}

TEST_CASE("sim: a late rank starts late, and StragglAR's phase 1 alone remains after it", "[synth][sim]") {
  SimResult on_time, late, sa;
  std::string error;
  const int n = 4;
  const Topology t = clique(n, true);
  REQUIRE(simulate(ring_allreduce(n), t, 3000000, &on_time, &error));
  std::vector<double> starts(n, 0.0);
  starts[3] = 1000;
  REQUIRE(simulate(ring_allreduce(n), t, 3000000, &late, &error, {starts}));
  // Ring waits for the late rank from its first step: at least its own time after arrival.
  CHECK(late.time_us >= 1000 + on_time.time_us * 0.5);
  // StragglAR with rank 3 late: phase 0 is over when it arrives; R rounds of one
  // S/(n-1) = 1 MB chunk (11 us each) remain, R = 4 at n = 4.
  REQUIRE(simulate(stragglar_allreduce(n, 3), t, 3000000, &sa, &error, {starts}));
  CHECK(sa.time_us - 1000 == Approx(4 * 11.0));
  std::vector<double> wrong(n - 1, 0.0);
  CHECK_FALSE(simulate(ring_allreduce(n), t, 3000000, &late, &error, {wrong}));
}

TEST_CASE("sim: fragments pipeline a chunk over hops, as the host executor does", "[synth][sim]") {
  // A 3-rank chain 0 -> 1 -> 2 of one 1 MB chunk (AllGather-like forward):
  // whole, the second hop starts when the first ends (2 x 11 us); in 4
  // fragments of 250 KB (alpha 1 + 2.5 us each), the second hop follows the
  // first a fragment behind: 5 fragment times.
  ScheduleBuilder b("chain", Collective::Custom, 3, -1, 1, 1);
  b.send(0, 1, in(0));
  b.recv_copy_send(1, 0, out(0), 2);
  b.recv(2, 1, out(0));
  const Schedule s = b.take();
  SimResult whole, pieces;
  std::string error;
  REQUIRE(simulate(s, clique(3, false), 1000000, &whole, &error));
  CHECK(whole.time_us == Approx(22.0));
  SimOptions o;
  o.fragment_bytes = 250000;
  REQUIRE(simulate(s, clique(3, false), 1000000, &pieces, &error, o));
  CHECK(pieces.time_us == Approx(5 * 3.5));
  CHECK(pieces.transfers.size() == 8);
  // A fragment wider than the chunk is the whole chunk.
  o.fragment_bytes = 4000000;
  REQUIRE(simulate(s, clique(3, false), 1000000, &pieces, &error, o));
  CHECK(pieces.time_us == Approx(22.0));
}

TEST_CASE("sim: one-sided ops cross the link their bytes take and signals cost alpha", "[synth][sim]") {
  SimResult r;
  std::string error;
  // Two-shot on 2 ranks, 2 MB (1 MB blocks).  Each rank: a signal (0-1 us),
  // the peer's signal arrives at 1; a get of the peer's block over the
  // peer->me link (1-12); a put of my block over me->peer (12-23); the done
  // signal (23-24).  The get and the peer's put share a link, one after
  // the other.
  REQUIRE(simulate(twoshot_allreduce(2), clique(2, false), 2000000, &r, &error));
  CHECK(r.time_us == Approx(24.0));
  CHECK(r.transfers.size() == 8);
  // Latency: a small one-shot AllReduce on 8 ranks is two signal rounds
  // and a put per peer, against ring's 2(n-1) steps in a row.
  SimResult oneshot, ring;
  REQUIRE(simulate(oneshot_allreduce(8), clique(8, false), 64, &oneshot, &error));
  REQUIRE(simulate(ring_allreduce(8), clique(8, false), 64, &ring, &error));
  CHECK(oneshot.time_us < ring.time_us);
}

// Synthesis on TACCL's published sketches (small time limits), checked by the
// verifier and against hand-computed relaxed objectives; sketch parsing;
// baselines; refusals.
#include <fmt/format.h>

#include <catch2/catch.hpp>

#include "braid/msccl_xml.h"
#include "braid/sim.h"
#include "braid/synth.h"
#include "braid/verify.h"

using namespace braid;

namespace {

Sketch sketch(const std::string& file, int gpus) {
  Sketch s;
  std::string error;
  INFO(error);
  REQUIRE(load_sketch(std::string(BRAID_TEST_DATA "/synth/") + file, gpus, &s, &error));
  return s;
}

Topology topo(const std::string& name) {
  Topology t;
  std::string error;
  REQUIRE(builtin_topology(name, 1, &t, &error));
  return t;
}

Schedule synth(const Topology& t, const Sketch& s, Collective c, SynthReport* report, bool milp = true) {
  SynthOptions o;
  o.collective = c;
  o.time_limit_s = 20;
  o.contiguity_time_limit_s = 5;
  o.use_milp = milp;
  Schedule out;
  std::string error;
  bool ok = synthesize(t, s, o, &out, report, &error);
  INFO(error);
  REQUIRE(ok);
  return out;
}

}  // namespace

TEST_CASE("sketch: TACCL's published sketches parse field for field", "[synth][sketch]") {
  Sketch relay = sketch("ndv2-x2-relay.json", 8);
  CHECK(relay.nnodes == 2);
  CHECK_FALSE(relay.intra_switch);
  CHECK(relay.inter == Sketch::InterConn::Custom);
  CHECK(relay.internode_conn == std::map<int, std::vector<int>>{{0, {1}}});
  CHECK(relay.symmetry_offsets == std::vector<std::pair<int, int>>{{8, 16}});
  Sketch ucmin = sketch("dgx2-x2-ucmin-relay.json", 16);
  CHECK(ucmin.intra_switch);
  CHECK(ucmin.switch_strategy == std::vector<std::string>{"uc-min"});
  CHECK(ucmin.switches[0].size() == 16);
  CHECK(ucmin.gpus_to_sender_rev_map.at(3) == std::vector<int>{2, 3});
  CHECK(ucmin.enforce_ordering);
  CHECK(ucmin.input_chunkup == 2);
  Sketch direct = sketch("dgx2-x2-direct-map.json", 16);
  CHECK(direct.inter == Sketch::InterConn::DirectMap);
  CHECK(direct.switch_strategy == std::vector<std::string>{"uc-max"});
}

TEST_CASE("sketch: bad sketches are refused", "[synth][sketch]") {
  Sketch s;
  std::string error;
  CHECK_FALSE(sketch_from_json("{", 8, &s, &error));
  CHECK_FALSE(sketch_from_json(R"({"nnodes": 0})", 8, &s, &error));
  CHECK_FALSE(sketch_from_json(R"({"intranode_sketch": {"strategy": "ring"}})", 8, &s, &error));
  CHECK(error.find("ring") != std::string::npos);
  CHECK_FALSE(sketch_from_json(R"({"internode_sketch": {"strategy": "relay", "internode_conn": {"9": [1]}}})", 8, &s, &error));
  CHECK(error.find("'9'") != std::string::npos);
  CHECK_FALSE(sketch_from_json(R"({"intranode_sketch": {"strategy": "switch", "switches": [[0, 1]],
      "switch_hyperedge_strategy": ["uc-mid"]}})", 8, &s, &error));
  CHECK_FALSE(sketch_from_json(R"({"hyperparameters": {"input_chunkup": 0}})", 8, &s, &error));
  CHECK_FALSE(sketch_from_json(R"({"symmetry_offsets": [[1]]})", 8, &s, &error));
  CHECK_FALSE(sketch_from_json(R"({"nnodes": "two"})", 8, &s, &error));
}

TEST_CASE("synth: NDv2 x2 relay, all three collectives, verified", "[synth]") {
  Topology t = topo("ndv2x2");
  Sketch s = sketch("ndv2-x2-relay.json", 8);
  SynthReport ag, a2a, ar;
  Schedule g = synth(t, s, Collective::AllGather, &ag);
  // The one NIC sends each of the node's 8 chunks once: 8 * (2.6 + 105) us.
  CHECK(ag.milp_used);
  CHECK(ag.milp_objective == Approx(8 * 107.6));
  CHECK(ag.symmetry_generators == 1);
  CHECK(g.nranks == 16);
  CHECK(g.in_place);
  CHECK(g.out_of_place);
  CHECK(verify(g).ok);
  // Every inter-node byte leaves through local GPU 0 and lands on local GPU 1.
  for (int r = 0; r < 16; ++r)
    for (const Lane& lane : g.ranks[r].lanes)
      for (const Op& op : lane.ops)
        if (op_sends(op.type) && op.send_peer / 8 != r / 8) {
          CHECK(r % 8 == 0);
          CHECK(op.send_peer % 8 == 1);
        }
  Schedule x = synth(t, s, Collective::AlltoAll, &a2a);
  CHECK(a2a.milp_objective == Approx(64 * 107.6));  // 64 chunks cross each way through one NIC
  CHECK(x.out_of_place);
  CHECK(x.in_place);  // chunks pass through scratch, so both placements hold
  CHECK(verify(x).ok);
  Schedule r = synth(t, s, Collective::AllReduce, &ar);
  CHECK(verify(r).ok);
  CHECK(r.ranks[0].input_chunks == 16);
}

TEST_CASE("synth: DGX-2 x2 direct-map AllGather objective and XML round trip", "[synth]") {
  Topology t = topo("dgx2x2");
  Sketch s = sketch("dgx2-x2-direct-map.json", 16);
  SynthReport rep;
  Schedule g = synth(t, s, Collective::AllGather, &rep);
  // Each GPU's switch ingress takes 15 local chunks and 15 relayed remote ones.
  CHECK(rep.milp_objective == Approx(30 * 8.3));  // alpha 0.3 + beta 8 each
  CHECK(rep.symmetry_generators == 2);
  CHECK(verify(g).ok);
  std::string xml, error;
  REQUIRE(schedule_to_msccl_xml(g, &xml, &error));
  Schedule back;
  REQUIRE(schedule_from_msccl_xml(xml, &back, &error));
  // Sends wait for the previous send through the same port as well as for
  // their data, so some ops carry two deps and come back behind a nop step;
  // the XML itself is a fixed point.
  CHECK(verify(back).ok);
  CHECK(back.in_place == g.in_place);
  CHECK(back.out_of_place == g.out_of_place);
  std::string again;
  REQUIRE(schedule_to_msccl_xml(back, &again, &error));
  CHECK(again == xml);
}

TEST_CASE("synth: symmetry aliasing shrinks the model, heuristic mode needs no solver", "[synth]") {
  Topology t = topo("ndv2x2");
  Sketch s = sketch("ndv2-x2-relay.json", 8);
  SynthReport with, without, heuristic;
  synth(t, s, Collective::AllGather, &with);
  Sketch plain = s;
  plain.symmetry_offsets.clear();
  synth(t, plain, Collective::AllGather, &without);
  CHECK(with.milp_columns < without.milp_columns);
  CHECK(with.milp_objective == Approx(without.milp_objective));
  Schedule h = synth(t, s, Collective::AllGather, &heuristic, false);
  CHECK_FALSE(heuristic.milp_used);
  CHECK(verify(h).ok);
}

TEST_CASE("synth: the simulated schedule beats the topology ring on DGX-2 x2", "[synth]") {
  Topology t = topo("dgx2x2");
  Sketch s = sketch("dgx2-x2-direct-map.json", 16);
  SynthReport rep;
  Schedule g = synth(t, s, Collective::AllGather, &rep);
  Schedule ring;
  std::string error;
  REQUIRE(topology_ring(t, Collective::AllGather, &ring, &error));
  CHECK(verify(ring).ok);
  SimResult a, b;
  REQUIRE(simulate(g, t, 64 << 20, &a, &error));
  REQUIRE(simulate(ring, t, 64 << 20, &b, &error));
  CHECK(a.time_us < b.time_us);
  Schedule hier;
  REQUIRE(hierarchical(t, Collective::AllGather, &hier, &error));
  CHECK(verify(hier).ok);
}

TEST_CASE("synth: refusals", "[synth]") {
  Schedule out;
  std::string error;
  SynthOptions o;
  Topology one = topo("ndv2");
  Sketch two = sketch("ndv2-x2-relay.json", 8);
  CHECK_FALSE(synthesize(one, two, o, &out, nullptr, &error));
  CHECK(error.find("2 nodes") != std::string::npos);
  o.collective = Collective::Broadcast;
  Topology t = topo("ndv2x2");
  CHECK_FALSE(synthesize(t, two, o, &out, nullptr, &error));
  CHECK(error.find("broadcast") != std::string::npos);
  o.collective = Collective::AllGather;
  Sketch cut = two;
  cut.internode_conn.clear();  // relay with no inter-node pair: node 1 unreachable
  CHECK_FALSE(synthesize(t, cut, o, &out, nullptr, &error));
  CHECK(error.find("unreachable") != std::string::npos);
}

TEST_CASE("synth: on one NDv2 node the MILP beats the greedy routes", "[synth]") {
  Topology t = topo("ndv2");
  Sketch s = sketch("ndv2-n1-chunkup2.json", 8);
  SynthReport ag;
  Schedule g = synth(t, s, Collective::AllGather, &ag);
  CHECK(ag.milp_used);
  CHECK(ag.milp_optimal);
  // Busy times of the busiest link: 4 chunks at 46 us and 3 at 46 (+ alpha 0.3 each).
  CHECK(ag.heuristic_objective == Approx(4 * 46.3));
  CHECK(ag.milp_objective == Approx(3 * 46.3));
  CHECK(verify(g).ok);
}

TEST_CASE("synth: baselines verify on every built-in shape", "[synth][baselines]") {
  for (const char* name : {"ndv2", "ndv2x2", "dgx2x2", "dgx-a100x3", "dgx-h100"}) {
    INFO(name);
    Topology t = topo(name);
    std::string error;
    for (Collective c : {Collective::AllGather, Collective::AllReduce}) {
      Schedule ring, hier;
      REQUIRE(topology_ring(t, c, &ring, &error));
      CHECK(verify(ring).ok);
      REQUIRE(hierarchical(t, c, &hier, &error));
      CHECK(verify(hier).ok);
      CHECK(hier.collective == c);
    }
    Schedule a2a;
    REQUIRE(hierarchical(t, Collective::AlltoAll, &a2a, &error));
    CHECK(verify(a2a).ok);
    Schedule none;
    CHECK_FALSE(hierarchical(t, Collective::Broadcast, &none, &error));
  }
}

TEST_CASE("synth: at the time limit the best incumbent is kept", "[synth]") {
  Topology t = topo("ndv2");
  Sketch s = sketch("ndv2-n1-chunkup4.json", 8);
  SynthOptions o;
  o.collective = Collective::AlltoAll;
  o.time_limit_s = 1;
  Schedule out;
  SynthReport rep;
  std::string error;
  REQUIRE(synthesize(t, s, o, &out, &rep, &error));
  CHECK(rep.milp_used);
  CHECK(rep.heuristic_objective == Approx(18 * 46.3));
  // The incumbent is kept: never worse than the MIP start (whether CBC improves
  // on it within 1 s depends on the machine, e.g. under ASan on a loaded one).
  CHECK(rep.milp_objective <= rep.heuristic_objective + 1e-6);
  CHECK(rep.milp_bound <= rep.milp_objective + 1e-6);
  CHECK(rep.routing_s < 30);
  CHECK(verify(out).ok);
}

TEST_CASE("synth: the reported simulated time is braid sim's at the stated chunk size", "[synth]") {
  // AlltoAll's input_chunks already hold one slice per peer: the size with
  // chunk_mb chunks is input_chunks * chunk_mb, not nranks times that.
  Topology t = topo("ndv2");
  Sketch s = sketch("ndv2-n1-chunkup2.json", 8);
  for (Collective c : {Collective::AlltoAll, Collective::AllGather, Collective::AllReduce}) {
    INFO(to_string(c));
    SynthReport rep;
    Schedule x = synth(t, s, c, &rep, false);
    uint64_t chunks = x.ranks[0].input_chunks * uint64_t(c == Collective::AllGather ? x.nranks : 1);
    SimResult at_chunk;
    std::string error;
    REQUIRE(simulate(x, t, chunks * 1000000, &at_chunk, &error));
    CHECK(rep.simulated_us == Approx(at_chunk.time_us));
  }
}

TEST_CASE("synth: chunks relay over fast links where a direct link is slow", "[synth]") {
  // 6 ranks fully connected; links with i + j odd at 2 us/MB, the others at
  // 40.  Ring uses only fast links; routes on fewest hops alone must cross
  // slow ones, about 3x slower than ring.
  std::string links;
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 6; ++j)
      if (i != j)
        links += fmt::format(R"({}{{"src": {}, "dst": {}, "alpha_us": 0.3, "beta_us_per_mb": {}, "kind": "nvlink"}})",
                             links.empty() ? "" : ", ", i, j, (i + j) % 2 ? 2.0 : 40.0);
  Topology t;
  std::string error;
  REQUIRE(topology_from_json(R"({"format": "braid-topology", "name": "asym6", "nodes": 1, "gpus_per_node": 6,
      "nics_per_node": 0, "local_beta_us_per_mb": 0.5, "ports": [], "links": [)" + links + "]}",
                             1, &t, &error));
  Sketch s;
  REQUIRE(sketch_from_json(R"({"nnodes": 1, "intranode_sketch": {"strategy": "none"}, "symmetry_offsets": [],
      "hyperparameters": {"input_chunkup": 1}})", 6, &s, &error));
  for (Collective c : {Collective::AllGather, Collective::AllReduce}) {
    INFO(to_string(c));
    SynthReport rep;
    Schedule x = synth(t, s, c, &rep);
    Schedule ring;
    REQUIRE(topology_ring(t, c, &ring, &error));
    SimResult a, b;
    REQUIRE(simulate(x, t, 64 << 20, &a, &error));
    REQUIRE(simulate(ring, t, 64 << 20, &b, &error));
    CHECK(a.time_us <= b.time_us * 1.1);
  }
}

// Stage 3 (contiguity MILP) and channel assignment: merging happens where
// alpha is high, shortens the simulated time at the chunk size synthesis was
// tuned for, lowers to one op per message, verifies in both placements, and
// survives MSCCL XML; stage 3 never makes a published sketch's simulated
// time worse.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>

#include "braid/msccl_xml.h"
#include "braid/sim.h"
#include "braid/synth.h"
#include "braid/verify.h"

using namespace braid;

namespace {

// Two nodes of two GPUs on a switch; the network has alpha 50 us and beta
// 10 us/MB, so at 1 MB chunks a message's latency outweighs its bytes.
Topology high_alpha_pair() {
  NodeProfile p;
  p.name = "high_alpha";
  p.gpus_per_node = 2;
  p.nics_per_node = 1;
  p.switched = true;
  p.alpha_us = 0.3;
  p.betas = {{0, 8}, {8, 0}};
  p.remote_alpha_us = 50;
  p.remote_beta_us_per_mb = 10;
  return replicate(p, 2);
}

Sketch load(const std::string& file, int gpus) {
  Sketch s;
  std::string error;
  INFO(error);
  REQUIRE(load_sketch(std::string(BRAID_TEST_DATA "/synth/") + file, gpus, &s, &error));
  return s;
}

Schedule synth(const Topology& t, const Sketch& s, Collective c, bool contiguity, SynthReport* report) {
  SynthOptions o;
  o.collective = c;
  o.time_limit_s = 20;
  o.contiguity_time_limit_s = 5;
  o.contiguity = contiguity;
  Schedule out;
  std::string error;
  bool ok = synthesize(t, s, o, &out, report, &error);
  INFO(error);
  REQUIRE(ok);
  return out;
}

// nccl-tests' size at which the schedule's chunks are 1 MB (synthesis's chunk_mb);
// AlltoAll's input_chunks already count a slice per peer.
uint64_t size_at_1mb_chunks(const Schedule& s) {
  const uint64_t chunks = s.ranks[0].input_chunks;
  return (s.collective == Collective::AllGather ? chunks * uint64_t(s.nranks) : chunks) * 1000000;
}

double simulated_us(const Schedule& s, const Topology& t) {
  SimResult r;
  std::string error;
  INFO(error);
  REQUIRE(simulate(s, t, size_at_1mb_chunks(s), &r, &error));
  return r.time_us;
}

int inter_node_multi_chunk_sends(const Schedule& s, int gpus_per_node) {
  int found = 0;
  for (int r = 0; r < s.nranks; ++r)
    for (const Lane& lane : s.ranks[r].lanes)
      for (const Op& op : lane.ops)
        found += op_sends(op.type) && op.count > 1 && op.send_peer / gpus_per_node != r / gpus_per_node;
  return found;
}

}  // namespace

TEST_CASE("contiguity: merges on a high-alpha network link and shortens the simulated time", "[synth][contiguity]") {
  Topology t = high_alpha_pair();
  Sketch s = load("sk-2x2-relay.json", 2);
  for (Collective c : {Collective::AllGather, Collective::AlltoAll, Collective::AllReduce}) {
    INFO(to_string(c));
    SynthReport merged_report, plain_report;
    Schedule merged = synth(t, s, c, true, &merged_report);
    Schedule plain = synth(t, s, c, false, &plain_report);
    CHECK(plain_report.merged_transfers == 0);
    CHECK(inter_node_multi_chunk_sends(plain, 2) == 0);
    CHECK(merged_report.merged_transfers > 0);
    CHECK(merged_report.contiguity_makespan_us < merged_report.ordered_makespan_us - 40);  // at least one alpha saved
    CHECK(inter_node_multi_chunk_sends(merged, 2) > 0);
    VerifyResult v = verify(merged);
    INFO((v.errors.empty() ? "" : v.errors[0]));
    CHECK(v.ok);
    CHECK(merged.in_place);
    CHECK(merged.out_of_place);
    CHECK(simulated_us(merged, t) < simulated_us(plain, t) - 40);
    // MSCCL XML keeps the multi-chunk steps (cnt) and the channels.
    std::string xml, error;
    REQUIRE(schedule_to_msccl_xml(merged, &xml, &error));
    Schedule back;
    REQUIRE(schedule_from_msccl_xml(xml, &back, &error));
    CHECK(verify(back).ok);
    CHECK(inter_node_multi_chunk_sends(back, 2) == inter_node_multi_chunk_sends(merged, 2));
    CHECK(simulated_us(back, t) == Approx(simulated_us(merged, t)));
  }
}

TEST_CASE("contiguity: never makes a published sketch's simulated time worse", "[synth][contiguity]") {
  struct Case {
    const char* topology;
    const char* sketch;
    int gpus;
    Collective c;
  };
  for (const Case& k : {Case{"ndv2x2", "ndv2-x2-relay.json", 8, Collective::AllGather},
                        Case{"ndv2x2", "ndv2-x2-relay.json", 8, Collective::AlltoAll},
                        Case{"ndv2x2", "ndv2-x2-relay.json", 8, Collective::AllReduce},
                        Case{"dgx2x2", "dgx2-x2-ucmin-relay.json", 16, Collective::AllGather}}) {
    INFO(k.sketch << " " << to_string(k.c));
    Topology t;
    std::string error;
    REQUIRE(builtin_topology(k.topology, 1, &t, &error));
    Sketch s = load(k.sketch, k.gpus);
    SynthReport merged_report, plain_report;
    Schedule merged = synth(t, s, k.c, true, &merged_report);
    Schedule plain = synth(t, s, k.c, false, &plain_report);
    CHECK(merged_report.contiguity_makespan_us <= merged_report.ordered_makespan_us + 1e-6);
    CHECK(verify(merged).ok);
    // Against the same run's stage-2 schedule: two runs may route or merge
    // differently when a MILP stops at its time limit (a loaded machine).
    CHECK(simulated_us(merged, t) == Approx(merged_report.simulated_us));
    CHECK(merged_report.simulated_us <= merged_report.ordered_simulated_us);
    CHECK(plain_report.simulated_us == Approx(simulated_us(plain, t)));
    CHECK(plain_report.simulated_us == plain_report.ordered_simulated_us);
  }
}

TEST_CASE("channels: AllReduce's two phases on one connection use distinct channels", "[synth][channels]") {
  Topology t;
  std::string error;
  REQUIRE(builtin_topology("ndv2x2", 1, &t, &error));
  SynthReport report;
  Schedule s = synth(t, load("ndv2-x2-relay.json", 8), Collective::AllReduce, true, &report);
  // Per rank and peer: the channels of the lanes sending to it.  Every
  // ReduceScatter-and-AllGather link carries both phases, each in its own
  // lane; the verifier rejects two lanes sending to one (peer, channel).
  int both = 0;
  for (int r = 0; r < s.nranks; ++r) {
    std::map<int, std::set<int>> channels_to;
    for (const Lane& lane : s.ranks[r].lanes)
      for (const Op& op : lane.ops)
        if (op_sends(op.type)) channels_to[op.send_peer].insert(lane.channel);
    for (auto& [peer, channels] : channels_to) {
      for (int ch : channels) CHECK(ch < 2);
      both += channels.size() == 2;
    }
  }
  CHECK(both > 0);
  CHECK(verify(s).ok);
  std::string xml;
  REQUIRE(schedule_to_msccl_xml(s, &xml, &error));
  CHECK(xml.find("nchannels=\"2\"") != std::string::npos);
  Schedule back;
  REQUIRE(schedule_from_msccl_xml(xml, &back, &error));
  CHECK(verify(back).ok);
  std::multiset<int> before, after;
  for (const Schedule* x : {&s, &back})
    for (const RankProgram& p : x->ranks)
      for (const Lane& lane : p.lanes)
        if (std::any_of(lane.ops.begin(), lane.ops.end(), [](const Op& op) { return op_sends(op.type) || op_receives(op.type); }))
          (x == &s ? before : after).insert(lane.channel);
  CHECK(before == after);
}

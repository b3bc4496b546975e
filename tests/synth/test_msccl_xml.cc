// MSCCL XML: exact round trips, both dialects, the in-place files msccl-tools
// writes, and refusal of malformed or unrepresentable input.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "braid/algorithms.h"
#include "braid/msccl_xml.h"
#include "braid/verify.h"
#include "msccl_style.h"

using namespace braid;

namespace {

std::string read(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

Schedule round_trip(const Schedule& s, MscclDialect d = MscclDialect::Current) {
  std::string xml, error;
  REQUIRE(schedule_to_msccl_xml(s, &xml, &error, d));
  Schedule back;
  INFO(xml);
  REQUIRE(schedule_from_msccl_xml(xml, &back, &error));
  return back;
}

bool fails_with(const std::string& xml, const std::string& needle) {
  Schedule s;
  std::string error;
  bool ok = schedule_from_msccl_xml(xml, &s, &error);
  INFO(error);
  return !ok && error.find(needle) != std::string::npos;
}

const char* kHead = R"(<algo name="t" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2" coll="allreduce" inplace="0" outofplace="1" minBytes="0" maxBytes="1024">)";

}  // namespace

TEST_CASE("msccl xml: built-in schedules round-trip exactly", "[synth][xml]") {
  for (Schedule s : {ring_allreduce(4), ring_allgather(5), ring_reducescatter(3), pairwise_alltoall(1)}) {
    s.min_bytes = 4096;
    s.max_bytes = 1 << 20;
    Schedule back = round_trip(s);
    CHECK(back == s);
    CHECK(verify(back).ok);
  }
  Schedule unbounded = ring_allreduce(3);
  CHECK(round_trip(unbounded).max_bytes == UINT64_MAX);
}

TEST_CASE("msccl xml: attributes the current runtime requires", "[synth][xml]") {
  std::string xml, error;
  Schedule s = ring_reducescatter(4);
  s.min_bytes = 1024;
  s.max_bytes = 65536;
  REQUIRE(schedule_to_msccl_xml(s, &xml, &error));
  CHECK(xml.find("coll=\"reducescatter\"") != std::string::npos);
  CHECK(xml.find("outofplace=\"1\"") != std::string::npos);
  CHECK(xml.find("minBytes=\"1024\"") != std::string::npos);
  CHECK(xml.find("maxBytes=\"65536\"") != std::string::npos);
  CHECK(xml.find("nchunksperloop=\"4\"") != std::string::npos);
  REQUIRE(schedule_to_msccl_xml(s, &xml, &error, MscclDialect::Legacy));
  CHECK(xml.find("coll=\"reduce_scatter\"") != std::string::npos);
  CHECK(xml.find("minBytes") == std::string::npos);
  CHECK(xml.find("outofplace") == std::string::npos);
  // Legacy files carry no placement beyond inplace and no size range.
  Schedule back;
  REQUIRE(schedule_from_msccl_xml(xml, &back, &error));
  CHECK(back.collective == Collective::ReduceScatter);
  CHECK(back.in_place);
  CHECK(back.min_bytes == 0);
  CHECK(back.max_bytes == (uint64_t(1) << 27) - 1);  // the older runtime's default: below 128 MiB
  CHECK(back.ranks == s.ranks);
}

TEST_CASE("msccl xml: several deps become nop steps and come back as nops", "[synth][xml]") {
  Schedule s = ring_allgather(3);
  // Give rank 0 a second lane with an op that waits for two others.
  Op nop;
  nop.type = OpType::Nop;
  nop.deps = {Dep{0, 0}, Dep{0, 1}};
  s.ranks[0].lanes.push_back(Lane{1, {nop}});
  std::string xml, error;
  REQUIRE(schedule_to_msccl_xml(s, &xml, &error));
  CHECK(xml.find("hasdep=\"1\"") != std::string::npos);
  Schedule back;
  REQUIRE(schedule_from_msccl_xml(xml, &back, &error));
  REQUIRE(back.ranks[0].lanes[1].ops.size() == 2);
  CHECK(back.ranks[0].lanes[1].ops[0].deps == std::vector<Dep>{Dep{0, 0}});
  CHECK(back.ranks[0].lanes[1].ops[1].deps == std::vector<Dep>{Dep{0, 1}});
  CHECK(verify(back).ok);
}

TEST_CASE("msccl xml: an msccl-tools style in-place allreduce imports and verifies", "[synth][xml]") {
  Schedule s;
  std::string error;
  REQUIRE(schedule_from_msccl_xml(read(BRAID_TEST_DATA "/synth/msccl_allreduce_ring4_inplace.xml"), &s, &error));
  CHECK(s.name == "allreduce_ring_4gpus");
  CHECK(s.collective == Collective::AllReduce);
  CHECK(s.nranks == 4);
  CHECK(s.in_place);
  CHECK_FALSE(s.out_of_place);  // as declared (load_schedule_file adds what verifies)
  CHECK(s.ranks[0].output_chunks == 4);
  // rrcs writes the aliased chunk: now a write of the output.
  CHECK(s.ranks[0].lanes[0].ops[3].dst == ChunkRef{BufferKind::Output, 1});
  CHECK(s.ranks[0].lanes[0].ops[3].src == ChunkRef{BufferKind::Input, 1});
  VerifyResult v = verify(s);
  CHECK(v.ok);
}

TEST_CASE("msccl xml: an in-place file past 16384 steps a rank is refused (its check takes steps^2 bits)",
          "[synth][xml]") {
  // One rank: a copy, then nops.  16384 steps resolve; one more is refused
  // (the table would take 1.3 GB at 100,000 steps), and out of place takes any.
  auto chain = [](int steps, bool in_place) {
    std::string xml = fmt::format(R"(<algo name="big" proto="Simple" nchannels="1" nchunksperloop="1" ngpus="1" )"
                                  R"(coll="allreduce" inplace="{}" outofplace="{}" minBytes="0" maxBytes="0">)"
                                  R"(<gpu id="0" i_chunks="1" o_chunks="1" s_chunks="0"><tb id="0" send="-1" )"
                                  R"(recv="-1" chan="0"><step s="0" type="cpy" srcbuf="i" srcoff="0" dstbuf="o" )"
                                  R"(dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>)",
                                  int(in_place), int(!in_place));
    for (int i = 1; i < steps; ++i)
      xml += fmt::format(R"(<step s="{}" type="nop" srcbuf="i" srcoff="-1" dstbuf="o" dstoff="-1" cnt="0" )"
                         R"(depid="-1" deps="-1" hasdep="0"/>)", i);
    return xml + "</tb></gpu></algo>";
  };
  Schedule s;
  std::string error;
  CHECK(schedule_from_msccl_xml(chain(16384, true), &s, &error));
  CHECK_FALSE(schedule_from_msccl_xml(chain(16385, true), &s, &error));
  CHECK(error == "rank 0 has 16385 steps: braid resolves in-place files of at most 16384 steps a rank (write it "
                 "out of place)");
  CHECK(schedule_from_msccl_xml(chain(20000, false), &s, &error));
}

TEST_CASE("msccl xml: malformed input is refused with the element named", "[synth][xml]") {
  CHECK(fails_with("<algo", "XML parse error"));
  CHECK(fails_with("<notalgo/>", "no <algo>"));
  CHECK(fails_with(R"(<algo name="t" ngpus="2" coll="allmagic" inplace="0"/>)", "allmagic"));
  CHECK(fails_with(R"(<algo name="t" coll="allreduce" inplace="0"/>)", "ngpus"));
  CHECK(fails_with(std::string(kHead) + "<gpu id=\"0\" i_chunks=\"2\" o_chunks=\"2\" s_chunks=\"0\"/></algo>", "no <gpu id=1>"));
  CHECK(fails_with(std::string(kHead) + R"(<gpu id="0" i_chunks="2" o_chunks="2" s_chunks="0"><tb id="1" send="-1" recv="-1" chan="0"/></gpu></algo>)",
                   "contiguous"));
  CHECK(fails_with(std::string(kHead) + R"(<gpu id="0" i_chunks="2" o_chunks="2" s_chunks="0"><tb id="0" send="-1" recv="-1" chan="0">
      <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/></tb></gpu></algo>)",
                   "send=-1"));
  CHECK(fails_with(std::string(kHead) + R"(<gpu id="0" i_chunks="2" o_chunks="2" s_chunks="0"><tb id="0" send="1" recv="-1" chan="0">
      <step s="0" type="zz" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/></tb></gpu></algo>)",
                   "unknown step type"));
  CHECK(fails_with(std::string(kHead) + R"(<gpu id="0" i_chunks="2" o_chunks="2" s_chunks="0"><tb id="0" send="1" recv="-1" chan="0">
      <step s="1" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/></tb></gpu></algo>)",
                   "numbered"));
  CHECK(fails_with(std::string(kHead) + R"(<gpu id="0" i_chunks="2" o_chunks="2" s_chunks="0"><tb id="0" send="1" recv="-1" chan="0">
      <step s="0" type="s" srcbuf="q" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/></tb></gpu></algo>)",
                   "srcbuf"));
  CHECK(fails_with(std::string(kHead) + R"(<gpu id="0" i_chunks="x" o_chunks="2" s_chunks="0"/></algo>)", "not an integer"));
  // In place, ReduceScatter may not write the input outside the rank's own block.
  CHECK(fails_with(R"(<algo name="t" ngpus="2" coll="reduce_scatter" inplace="1">
      <gpu id="0" i_chunks="2" o_chunks="1" s_chunks="0"><tb id="0" send="-1" recv="1" chan="0">
      <step s="0" type="r" srcbuf="i" srcoff="1" dstbuf="i" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/></tb></gpu>
      <gpu id="1" i_chunks="2" o_chunks="1" s_chunks="0"/></algo>)", "outside the output it shares in place"));
  // Out of place the send buffer is read-only.
  CHECK(fails_with(R"(<algo name="t" ngpus="2" coll="reduce_scatter" inplace="0">
      <gpu id="0" i_chunks="2" o_chunks="1" s_chunks="0"><tb id="0" send="-1" recv="1" chan="0">
      <step s="0" type="r" srcbuf="i" srcoff="1" dstbuf="i" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/></tb></gpu>
      <gpu id="1" i_chunks="2" o_chunks="1" s_chunks="0"/></algo>)", "writes the input buffer out of place"));
}

TEST_CASE("msccl xml: lanes that talk to several peers export as a tb per peer", "[synth][xml]") {
  Schedule back = round_trip(recursive_doubling_allreduce(8));  // one lane per rank, a peer per round
  CHECK(back.ranks[0].lanes.size() == 3);
  CHECK(verify(back).ok);
}

TEST_CASE("msccl xml: local-only thread blocks may say chan=-1 (msccl-tools allpairs files)", "[synth][xml]") {
  // Two ranks: each receives the peer's chunk into scratch, then reduces it
  // into its (aliased, in-place) buffer in a local thread block.
  const char* xml = R"(<algo name="pairs" proto="LL" nchannels="1" nchunksperloop="1" ngpus="2" coll="allreduce" inplace="1">
  <gpu id="0" i_chunks="1" o_chunks="0" s_chunks="1">
    <tb id="0" send="-1" recv="-1" chan="-1">
      <step s="0" type="re" srcbuf="s" srcoff="0" dstbuf="i" dstoff="0" cnt="1" depid="1" deps="1" hasdep="0"/>
    </tb>
    <tb id="1" send="1" recv="1" chan="0">
      <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="s" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="1" type="r" srcbuf="i" srcoff="0" dstbuf="s" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="1"/>
    </tb>
  </gpu>
  <gpu id="1" i_chunks="1" o_chunks="0" s_chunks="1">
    <tb id="0" send="-1" recv="-1" chan="-1">
      <step s="0" type="re" srcbuf="s" srcoff="0" dstbuf="i" dstoff="0" cnt="1" depid="1" deps="1" hasdep="0"/>
    </tb>
    <tb id="1" send="0" recv="0" chan="0">
      <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="s" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="1" type="r" srcbuf="i" srcoff="0" dstbuf="s" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="1"/>
    </tb>
  </gpu>
</algo>)";
  Schedule s;
  std::string error;
  REQUIRE(schedule_from_msccl_xml(xml, &s, &error));
  CHECK(s.ranks[0].lanes[0].channel == 0);
  CHECK(s.ranks[0].lanes[0].ops[0].type == OpType::Reduce);
  CHECK(s.ranks[0].lanes[0].ops[0].dst == ChunkRef{BufferKind::Output, 0});
  CHECK(s.in_place);
  CHECK_FALSE(s.out_of_place);
  VerifyResult v = verify(s);
  INFO((v.errors.empty() ? "" : v.errors[0]));
  CHECK(v.ok);
}

namespace {

Schedule import(const std::string& xml) {
  Schedule s;
  std::string error;
  INFO(xml.substr(0, 2000));
  REQUIRE(schedule_from_msccl_xml(xml, &s, &error));
  return s;
}

std::string with_attrs(const std::string& attrs) {
  return R"(<algo name="t" proto="Simple" nchannels="1" ngpus="2" coll="allreduce" )" + attrs + R"(>
  <gpu id="0" i_chunks="1" o_chunks="1" s_chunks="0"><tb id="0" send="1" recv="1" chan="0">
    <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    <step s="1" type="rrc" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/></tb></gpu>
  <gpu id="1" i_chunks="1" o_chunks="1" s_chunks="0"><tb id="0" send="0" recv="0" chan="0">
    <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    <step s="1" type="rrc" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/></tb></gpu>
</algo>)";
}

}  // namespace

TEST_CASE("msccl xml: size ranges as each runtime reads them", "[synth][xml]") {
  // msccl-executor (files with outofplace): maxBytes="0" is unbounded, the range inclusive.
  Schedule s = import(with_attrs(R"(inplace="0" outofplace="1" minBytes="0" maxBytes="0")"));
  CHECK(s.min_bytes == 0);
  CHECK(s.max_bytes == UINT64_MAX);
  s = import(with_attrs(R"(inplace="0" outofplace="1" minBytes="1024" maxBytes="1048575")"));
  CHECK(s.min_bytes == 1024);
  CHECK(s.max_bytes == 1048575);
  // The older runtime: maxBytes exclusive, 128 MiB when absent.
  s = import(with_attrs(R"(inplace="0" minBytes="64" maxBytes="4096")"));
  CHECK(s.max_bytes == 4095);
  s = import(with_attrs(R"(inplace="0")"));
  CHECK(s.max_bytes == (uint64_t(1) << 27) - 1);
  CHECK(fails_with(with_attrs(R"(inplace="0" outofplace="1" minBytes="4096" maxBytes="1024")"), "no call could choose it"));
  CHECK(fails_with(with_attrs(R"(inplace="0" outofplace="1" minBytes="-1" maxBytes="0")"), "negative"));
  // braid writes maxBytes="0" for no bound, as msccl-tools does.
  std::string xml, error;
  REQUIRE(schedule_to_msccl_xml(ring_allreduce(2), &xml, &error));
  CHECK(xml.find(R"(maxBytes="0")") != std::string::npos);
}

TEST_CASE("msccl xml: message sizes count every rank's share where MSCCL does", "[synth][xml]") {
  CHECK(message_bytes(Collective::AllReduce, 8, 1000, 4) == 4000);
  CHECK(message_bytes(Collective::Broadcast, 8, 1000, 4) == 4000);
  CHECK(message_bytes(Collective::AllGather, 8, 1000, 4) == 32000);
  CHECK(message_bytes(Collective::ReduceScatter, 8, 1000, 2) == 16000);
  CHECK(message_bytes(Collective::AlltoAll, 8, 1000, 1) == 8000);
}

TEST_CASE("msccl xml: nop steps carry dependencies only", "[synth][xml]") {
  // msccl-tools' allpairs AllReduce: local thread blocks wait for every
  // receive through nop steps (srcoff="-1" dstoff="-1" cnt="0").
  const std::string xml = msccl_style::allpairs(4, true).xml();
  REQUIRE(xml.find(R"(type="nop" srcbuf="i" srcoff="-1" dstbuf="o" dstoff="-1" cnt="0")") != std::string::npos);
  Schedule s = import(xml);
  size_t nops = 0;
  for (const Lane& lane : s.ranks[1].lanes)
    for (const Op& op : lane.ops)
      if (op.type == OpType::Nop) {
        ++nops;
        CHECK(op.deps.size() == 1);
        CHECK(op.count == 1);
      }
  CHECK(nops > 0);
  // A nop's offsets are not chunks; a step that uses a buffer must name one, and move something.
  auto one_step = [](const char* step) {
    return std::string(kHead) + R"(<gpu id="0" i_chunks="2" o_chunks="2" s_chunks="0"><tb id="0" send="1" recv="-1" chan="0">)" +
           step + "</tb></gpu></algo>";
  };
  CHECK(fails_with(one_step(R"(<step s="0" type="s" srcbuf="i" srcoff="-1" dstbuf="o" dstoff="-1" cnt="1" depid="-1" deps="-1" hasdep="0"/>)"),
                   "offset -1"));
  CHECK(fails_with(one_step(R"(<step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="0" depid="-1" deps="-1" hasdep="0"/>)"),
                   "cnt=0"));
}

TEST_CASE("msccl xml: a multi-chunk step is one message, so allpairs runs with two slots", "[synth][xml]") {
  // Rank r sends its n-chunk block to each peer in one step (cnt=n) before
  // it receives theirs: with each chunk a message of its own, every
  // connection would need n slots (the executors frame such a step:
  // src/ops/op_step.h).
  for (int n : {2, 3, 4, 8}) {
    INFO("ranks " << n);
    Schedule s = import(msccl_style::allpairs(n, true).xml());
    CHECK(s.ranks[0].lanes[0].ops[0].count == uint32_t(n));
    VerifyResult v = verify(s);
    INFO((v.errors.empty() ? "" : v.errors[0]));
    CHECK(v.ok);
    CHECK(s.slots == kMinSlots);
  }
  // A message's chunks must be received by an op of as many.
  Schedule s = import(msccl_style::allpairs_alltoall(3, 2).xml());
  s.ranks[1].lanes[0].ops[1].count = 1;
  s.ranks[1].lanes[0].ops.insert(s.ranks[1].lanes[0].ops.begin() + 2, s.ranks[1].lanes[0].ops[1]);
  s.ranks[1].lanes[0].ops[2].dst.index += 1;
  VerifyResult v = verify(s);
  REQUIRE_FALSE(v.ok);
  CHECK(v.errors[0].find("2 chunk(s) sent as one, but received by an op of 1") != std::string::npos);
}

TEST_CASE("msccl xml: one-placement files keep their placement", "[synth][xml]") {
  Schedule ag = import(msccl_style::ring_allgather(4).xml());  // names only the output, in place
  CHECK(ag.in_place);
  CHECK_FALSE(ag.out_of_place);
  CHECK(ag.ranks[2].input_chunks == 1);  // given by nchunksperloop (the file says i_chunks="0")
  CHECK(ag.ranks[2].output_chunks == 4);
  CHECK(verify(ag).ok);
  Schedule a2a = import(msccl_style::allpairs_alltoall(4, 2).xml());
  CHECK(a2a.out_of_place);
  CHECK_FALSE(a2a.in_place);
  CHECK(verify(a2a).ok);
}

TEST_CASE("msccl xml: nchunksperloop lays the chunks out", "[synth][xml]") {
  const std::string head = R"(<algo name="t" proto="LL" nchannels="1" nchunksperloop="4" ngpus="2" coll="allgather" inplace="1" outofplace="0" minBytes="0" maxBytes="0">)";
  // i_chunks="0" in place: nchunksperloop says 4 output chunks, so 2 input chunks.
  Schedule s = import(head + R"(<gpu id="0" i_chunks="0" o_chunks="4" s_chunks="0"/><gpu id="1" i_chunks="0" o_chunks="4" s_chunks="0"/></algo>)");
  CHECK(s.ranks[0].input_chunks == 2);
  CHECK(s.ranks[0].output_chunks == 4);
  CHECK(fails_with(head + R"(<gpu id="0" i_chunks="0" o_chunks="2" s_chunks="0"/><gpu id="1" i_chunks="0" o_chunks="4" s_chunks="0"/></algo>)",
                   "o_chunks=2, but 4 chunks per loop (nchunksperloop) make that buffer 4 chunks"));
  CHECK(fails_with(R"(<algo name="t" proto="LL" nchunksperloop="3" ngpus="2" coll="allgather" inplace="1" outofplace="0">
      <gpu id="0" i_chunks="0" o_chunks="3" s_chunks="0"/><gpu id="1" i_chunks="0" o_chunks="3" s_chunks="0"/></algo>)",
                   "do not split into the 2 ranks' blocks"));
  CHECK(fails_with(R"(<algo name="t" proto="Fast" nchunksperloop="2" ngpus="2" coll="allgather" inplace="1" outofplace="0">
      <gpu id="0" i_chunks="0" o_chunks="2" s_chunks="0"/><gpu id="1" i_chunks="0" o_chunks="2" s_chunks="0"/></algo>)",
                   "Simple, LL and LL128"));
}

TEST_CASE("msccl xml: registration files", "[synth][xml]") {
  std::vector<MscclRegistration> loads;
  std::string error;
  const std::string text = R"(<?xml version="1.0"?>
<!-- written by msccl.init -->
<msccl_algos>
  <load path="/algos/a.xml" minbytes="1024" maxbytes="4096" proto="LL"/>
  <load path="b.xml" proto="Simple"/>
</msccl_algos>)";
  CHECK(is_msccl_registration(text));
  CHECK_FALSE(is_msccl_registration(with_attrs(R"(inplace="1")")));
  REQUIRE(msccl_registrations_from_xml(text, &loads, &error));
  REQUIRE(loads.size() == 2);
  CHECK(loads[0].path == "/algos/a.xml");
  CHECK(loads[0].min_bytes == 1024);
  CHECK(loads[0].max_bytes == 4095);  // exclusive there
  CHECK(loads[0].protocol == "LL");
  CHECK(loads[1].min_bytes == 0);
  CHECK(loads[1].max_bytes == UINT64_MAX);
  CHECK_FALSE(msccl_registrations_from_xml("<msccl_algos><load minbytes=\"1\"/></msccl_algos>", &loads, &error));
  CHECK(error.find("no path") != std::string::npos);
}

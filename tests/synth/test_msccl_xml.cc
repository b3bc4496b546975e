// MSCCL XML: exact round trips, both dialects, the in-place files msccl-tools
// writes, and refusal of malformed or unrepresentable input.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "braid/algorithms.h"
#include "braid/msccl_xml.h"
#include "braid/verify.h"

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
  CHECK(back.max_bytes == UINT64_MAX);
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
  CHECK(s.out_of_place);  // reads of unwritten chunks are input reads: right out of place too
  CHECK(s.ranks[0].output_chunks == 4);
  // rrcs writes the aliased chunk: now a write of the output.
  CHECK(s.ranks[0].lanes[0].ops[3].dst == ChunkRef{BufferKind::Output, 1});
  CHECK(s.ranks[0].lanes[0].ops[3].src == ChunkRef{BufferKind::Input, 1});
  VerifyResult v = verify(s);
  CHECK(v.ok);
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
      <gpu id="1" i_chunks="2" o_chunks="1" s_chunks="0"/></algo>)", "no output alias"));
}

TEST_CASE("msccl xml: lanes that talk to several peers cannot be exported", "[synth][xml]") {
  std::string xml, error;
  CHECK_FALSE(schedule_to_msccl_xml(binomial_broadcast(8, 0), &xml, &error));
  CHECK(error.find("one peer") != std::string::npos);
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
  CHECK_FALSE(s.out_of_place);  // out of place the reduce would add into an output never initialised
  VerifyResult v = verify(s);
  INFO((v.errors.empty() ? "" : v.errors[0]));
  CHECK(v.ok);
}

// MSCCL XML export within what MSCCL's runtime parser accepts: one peer per
// thread block (lanes split, order kept), 32 sending or receiving tbs per
// channel, 256 steps per tb; and what the format cannot carry (a root, a
// size range no call can choose) refused rather than written wrong.
#include <catch2/catch.hpp>

#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "braid/algorithms.h"
#include "braid/msccl_xml.h"
#include "braid/schedule_json.h"
#include "braid/verify.h"

using namespace braid;

namespace {

std::string export_xml(const Schedule& s) {
  std::string xml, error;
  INFO(error);
  bool ok = schedule_to_msccl_xml(s, &xml, &error);
  INFO(error);
  REQUIRE(ok);
  return xml;
}

std::string export_error(const Schedule& s) {
  std::string xml, error;
  CHECK_FALSE(schedule_to_msccl_xml(s, &xml, &error));
  return error;
}

Schedule import_xml(const std::string& xml) {
  Schedule back;
  std::string error;
  bool ok = schedule_from_msccl_xml(xml, &back, &error);
  INFO(error);
  REQUIRE(ok);
  return back;
}

// The most tbs that send (or receive) on one channel of one gpu.
int busiest_channel(const std::string& xml, const char* side) {
  int most = 0;
  std::map<std::pair<int, int>, int> count;  // (gpu, chan)
  int gpu = -1;
  std::regex tb(std::string("<tb id=\"\\d+\" send=\"(-?\\d+)\" recv=\"(-?\\d+)\" chan=\"(\\d+)\""));
  std::istringstream in(xml);
  for (std::string line; std::getline(in, line);) {
    if (line.find("<gpu ") != std::string::npos) ++gpu;
    std::smatch m;
    if (!std::regex_search(line, m, tb)) continue;
    const int peer = std::stoi(m[std::string(side) == "send" ? 1 : 2]);
    if (peer >= 0) most = std::max(most, ++count[{gpu, std::stoi(m[3])}]);
  }
  return most;
}

}  // namespace

TEST_CASE("msccl export: a lane sending to several peers becomes one tb per peer, in order", "[synth][xml]") {
  for (int n : {3, 4, 5, 8}) {
    INFO(n);
    // Compact lanes: the straggler's sends to every peer share one lane.
    for (StragglarLanes lanes : {StragglarLanes::Compact, StragglarLanes::PerConnection}) {
      Schedule s = stragglar_allreduce(n, n - 1, lanes);
      REQUIRE(verify(s).ok);
      const std::string xml = export_xml(s);
      Schedule back = import_xml(xml);
      VerifyResult v = verify(back);
      INFO((v.errors.empty() ? "" : v.errors[0]));
      CHECK(v.ok);
      for (const RankProgram& p : back.ranks)
        for (const Lane& lane : p.lanes) {
          std::set<int> sends, recvs;
          for (const Op& op : lane.ops) {
            if (op_sends(op.type)) sends.insert(op.send_peer);
            if (op_receives(op.type)) recvs.insert(op.recv_peer);
          }
          CHECK(sends.size() <= 1);
          CHECK(recvs.size() <= 1);
        }
    }
  }
}

TEST_CASE("msccl export: tbs spread over channels within MSCCL's 32 per channel", "[synth][xml]") {
  Schedule s = direct_alltoall(40);
  const std::string xml = export_xml(s);
  CHECK(busiest_channel(xml, "send") <= 32);
  CHECK(busiest_channel(xml, "recv") <= 32);
  CHECK(xml.find("nchannels=\"1\"") == std::string::npos);
  CHECK(verify(import_xml(xml)).ok);
  // A file already within the limits keeps its channels.
  CHECK(export_xml(ring_allreduce(4)).find("nchannels=\"1\"") != std::string::npos);
}

TEST_CASE("msccl export: a tb past MSCCL's 256 steps is refused", "[synth][xml]") {
  const std::string error = export_error(ring_allreduce(200));  // 398 steps in one lane
  CHECK(error.find("MSCCL_MAX_NUM_STEPS") != std::string::npos);
  CHECK(error.find("256") != std::string::npos);
  export_xml(ring_allreduce(100));  // about 200 steps: fits
}

TEST_CASE("msccl export: rooted schedules are refused, the format has no root", "[synth][xml]") {
  for (const Schedule& s : {chain_reduce(4, 2), binomial_broadcast(4, 1), direct_gather(3, 0), direct_scatter(3, 2)}) {
    INFO(s.name);
    CHECK(export_error(s).find("no root attribute") != std::string::npos);
  }
}

TEST_CASE("schedule files: a size range no call can choose is refused in JSON as in XML", "[synth][xml]") {
  Schedule s = ring_allreduce(2);
  std::string error;
  Schedule back;
  s.max_bytes = 0;  // JSON's 0..0 serves nothing; XML's maxBytes="0" would serve everything
  CHECK(export_error(s).find("no call could choose") != std::string::npos);
  CHECK_FALSE(schedule_from_json(schedule_to_json(s), &back, &error));
  CHECK(error.find("max_bytes=0") != std::string::npos);
  s.min_bytes = 100;
  s.max_bytes = 10;
  CHECK_FALSE(schedule_from_json(schedule_to_json(s), &back, &error));
  CHECK(error.find("min_bytes=100 is above max_bytes=10") != std::string::npos);
  s.min_bytes = 8;
  s.max_bytes = 8;  // one size: a real range, kept through both formats
  REQUIRE(schedule_from_json(schedule_to_json(s), &back, &error));
  Schedule xml = import_xml(export_xml(s));
  CHECK((xml.min_bytes == 8 && xml.max_bytes == 8));
}

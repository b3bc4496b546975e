// BRAID_SCHEDULES end to end on forked processes: synthesized schedules
// (braid JSON) and an MSCCL XML allreduce, loaded from a directory, chosen by
// collective, rank count and size, executed with exact results; the log
// names the schedule each call ran.
//
// tests/data/synth/schedules/ holds (regenerate with the commands in
// synth/README.md): a_msccl_allreduce_small.xml (allreduce, 4 ranks, up to
// 64 KiB), b_taccl_{allgather,allreduce,alltoall}.json (synthesized for two
// nodes of two GPUs).  Every one of them is correct in both placements.
// A rank count with no file falls back to the built-ins.  (Files of one
// placement, MSCCL's own files and the msccl-tools-style ones: tests/msccl.)
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <string>

#include "collective_check.h"
#include "read_file.h"

using namespace mp;

namespace {

std::string data_dir() { return BRAID_TEST_DATA "/synth/schedules"; }

std::string read_logs(const std::string& pattern_dir) {
  std::string all;
  for (int i = 0; i < 4; ++i) all += read_file(pattern_dir + "/rank" + std::to_string(i) + ".log");
  return all;
}

}  // namespace

TEST_CASE("BRAID_SCHEDULES: synthesized and MSCCL schedules run with exact results", "[mp][processes][synth]") {
  char tmpl[] = "/tmp/braid_sched_logs_XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  const std::string logs = tmpl;
  auto setup = [&](int rank) {
    setenv("BRAID_SCHEDULES", data_dir().c_str(), 1);
    setenv("BRAID_DEBUG", "INFO", 1);
    setenv("BRAID_DEBUG_FILE", (logs + "/rank" + std::to_string(rank) + ".log").c_str(), 1);
    ncclResetDebugInit();  // the parent's ncclGetUniqueId already read the logging variables
  };
  auto body = [](int rank, int n, ncclComm_t comm, Failures& f) {
    // 1000 floats = 4000 B (the MSCCL allreduce); 300007 floats > 64 KiB (the synthesized one).
    for (size_t count : {size_t(1), size_t(7), size_t(1000), size_t(300007)})
      for (Coll coll : {Coll::AllGather, Coll::AllReduce, Coll::AlltoAll})
        for (bool in_place : {false, true}) {
          CollCase c;
          c.coll = coll;
          c.count = count;
          c.in_place = in_place;
          run_and_check(c, rank, n, comm, f);
        }
  };
  CHECK(run_ranks_as_processes(4, body, 120, setup) == 0);
  std::string log = read_logs(logs);
  INFO(log.substr(0, 4000));
  const std::string dir = data_dir();
  CHECK(log.find("loaded 'taccl_allgather_pair_switch_1MBx2_c2'") != std::string::npos);
  // Sizes are whole messages (x4 ranks for AllGather and AlltoAll), as MSCCL counts them.
  CHECK(log.find("allgather of 28 B (out of place, 112 B message) on 4 ranks: schedule "
                 "'taccl_allgather_pair_switch_1MBx2_c2' from " + dir + "/b_taccl_allgather.json") != std::string::npos);
  CHECK(log.find("allgather of 28 B (in place, 112 B message) on 4 ranks: schedule "
                 "'taccl_allgather_pair_switch_1MBx2_c2'") != std::string::npos);
  CHECK(log.find("allreduce of 4000 B (out of place, 4000 B message) on 4 ranks: schedule 'msccl_ring_allreduce_small' "
                 "from " + dir + "/a_msccl_allreduce_small.xml") != std::string::npos);
  CHECK(log.find("allreduce of 1200028 B (in place, 1200028 B message) on 4 ranks: schedule "
                 "'taccl_allreduce_pair_switch_1MBx2_c2'") != std::string::npos);
  CHECK(log.find("alltoall of 4 B (out of place, 16 B message) on 4 ranks: schedule "
                 "'taccl_alltoall_pair_switch_1MBx2_c2'") != std::string::npos);
  std::string cleanup = "rm -rf " + logs;
  CHECK(std::system(cleanup.c_str()) == 0);
}

namespace {

// An out-of-place AllGather on 2 ranks in MSCCL XML: each rank sends its 3
// input chunks one step each before it receives any, so a connection must
// hold 3 messages.
std::string deep_allgather_xml() {
  std::string x = R"(<algo name="deep" proto="Simple" nchannels="1" nchunksperloop="6" ngpus="2" coll="allgather" )"
                  R"(inplace="0" outofplace="1" minBytes="0" maxBytes="0">)";
  for (int r = 0; r < 2; ++r) {
    const int peer = 1 - r;
    x += "<gpu id=\"" + std::to_string(r) + R"(" i_chunks="3" o_chunks="6" s_chunks="0"><tb id="0" send=")" +
         std::to_string(peer) + "\" recv=\"" + std::to_string(peer) + "\" chan=\"0\">";
    for (int j = 0; j < 6; ++j) {
      const bool send = j < 3;
      const int k = send ? j : j - 3;
      x += "<step s=\"" + std::to_string(j) + "\" type=\"" + (send ? "s" : "r") + "\" srcbuf=\"i\" srcoff=\"" +
           std::to_string(k) + "\" dstbuf=\"o\" dstoff=\"" + std::to_string(peer * 3 + k) +
           R"(" cnt="1" depid="-1" deps="-1" hasdep="0"/>)";
    }
    x += R"(</tb><tb id="1" send="-1" recv="-1" chan="-1"><step s="0" type="cpy" srcbuf="i" srcoff="0" dstbuf="o" dstoff=")" +
         std::to_string(r * 3) + R"(" cnt="3" depid="-1" deps="-1" hasdep="0"/></tb></gpu>)";
  }
  return x + "</algo>\n";
}

}  // namespace

TEST_CASE("schedule files: a file needing more slots than the connections buffer is not used",
          "[mp][processes][synth]") {
  char tmpl[] = "/tmp/braid_sched_slots_XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl, file = dir + "/deep.xml";
  std::ofstream(file) << deep_allgather_xml();
  for (const char* slots : {"2", "8"}) {
    auto setup = [&](int rank) {
      setenv("BRAID_SCHEDULES", file.c_str(), 1);
      setenv("BRAID_SHM_SLOTS", slots, 1);
      setenv("BRAID_DEBUG", "INFO", 1);
      setenv("BRAID_DEBUG_FILE", (dir + "/rank" + std::to_string(rank) + ".log").c_str(), 1);
      ncclResetDebugInit();
    };
    auto body = [](int rank, int n, ncclComm_t comm, Failures& f) {
      CollCase c;
      c.coll = Coll::AllGather;
      c.count = 1000;
      run_and_check(c, rank, n, comm, f);
    };
    CHECK(run_ranks_as_processes(2, body, 60, setup) == 0);
    std::string log = read_logs(dir);
    INFO(log.substr(0, 3000));
    if (std::string(slots) == "2") {
      CHECK(log.find("needs 3 slots per connection") != std::string::npos);
      CHECK(log.find("built-in") != std::string::npos);
    } else {
      CHECK(log.find("schedule 'deep' from " + file) != std::string::npos);
    }
  }
  CHECK(std::system(("rm -rf " + dir).c_str()) == 0);
}

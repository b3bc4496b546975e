// RAS's reports (src/runtime/ras_report.h) from job views built by hand:
// the exact text NCCL's format gives for healthy, failed, partly finalized
// and partly missing communicators, the job summary of uneven jobs, the
// outlier rule with and without verbose, the JSON, and the wire form
// between processes (round trip; garbage refused).
#include <catch2/catch.hpp>

#include <string>

#include "src/runtime/ras_report.h"

using namespace braid::ras;

namespace {

ProcessInfo process(int i, const std::string& host, std::vector<int> devs = {}) {
  return {host + ":" + std::to_string(40000 + i), host, 1000 + i, std::move(devs)};
}

RankState rank(int r, int dev = -1, uint64_t allreduces = 7) {
  RankState s;
  s.rank = r;
  s.cuda_dev = dev;
  s.coll_counts[4] = allreduces;
  return s;
}

// n processes on `hosts` hosts (round robin), one rank each of one n-rank communicator.
JobView one_comm(int n, int hosts = 1) {
  JobView v;
  v.nccl_version = "2.32.6";
  v.cuda_compiled = 13000;
  for (int i = 0; i < n; ++i) {
    ProcessReport r;
    r.process = process(i, "10.0.0." + std::to_string(1 + i % hosts), {0});
    r.comms.push_back({{0xabc, 1, 2}, n, {rank(i, 0)}});
    v.answered.push_back(r);
  }
  return v;
}

bool has(const std::string& text, const std::string& what) {
  if (text.find(what) != std::string::npos) return true;
  UNSCOPED_INFO("in:\n" << text << "\nmissing:\n" << what);
  return false;
}

}  // namespace

TEST_CASE("RAS text report of a healthy job is NCCL's layout", "[ras]") {
  const std::string text = render_text(one_comm(8, 2), false);
  CHECK(text ==
        "NCCL version 2.32.6 compiled with CUDA 13.0\n"
        "CUDA runtime version 0, driver version 0\n\n"
        "Job summary\n===========\n\n"
        "  Nodes  Processes         GPUs  Processes     GPUs\n"
        "(total)   per node  per process    (total)  (total)\n"
        "      2          4            1          8        8\n"
        "\nCommunicators... (0.000s)\n=============\n\n"
        "Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors\n"
        "    #  in group  per comm  per node  per comm  in group\n"
        "    0         1         2         4         8         8   RUNNING      OK\n"
        "\nErrors\n======\n\n"
        "Warnings\n========\n\n");
  JobView none;
  none.nccl_version = "2.32.6";
  CHECK(has(render_text(none, false), "No communicator data collected!\n"));
  CHECK(has(render_text(none, false), "compiled without CUDA\n"));
}

TEST_CASE("RAS lists the ranks behind by name only where they are outliers", "[ras]") {
  JobView v = one_comm(16);
  for (int i = 0; i < 5; ++i) v.answered[size_t(i)].comms[0].ranks[0].coll_counts[4] = 6;  // 5 of 16 behind
  const std::string quiet = render_text(v, false), verbose = render_text(v, true);
  CHECK(has(quiet, "#0-0 (0000000000000abc) MISMATCH\n"
                   "  Communicator ranks have different AllReduce operation counts\n"
                   "  11 ranks have launched up to operation 7\n"
                   "  5 ranks have launched up to operation 6\n\n"));  // 5 > 16/4: not named
  CHECK(has(verbose, "  5 ranks have launched up to operation 6\n"
                     "  Rank 0 -- GPU 0 managed by process 1000 on node 10.0.0.1\n"));  // 5 < 16/2: named
  CHECK(!has(verbose, "  Rank 5 --"));
  v.answered[0].comms[0].ranks[0].coll_counts[4] = 0;
  CHECK(has(render_text(v, false), "  Rank 0 has not launched any operations -- GPU 0 managed by process 1000"));
}

TEST_CASE("RAS reports failed ranks by error, and status mismatches with NOCOMM ranks", "[ras]") {
  JobView v = one_comm(4);
  v.answered[1].comms[0].ranks[0].async_error = 6;  // ncclRemoteError
  v.answered[2].comms[0].ranks[0].async_error = 6;
  v.answered[3].comms[0].ranks[0].finalize_called = true;
  v.answered[0].comms.clear();  // its process answered without it: NOCOMM
  v.homes[{0xabc, 1, 2}] = {{0, v.answered[0].process.addr, 0}};
  const std::string text = render_text(v, false);
  CHECK(has(text, "    0         1         1         3         4         3  FINALIZE  ERROR,MISMATCH\n"));
  CHECK(has(text, "#0-0 (0000000000000abc) ERROR\n"
                  "  Asynchronous errors on 2 ranks\n"
                  "  2 ranks reported Remote process error\n"
                  "  Rank 1 -- GPU 0 managed by process 1001 on node 10.0.0.1\n"
                  "  Rank 2 -- GPU 0 managed by process 1002 on node 10.0.0.1\n\n"));
  CHECK(has(text, "  Communicator ranks have different status\n"
                  "  2 ranks have status RUNNING\n"));
  CHECK(has(text, "  Rank 3 has status FINALIZE -- GPU 0 managed by process 1003 on node 10.0.0.1\n"));
  CHECK(has(text, "  Rank 0 has status NOCOMM -- GPU 0 managed by process 1000 on node 10.0.0.1\n"));
  CHECK(!has(text, "INCOMPLETE"));

  JobView lone = one_comm(4);  // a process without the communicator is the only difference
  lone.answered[0].comms.clear();
  CHECK(has(render_text(lone, false), "         4         3   RUNNING  MISMATCH\n"));
}

TEST_CASE("RAS reports missing ranks of unresponsive and dead processes as INCOMPLETE", "[ras]") {
  JobView v = one_comm(4);
  const ProcessInfo gone = v.answered[3].process, silent = v.answered[2].process;
  v.answered.resize(2);
  v.dead = {gone};
  v.unresponsive = {silent};
  v.timeouts = 1;
  v.homes[{0xabc, 1, 2}] = {{0, v.answered[0].process.addr, 0}, {1, v.answered[1].process.addr, 0},
                           {2, silent.addr, 0}, {3, gone.addr, 0}};
  const std::string text = render_text(v, false);
  CHECK(has(text, "      1          4            1          4        4\n"));  // the job counts every process
  CHECK(has(text, "   RUNNING  INCOMPLETE\n"));
  CHECK(has(text, "INCOMPLETE\n  Missing communicator data from 1 job process\n"
                  "  Process 1002 on node 10.0.0.1 managing GPU 0\n\n"));
  CHECK(has(text, "DEAD\n  1 job process is considered dead (unreachable via the RAS network)\n"
                  "  Process 1003 on node 10.0.0.1 managing GPU 0\n\n"));
  CHECK(has(text, "#0-0 (0000000000000abc) INCOMPLETE\n  Missing communicator data from 2 ranks\n"
                  "  Rank 2 -- GPU 0 managed by process 1002 on node 10.0.0.1\n"
                  "  Rank 3 -- GPU 0 managed by process 1003 on node 10.0.0.1\n\n"));
  CHECK(has(text, "TIMEOUT\n  Encountered 1 communication timeout while gathering communicator data\n\n"));
  v.homes.clear();  // nobody knew where they live
  CHECK(has(render_text(v, false), "  Rank 2 -- [process information not found]\n"));

  const std::string json = render_json(v);
  CHECK(has(json, "\"missing_ranks_count\": 2"));
  CHECK(has(json, "\"host\": \"unknown\""));
  CHECK(has(json, "\"timeouts_count\": 1"));
}

TEST_CASE("RAS job summary of uneven jobs names the outlier nodes", "[ras]") {
  JobView v = one_comm(9, 3);  // 3 nodes of 3 processes
  v.answered.push_back(v.answered[0]);
  v.answered.back().process = process(99, "10.0.0.9", {0});  // a fourth node with one
  const std::string text = render_text(v, false);
  CHECK(has(text, "  Nodes  Processes         GPUs\n          per node  per process\n"
                  "      3          3            1\n"
                  "      1          1            1\n"));
  CHECK(has(text, "\n  Nodes  Processes         GPUs\n(total)    (total)      (total)\n"
                  "      4         10           10\n"));
  CHECK(has(text, "\nThe outlier node:\n  Node 10.0.0.9 running process 1099\n"));
  v.answered.back().process.cuda_devs = {0, 1};  // and GPUs per process differ too
  CHECK(has(render_text(v, false), "\n         Processes         GPUs\n                    per process\n"
                                   "                 9            1\n                 1            2\n"));
}

TEST_CASE("RAS groups alike communicators in one table row", "[ras]") {
  JobView v = one_comm(4);
  for (int i = 0; i < 4; ++i) {
    v.answered[size_t(i)].comms.push_back({{0xdef, 1, 2}, 4, {rank(i, 0)}});  // alike
    v.answered[size_t(i)].comms.push_back({{i < 2 ? 0x123u : 0x456u, 1, 2}, 2, {rank(i % 2, 0)}});  // split in two
  }
  const std::string text = render_text(v, false);
  CHECK(has(text, "    0         2         1         4         4         4   RUNNING      OK\n"
                  "    1         2         1         2         2         4   RUNNING      OK\n"));
}

TEST_CASE("RAS wire form round-trips and refuses what is not a report", "[ras]") {
  ProcessReport r;
  r.process = process(1, "10.1.2.3", {0, 3});
  RankState s = rank(5, 3, 42);
  s.init_state = 7;
  s.async_error = 6;
  s.abort_flag = true;
  r.comms.push_back({{~0ull, 2, 3}, 8, {s}});
  r.peers.push_back(process(2, "10.1.2.4"));
  ProcessReport back;
  REQUIRE(from_json(to_json(r), &back));
  CHECK(back.process == r.process);
  CHECK(back.peers == r.peers);
  REQUIRE(back.comms.size() == 1);
  CHECK(back.comms[0].id == r.comms[0].id);
  CHECK(back.comms[0].nranks == 8);
  CHECK(back.comms[0].ranks[0].coll_counts == s.coll_counts);
  CHECK(back.comms[0].ranks[0].abort_flag);
  CHECK(back.comms[0].ranks[0].async_error == 6);

  for (const char* bad : {"{}", "[]", "17", "{\"process\": 3}", "{\"process\": {\"addr\": 1}}"})
    CHECK_FALSE(from_json(nlohmann::json::parse(bad), &back));
  auto broken = to_json(r);
  broken["comms"][0]["ranks"][0]["counts"] = {1, 2};  // not five
  CHECK_FALSE(from_json(broken, &back));
  std::vector<RankHome> homes;
  CHECK(from_json(to_json(std::vector<RankHome>{{3, "a:1", 2}}), &homes));
  CHECK(homes.size() == 1);
  CHECK(homes[0].addr == "a:1");
  CHECK_FALSE(from_json(nlohmann::json::parse("[{\"rank\": \"x\"}]"), &homes));
}

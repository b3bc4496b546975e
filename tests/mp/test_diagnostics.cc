// NCCL 2.31's init diagnostics (src/runtime/diagnostics.h), with real ranks:
//  - NCCL_RUN_DIAGNOSTICS=1: every directed pair of ranks is checked through
//    the communicator's own paths, rank 0 alone prints the report, and a
//    pattern changed on one edge (BRAID_TEST_DIAG_CORRUPT) is named by
//    source, destination and path while init still succeeds;
//  - NCCL_RUN_RAS_DIAGNOSTICS=1: the ranks' NCCL_* and BRAID_* variables
//    and library are compared, differences grouped by rank, secrets hashed;
//  - a rank that dies during the exchange fails its peers' init in bounded
//    time.
#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "read_file.h"
#include "scoped_env.h"

using namespace mp;

namespace {

// The "NCCL DIAG" lines of `text`, without their "host:pid " prefix.
std::vector<std::string> diag_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const size_t at = line.find("NCCL DIAG ");
    if (at != std::string::npos) lines.push_back(line.substr(at + 10));
  }
  return lines;
}

bool has_line_starting(const std::vector<std::string>& lines, const std::string& start) {
  for (const std::string& l : lines)
    if (l.rfind(start, 0) == 0) return true;
  return false;
}

int count_lines(const std::vector<std::string>& lines, const std::string& start) {
  int n = 0;
  for (const std::string& l : lines) n += l.rfind(start, 0) == 0;
  return n;
}

ncclResult_t wait_done(ncclComm_t comm) {
  ncclResult_t state = ncclInProgress;
  while (ncclCommGetAsyncError(comm, &state) == ncclSuccess && state == ncclInProgress)
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  return state;
}

// The communicator still reduces exactly after its diagnostics (blocking
// or not).
void sums_exactly(int rank, int nranks, ncclComm_t comm, Failures& f) {
  std::vector<int32_t> in(1 << 16), out(in.size());
  for (size_t i = 0; i < in.size(); ++i) in[i] = int32_t(i) * (rank + 1);
  ncclResult_t r = ncclAllReduce(in.data(), out.data(), in.size(), ncclInt32, ncclSum, comm, nullptr);
  if (r == ncclInProgress) r = wait_done(comm);
  if (r != ncclSuccess) return f.fail(std::string("allreduce after the diagnostics: ") + ncclGetErrorString(r));
  const int32_t factor = nranks * (nranks + 1) / 2;
  for (size_t i = 0; i < out.size(); ++i)
    if (out[i] != int32_t(i) * factor) {
      f.fail("allreduce after the diagnostics: element " + std::to_string(i) + " is " + std::to_string(out[i]));
      return;
    }
}

// Each forked rank's standard output, in a file of its own.
struct RankOutputs {
  std::string dir;
  RankOutputs() {
    char tmpl[] = "/tmp/braid_diag_XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    dir = tmpl;
  }
  ~RankOutputs() {
    for (int r = 0; r < 16; ++r) unlink(path(r).c_str());
    rmdir(dir.c_str());
  }
  std::string path(int rank) const { return dir + "/rank" + std::to_string(rank); }
  void redirect(int rank) const {
    const int fd = open(path(rank).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) dup2(fd, STDOUT_FILENO), close(fd);
  }
  std::vector<std::string> lines(int rank) const { return diag_lines(read_file(path(rank))); }
};

}  // namespace

TEST_CASE("NCCL_RUN_DIAGNOSTICS: every directed edge verified, rank 0 reports, threads", "[mp][diagnostics]") {
  ScopedEnv active("NCCL_RUN_DIAGNOSTICS", "1");
  ScopedEnv ras("NCCL_RUN_RAS_DIAGNOSTICS", "1");
  // This process's standard output, into a file for the run.
  char path[] = "/tmp/braid_diag_threads_XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  std::fflush(stdout);
  const int saved = dup(STDOUT_FILENO);
  dup2(fd, STDOUT_FILENO);
  close(fd);
  const int bad = run_ranks_as_threads(4, sums_exactly);
  std::fflush(stdout);
  dup2(saved, STDOUT_FILENO);
  close(saved);
  const std::vector<std::string> lines = diag_lines(read_file(path));
  unlink(path);
  CHECK(bad == 0);
  INFO("report:\n" << [&] {
    std::string all;
    for (const auto& l : lines) all += l + "\n";
    return all;
  }());
  // One report (rank 0's), not one per rank.
  CHECK(count_lines(lines, "=== NCCL Diagnostics ===") == 1);
  CHECK(count_lines(lines, "=== RAS Diagnostics ===") == 1);
  CHECK(has_line_starting(lines, "[OK]   p2p: all 12 directed edges verified (shm 12)"));
  CHECK(has_line_starting(lines, "[OK]   library: braid "));
  // Threads share one environment.
  CHECK(has_line_starting(lines, "[OK]   NCCL environment: NCCL_* env vars consistent across 4 ranks in comm 0x"));
  CHECK(has_line_starting(lines, "[OK]   braid environment: BRAID_* env vars consistent across 4 ranks"));
  CHECK(has_line_starting(lines, "NCCL diagnostics completed in "));
  CHECK(count_lines(lines, "[INFO]") == 0);
}

TEST_CASE("NCCL_RUN_DIAGNOSTICS: a changed byte on one edge is named, init goes on, processes over sockets",
          "[mp][processes][diagnostics]") {
  RankOutputs outputs;
  const int n = 3;
  auto setup = [&](int rank) {
    outputs.redirect(rank);
    // Asked for by one rank only: every rank joins.
    if (rank == 2) setenv("NCCL_RUN_DIAGNOSTICS", "1", 1);
    setenv("BRAID_TRANSPORT", "socket", 1);
    setenv("BRAID_TEST_DIAG_CORRUPT", "2:1", 1);
  };
  CHECK(run_ranks_as_processes(n, sums_exactly, 60, setup) == 0);
  const std::vector<std::string> lines = outputs.lines(0);
  CHECK(outputs.lines(1).empty());
  CHECK(outputs.lines(2).empty());
  CHECK(count_lines(lines, "=== NCCL Diagnostics ===") == 1);
  CHECK(count_lines(lines, "=== RAS Diagnostics ===") == 0);
  CHECK(has_line_starting(lines, "[INFO] p2p: data mismatch srcRank=2 dstRank=1 path=socket message=1052675 bytes "
                                 "offset=526337 expected=0x"));
  CHECK(count_lines(lines, "[INFO] p2p: data mismatch") == 1);
  CHECK(has_line_starting(lines, "[INFO] p2p: 5/6 directed edges verified (socket 6)"));
}

TEST_CASE("NCCL_RUN_DIAGNOSTICS: every init reports, non-blocking ones and splits too, processes",
          "[mp][processes][diagnostics]") {
  RankOutputs outputs;
  const int n = 4;
  auto setup = [&](int rank) {
    outputs.redirect(rank);
    setenv("NCCL_RUN_DIAGNOSTICS", "1", 1);
  };
  // Non-blocking: the diagnostics run in init's own thread.
  auto init = [](ncclComm_t* comm, int nranks, const ncclUniqueId& id, int rank) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const ncclResult_t r = ncclCommInitRankConfig(comm, nranks, id, rank, &config);
    return r == ncclInProgress || r == ncclSuccess ? wait_done(*comm) : r;
  };
  auto body = [](int rank, int, ncclComm_t comm, Failures& f) {
    ncclComm_t half = nullptr;
    const ncclResult_t r = ncclCommSplit(comm, rank % 2, rank, &half, nullptr);  // inherits non-blocking
    // As NCCL's (and as PyTorch polls it): *newcomm is set once the parent's work is done.
    if ((r != ncclSuccess && r != ncclInProgress) || wait_done(comm) != ncclSuccess || !half ||
        wait_done(half) != ncclSuccess)
      return f.fail("split failed");
    sums_exactly(rank / 2, 2, half, f);
    MP_NCCL(f, ncclCommDestroy(half));
  };
  CHECK(run_ranks_as_processes(n, body, 60, setup, init) == 0);
  // Rank 0 of the world and of its half; rank 1 is rank 0 of the other half.
  const std::vector<std::string> first = outputs.lines(0), second = outputs.lines(1);
  CHECK(count_lines(first, "=== NCCL Diagnostics ===") == 2);
  CHECK(has_line_starting(first, "[OK]   p2p: all 12 directed edges verified (shm 12)"));
  CHECK(has_line_starting(first, "[OK]   p2p: all 2 directed edges verified (shm 2)"));
  CHECK(count_lines(second, "=== NCCL Diagnostics ===") == 1);
  CHECK(has_line_starting(second, "[OK]   p2p: all 2 directed edges verified (shm 2)"));
  CHECK(outputs.lines(2).empty());
  CHECK(outputs.lines(3).empty());
}

TEST_CASE("NCCL_RUN_RAS_DIAGNOSTICS: differing variables grouped by rank, secrets hashed, processes",
          "[mp][processes][diagnostics]") {
  RankOutputs outputs;
  const int n = 3;
  auto setup = [&](int rank) {
    outputs.redirect(rank);
    setenv("NCCL_RUN_RAS_DIAGNOSTICS", "1", 1);
    if (rank == 1) setenv("NCCL_DIAG_TEST_ONLY_ON_ONE", "yes", 1);
    setenv("BRAID_DIAG_TEST_PER_RANK", rank == 2 ? "b" : "a", 1);
    setenv("NCCL_DIAG_TEST_KEY", rank == 0 ? "hunter2" : "swordfish", 1);
    setenv("BRAID_DIAG_TEST_LINES", rank == 0 ? "one\ntwo" : "one", 1);  // a line stays one line
  };
  CHECK(run_ranks_as_processes(n, sums_exactly, 60, setup) == 0);
  const std::vector<std::string> lines = outputs.lines(0);
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  INFO("report:\n" << all);
  CHECK(outputs.lines(1).empty());
  CHECK(has_line_starting(lines, "[OK]   library: braid "));
  CHECK(has_line_starting(lines, "[INFO] NCCL environment: mismatch across 3 ranks in comm 0x"));
  CHECK(all.find(" for NCCL_DIAG_TEST_ONLY_ON_ONE\n") != std::string::npos);
  CHECK(has_line_starting(lines, "[INFO] NCCL environment: NCCL_DIAG_TEST_ONLY_ON_ONE=(unset) on rank(s) {0,2}"));
  CHECK(has_line_starting(lines, "[INFO] NCCL environment: NCCL_DIAG_TEST_ONLY_ON_ONE=yes on rank(s) {1}"));
  CHECK(has_line_starting(lines, "[INFO] NCCL environment: 2 NCCL_* env var(s) differ across 3 ranks"));
  CHECK(has_line_starting(lines, "[INFO] braid environment: BRAID_DIAG_TEST_PER_RANK=a on rank(s) {0,1}"));
  CHECK(has_line_starting(lines, "[INFO] braid environment: BRAID_DIAG_TEST_PER_RANK=b on rank(s) {2}"));
  CHECK(has_line_starting(lines, "[INFO] NCCL environment: NCCL_DIAG_TEST_KEY=<hidden, hash "));
  CHECK(has_line_starting(lines, "[INFO] braid environment: BRAID_DIAG_TEST_LINES=one?two on rank(s) {0}"));
  CHECK(all.find("hunter2") == std::string::npos);
  CHECK(all.find("swordfish") == std::string::npos);
  CHECK(count_lines(lines, "=== NCCL Diagnostics ===") == 0);
}

TEST_CASE("rank lists in the report stop at 8 ranks", "[mp][diagnostics]") {
  // NCCL's format: at most 8 ranks, then how many the group has.
  RankOutputs outputs;
  const int n = 10;
  auto setup = [&](int rank) {
    outputs.redirect(rank);
    setenv("NCCL_RUN_RAS_DIAGNOSTICS", "1", 1);
    setenv("BRAID_DIAG_TEST_ODD", rank == 9 ? "odd" : "even", 1);
  };
  CHECK(run_ranks_as_processes(n, [](int, int, ncclComm_t, Failures&) {}, 90, setup) == 0);
  const std::vector<std::string> lines = outputs.lines(0);
  CHECK(has_line_starting(lines, "[INFO] braid environment: BRAID_DIAG_TEST_ODD=even on rank(s) "
                                 "{0,1,2,3,4,5,6,7,...} (N=9)"));
  CHECK(has_line_starting(lines, "[INFO] braid environment: BRAID_DIAG_TEST_ODD=odd on rank(s) {9}"));
}

TEST_CASE("NCCL_RUN_DIAGNOSTICS: a rank that dies in the exchange fails its peers' init in bounded time",
          "[mp][processes][diagnostics][faults]") {
  const int n = 3, dead = 1;
  std::vector<pid_t> pids = fork_ranks(n, 60, 1, [&](int r, const std::vector<ncclUniqueId>& ids) {
    setenv("NCCL_RUN_DIAGNOSTICS", "1", 1);
    setenv("BRAID_TEST_DIAG_EXIT_RANK", std::to_string(dead).c_str(), 1);
    setenv("BRAID_TIMEOUT", "20", 1);
    const auto start = std::chrono::steady_clock::now();
    ncclComm_t comm = nullptr;
    const ncclResult_t got = ncclCommInitRank(&comm, n, ids[0], r);
    const std::string why = ncclGetLastError(nullptr);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const bool failed = got == ncclRemoteError || got == ncclSystemError;
    // It names the dead rank where the transport saw it exit, else the lost connection.
    if (!failed || took > 10 || why.find("NCCL diagnostics") == std::string::npos) {
      std::fprintf(stderr, "rank %d: init gave %d after %.1f s (%s)\n", r, int(got), took, why.c_str());
      return 1;
    }
    return 0;
  });
  REQUIRE(int(pids.size()) == n);
  for (int r = 0; r < n; ++r) {
    int status = 0;
    waitpid(pids[size_t(r)], &status, 0);
    INFO("rank " << r);
    if (r == dead) CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 9));
    else CHECK(exit_code(status) == 0);
  }
}

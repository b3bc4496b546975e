// NCCL_ALGO on braid's communicators (src/plan/nccl_algo.h), 4 processes:
// "ring" runs braid's ring even for calls its fast paths would take (the
// log names each call's schedule), "ring;allreduce:^ring" keeps AllReduce
// off it, "tree" (which braid has none of) warns once and leaves braid's own
// choice, and a malformed value, or one set apart on one rank, fails init
// on every rank with the reason.  NCCL_PROTO (src/plan/nccl_proto.h) the
// same way: LL128 alone warns once, a malformed or lone value fails init
// (its effect, the CUDA LL path, is the GPU checks').  Every result exact.
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "algo_calls.h"
#include "harness.h"
#include "process_log.h"

using namespace mp;

namespace {

constexpr int kRanks = 4;

// Each rank: the variable (NCCL_ALGO, NCCL_PROTO) set to value, and a log
// of this process at INFO (COLL and INIT: every call's schedule, and init's
// warnings).
std::function<void(int)> with(const char* variable, const std::string& value) {
  return [=](int) {
    setenv(variable, value.c_str(), 1);
    log_to_own_file("COLL,INIT");
  };
}
std::function<void(int)> with_algo(const std::string& value) { return with("NCCL_ALGO", value); }
std::function<void(int)> with_proto(const std::string& value) { return with("NCCL_PROTO", value); }

// run_algo_calls, then the log.
std::string run_calls(int rank, int n, ncclComm_t comm, Failures& f) {
  run_algo_calls(rank, n, comm, f);
  return own_log();
}

// Forks the ranks, each with `setup`, and expects every init to fail with
// ncclInvalidArgument or ncclInvalidUsage saying `why`.
int init_fails(const std::function<void(int)>& setup, const std::string& why) {
  std::vector<pid_t> pids = fork_ranks(kRanks, 60, 1, [&](int rank, const std::vector<ncclUniqueId>& ids) {
    setup(rank);
    ncclComm_t comm = nullptr;
    const ncclResult_t r = ncclCommInitRank(&comm, kRanks, ids[0], rank);
    const std::string said = ncclGetLastError(nullptr);
    if (comm) ncclCommAbort(comm);
    if ((r != ncclInvalidArgument && r != ncclInvalidUsage) || said.find(why) == std::string::npos) {
      std::fprintf(stderr, "rank %d: init gave %d: %s\n", rank, int(r), said.c_str());
      return 1;
    }
    return 0;
  });
  int bad = int(kRanks - pids.size());
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    bad += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  }
  return bad;
}

// The ranks, each with `setup`, run exact calls on two communicators of
// the process; the log holds `warning` once.
bool warns_once(const std::function<void(int)>& setup, const std::string& warning) {
  return run_ranks_as_processes(kRanks, [&](int rank, int n, ncclComm_t comm, Failures& f) {
           ncclComm_t second = nullptr;  // a second communicator of the process: no second warning
           MP_NCCL(f, ncclCommSplit(comm, 0, rank, &second, nullptr));
           if (second) MP_NCCL(f, ncclCommDestroy(second));
           const std::string log = run_calls(rank, n, comm, f);
           if (occurrences(log, warning) != 1) f.fail("the warning, once: " + log);
         }, 60, setup) == 0;
}

}  // namespace

TEST_CASE("NCCL_ALGO=ring runs braid's ring, also for calls its fast paths would take", "[mp][nccl_algo]") {
  CHECK(run_ranks_as_processes(kRanks, [](int rank, int n, ncclComm_t comm, Failures& f) {
          const std::string log = run_calls(rank, n, comm, f);
          if (occurrences(log, "allreduce(ring_allreduce)") < 2) f.fail("not both allreduces on ring: " + log);
          if (log.find("allgather(ring_allgather)") == std::string::npos) f.fail("the allgather not on ring: " + log);
        }, 60, with_algo("Ring")) == 0);
}

// BRAID_ALGO, for the collective it pins, comes first.
TEST_CASE("NCCL_ALGO=ring with BRAID_ALGO=allreduce=rd: AllReduce on rd, AllGather on the ring", "[mp][nccl_algo]") {
  CHECK(run_ranks_as_processes(kRanks, [](int rank, int n, ncclComm_t comm, Failures& f) {
          const std::string log = run_calls(rank, n, comm, f);
          if (occurrences(log, "allreduce(rd_allreduce)") < 2) f.fail("not both allreduces on rd: " + log);
          if (log.find("allgather(ring_allgather)") == std::string::npos) f.fail("the allgather not on ring: " + log);
        }, 60, [](int rank) {
          setenv("BRAID_ALGO", "allreduce=rd", 1);
          with_algo("ring")(rank);
        }) == 0);
}

// The first entry for every function but AllReduce, whose own entry keeps
// it off the ring.
TEST_CASE("NCCL_ALGO of ring then allreduce:^ring: AllGather on the ring, AllReduce off it", "[mp][nccl_algo]") {
  CHECK(run_ranks_as_processes(kRanks, [](int rank, int n, ncclComm_t comm, Failures& f) {
          const std::string log = run_calls(rank, n, comm, f);
          if (log.find("ring_allreduce") != std::string::npos) f.fail("an allreduce ran on ring: " + log);
          if (log.find("allreduce(") == std::string::npos) f.fail("no allreduce schedule named: " + log);
          if (log.find("allgather(ring_allgather)") == std::string::npos) f.fail("the allgather not on ring: " + log);
        }, 60, with_algo("ring;allreduce:^ring")) == 0);
}

TEST_CASE("NCCL_ALGO=tree: braid has no tree, says so once, and keeps its own choice", "[mp][nccl_algo]") {
  CHECK(warns_once(with_algo("tree"), "NCCL_ALGO=tree: braid has none of the algorithms it lists for broadcast "
                                      "(tree), reduce (tree), allgather (tree), reducescatter (tree), allreduce (tree)"));
}

TEST_CASE("NCCL_ALGO malformed, or set apart on one rank, fails init on every rank", "[mp][nccl_algo]") {
  CHECK(init_fails(with_algo("allreduce:ring;rings"), "names no function") == 0);
  CHECK(init_fails(with_algo("ringg"), "unknown algorithm \"ringg\"") == 0);
  // Rank 2 alone asks for ring: every rank fails, naming the variable (the
  // others' parse is fine, the agreement is not).
  CHECK(init_fails([](int rank) { with_algo(rank == 2 ? "ring" : "")(rank); }, "NCCL_ALGO") == 0);
}

TEST_CASE("NCCL_PROTO=LL128: braid has no LL128, says so once, and keeps its own choice", "[mp][nccl_algo]") {
  CHECK(warns_once(with_proto("LL128"), "NCCL_PROTO=LL128: braid has none of the protocols it lists for broadcast "
                                        "(ll128), reduce (ll128), allgather (ll128), reducescatter (ll128), "
                                        "allreduce (ll128)"));
}

TEST_CASE("NCCL_PROTO=Simple: every call exact, nothing to warn of", "[mp][nccl_algo]") {
  CHECK(run_ranks_as_processes(kRanks, [](int rank, int n, ncclComm_t comm, Failures& f) {
          const std::string log = run_calls(rank, n, comm, f);
          if (log.find("NCCL_PROTO") != std::string::npos) f.fail("NCCL_PROTO=Simple said something: " + log);
        }, 60, with_proto("Simple")) == 0);
}

TEST_CASE("NCCL_PROTO malformed, or set apart on one rank, fails init on every rank", "[mp][nccl_algo]") {
  CHECK(init_fails(with_proto("LL,LL256"), "unknown protocol \"ll256\"") == 0);
  CHECK(init_fails([](int rank) { with_proto(rank == 1 ? "^LL" : "")(rank); }, "NCCL_PROTO") == 0);
}

// NCCL compares names in any case: ranks that spell a value apart but admit
// the same agree (the agreement is on what it admits, as NCCL_PROTO's).
TEST_CASE("NCCL_ALGO spelt apart but alike on the ranks (Ring, ring): init agrees, calls exact", "[mp][nccl_algo]") {
  CHECK(run_ranks_as_processes(kRanks, [](int rank, int n, ncclComm_t comm, Failures& f) {
          const std::string log = run_calls(rank, n, comm, f);
          if (occurrences(log, "allreduce(ring_allreduce)") < 2) f.fail("not both allreduces on ring: " + log);
        }, 60, [](int rank) { with_algo(rank % 2 ? "Ring" : "ring;allreduce:RING")(rank); }) == 0);
}

// NCCL_ALGO=^ring leaves braid's fast paths (none of NCCL's algorithms) and
// the size rule's choice where it is not the ring; where it is, the size
// rule's other algorithm (src/plan/planner.h, selected_algorithm).
TEST_CASE("NCCL_ALGO=^ring: small calls keep their board, large ones the size rule's other algorithm",
          "[mp][nccl_algo]") {
  CHECK(run_ranks_as_processes(kRanks, [](int rank, int n, ncclComm_t comm, Failures& f) {
          const std::string log = run_calls(rank, n, comm, f);
          if (log.find("ring_allreduce") != std::string::npos) f.fail("an allreduce ran on ring: " + log);
          if (log.find("ring_allgather") != std::string::npos) f.fail("the allgather ran on ring: " + log);
          if (log.find("allreduce(oneshot) count=8") == std::string::npos) f.fail("small allreduce off board: " + log);
          if (log.find("allgather(oneshot) count=64") == std::string::npos) f.fail("allgather off board: " + log);
          // Without peer access (no CMA) the size rule's other AllReduce, recursive doubling.
          if (log.find("allreduce(rd_allreduce) count=300000") == std::string::npos)
            f.fail("the large allreduce not on rd: " + log);
        }, 60, [](int rank) {
          setenv("BRAID_CMA", "off", 1);  // the large call on a schedule, not the pull path
          with_algo("^ring")(rank);
        }) == 0);
}

// BRAID_ALGO is braid's own variable: what it names that no collective has
// is said once per process, and pins nothing.
TEST_CASE("BRAID_ALGO naming an unknown collective or algorithm: said once, the rest pinned", "[mp][nccl_algo]") {
  CHECK(warns_once([](int rank) {
          setenv("BRAID_ALGO", "allreduce=rd, allgathr=ring", 1);
          with_algo("")(rank);
        }, "BRAID_ALGO=allreduce=rd, allgathr=ring: ignored 'allgathr=ring': no collective is named 'allgathr'"));
  CHECK(run_ranks_as_processes(kRanks, [](int rank, int n, ncclComm_t comm, Failures& f) {
          const std::string log = run_calls(rank, n, comm, f);
          if (occurrences(log, "allreduce(rd_allreduce)") < 2) f.fail("not both allreduces on rd: " + log);
        }, 60, [](int rank) {
          setenv("BRAID_ALGO", "AllReduce = RD, allgathr=ring", 1);
          with_algo("")(rank);
        }) == 0);
}

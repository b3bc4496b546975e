// Large calls between hosts over TCP in several slices, each on TCP
// connections of its own (NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD,
// src/plan/host_path.h slices_for), between processes on two emulated
// hosts: every collective exact, plain and over TLS, the log naming the
// slices; and ranks that set the variables apart fail init on every rank.
// How many slices a call gets: tests/unit/test_tcp_slices.cc.
#include <catch2/catch.hpp>
#include <string>

#include "cross_host_sweep.h"
#include "harness.h"
#include "process_log.h"
#include "scoped_env.h"
#include "tls_key.h"

using namespace mp;

namespace {

constexpr const char* kKey = "socket-streams-test-key-0123456789abcdef";

// 3 ranks over braid's sockets (ranks 0 and 1 on one emulated host, rank 2
// on another, every pair over TCP), `threads` x `per_thread` asked for;
// every collective exact, at sizes from one element to many 128 KiB
// fragments per chunk, and the log saying that the largest AllReduce ran
// in `slices` slices (none where 1).
int every_collective_over(const char* threads, const char* per_thread, int slices) {
  return run_ranks_as_processes(3, [=](int rank, int n, ncclComm_t comm, Failures& f) {
    every_collective(rank, n, comm, f, {1, 70000, 900000});
    const std::string log = own_log();
    const std::string said = fmt::format("allreduce(ring_allreduce) count=900000 float rank {}/3, {} slices", rank,
                                         slices);
    if (slices > 1 && log.find(said) == std::string::npos)
      f.fail(fmt::format("not in {} slices: {}", slices, log));
    if (slices == 1 && log.find(" slices") != std::string::npos) f.fail("sliced: " + log);
  }, 120, [=](int rank) {
    setenv("BRAID_HOSTID", rank < 2 ? "streams-host-a" : "streams-host-b", 1);
    setenv("BRAID_TRANSPORT", "socket", 1);
    setenv("NCCL_SOCKET_NTHREADS", threads, 1);
    setenv("NCCL_NSOCKS_PERTHREAD", per_thread, 1);
    log_to_own_file("COLL");
  });
}

}  // namespace

TEST_CASE("NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD slices between hosts carry every collective exactly",
          "[mp][processes][socket][net]") {
  CHECK(every_collective_over("2", "2", 4) == 0);
  CHECK(every_collective_over("1", "3", 3) == 0);
  // 64 asked for; the AllReduce's 1.2 MB chunks hold 9 fragments of 128 KiB.
  CHECK(every_collective_over("40", "8", 9) == 0);
  CHECK(every_collective_over("0", "-3", 1) == 0);
}

TEST_CASE("Slices between hosts under TLS: every collective exact", "[mp][processes][socket][tls]") {
  ScopedTlsKey key(kKey);  // the parent's bootstrap root, and every forked rank, speak TLS
  REQUIRE(key.ok);
  CHECK(every_collective_over("1", "4", 4) == 0);
}

TEST_CASE("NCCL_NSOCKS_PERTHREAD set apart on one rank fails init on every rank", "[mp][socket][errors]") {
  CHECK(init_must_fail(3, [](int rank) {
    setenv("BRAID_TRANSPORT", "socket", 1);
    if (rank == 1) setenv("NCCL_NSOCKS_PERTHREAD", "4", 1);
  }, ncclInvalidUsage, "NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD") == 0);
}

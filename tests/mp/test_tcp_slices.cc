// Large calls between hosts over TCP in several slices, each on TCP
// connections of its own (NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD,
// src/plan/host_path.h slices_for), between processes on two emulated
// hosts: every collective exact, plain and over TLS, the log naming the
// slices; send/recv messages cut the same way, in order and exact; and
// ranks that set the variables apart fail init on every rank.
// How many slices a call gets: tests/unit/test_tcp_slices.cc.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

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

void on_two_hosts(int rank, const char* per_thread) {
  setenv("BRAID_HOSTID", rank < 2 ? "streams-host-a" : "streams-host-b", 1);
  setenv("BRAID_TRANSPORT", "socket", 1);
  setenv("NCCL_NSOCKS_PERTHREAD", per_thread, 1);
  log_to_own_file("P2P");
}

// Message sizes (floats) each rank sends every peer, in this order, in one
// group: nothing, one element, a part of a fragment, 1.2 MB (9 fragments of
// 128 KiB: 4 slices), and an odd count that does not divide into slices.
constexpr size_t kMessages[] = {0, 1, 70000, 300000, 1000003};

float value(int from, int to, size_t message, size_t i) {
  return float((i * 7 + size_t(from) * 1000 + size_t(to) * 100 + message * 10) % 8191);
}

// 3 ranks (two on one emulated host, one on the other), every pair over
// TCP, each sending every peer all of kMessages in one group and receiving
// them in that order: every element exact, and the log saying the messages
// between hosts went in slices (up to `slices`), none within a host.
int send_recv_over(const char* per_thread, int slices) {
  return run_ranks_as_processes(3, [=](int rank, int n, ncclComm_t comm, Failures& f) {
    std::vector<std::vector<float>> out, in;
    for (int p = 0; p < n; ++p)
      for (size_t m = 0; m < std::size(kMessages); ++m) {
        out.emplace_back(kMessages[m]);
        for (size_t i = 0; i < kMessages[m]; ++i) out.back()[i] = value(rank, p, m, i);
        in.emplace_back(kMessages[m] + 1, -1.f);  // one past: nothing writes there
      }
    MP_NCCL(f, ncclGroupStart());
    for (int p = 0, k = 0; p < n; ++p)
      for (size_t m = 0; m < std::size(kMessages); ++m, ++k) {
        MP_NCCL(f, ncclSend(out[k].data(), kMessages[m], ncclFloat, p, comm, nullptr));
        MP_NCCL(f, ncclRecv(in[k].data(), kMessages[m], ncclFloat, p, comm, nullptr));
      }
    MP_NCCL(f, ncclGroupEnd());
    for (int p = 0, k = 0; p < n; ++p)
      for (size_t m = 0; m < std::size(kMessages); ++m, ++k) {
        for (size_t i = 0; i < kMessages[m]; ++i)
          if (in[k][i] != value(p, rank, m, i))
            return f.fail(fmt::format("message {} from rank {}: element {} is {}", m, p, i, in[k][i]));
        if (in[k][kMessages[m]] != -1.f) return f.fail(fmt::format("message {} from rank {} overran", m, p));
      }
    const std::string log = own_log();
    // 3 messages each way with each peer on the other host: 12 sliced ops on rank 2, 6 on ranks 0 and 1.
    const std::string said = fmt::format("rank {}/3: {} in slices, up to {}", rank, rank == 2 ? 12 : 6, slices);
    if (slices > 1 && log.find(said) == std::string::npos) f.fail(fmt::format("not \"{}\": {}", said, log));
    if (slices == 1 && log.find("in slices") != std::string::npos) f.fail("sliced: " + log);
  }, 120, [=](int rank) { on_two_hosts(rank, per_thread); });
}

}  // namespace

TEST_CASE("Send/recv messages between hosts over TCP in slices arrive exact and in order",
          "[mp][processes][socket][p2p]") {
  CHECK(send_recv_over("4", 4) == 0);
  CHECK(send_recv_over("3", 3) == 0);
  CHECK(send_recv_over("1", 1) == 0);
}

TEST_CASE("A send/recv count mismatch between hosts in slices is reported", "[mp][processes][socket][p2p][errors]") {
  // Rank 0 sends 900000 floats (4 slices) that rank 2 receives as 40000
  // (one slice): rank 2 fails naming both sizes; rank 0's send may not
  // finish, and times out.
  CHECK(run_ranks_as_processes(3, [](int rank, int, ncclComm_t comm, Failures& f) {
    std::vector<float> buf(900000, 1.f);
    if (rank == 1) return;
    const ncclResult_t r = rank == 0 ? ncclSend(buf.data(), buf.size(), ncclFloat, 2, comm, nullptr)
                                     : ncclRecv(buf.data(), 40000, ncclFloat, 0, comm, nullptr);
    if (rank == 2 && r != ncclInvalidUsage) f.fail(fmt::format("receiver got {} not ncclInvalidUsage", int(r)));
    if (rank == 2 && std::string(ncclGetLastError(comm)).find("3600000 bytes") == std::string::npos)
      f.fail(std::string("message does not name the sizes: ") + ncclGetLastError(comm));
  }, 120, [](int rank) {
    on_two_hosts(rank, "4");
    setenv("BRAID_TIMEOUT", "5", 1);
  }) == 0);
}

TEST_CASE("NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD slices between hosts carry every collective exactly",
          "[mp][processes][socket][net]") {
  CHECK(every_collective_over("2", "2", 4) == 0);
  CHECK(every_collective_over("1", "3", 3) == 0);
  // 64 asked for; the AllReduce's 1.2 MB chunks hold 9 fragments of 128 KiB.
  CHECK(every_collective_over("40", "8", 9) == 0);
  CHECK(every_collective_over("0", "-3", 1) == 0);
}

TEST_CASE("Slices between hosts under TLS: every collective and send/recv exact", "[mp][processes][socket][tls]") {
  ScopedTlsKey key(kKey);  // the parent's bootstrap root, and every forked rank, speak TLS
  REQUIRE(key.ok);
  CHECK(every_collective_over("1", "4", 4) == 0);
  CHECK(send_recv_over("4", 4) == 0);
}

TEST_CASE("NCCL_NSOCKS_PERTHREAD set apart on one rank fails init on every rank", "[mp][socket][errors]") {
  CHECK(init_must_fail(3, [](int rank) {
    setenv("BRAID_TRANSPORT", "socket", 1);
    if (rank == 1) setenv("NCCL_NSOCKS_PERTHREAD", "4", 1);
  }, ncclInvalidUsage, "NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD") == 0);
}

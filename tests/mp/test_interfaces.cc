// The interface the sockets use, through the public API: NCCL_SOCKET_IFNAME
// (and BRAID_SOCKET_IFNAME over it) places the bootstrap root and the TCP
// transport; a name matching nothing fails the call that needs a socket,
// with NCCL's usage error and the reason.
#include <arpa/inet.h>
#include <netinet/in.h>

#include <catch2/catch.hpp>

#include <string>

#include "collective_check.h"
#include "harness.h"
#include "scoped_env.h"

using namespace mp;

namespace {

bool root_on_loopback(const ncclUniqueId& id) { return root_address(id).sin_addr.s_addr == htonl(INADDR_LOOPBACK); }

// An AllReduce of 3000 floats, checked exactly (collective_check.h).
void allreduce_ranks(int rank, int nranks, ncclComm_t comm, Failures& failures) {
  run_and_check(CollCase{.coll = Coll::AllReduce, .count = 3000}, rank, nranks, comm, failures);
}

}  // namespace

TEST_CASE("NCCL_SOCKET_IFNAME=lo: the root listens on loopback, and 3 processes run over sockets", "[mp][processes][socket][net]") {
  ScopedEnv ifname("NCCL_SOCKET_IFNAME", "lo");
  ScopedEnv transport("BRAID_TRANSPORT", "socket");
  CHECK(run_ranks_as_processes(3, allreduce_ranks) == 0);
  // After the fork, as harness.h forks before it makes ids (test_fork.cc
  // covers a fork right after ncclGetUniqueId).
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  CHECK(root_on_loopback(id));
}

TEST_CASE("BRAID_SOCKET_IFNAME is read before NCCL_SOCKET_IFNAME", "[mp][net]") {
  ScopedEnv nccl("NCCL_SOCKET_IFNAME", "=no-such-if0");
  ScopedEnv braid("BRAID_SOCKET_IFNAME", "=lo");
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  CHECK(root_on_loopback(id));
}

TEST_CASE("an interface filter matching nothing fails with the reason, not a hang", "[mp][net][errors]") {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);  // before the variable: a good root
  ScopedEnv ifname("NCCL_SOCKET_IFNAME", "=no-such-if0");
  ncclUniqueId other;
  CHECK(ncclGetUniqueId(&other) == ncclInvalidUsage);
  std::string why = ncclGetLastError(nullptr);
  INFO(why);
  CHECK(why.find("NCCL_SOCKET_IFNAME==no-such-if0 matches no IPv4 interface that is up") != std::string::npos);
  // A rank joining the good root cannot listen either: the same error, at once.
  ncclComm_t comm = nullptr;
  CHECK(ncclCommInitRank(&comm, 1, id, 0) == ncclInvalidUsage);
  CHECK(comm == nullptr);
  CHECK(std::string(ncclGetLastError(nullptr)).find("no-such-if0") != std::string::npos);
}

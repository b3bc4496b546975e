// The interface the sockets use, through the public API: NCCL_SOCKET_IFNAME
// (and BRAID_SOCKET_IFNAME over it) places the bootstrap root and the TCP
// transport; a name matching nothing fails the call that needs a socket,
// with NCCL's usage error and the reason.  NCCL_SOCKET_FAMILY=AF_INET6, or
// an IPv6 NCCL_COMM_ID, puts all of it on IPv6.
#include <arpa/inet.h>
#include <netinet/in.h>

#include <catch2/catch.hpp>

#include <string>

#include "collective_check.h"
#include "cross_host_sweep.h"
#include "harness.h"
#include "process_log.h"
#include "scoped_env.h"

using namespace mp;

namespace {

bool root_on_loopback(const ncclUniqueId& id) {
  const AnyAddress root = root_address(id);
  return root.sa.sa_family == AF_INET ? root.v4.sin_addr.s_addr == htonl(INADDR_LOOPBACK)
                                      : IN6_IS_ADDR_LOOPBACK(&root.v6.sin6_addr);
}

// A port on ::1 that was free a moment ago.
int free_ipv6_port() {
  const int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  socklen_t len = sizeof(a);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  ::close(fd);
  return ntohs(a.sin6_port);
}

// Every collective exact between 3 processes "on two hosts" (so that the
// net between hosts carries some pairs, and shared memory the others), each
// rank's log saying that its bootstrap listened on an IPv6 address and that
// the net between hosts was `net` (braid's sockets, or its net plugin's).
void runs_on_ipv6(bool plugin = false) {
  auto hosts = [=](int rank) {
    setenv("BRAID_HOSTID", rank < 2 ? "v6-host-a" : "v6-host-b", 1);
    setenv("NCCL_NET_PLUGIN", plugin ? BRAID_NET_PLUGIN_LIB : "none", 1);
    log_to_own_file("INIT,NET,BOOTSTRAP");
  };
  const std::string net = plugin ? "transport auto (shm+BraidSocket (net plugin" : "transport auto (shm+socket)";
  auto body = [=](int rank, int n, ncclComm_t comm, Failures& f) {
    const std::string log = own_log();
    if (log.find("bootstrap done, listening on [") == std::string::npos) f.fail("not IPv6: " + log);
    if (log.find(net) == std::string::npos) f.fail("not over " + net + ": " + log);
    every_collective(rank, n, comm, f, {1, 70000});
  };
  CHECK(run_ranks_as_processes(3, body, 120, hosts) == 0);
}

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
  CHECK(why.find("NCCL_SOCKET_IFNAME==no-such-if0 matches no interface that is up") != std::string::npos);
  // A rank joining the good root cannot listen either: the same error, at once.
  ncclComm_t comm = nullptr;
  CHECK(ncclCommInitRank(&comm, 1, id, 0) == ncclInvalidUsage);
  CHECK(comm == nullptr);
  CHECK(std::string(ncclGetLastError(nullptr)).find("no-such-if0") != std::string::npos);
}

TEST_CASE("NCCL_SOCKET_FAMILY=AF_INET6: the root, the ranks and the TCP transport on IPv6", "[mp][processes][net]") {
  ScopedEnv ifname("NCCL_SOCKET_IFNAME", "lo");  // ::1, on every machine (NCCL would refuse IPv6 loopback)
  ScopedEnv family("NCCL_SOCKET_FAMILY", "AF_INET6");
  runs_on_ipv6();
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  CHECK(root_address(id).sa.sa_family == AF_INET6);
  CHECK(root_on_loopback(id));
}

TEST_CASE("NCCL_SOCKET_FAMILY=AF_INET6: braid's net plugin listens and connects on IPv6",
          "[mp][processes][net][plugin]") {
  ScopedEnv ifname("NCCL_SOCKET_IFNAME", "lo");
  ScopedEnv family("NCCL_SOCKET_FAMILY", "AF_INET6");
  runs_on_ipv6(true);
}

TEST_CASE("NCCL_COMM_ID=[::1]:port: rank 0 hosts the root on IPv6, and the ranks follow its family",
          "[mp][processes][net]") {
  ScopedEnv comm_id("NCCL_COMM_ID", fmt::format("[::1]:{}", free_ipv6_port()));
  runs_on_ipv6();
}

TEST_CASE("bad IPv6 endpoints in NCCL_COMM_ID are refused with the form expected", "[mp][net][errors]") {
  for (const char* bad : {"::1:5000", "[::1]", "[::1]:0", "[::1%no-such-if0]:5000", "[10.0.0.1]:5000"}) {
    ScopedEnv comm_id("NCCL_COMM_ID", bad);
    ncclUniqueId id;
    CHECK(ncclGetUniqueId(&id) == ncclInvalidArgument);
    const std::string why = ncclGetLastError(nullptr);
    INFO(bad << ": " << why);
    CHECK(why.find("[ipv6]:port") != std::string::npos);
  }
}

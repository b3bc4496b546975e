// The net transport on this machine (no InfiniBand here; the verbs side
// runs in the rdma guests, tests/rdma):
//  - the round trip of NCCL's net plugin ABI: braid loads its own plugin
//    library (libnccl-net-braid.so, TCP inside) and runs every collective,
//    every datatype and send/recv through it, exactly;
//  - BRAID_TRANSPORT=auto across hosts takes the plugin, with shared memory
//    within a host, and without one falls back to sockets, saying why at INFO;
//  - a forced net that is not there (BRAID_TRANSPORT=ib without a port, a
//    plugin that does not load) fails init with the reason, on every rank.
#include <catch2/catch.hpp>

#include "cross_host_sweep.h"
#include "process_log.h"

using namespace mp;

namespace {

// Rank r is host r / per_host, with its own loopback address, so that
// every byte between hosts crosses a real connection.
std::function<void(int)> hosts(int per_host, const char* transport, const char* plugin) {
  return [=](int rank) {
    setenv("BRAID_HOSTID", fmt::format("net-host-{}", rank / per_host).c_str(), 1);
    setenv("BRAID_SOCKET_ADDR", fmt::format("127.0.0.{}", rank / per_host + 1).c_str(), 1);
    setenv("BRAID_TRANSPORT", transport, 1);
    setenv("NCCL_NET_PLUGIN", plugin, 1);
  };
}

// Logs INIT and NET at INFO to a file per process (process_log.h).
void log_to_file() { log_to_own_file("INIT,NET"); }

}  // namespace

TEST_CASE("braid runs every collective, datatype and send/recv through its own net plugin library",
          "[mp][processes][net][plugin]") {
  auto body = [](int rank, int n, ncclComm_t comm, Failures& f) {
    every_collective(rank, n, comm, f, {1, 4099, 300000});
    every_datatype(rank, n, comm, f, 1003);
    every_send_recv(rank, n, comm, f, 5000);
  };
  CHECK(run_ranks_as_processes(3, body, 120, hosts(1, "plugin", BRAID_NET_PLUGIN_LIB)) == 0);
}

TEST_CASE("auto across hosts: shared memory within a host, the net plugin between hosts, said at INFO",
          "[mp][processes][net][plugin]") {
  auto setup = [](int rank) {
    hosts(2, "auto", BRAID_NET_PLUGIN_LIB)(rank);
    log_to_file();
  };
  auto body = [](int rank, int n, ncclComm_t comm, Failures& f) {
    const std::string log = own_log();
    if (log.find("transport auto (shm+BraidSocket (net plugin v12") == std::string::npos)
      f.fail("the log does not say shm+BraidSocket: " + log);
    if (log.find("it does not give: ") == std::string::npos) f.fail("the plugin's missing features are not said");
    // Its one device has no PCI path: the nearest are every device, which
    // the host's two ranks share (nic_affinity.h).
    if (log.find(fmt::format("rank {}: BraidSocket (net plugin v12", rank)) == std::string::npos ||
        log.find("transport on device 0 (socket, port 0, 10000 Mbps); the nearest: 1 of 1 devices, none nearer than "
                 "another, shared by 2 ranks\n") == std::string::npos)
      f.fail("the log does not say which device and why: " + log);
    every_collective(rank, n, comm, f, {1, 70000});
  };
  CHECK(run_ranks_as_processes(4, body, 120, setup) == 0);
}

// One-sided RMA between hosts takes the communicator's net too (InfiniBand
// in the rdma guests; braid's own plugin here).
TEST_CASE("one-sided RMA across hosts goes over the net plugin, exact, said at INFO",
          "[mp][processes][net][plugin][rma]") {
  auto setup = [](int rank) {
    hosts(2, "auto", BRAID_NET_PLUGIN_LIB)(rank);
    log_to_file();
  };
  auto body = [](int rank, int n, ncclComm_t comm, Failures& f) {
    every_put_signal(rank, n, comm, f, 70000);  // several fragments per put
    const std::string log = own_log();
    if (log.find("one-sided RMA over shm+BraidSocket (net plugin") == std::string::npos)
      f.fail("RMA is not over the net plugin: " + log);
  };
  CHECK(run_ranks_as_processes(4, body, 120, setup) == 0);
}

TEST_CASE("auto across hosts without InfiniBand or a plugin: sockets, and the reason at INFO", "[mp][processes][net]") {
  auto setup = [](int rank) {
    hosts(1, "auto", "none")(rank);
    setenv("BRAID_IB_HCA", "no_such_hca", 1);  // whatever this machine has
    log_to_file();
  };
  auto body = [](int rank, int n, ncclComm_t comm, Failures& f) {
    const std::string log = own_log();
    if (log.find("between hosts: no InfiniBand (this rank has no usable InfiniBand/RoCE port: ") == std::string::npos ||
        log.find("): sockets") == std::string::npos)
      f.fail("the fallback's reason is not logged: " + log);
    if (log.find("transport auto (shm+socket)") == std::string::npos) f.fail("not on sockets: " + log);
    every_collective(rank, n, comm, f, {1, 4099});
  };
  CHECK(run_ranks_as_processes(2, body, 120, setup) == 0);
}

TEST_CASE("BRAID_TRANSPORT=ib without a usable port fails init on every rank, with the reason",
          "[mp][processes][net]") {
  auto setup = [](int rank) {
    hosts(1, "ib", "none")(rank);
    setenv("BRAID_IB_HCA", "no_such_hca", 1);
  };
  CHECK(init_must_fail(2, setup, ncclSystemError, "BRAID_TRANSPORT=ib: this rank has no usable InfiniBand/RoCE port") ==
        0);
}

TEST_CASE("BRAID_TRANSPORT=plugin with a plugin that does not load fails init with the reason",
          "[mp][processes][net][plugin]") {
  CHECK(init_must_fail(2, hosts(1, "plugin", "/nonexistent/libnccl-net-x.so"), ncclSystemError,
                       "net plugin /nonexistent/libnccl-net-x.so: cannot load it") == 0);
}

TEST_CASE("ranks that disagree on BRAID_TRANSPORT fail init instead of waiting on each other",
          "[mp][processes][net]") {
  auto setup = [](int rank) { hosts(1, rank == 0 ? "socket" : "auto", "none")(rank); };
  CHECK(init_must_fail(2, setup, ncclInvalidUsage, "transport_mode") == 0);
}

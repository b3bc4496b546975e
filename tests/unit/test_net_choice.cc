// Which network carries traffic between hosts (net_choice.h): the agreed
// choice and the reasons logged when braid falls back.
#include <catch2/catch.hpp>

#include "src/transport/net/net_choice.h"

using namespace braid;

namespace {

struct Decision {
  Status status;
  NetKind kind = kNetSocket;
  std::string why;
};
Decision decide(const std::string& mode, int rank, std::vector<uint32_t> caps, NetReasons reasons = {}) {
  Decision d;
  d.status = decide_net(mode, rank, caps, reasons, &d.kind, &d.why);
  return d;
}

}  // namespace

TEST_CASE("net choice, auto: plugin, else InfiniBand, else sockets, as every rank can", "[unit][net]") {
  CHECK(decide("auto", 0, {kNetIb | kNetPlugin, kNetIb | kNetPlugin}).kind == kNetPlugin);
  Decision ib = decide("auto", 0, {kNetIb, kNetIb});
  CHECK(ib.kind == kNetIb);
  CHECK(ib.why.empty());  // nobody asked for a plugin: nothing to explain

  // Rank 1 has no port: every rank falls back to sockets and says why.
  NetReasons mine{"no InfiniBand/RoCE device (libibverbs found none)", "", ""};
  Decision on0 = decide("auto", 0, {kNetIb, 0});
  CHECK(on0.kind == kNetSocket);
  CHECK(on0.why == "no InfiniBand (rank 1 has no usable InfiniBand/RoCE port): sockets");
  Decision on1 = decide("auto", 1, {kNetIb, 0}, mine);
  CHECK(on1.kind == kNetSocket);
  CHECK(on1.why.find("this rank has no usable InfiniBand/RoCE port: no InfiniBand/RoCE device") != std::string::npos);

  // A configured plugin that failed on this rank is reported, then InfiniBand is used.
  Decision failed = decide("auto", 0, {kNetIb, kNetIb | kNetPlugin}, {"", "net plugin foo: cannot load it", ""});
  CHECK(failed.kind == kNetIb);
  CHECK(failed.why.find("no net plugin (this rank has no net plugin: net plugin foo: cannot load it)") == 0);
}

TEST_CASE("net choice, forced: a rank without the net fails init with the reason", "[unit][net]") {
  CHECK(decide("ib", 0, {kNetIb, kNetIb}).kind == kNetIb);
  Decision other = decide("ib", 0, {kNetIb, 0});
  CHECK(other.status.code() == ncclSystemError);
  CHECK(other.status.message() == "BRAID_TRANSPORT=ib: rank 1 has no usable InfiniBand/RoCE port");
  Decision self = decide("ib", 1, {kNetIb, 0}, {"NCCL_IB_HCA=mlx9 matches no active port (ports: rxe0:1)", "", ""});
  CHECK(self.status.message().find("this rank has no usable InfiniBand/RoCE port: NCCL_IB_HCA=mlx9") !=
        std::string::npos);
  CHECK(decide("plugin", 0, {kNetPlugin, kNetPlugin}).kind == kNetPlugin);
  CHECK(decide("plugin", 0, {kNetIb, kNetIb}).status.code() == ncclSystemError);
}

TEST_CASE("net choice, auto under NCCL_NET: only the named net, and none is an error naming the ranks", "[unit][net]") {
  // Every rank names IB (no sockets): InfiniBand where all have it.
  CHECK(decide("auto", 0, {kNetIb | kNetNoSocket, kNetIb | kNetNoSocket}).kind == kNetIb);
  // One rank names IB, the other nothing: they meet on InfiniBand.
  CHECK(decide("auto", 1, {kNetIb | kNetNoSocket, kNetIb | kNetPlugin}).kind == kNetIb);
  // Rank 1 has no port, and rank 0 excludes sockets: nothing every rank may use.
  NetReasons mine{"", "", "NCCL_NET names IB"};
  Decision none = decide("auto", 0, {kNetIb | kNetNoSocket, 0}, mine);
  CHECK(none.status.code() == ncclInvalidUsage);
  CHECK(none.status.message() ==
        "no network every rank may use between hosts: no net plugin (this rank has no net plugin), no InfiniBand "
        "(rank 1 has no usable InfiniBand/RoCE port), no sockets (this rank has no sockets: NCCL_NET names IB)");
  Decision other = decide("auto", 1, {kNetIb | kNetNoSocket, 0});
  CHECK(other.status.code() == ncclInvalidUsage);
  CHECK(other.status.message().find("no sockets (rank 0 has no sockets)") != std::string::npos);
  // Sockets named on every rank: sockets, though every rank has InfiniBand left out.
  CHECK(decide("auto", 0, {0, 0}).kind == kNetSocket);
}

TEST_CASE("transport policy: BRAID_TRANSPORT decides alone, else NCCL's variables", "[unit][net]") {
  const char* vars[] = {"BRAID_TRANSPORT", "NCCL_NET", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE"};
  for (const char* v : vars) unsetenv(v);
  TransportPolicy p;
  REQUIRE(read_transport_policy("", &p).is_ok());
  CHECK((p.mode == "auto" && p.shm && p.ib && p.net_name.empty()));
  CHECK((p.admits("IB") && p.admits("Socket") && p.admits("AWS Libfabric")));

  setenv("NCCL_NET", "socket", 1);
  setenv("NCCL_SHM_DISABLE", "1", 1);
  setenv("NCCL_IB_DISABLE", "0x1", 1);  // NCCL's integers take any base
  REQUIRE(read_transport_policy("IB", &p).is_ok());
  CHECK((p.mode == "auto" && !p.shm && !p.ib && p.net_name == "socket"));  // NCCL_NET wins over the config's
  CHECK((p.admits("Socket") && !p.admits("IB") && !p.admits("AWS Libfabric")));
  CHECK(p.agreement_code() != TransportPolicy().agreement_code());  // ranks must agree on shared memory

  unsetenv("NCCL_NET");
  setenv("NCCL_SHM_DISABLE", "0", 1);
  setenv("NCCL_IB_DISABLE", "yes", 1);  // not a number: unset, as NCCL reads it
  REQUIRE(read_transport_policy("ib", &p).is_ok());
  CHECK((p.shm && p.ib && p.net_name == "ib" && p.admits("IB") && !p.admits("Socket")));

  setenv("BRAID_TRANSPORT", "socket", 1);
  setenv("NCCL_NET", "IB", 1);
  REQUIRE(read_transport_policy("", &p).is_ok());
  CHECK((p.mode == "socket" && !p.shm && p.net_name.empty()));
  setenv("BRAID_TRANSPORT", "carrier-pigeon", 1);
  CHECK(read_transport_policy("", &p).code() == ncclInvalidArgument);
  for (const char* v : vars) unsetenv(v);
}

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
  NetReasons mine{"no InfiniBand/RoCE device (libibverbs found none)", ""};
  Decision on0 = decide("auto", 0, {kNetIb, 0});
  CHECK(on0.kind == kNetSocket);
  CHECK(on0.why == "no InfiniBand (rank 1 has no usable InfiniBand/RoCE port): sockets");
  Decision on1 = decide("auto", 1, {kNetIb, 0}, mine);
  CHECK(on1.kind == kNetSocket);
  CHECK(on1.why.find("this rank has no usable InfiniBand/RoCE port: no InfiniBand/RoCE device") != std::string::npos);

  // A configured plugin that failed on this rank is reported, then InfiniBand is used.
  Decision failed = decide("auto", 0, {kNetIb, kNetIb | kNetPlugin}, {"", "net plugin foo: cannot load it"});
  CHECK(failed.kind == kNetIb);
  CHECK(failed.why.find("no net plugin (this rank has no net plugin: net plugin foo: cannot load it)") == 0);
}

TEST_CASE("net choice, forced: a rank without the net fails init with the reason", "[unit][net]") {
  CHECK(decide("ib", 0, {kNetIb, kNetIb}).kind == kNetIb);
  Decision other = decide("ib", 0, {kNetIb, 0});
  CHECK(other.status.code() == ncclSystemError);
  CHECK(other.status.message() == "BRAID_TRANSPORT=ib: rank 1 has no usable InfiniBand/RoCE port");
  Decision self = decide("ib", 1, {kNetIb, 0}, {"NCCL_IB_HCA=mlx9 matches no active port (ports: rxe0:1)", ""});
  CHECK(self.status.message().find("this rank has no usable InfiniBand/RoCE port: NCCL_IB_HCA=mlx9") !=
        std::string::npos);
  CHECK(decide("plugin", 0, {kNetPlugin, kNetPlugin}).kind == kNetPlugin);
  CHECK(decide("plugin", 0, {kNetIb, kNetIb}).status.code() == ncclSystemError);
}

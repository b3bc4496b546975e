// NCCL's net plugin ABI both ways, in one process: braid's plugin library
// (libnccl-net-braid.so) is opened, and each of its tables, v12 down to v8,
// is driven through braid's loader (plugin_net.cc) as NCCL would drive it:
// listen, non-blocking connect and accept, registration, isend/irecv/test.
// Messages arrive whole and exact, the sizes reported are the sent ones,
// and misuse (a message larger than its receive, grouped receives) is an
// error.  On this machine the plugin runs braid's TCP net (no InfiniBand);
// the verbs side is tested in the rdma guests (tests/rdma).
#include <dlfcn.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "src/transport/net/nccl_net_abi.h"
#include "src/transport/net/nets.h"

using namespace braid;

namespace {

void* open_plugin() {
  setenv("BRAID_TRANSPORT", "socket", 1);  // the plugin's choice, made at its first init
  static void* lib = dlopen(BRAID_NET_PLUGIN_LIB, RTLD_NOW | RTLD_LOCAL);
  INFO(dlerror());
  REQUIRE(lib);
  return lib;
}

struct Pair {
  void* send = nullptr;
  void* recv = nullptr;
};

Pair connect_pair(Net& net, const NetCommConfig& config = {}) {
  NetHandle handle;
  void* listen = nullptr;
  REQUIRE(net.listen(0, config, &handle, &listen).is_ok());
  Pair p;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while ((!p.send || !p.recv) && std::chrono::steady_clock::now() < deadline) {
    if (!p.send) REQUIRE(net.connect(0, config, &handle, &p.send).is_ok());
    if (!p.recv) REQUIRE(net.accept(listen, &p.recv).is_ok());
  }
  REQUIRE(net.close_listen(listen).is_ok());
  REQUIRE(p.send);
  REQUIRE(p.recv);
  return p;
}

// Polls until done; the request's size.
size_t wait(Net& net, void* request) {
  bool done = false;
  size_t bytes = 0;
  for (int i = 0; i < 10000000 && !done; ++i) REQUIRE(net.test(request, &done, &bytes).is_ok());
  REQUIRE(done);
  return bytes;
}

void exchange(Net& net, const Pair& p, size_t room, size_t size, int seed) {
  std::vector<char> out(size), in(room, 0);
  for (size_t i = 0; i < size; ++i) out[i] = char((i * 131 + size_t(seed)) & 0xff);
  void *smh = nullptr, *rmh = nullptr;
  REQUIRE(net.reg_mr(p.send, out.data(), out.size(), kNetPtrHost, &smh).is_ok());
  REQUIRE(net.reg_mr(p.recv, in.data(), in.size(), kNetPtrHost, &rmh).is_ok());
  void *rreq = nullptr, *sreq = nullptr;
  REQUIRE(net.irecv(p.recv, in.data(), in.size(), 0, rmh, &rreq).is_ok());
  REQUIRE(rreq);
  for (int i = 0; i < 1000000 && !sreq; ++i) REQUIRE(net.isend(p.send, out.data(), out.size(), 0, smh, &sreq).is_ok());
  REQUIRE(sreq);
  CHECK(wait(net, sreq) == size);
  CHECK(wait(net, rreq) == size);
  if (size) CHECK(std::memcmp(in.data(), out.data(), size) == 0);  // (an empty vector's data() may be null)
  REQUIRE(net.dereg_mr(p.send, smh).is_ok());
  REQUIRE(net.dereg_mr(p.recv, rmh).is_ok());
}

// A plugin that only records the trafficClass each call was given.
namespace recording {
std::vector<int> inits, listens, connects;
ncclResult_t init_v11(void** ctx, uint64_t, braidNcclNetCommConfig_t* config, braidNcclDebugLogger_t,
                      braidNcclProfilerCallback_t) {
  inits.push_back(config->trafficClass);
  *ctx = new int(config->trafficClass);
  return ncclSuccess;
}
ncclResult_t finalize_v11(void* ctx) {
  delete static_cast<int*>(ctx);
  return ncclSuccess;
}
ncclResult_t init_v10(braidNcclDebugLogger_t, braidNcclProfilerCallback_t) { return ncclSuccess; }
ncclResult_t devices(int* n) { return *n = 1, ncclSuccess; }
ncclResult_t listen_v11(void* ctx, int, void*, void** comm) {
  listens.push_back(*static_cast<int*>(ctx));
  return *comm = nullptr, ncclSuccess;
}
ncclResult_t connect_v11(void* ctx, int, void*, void** comm, braidNcclNetDeviceHandle_t**) {
  connects.push_back(*static_cast<int*>(ctx));
  return *comm = nullptr, ncclSuccess;
}
ncclResult_t connect_v10(int, braidNcclNetCommConfig_t* config, void*, void** comm, braidNcclNetDeviceHandle_t**) {
  connects.push_back(config->trafficClass);
  return *comm = nullptr, ncclSuccess;
}
}  // namespace recording

}  // namespace

TEST_CASE("a communicator's trafficClass reaches a v11 plugin through an init of its own, a v10 one at connect",
          "[unit][net][plugin]") {
  using namespace recording;
  braidNcclNet_v11_t v11{};
  v11.name = "Recording";
  v11.init = init_v11;
  v11.devices = devices;
  v11.listen = listen_v11;
  v11.connect = connect_v11;
  v11.finalize = finalize_v11;
  std::unique_ptr<Net> net;
  REQUIRE(open_plugin_table(11, &v11, "recording", &net).is_ok());
  CHECK(inits == std::vector<int>{-1});  // the loader's own init: no config
  NetHandle handle{};
  void* comm = nullptr;
  REQUIRE(net->listen(0, NetCommConfig{}, &handle, &comm).is_ok());
  REQUIRE(net->connect(0, NetCommConfig{104}, &handle, &comm).is_ok());
  REQUIRE(net->listen(0, NetCommConfig{104}, &handle, &comm).is_ok());
  REQUIRE(net->connect(0, NetCommConfig{104}, &handle, &comm).is_ok());
  CHECK(inits == std::vector<int>{-1, 104});  // one init per traffic class
  CHECK(listens == std::vector<int>{-1, 104});
  CHECK(connects == std::vector<int>{104, 104});

  braidNcclNet_v10_t v10{};
  v10.name = "Recording";
  v10.init = init_v10;
  v10.devices = devices;
  v10.connect = connect_v10;
  REQUIRE(open_plugin_table(10, &v10, "recording", &net).is_ok());
  connects.clear();
  REQUIRE(net->connect(0, NetCommConfig{}, &handle, &comm).is_ok());
  REQUIRE(net->connect(0, NetCommConfig{40}, &handle, &comm).is_ok());
  CHECK(connects == std::vector<int>{-1, 40});
}

TEST_CASE("a v12 plugin's railId and planeId reach the device's properties, -1 where it sets none",
          "[unit][net][plugin]") {
  using namespace recording;
  braidNcclNet_v12_t v12{};
  v12.name = "Railed";
  v12.init = init_v11;  // v12's calls are v11's
  v12.finalize = finalize_v11;
  v12.devices = [](int* n) { return *n = 2, ncclSuccess; };
  v12.getProperties = [](int dev, braidNcclNetProperties_v12_t* p) {
    p->name = const_cast<char*>("railed");
    p->speed = 400000;
    if (dev == 0) {
      p->railId = 3;
      p->planeId = 1;
    }
    return ncclSuccess;
  };
  std::unique_ptr<Net> net;
  REQUIRE(open_plugin_table(12, &v12, "railed", &net).is_ok());
  CHECK(std::string(net->name()).find("Railed (net plugin v12") == 0);
  NetProperties props;
  REQUIRE(net->properties(0, &props).is_ok());
  CHECK((props.rail == 3 && props.plane == 1 && props.speed_mbps == 400000));
  REQUIRE(net->properties(1, &props).is_ok());
  CHECK((props.rail == -1 && props.plane == -1));
  CHECK(open_plugin_table(13, &v12, "railed", &net).code() == ncclInvalidArgument);
}

TEST_CASE("braid's net plugin, every ABI version through braid's loader: exact messages", "[unit][net][plugin]") {
  void* lib = open_plugin();
  for (int version : {12, 11, 10, 9, 8}) {
    INFO("ncclNet v" << version);
    const void* table = dlsym(lib, fmt::format("ncclNetPlugin_v{}", version).c_str());
    REQUIRE(table);
    std::unique_ptr<Net> net;
    Status s = open_plugin_table(version, table, BRAID_NET_PLUGIN_LIB, &net);
    INFO(s.to_string());
    REQUIRE(s.is_ok());
    CHECK(std::string(net->name()).find("BraidSocket") == 0);
    REQUIRE(net->devices() == 1);
    NetProperties props;
    REQUIRE(net->properties(0, &props).is_ok());
    CHECK(props.ptr_support == kNetPtrHost);
    CHECK(props.max_recvs == 1);
    CHECK((props.rail == -1 && props.plane == -1));  // TCP interfaces have no rail (v12: NCCL_NET_ID_UNDEF)
    Pair p = connect_pair(*net, NetCommConfig{version});  // a traffic class, which TCP has not
    exchange(*net, p, 4096, 0, version);
    exchange(*net, p, 4096, 4096, version);
    exchange(*net, p, 3 << 20, (3 << 20) - 5, version);
    REQUIRE(net->close_send(p.send).is_ok());
    REQUIRE(net->close_recv(p.recv).is_ok());
  }
}

TEST_CASE("braid's net plugin: a message larger than its receive, and grouped receives, are errors",
          "[unit][net][plugin]") {
  void* lib = open_plugin();
  auto* v11 = static_cast<const braidNcclNet_v11_t*>(dlsym(lib, "ncclNetPlugin_v11"));
  REQUIRE(v11);
  std::unique_ptr<Net> net;
  REQUIRE(open_plugin_table(11, v11, BRAID_NET_PLUGIN_LIB, &net).is_ok());
  Pair p = connect_pair(*net);
  std::vector<char> out(1000), in(999);
  void *smh = nullptr, *rmh = nullptr, *rreq = nullptr, *sreq = nullptr;
  REQUIRE(net->reg_mr(p.send, out.data(), out.size(), kNetPtrHost, &smh).is_ok());
  REQUIRE(net->reg_mr(p.recv, in.data(), in.size(), kNetPtrHost, &rmh).is_ok());
  REQUIRE(net->irecv(p.recv, in.data(), in.size(), 0, rmh, &rreq).is_ok());
  REQUIRE(net->isend(p.send, out.data(), out.size(), 0, smh, &sreq).is_ok());
  Status s;
  bool done = false;
  for (int i = 0; i < 1000000 && s.is_ok() && !done; ++i) s = net->test(rreq, &done, nullptr);
  CHECK(s.code() == ncclInvalidUsage);  // the ranks disagree on a size, as NCCL's socket net says
  CHECK(s.message().find("failed") != std::string::npos);

  // Grouped receives straight through the table: refused, no request.
  void* data[2] = {in.data(), in.data()};
  size_t sizes[2] = {1, 1};
  int tags[2] = {0, 0};
  void* mhs[2] = {rmh, rmh};
  void* request = reinterpret_cast<void*>(1);
  CHECK(v11->irecv(p.recv, 2, data, sizes, tags, mhs, nullptr, &request) == ncclInternalError);
  CHECK(request == nullptr);
  REQUIRE(net->close_send(p.send).is_ok());
  REQUIRE(net->close_recv(p.recv).is_ok());
}

// An external NCCL net plugin as a Net (net.h).
//
// Found as NCCL 2.28 finds it: BRAID_NET_PLUGIN (else NCCL_NET_PLUGIN) is a
// comma list; each entry is opened as given, and when that fails and the
// entry is a bare name (no '/', not lib*.so) as libnccl-net-NAME.so; unset,
// libnccl-net.so is tried; "none" turns plugins off.  The first library that
// exports an ncclNet braid knows (ncclNetPlugin_v12 down to _v8), initialises
// and has a device is used, once per process.
//
// The plugin's table is called through its own version's signatures; its
// log lines go to braid's log.  What the ABI cannot give (error messages: a
// plugin returns only a code; a way to sleep until a completion) braid
// makes up for: errors name the call and the plugin, waits poll with
// back-off (net_transport.cc).  What a plugin lacks is said once at INFO.
#include <dlfcn.h>

#include <cstdarg>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "src/base/env.h"
#include "src/base/log.h"
#include "src/base/plugin_library.h"
#include "src/transport/net/nccl_net_abi.h"
#include "src/transport/net/nets.h"

namespace braid {
namespace {

void plugin_logger(braidNcclDebugLogLevel level, unsigned long flags, const char* file, int line, const char* fmt,
                   ...) {
  va_list args;
  va_start(args, fmt);
  plugin_vlog(level, flags, kNet, "net plugin", file, line, fmt, args);
  va_end(args);
}

class PluginNet final : public Net {
 public:
  PluginNet(void* lib, std::string library, int version, const void* table)
      : lib_(lib), library_(std::move(library)), version_(version) {
    switch (version) {
      case 12: v12_ = static_cast<const braidNcclNet_v12_t*>(table); break;
      case 11: v11_ = static_cast<const braidNcclNet_v11_t*>(table); break;
      case 10: v10_ = static_cast<const braidNcclNet_v10_t*>(table); break;
      case 9: v9_ = static_cast<const braidNcclNet_v9_t*>(table); break;
      default: v8_ = static_cast<const braidNcclNet_v8_t*>(table); break;
    }
    name_ = fmt::format("{} (net plugin v{}, {})", call_name(), version, library_);
  }
  // (The process's plugin lives as long as the process: tests' tables end here.)
  ~PluginNet() override {
    if (with_contexts())
      v11_calls([&](auto* t) {
        if (t->finalize)
          for (const auto& [traffic_class, ctx] : contexts_) (void)t->finalize(ctx);
      });
  }

  Status init() {
    if (with_contexts()) {
      void* ctx = nullptr;  // for communicators without a config
      BRAID_TRY(context_for(NetCommConfig{}, &ctx));
    } else {
      BRAID_TRY(check(v10_  ? v10_->init(plugin_logger, nullptr)
                      : v9_ ? v9_->init(plugin_logger)
                            : v8_->init(plugin_logger),
                      "init"));
    }
    name_ = fmt::format("{} (net plugin v{}, {})", call_name(), version_, library_);  // init may name it
    int n = 0;
    BRAID_TRY(check(dispatch([&](auto* t) { return t->devices(&n); }), "devices"));
    devices_ = n;
    return Status::ok();
  }

  const char* name() const override { return name_.c_str(); }
  const char* net_name() const override { return call_name(); }
  int devices() const override { return devices_; }

  Status properties(int dev, NetProperties* out) override {
    *out = NetProperties{};
    auto fill = [&](const auto& p) {
      out->name = p.name ? p.name : "";
      out->pci_path = p.pciPath ? p.pciPath : "";
      out->guid = p.guid;
      out->ptr_support = p.ptrSupport;
      out->reg_is_global = p.regIsGlobal != 0;
      out->speed_mbps = p.speed;
      out->port = p.port;
      out->latency_us = p.latency;
      out->max_comms = p.maxComms;
      out->max_recvs = p.maxRecvs;
    };
    ncclResult_t r;
    if (v12_) {
      braidNcclNetProperties_v12_t p{};
      p.railId = p.planeId = BRAID_NCCL_NET_ID_UNDEF;
      r = v12_->getProperties(dev, &p);
      fill(p);
      out->max_p2p_bytes = p.maxP2pBytes;
      out->rail = p.railId < 0 ? -1 : p.railId;
      out->plane = p.planeId < 0 ? -1 : p.planeId;
    } else if (v11_) {
      braidNcclNetProperties_v11_t p{};
      r = v11_->getProperties(dev, &p);
      fill(p);
      out->max_p2p_bytes = p.maxP2pBytes;
    } else if (v10_ || v9_) {
      braidNcclNetProperties_v9_t p{};
      r = v10_ ? v10_->getProperties(dev, &p) : v9_->getProperties(dev, &p);
      fill(p);
      out->max_p2p_bytes = p.maxP2pBytes;
    } else {
      braidNcclNetProperties_v8_t p{};
      r = v8_->getProperties(dev, &p);
      fill(p);
      out->max_p2p_bytes = size_t(1) << 30;  // int sizes
    }
    return check(r, "getProperties");
  }

  Status listen(int dev, const NetCommConfig& config, NetHandle* handle, void** listen_comm) override {
    ncclResult_t r;
    if (with_contexts()) {
      void* ctx = nullptr;
      BRAID_TRY(context_for(config, &ctx));
      r = v11_calls([&](auto* t) { return t->listen(ctx, dev, handle->bytes, listen_comm); });
    } else if (v10_) r = v10_->listen(dev, handle->bytes, listen_comm);
    else if (v9_) r = v9_->listen(dev, handle->bytes, listen_comm);
    else r = v8_->listen(dev, handle->bytes, listen_comm);
    return check(r, "listen");
  }
  Status connect(int dev, const NetCommConfig& config, NetHandle* handle, void** send_comm) override {
    braidNcclNetDeviceHandle_t* device_comm = nullptr;  // no device offload asked for
    ncclResult_t r;
    if (config.traffic_class >= 0 && !with_contexts() && !v10_)
      std::call_once(no_config_said_, [&] {
        BRAID_INFO(kNet | kInit, "{}: a v{} net plugin takes no communicator config: trafficClass {} not given to it",
                   name_, version_, config.traffic_class);
      });
    if (with_contexts()) {
      void* ctx = nullptr;
      BRAID_TRY(context_for(config, &ctx));
      r = v11_calls([&](auto* t) { return t->connect(ctx, dev, handle->bytes, send_comm, &device_comm); });
    } else if (v10_) {
      braidNcclNetCommConfig_t c{config.traffic_class};
      r = v10_->connect(dev, &c, handle->bytes, send_comm, &device_comm);
    } else if (v9_) r = v9_->connect(dev, handle->bytes, send_comm, &device_comm);
    else r = v8_->connect(dev, handle->bytes, send_comm, &device_comm);
    return check(r, "connect");
  }
  Status accept(void* listen_comm, void** recv_comm) override {
    braidNcclNetDeviceHandle_t* device_comm = nullptr;
    return check(dispatch([&](auto* t) { return t->accept(listen_comm, recv_comm, &device_comm); }), "accept");
  }
  Status close_listen(void* c) override {
    return check(dispatch([&](auto* t) { return t->closeListen(c); }), "closeListen");
  }
  Status close_send(void* c) override { return check(dispatch([&](auto* t) { return t->closeSend(c); }), "closeSend"); }
  Status close_recv(void* c) override { return check(dispatch([&](auto* t) { return t->closeRecv(c); }), "closeRecv"); }

  Status reg_mr(void* comm, void* data, size_t bytes, int type, void** mhandle) override {
    return check(dispatch([&](auto* t) { return t->regMr(comm, data, bytes, type, mhandle); }), "regMr");
  }
  Status dereg_mr(void* comm, void* mhandle) override {
    return check(dispatch([&](auto* t) { return t->deregMr(comm, mhandle); }), "deregMr");
  }

  Status isend(void* comm, void* data, size_t bytes, int tag, void* mhandle, void** request) override {
    *request = nullptr;
    ncclResult_t r;
    if (with_contexts())
      r = v11_calls([&](auto* t) { return t->isend(comm, data, bytes, tag, mhandle, nullptr, request); });
    else if (v10_) r = v10_->isend(comm, data, bytes, tag, mhandle, nullptr, request);
    else if (v9_) r = v9_->isend(comm, data, bytes, tag, mhandle, request);
    else {
      if (bytes > size_t(INT32_MAX)) return BRAID_ERROR(ncclInternalError, "{}: a v8 plugin sends < 2 GiB", name_);
      r = v8_->isend(comm, data, int(bytes), tag, mhandle, request);
    }
    return check(r, "isend");
  }
  Status irecv(void* comm, void* data, size_t bytes, int tag, void* mhandle, void** request) override {
    *request = nullptr;
    ncclResult_t r;
    if (with_contexts())
      r = v11_calls([&](auto* t) { return t->irecv(comm, 1, &data, &bytes, &tag, &mhandle, nullptr, request); });
    else if (v10_) r = v10_->irecv(comm, 1, &data, &bytes, &tag, &mhandle, nullptr, request);
    else if (v9_) r = v9_->irecv(comm, 1, &data, &bytes, &tag, &mhandle, request);
    else {
      if (bytes > size_t(INT32_MAX)) return BRAID_ERROR(ncclInternalError, "{}: a v8 plugin receives < 2 GiB", name_);
      int size = int(bytes);
      r = v8_->irecv(comm, 1, &data, &size, &tag, &mhandle, request);
    }
    return check(r, "irecv");
  }
  Status test(void* request, bool* done, size_t* bytes) override {
    int d = 0, size = 0;
    BRAID_TRY(check(dispatch([&](auto* t) { return t->test(request, &d, &size); }), "test"));
    *done = d != 0;
    if (bytes) *bytes = size_t(size);
    return Status::ok();
  }

  // What this plugin does not give braid, for the init log.
  std::string lacks() {
    std::vector<std::string> missing;
    NetProperties p;
    if (devices_ > 0 && properties(0, &p).is_ok() && !(p.ptr_support & kNetPtrCuda))
      missing.push_back("GPU memory (device buffers are staged through host memory)");
    const bool dmabuf = dispatch([](auto* t) { return t->regMrDmaBuf != nullptr; });
    if (!dmabuf) missing.push_back("dma-buf registration");
    missing.push_back("completion events (braid polls test with back-off)");
    if (v8_) missing.push_back("messages of 2 GiB or more (v8 int sizes)");
    std::string text;
    for (const std::string& m : missing) text += (text.empty() ? "" : "; ") + m;
    return text;
  }

 private:
  // (Declared return types: the members above call these before the class is complete.)
  template <class Fn>
  auto dispatch(Fn fn) const -> decltype(fn(static_cast<const braidNcclNet_v8_t*>(nullptr))) {
    if (v12_) return fn(v12_);
    if (v11_) return fn(v11_);
    if (v10_) return fn(v10_);
    if (v9_) return fn(v9_);
    return fn(v8_);
  }
  // v11 and v12: contexts from init, the calls that take them.
  bool with_contexts() const { return v12_ || v11_; }
  template <class Fn>
  auto v11_calls(Fn fn) const -> decltype(fn(static_cast<const braidNcclNet_v11_t*>(nullptr))) {
    return v12_ ? fn(v12_) : fn(v11_);
  }
  const char* call_name() const {
    const char* n = dispatch([](auto* t) { return t->name; });
    return n ? n : "unnamed";
  }
  // The v11 context for a communicator of `config`'s traffic class.
  Status context_for(const NetCommConfig& config, void** ctx) {
    std::lock_guard<std::mutex> lock(contexts_mutex_);
    auto [it, added] = contexts_.try_emplace(config.traffic_class, nullptr);
    if (added) {
      braidNcclNetCommConfig_t c{config.traffic_class};
      const ncclResult_t r = v11_calls([&](auto* t) { return t->init(&it->second, 0, &c, plugin_logger, nullptr); });
      if (r != ncclSuccess) contexts_.erase(it);
      BRAID_TRY(check(r, "init"));
    }
    *ctx = it->second;
    return Status::ok();
  }

  Status check(ncclResult_t r, const char* call) const {
    if (r == ncclSuccess) return Status::ok();
    // A plugin's network failure is ncclSystemError; keep the plugin's code.
    return Status::error(
        r, fmt::format("{}: {} failed: {} (the plugin's log says more)", name_, call, nccl_result_name(r)), __FILE__,
        __LINE__);
  }

  void* lib_;
  std::string library_;
  int version_;
  std::string name_;
  // v11, v12: a context per traffic class, each from its own init (NCCL inits
  // once per communicator); -1's from init().  Finalized with the net.
  std::mutex contexts_mutex_;
  std::map<int, void*> contexts_;
  std::once_flag no_config_said_;
  int devices_ = 0;
  const braidNcclNet_v12_t* v12_ = nullptr;
  const braidNcclNet_v11_t* v11_ = nullptr;
  const braidNcclNet_v10_t* v10_ = nullptr;
  const braidNcclNet_v9_t* v9_ = nullptr;
  const braidNcclNet_v8_t* v8_ = nullptr;
};

Status load(const std::string& entry, bool quiet_if_absent, PluginNet** out) {
  *out = nullptr;
  std::string opened, error;
  void* lib = open_plugin_library("libnccl-net", entry, &opened, &error);
  if (!lib) {
    if (quiet_if_absent) return Status::ok();
    return BRAID_ERROR(ncclSystemError, "net plugin {}: cannot load it ({})", entry, error);
  }
  static const struct {
    int version;
    const char* symbol;
  } kVersions[] = {{12, "ncclNetPlugin_v12"}, {11, "ncclNetPlugin_v11"}, {10, "ncclNetPlugin_v10"},
                   {9, "ncclNetPlugin_v9"},   {8, "ncclNetPlugin_v8"}};
  for (const auto& v : kVersions) {
    if (const void* table = dlsym(lib, v.symbol)) {
      auto net = std::make_unique<PluginNet>(lib, opened, v.version, table);
      BRAID_TRY(net->init());
      *out = net.release();  // kept for the life of the process, with its library
      return Status::ok();
    }
  }
  dlclose(lib);
  return BRAID_ERROR(ncclSystemError, "net plugin {} ({}) exports no ncclNetPlugin_v12..v8 (older versions are not "
                     "supported)", entry, opened);
}

}  // namespace

Status open_plugin_table(int version, const void* table, const std::string& library, std::unique_ptr<Net>* out) {
  if (version < 8 || version > 12) return BRAID_ERROR(ncclInvalidArgument, "ncclNet v{} is not supported", version);
  auto net = std::make_unique<PluginNet>(nullptr, library, version, table);
  BRAID_TRY(net->init());
  *out = std::move(net);
  return Status::ok();
}

Status plugin_net(Net** out) {
  static std::mutex mutex;
  static bool tried = false;
  static Net* net = nullptr;
  static Status failure;
  std::lock_guard<std::mutex> lock(mutex);
  if (!tried) {
    tried = true;
    std::string spec = env_string_or_nccl("BRAID_NET_PLUGIN", "NCCL_NET_PLUGIN");
    const bool configured = !spec.empty();
    if (!configured) spec = "libnccl-net.so";
    if (spec != "none") {
      size_t begin = 0;
      while (begin <= spec.size() && !net) {
        size_t end = spec.find(',', begin);
        if (end == std::string::npos) end = spec.size();
        const std::string entry = spec.substr(begin, end - begin);
        begin = end + 1;
        if (entry.empty()) continue;
        PluginNet* p = nullptr;
        Status s = load(entry, !configured, &p);
        if (!s.is_ok()) {
          if (failure.is_ok()) failure = std::move(s);
          continue;
        }
        if (!p) continue;
        if (p->devices() <= 0) {
          BRAID_INFO(kNet | kInit, "{}: no device; not used", p->name());
          if (failure.is_ok()) failure = BRAID_ERROR(ncclSystemError, "{} reports no device", p->name());
          continue;  // p stays loaded: a plugin's init may not be undone
        }
        BRAID_INFO(kNet | kInit, "loaded {} with {} device(s); it does not give: {}", p->name(), p->devices(),
                   p->lacks());
        net = p;
      }
    }
    if (net) failure = Status::ok();
  }
  *out = net;
  return net ? Status::ok() : failure;
}

}  // namespace braid

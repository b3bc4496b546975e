// libnccl-net-braid.so: braid's networks as an NCCL net plugin.
//
// NCCL (NCCL_NET_PLUGIN=braid) or braid itself (BRAID_TRANSPORT=plugin
// with the same setting) loads it and finds ncclNetPlugin_v12 .. _v8, all
// backed by one of braid's Nets (src/transport/net/net.h), chosen at init
// by BRAID_TRANSPORT: ib (braid's InfiniBand verbs net, or init fails
// saying why), socket (braid's TCP net), otherwise InfiniBand where a port
// is usable, else TCP.  The table's name is "Braid" until init, then says
// which ("BraidIB", "BraidSocket").
//
// What it offers: host memory only (ptrSupport NCCL_PTR_HOST: no
// GPUDirect RDMA, no dma-buf), single receives (maxRecvs 1), no device
// offload.  Errors go to NCCL's logger with braid's message, and the call
// returns the error's code.  No C++ exception leaves a call.
#include <dlfcn.h>

#include <cstdarg>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "src/base/env.h"
#include "src/base/env_plugin.h"
#include "src/base/log.h"
#include "src/transport/net/nccl_net_abi.h"
#include "src/transport/net/nets.h"

namespace braid {
namespace {

Net* g_net = nullptr;
braidNcclDebugLogger_t g_logger = nullptr;
std::vector<NetProperties> g_properties;  // by device: the strings the tables point into
constexpr unsigned long kNcclNetSubsys = 0x10;  // NCCL_NET

ncclResult_t report(Status s) {
  if (s.is_ok()) return ncclSuccess;
  if (g_logger)
    g_logger(BRAID_NCCL_LOG_WARN, kNcclNetSubsys, __FILE__, __LINE__, "braid net plugin: %s", s.to_string().c_str());
  return s.code();
}

template <class Fn>
ncclResult_t guarded(Fn fn) {
  try {
    return report(fn());
  } catch (const std::exception& e) {
    return report(BRAID_ERROR(ncclInternalError, "unexpected exception: {}", e.what()));
  } catch (...) {
    return report(BRAID_ERROR(ncclInternalError, "unexpected exception"));
  }
}

// fn(net), once init has chosen the net.
template <class Fn>
ncclResult_t with_net(Fn fn) {
  return guarded([&] {
    if (!g_net) return BRAID_ERROR(ncclInternalError, "braid net plugin: called before init");
    return fn(*g_net);
  });
}

// Picks the net once; later inits (one per NCCL communicator) reuse it.
Status init_net(const char** name) {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  if (!g_net) {
    int mode = 0;
    BRAID_TRY(env_choice("BRAID_TRANSPORT", {"auto", "shm", "socket", "ib", "plugin"}, &mode));
    Net* net = nullptr;
    if (mode == 3) {
      BRAID_TRY(braid_ib_net(&net));
    } else if (mode != 2) {
      if (!braid_ib_net(&net).is_ok()) net = nullptr;
    }
    if (!net) BRAID_TRY(braid_socket_net(&net));
    g_properties.resize(size_t(net->devices()));
    for (int d = 0; d < net->devices(); ++d) BRAID_TRY(net->properties(d, &g_properties[size_t(d)]));
    g_net = net;
  }
  *name = std::string(g_net->name()) == "IB" ? "BraidIB" : "BraidSocket";
  return Status::ok();
}

template <class Props>
ncclResult_t fill_properties(int dev, Props* p) {
  return guarded([&] {
    if (!g_net || dev < 0 || dev >= int(g_properties.size()))
      return BRAID_ERROR(ncclInternalError, "braid net plugin: no device {}", dev);
    const NetProperties& n = g_properties[size_t(dev)];
    std::memset(p, 0, sizeof(*p));
    p->name = const_cast<char*>(n.name.c_str());
    p->pciPath = const_cast<char*>(n.pci_path.c_str());
    p->guid = n.guid;
    p->ptrSupport = n.ptr_support;
    p->regIsGlobal = n.reg_is_global;
    p->speed = n.speed_mbps;
    p->port = n.port;
    p->latency = n.latency_us;
    p->maxComms = n.max_comms;
    p->maxRecvs = 1;
    p->netDeviceType = BRAID_NCCL_NET_DEVICE_HOST;
    p->netDeviceVersion = 0;
    if constexpr (requires { p->maxP2pBytes; }) {
      p->vProps.ndevs = 1;
      p->vProps.devs[0] = dev;
      p->maxP2pBytes = n.max_p2p_bytes;
      p->maxCollBytes = n.max_p2p_bytes;
    }
    if constexpr (requires { p->maxMultiRequestSize; }) p->maxMultiRequestSize = 1;
    if constexpr (requires { p->railId; }) {
      p->railId = int16_t(n.rail);  // -1, NCCL's NCCL_NET_ID_UNDEF, where the net has none
      p->planeId = int16_t(n.plane);
    }
    return Status::ok();
  });
}

// --- the calls every version shares ---------------------------------------

ncclResult_t devices(int* ndev) {
  return with_net([&](Net& net) {
    *ndev = net.devices();
    return Status::ok();
  });
}
// A v11 context: the config of the communicator whose init made it.
NetCommConfig* new_context(const braidNcclNetCommConfig_t* config) {
  return new NetCommConfig{config ? config->trafficClass : -1};
}
NetCommConfig config_of(void* ctx) { return ctx ? *static_cast<NetCommConfig*>(ctx) : NetCommConfig{}; }

ncclResult_t listen(const NetCommConfig& config, int dev, void* handle, void** listen_comm) {
  return with_net([&](Net& net) { return net.listen(dev, config, static_cast<NetHandle*>(handle), listen_comm); });
}
ncclResult_t connect(const NetCommConfig& config, int dev, void* handle, void** send_comm,
                     braidNcclNetDeviceHandle_t** device_comm) {
  return with_net([&](Net& net) {
    if (device_comm && *device_comm) *device_comm = nullptr;  // no device offload
    return net.connect(dev, config, static_cast<NetHandle*>(handle), send_comm);
  });
}
// v8 and v9: no config.
ncclResult_t listen_unconfigured(int dev, void* handle, void** listen_comm) {
  return listen({}, dev, handle, listen_comm);
}
ncclResult_t connect_unconfigured(int dev, void* handle, void** send_comm, braidNcclNetDeviceHandle_t** dc) {
  return connect({}, dev, handle, send_comm, dc);
}
ncclResult_t accept(void* listen_comm, void** recv_comm, braidNcclNetDeviceHandle_t** device_comm) {
  return with_net([&](Net& net) {
    if (device_comm && *device_comm) *device_comm = nullptr;
    return net.accept(listen_comm, recv_comm);
  });
}
ncclResult_t reg_mr(void* comm, void* data, size_t size, int type, void** mhandle) {
  return with_net([&](Net& net) { return net.reg_mr(comm, data, size, type, mhandle); });
}
ncclResult_t reg_mr_dmabuf(void*, void*, size_t, int, uint64_t, int, void**) {
  return report(BRAID_ERROR(ncclInvalidUsage, "dma-buf registration is not supported (ptrSupport is host only)"));
}
ncclResult_t dereg_mr(void* comm, void* mhandle) { return with_net([&](Net& net) { return net.dereg_mr(comm, mhandle); }); }
ncclResult_t isend(void* comm, void* data, size_t size, int tag, void* mhandle, void** request) {
  return with_net([&](Net& net) { return net.isend(comm, data, size, tag, mhandle, request); });
}
template <class Size>
ncclResult_t irecv(void* comm, int n, void** data, Size* sizes, int* tags, void** mhandles, void** request) {
  return with_net([&](Net& net) {
    *request = nullptr;
    if (n != 1) return BRAID_ERROR(ncclInternalError, "grouped receives (n = {}) are not supported (maxRecvs 1)", n);
    return net.irecv(comm, data[0], size_t(sizes[0]), tags[0], mhandles ? mhandles[0] : nullptr, request);
  });
}
ncclResult_t iflush(void*, int, void**, int*, void**, void** request) {
  *request = nullptr;  // host memory: nothing to flush
  return ncclSuccess;
}
ncclResult_t test(void* request, int* done, int* sizes) {
  return with_net([&](Net& net) {
    bool d = false;
    size_t bytes = 0;
    BRAID_TRY(net.test(request, &d, &bytes));
    *done = d;
    if (d && sizes) *sizes = int(bytes);
    return Status::ok();
  });
}
ncclResult_t close_send(void* c) { return with_net([&](Net& net) { return net.close_send(c); }); }
ncclResult_t close_recv(void* c) { return with_net([&](Net& net) { return net.close_recv(c); }); }
ncclResult_t close_listen(void* c) { return with_net([&](Net& net) { return net.close_listen(c); }); }
template <typename VDeviceProps>
ncclResult_t make_vdevice(int* d, VDeviceProps* props) {
  // Only the trivial virtual device (one physical one) exists.
  if (!props || props->ndevs != 1 || props->devs[0] < 0 || props->devs[0] >= int(g_properties.size()))
    return report(BRAID_ERROR(ncclInvalidUsage, "virtual devices merging several NICs are not supported"));
  *d = props->devs[0];
  return ncclSuccess;
}

// braid's log lines, through NCCL's logger: its levels and subsystem flags.
void forward_to_nccl(LogLevel level, uint32_t subsys, const char* message) {
  const auto nccl_level = level == LogLevel::Warn    ? BRAID_NCCL_LOG_WARN
                          : level == LogLevel::Info  ? BRAID_NCCL_LOG_INFO
                          : level == LogLevel::Trace ? BRAID_NCCL_LOG_TRACE
                                                     : BRAID_NCCL_LOG_VERSION;
  if (braidNcclDebugLogger_t logger = g_logger)
    logger(nccl_level, nccl_flags_from_subsys(subsys), "braid", 0, "braid net plugin: %s", message);
}

template <class Table>
ncclResult_t init_table(Table* table, braidNcclDebugLogger_t logger) {
  g_logger = logger;
  // Variables as the host NCCL reads them (its env plugin's answers) where
  // it says (2.30 and later); else the environment.  Never an env plugin of
  // this copy's own: the host has loaded its own (env_plugin.h).
  env_plugin_never_load();
  if (auto* host = reinterpret_cast<HostEnvGetter>(dlsym(RTLD_DEFAULT, "ncclParamEnvPluginGet")))
    env_read_through_host(host);
  log_forward_to(logger ? forward_to_nccl : nullptr);
  return guarded([&] { return init_net(&table->name); });
}

// The v12 and v11 tables: the same calls, each version's properties
// (nccl_net_abi.h).  `Self` is the table, which init names.
template <typename Properties, typename VDeviceProps, braidNcclNetV11Layout<Properties, VDeviceProps>* Self>
constexpr braidNcclNetV11Layout<Properties, VDeviceProps> v11_layout_table() {
  return {
    "Braid",
    [](void** ctx, uint64_t, braidNcclNetCommConfig_t* config, braidNcclDebugLogger_t logger,
       braidNcclProfilerCallback_t) -> ncclResult_t {
      ncclResult_t r = init_table(Self, logger);
      *ctx = r == ncclSuccess ? new_context(config) : nullptr;
      return r;
    },
    devices,
    fill_properties<Properties>,
    [](void* ctx, int dev, void* handle, void** comm) { return braid::listen(config_of(ctx), dev, handle, comm); },
    [](void* ctx, int dev, void* handle, void** comm, braidNcclNetDeviceHandle_t** dc) {
      return braid::connect(config_of(ctx), dev, handle, comm, dc);
    },
    braid::accept,
    reg_mr,
    reg_mr_dmabuf,
    dereg_mr,
    [](void* c, void* data, size_t size, int tag, void* mh, void*, void** req) { return isend(c, data, size, tag, mh, req); },
    [](void* c, int n, void** data, size_t* sizes, int* tags, void** mhs, void**, void** req) {
      return irecv(c, n, data, sizes, tags, mhs, req);
    },
    iflush,
    test,
    close_send,
    close_recv,
    close_listen,
    nullptr,  // getDeviceMr: no device offload
    nullptr,  // irecvConsumed: idem
    make_vdevice<VDeviceProps>,
    [](void* ctx) {  // the communicator's context; the nets live with the process
      delete static_cast<NetCommConfig*>(ctx);
      return ncclSuccess;
    },
    [](void*, braidNcclNetAttr_t*) { return ncclSuccess; },  // setNetAttr: no tunable here
  };
}

}  // namespace
}  // namespace braid

using namespace braid;

extern "C" {

extern braidNcclNet_v12_t ncclNetPlugin_v12;
extern braidNcclNet_v11_t ncclNetPlugin_v11;
__attribute__((visibility("default"))) braidNcclNet_v12_t ncclNetPlugin_v12 =
    v11_layout_table<braidNcclNetProperties_v12_t, braidNcclNetVDeviceProps_v12_t, &ncclNetPlugin_v12>();
__attribute__((visibility("default"))) braidNcclNet_v11_t ncclNetPlugin_v11 =
    v11_layout_table<braidNcclNetProperties_v11_t, braidNcclNetVDeviceProps_t, &ncclNetPlugin_v11>();

__attribute__((visibility("default"))) braidNcclNet_v10_t ncclNetPlugin_v10 = {
    "Braid",
    [](braidNcclDebugLogger_t logger, braidNcclProfilerCallback_t) { return init_table(&ncclNetPlugin_v10, logger); },
    devices,
    fill_properties<braidNcclNetProperties_v10_t>,
    listen_unconfigured,  // v10 gives a config to connect only: the receiving end follows the sender's
    [](int dev, braidNcclNetCommConfig_t* config, void* handle, void** comm, braidNcclNetDeviceHandle_t** dc) {
      return braid::connect(NetCommConfig{config ? config->trafficClass : -1}, dev, handle, comm, dc);
    },
    braid::accept,
    reg_mr,
    reg_mr_dmabuf,
    dereg_mr,
    [](void* c, void* data, size_t size, int tag, void* mh, void*, void** req) { return isend(c, data, size, tag, mh, req); },
    [](void* c, int n, void** data, size_t* sizes, int* tags, void** mhs, void**, void** req) {
      return irecv(c, n, data, sizes, tags, mhs, req);
    },
    iflush,
    test,
    close_send,
    close_recv,
    close_listen,
    nullptr,
    nullptr,
    make_vdevice<braidNcclNetVDeviceProps_t>,
};

__attribute__((visibility("default"))) braidNcclNet_v9_t ncclNetPlugin_v9 = {
    "Braid",
    [](braidNcclDebugLogger_t logger) { return init_table(&ncclNetPlugin_v9, logger); },
    devices,
    fill_properties<braidNcclNetProperties_v9_t>,
    listen_unconfigured,
    connect_unconfigured,
    braid::accept,
    reg_mr,
    reg_mr_dmabuf,
    dereg_mr,
    isend,
    irecv<size_t>,
    iflush,
    test,
    close_send,
    close_recv,
    close_listen,
    nullptr,
    nullptr,
    make_vdevice<braidNcclNetVDeviceProps_t>,
};

__attribute__((visibility("default"))) braidNcclNet_v8_t ncclNetPlugin_v8 = {
    "Braid",
    [](braidNcclDebugLogger_t logger) { return init_table(&ncclNetPlugin_v8, logger); },
    devices,
    fill_properties<braidNcclNetProperties_v8_t>,
    listen_unconfigured,
    connect_unconfigured,
    braid::accept,
    reg_mr,
    reg_mr_dmabuf,
    dereg_mr,
    [](void* c, void* data, int size, int tag, void* mh, void** req) {
      return isend(c, data, size_t(size < 0 ? 0 : size), tag, mh, req);
    },
    irecv<int>,
    iflush,
    test,
    close_send,
    close_recv,
    close_listen,
    nullptr,
    nullptr,
};

}  // extern "C"

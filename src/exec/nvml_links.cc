#include "src/exec/nvml_links.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <mutex>

#include "src/transport/net/nic_affinity.h"

namespace braid {
namespace {

// The NVML declarations this needs, as NCCL declares them (src/include/nvmlwrap.h):
// the driver's library serves these symbols with these layouts.
using nvmlDevice_t = struct nvmlDevice_st*;
using nvmlReturn_t = int;  // 0: NVML_SUCCESS
constexpr int kFeatureEnabled = 1;
constexpr unsigned kCapP2pSupported = 0;
constexpr unsigned kFieldNvlinkState = 165;  // NVML_FI_DEV_NVLINK_GET_STATE
struct nvmlPciInfo_t {  // the v1 layout, which nvmlDeviceGetNvLinkRemotePciInfo (unversioned) fills
  char busId[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId, reserved[4];
};
struct nvmlFieldValue_t {
  unsigned fieldId, scopeId;
  long long timestamp, latencyUsec;
  int valueType;
  nvmlReturn_t nvmlReturn;
  union {
    double dVal;
    unsigned uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    long long sllVal;
  } value;
};

struct Nvml {
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*by_bus_id)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*capability)(nvmlDevice_t, unsigned, unsigned, unsigned*) = nullptr;
  nvmlReturn_t (*state)(nvmlDevice_t, unsigned, int*) = nullptr;
  nvmlReturn_t (*remote_pci)(nvmlDevice_t, unsigned, nvmlPciInfo_t*) = nullptr;
  nvmlReturn_t (*field_values)(nvmlDevice_t, int, nvmlFieldValue_t*) = nullptr;  // optional
  nvmlReturn_t (*capability_sm)(nvmlDevice_t, int*, int*) = nullptr;                // optional
  std::string why;  // empty: ready
};

const Nvml& nvml() {
  static Nvml n;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      n.why = std::string("NVML is not there (") + dlerror() + ")";
      return;
    }
    auto sym = [&](const char* name, auto** fn) { *reinterpret_cast<void**>(fn) = dlsym(lib, name); };
    sym("nvmlInit_v2", &n.init);
    if (!n.init) sym("nvmlInit", &n.init);
    sym("nvmlDeviceGetHandleByPciBusId", &n.by_bus_id);
    sym("nvmlDeviceGetNvLinkCapability", &n.capability);
    sym("nvmlDeviceGetNvLinkState", &n.state);
    sym("nvmlDeviceGetNvLinkRemotePciInfo", &n.remote_pci);
    sym("nvmlDeviceGetFieldValues", &n.field_values);
    sym("nvmlDeviceGetCudaComputeCapability", &n.capability_sm);
    if (!n.init || !n.by_bus_id || !n.capability || !n.state || !n.remote_pci)
      n.why = "libnvidia-ml.so.1 lacks a function NCCL's NVLink walk uses";
    else if (n.init() != 0)
      n.why = "nvmlInit failed";
  });
  return n;
}

bool link_up(const Nvml& n, nvmlDevice_t dev, unsigned link, int sm) {
  if (sm >= 90 && n.field_values) {  // NCCL asks Hopper and later through the field
    nvmlFieldValue_t fv{};
    fv.fieldId = kFieldNvlinkState;
    fv.scopeId = link;
    if (n.field_values(dev, 1, &fv) == 0 && fv.nvmlReturn == 0) return fv.value.uiVal == unsigned(kFeatureEnabled);
  }
  int active = 0;
  return n.state(dev, link, &active) == 0 && active == kFeatureEnabled;
}

}  // namespace

std::string nvlink_target_class(const std::string& target, const std::string& root) {
  const std::string cls = read_sysfs_line(root + "/bus/pci/devices/" + target + "/class");
  return cls.empty() ? "0x068000" : cls;
}

int nvml_gpu_sm(const std::string& bus_id) {
  const Nvml& n = nvml();
  nvmlDevice_t dev = nullptr;
  int major = 0, minor = 0;
  if (!n.why.empty() || !n.capability_sm || n.by_bus_id(bus_id.c_str(), &dev) != 0 ||
      n.capability_sm(dev, &major, &minor) != 0)
    return 0;
  return major * 10 + minor;
}

bool nvml_nvlinks(const std::string& bus_id, int sm, std::vector<TopoNvLink>* out, std::string* why) {
  out->clear();
  const Nvml& n = nvml();
  if (!n.why.empty()) {
    *why = n.why;
    return false;
  }
  nvmlDevice_t dev = nullptr;
  if (n.by_bus_id(bus_id.c_str(), &dev) != 0) {
    *why = "NVML does not know the GPU at " + bus_id;
    return false;
  }
  const unsigned links = sm < 60 ? 0 : sm < 70 ? 4 : sm < 80 ? 6 : sm < 90 ? 12 : 18;
  for (unsigned l = 0; l < links; ++l) {
    unsigned p2p = 0;
    if (n.capability(dev, l, kCapP2pSupported, &p2p) != 0 || !p2p || !link_up(n, dev, l, sm)) continue;
    nvmlPciInfo_t remote{};
    if (n.remote_pci(dev, l, &remote) != 0) continue;
    std::string target;
    for (char c : std::string(remote.busId, strnlen(remote.busId, sizeof remote.busId))) {
      if (!std::isprint(static_cast<unsigned char>(c))) {
        target.clear();
        break;
      }
      target += char(std::tolower(static_cast<unsigned char>(c)));
    }
    if (target.empty()) target = "fffffff:ffff:ff";  // not visible (NCCL's mark): an NVSwitch
    auto same = std::find_if(out->begin(), out->end(), [&](const TopoNvLink& t) { return t.target == target; });
    if (same != out->end()) {
      ++same->count;
      continue;
    }
    out->push_back({target, 1, nvlink_target_class(target)});
  }
  return true;
}

}  // namespace braid

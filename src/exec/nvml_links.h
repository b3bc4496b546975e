// A GPU's NVLinks as NVML reports them, for the topology NCCL_TOPO_DUMP_FILE
// writes (src/runtime/topo_dump.h).  NVML (libnvidia-ml.so.1, the driver's)
// is opened at run time, not linked: a machine without NVIDIA's driver has
// none, and braid runs there.  The walk is NCCL's (src/graph/xml.cc,
// ncclTopoGetXmlFromGpu): every link the GPU's generation may have (4 on
// sm60, 6 on sm70, 12 on sm80, 18 from sm90) that supports P2P and is up,
// counted by the PCI bus id at its far end; the far end's class from sysfs,
// or the NVSwitch's (0x068000) where sysfs does not show it.
#pragma once

#include <string>
#include <vector>

#include "src/transport/net/topo_xml.h"

namespace braid {

// The NVLinks of the GPU at `bus_id` with compute capability `sm` (90 for
// 9.0); false, with *why, where NVML is missing or does not know the GPU.
bool nvml_nvlinks(const std::string& bus_id, int sm, std::vector<TopoNvLink>* out, std::string* why);

// The compute capability NVML reports for the GPU at `bus_id` (90 for 9.0); 0 where unknown.
int nvml_gpu_sm(const std::string& bus_id);

// The far end's class, by sysfs under `root`: NVSwitch where not visible.
std::string nvlink_target_class(const std::string& target, const std::string& root = "/sys");

}  // namespace braid

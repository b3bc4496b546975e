// NCCL_TOPO_DUMP_FILE: as NCCL does, the rank NCCL_TOPO_DUMP_FILE_RANK names
// (default 0) writes its host's topology there at every init, in NCCL's XML
// (src/transport/net/topo_xml.h): the GPUs of the communicator's ranks on
// its host (their NVLinks from NVML where the driver's library is there)
// and the host's network devices.  `braid synth --topology FILE` and
// `braid topo FILE` read it, so a job run with braid yields the machine
// description that synthesizing a schedule for it needs.  A file that cannot
// be written is reported at INFO and init goes on, as NCCL's.  Host ranks
// (no GPU) give a file with the CPUs and network devices only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace braid {

struct TopoDumpRank {
  uint64_t host_hash = 0;
  std::string gpu_bus_id;  // "": no GPU (the host backend)
  int sm = 0;
};

// Called by every rank at init with the communicator's ranks (by rank):
// writes the file where this is the rank that dumps.
void dump_topology_if_asked(int rank, const std::vector<TopoDumpRank>& ranks);

// The file's text for `rank`'s host, by sysfs under `root`; NVLinks from
// NVML where `root` is the machine's own /sys.
std::string host_topology_of(int rank, const std::vector<TopoDumpRank>& ranks, const std::string& root = "/sys");

// The same for this machine without a communicator (`braid nics --xml`):
// every NVIDIA GPU sysfs lists, in bus id order as ranks 0, 1, ..., their
// compute capability and NVLinks from NVML where root is /sys (else sm 0).
std::string machine_topology(uint64_t host_hash, const std::string& root = "/sys");

}  // namespace braid

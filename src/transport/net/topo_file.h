// NCCL_TOPO_FILE: a topology in NCCL's XML that places PCI devices where
// sysfs cannot.  In a VM the PCI bus sysfs shows is flat (Azure's and AWS's
// GPU VMs), so every NIC looks as near to a GPU as every other; the vendors
// ship a file giving the real tree (Azure's ndv4/ndv5-topo.xml), and NCCL
// reads it, or, where NCCL_TOPO_FILE is unset, its own default path
// (/var/run/nvidia-topologyd/virtualTopology.xml) where that exists.
//
// braid reads it for one thing, the nearest NICs of a GPU or a NUMA node
// (nic_affinity.h): each <pci busid> of the file gets a path that the PCI
// hops there read, its <cpu> as the root ("pci-numa<id>") and then the bus
// ids of the <pci> nodes down to its own, and the NUMA node of that <cpu>.
// A device is matched by the PCI bus id its sysfs path ends in, a GPU by
// the bus id CUDA gives.  A file that cannot be read or parsed is warned of
// and left out (sysfs places everything, as without one); NCCL fails init
// on a file it cannot parse, which a hint is not worth here.
#pragma once

#include <map>
#include <string>

namespace braid {

struct FilePlace {
  std::string path;  // "/ncclTopoFile/pci-numa0/ffff:ff:01.0/0101:00:00.0"
  int numa_node = -1;
};
using TopologyPlaces = std::map<std::string, FilePlace>;  // by bus id, lower case

// The places NCCL's XML `text` gives; false, with *error, where it is not that.
bool topology_file_places(const std::string& text, TopologyPlaces* out, std::string* error);

// The file NCCL would read, read now (a communicator's init): NCCL_TOPO_FILE,
// else NCCL's default path where it exists; empty where none, or where it
// could not be read or parsed (warned).  *file is the one read ("": none).
TopologyPlaces topology_file(std::string* file);

// A bus id as sysfs and NCCL's files write it: lower case (CUDA gives upper).
std::string lower_bus_id(std::string bus_id);
// "BBBB:BB:DD.F" in hex: a PCI function's name in sysfs and NCCL's files (NCCL's checkBDFFormat).
bool is_pci_bus_id(const std::string& name);
// The bus id a sysfs device path ends in ("0101:00:00.0", lower case), "" where it ends in none.
std::string bus_id_of_path(const std::string& path);

}  // namespace braid

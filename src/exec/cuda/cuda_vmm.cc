#include "src/exec/cuda/cuda_vmm.h"

#include <cuda.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <vector>

#include "src/base/log.h"

namespace braid::vmm {
namespace {

// The driver functions braid uses, looked up once.
struct Driver {
  bool ok = false;
  decltype(&cuDeviceGet) DeviceGet = nullptr;
  decltype(&cuDeviceGetAttribute) DeviceGetAttribute = nullptr;
  decltype(&cuMemGetAllocationGranularity) GetAllocationGranularity = nullptr;
  decltype(&cuMemCreate) Create = nullptr;
  decltype(&cuMemRelease) Release = nullptr;
  decltype(&cuMemAddressReserve) AddressReserve = nullptr;
  decltype(&cuMemAddressFree) AddressFree = nullptr;
  decltype(&cuMemMap) Map = nullptr;
  decltype(&cuMemUnmap) Unmap = nullptr;
  decltype(&cuMemSetAccess) SetAccess = nullptr;
  decltype(&cuMemExportToShareableHandle) Export = nullptr;
  decltype(&cuMemImportFromShareableHandle) Import = nullptr;
  decltype(&cuMemRetainAllocationHandle) Retain = nullptr;
  decltype(&cuMemGetAddressRange) GetAddressRange = nullptr;
};

template <typename F>
bool lookup(const char* name, F* fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess || !p) {
    cudaGetLastError();
    return false;
  }
  *fn = reinterpret_cast<F>(p);
  return true;
}

const Driver& driver() {
  static const Driver d = [] {
    Driver d;
    d.ok = lookup("cuDeviceGet", &d.DeviceGet) && lookup("cuDeviceGetAttribute", &d.DeviceGetAttribute) &&
           lookup("cuMemGetAllocationGranularity", &d.GetAllocationGranularity) && lookup("cuMemCreate", &d.Create) &&
           lookup("cuMemRelease", &d.Release) && lookup("cuMemAddressReserve", &d.AddressReserve) &&
           lookup("cuMemAddressFree", &d.AddressFree) && lookup("cuMemMap", &d.Map) && lookup("cuMemUnmap", &d.Unmap) &&
           lookup("cuMemSetAccess", &d.SetAccess) && lookup("cuMemExportToShareableHandle", &d.Export) &&
           lookup("cuMemImportFromShareableHandle", &d.Import) && lookup("cuMemRetainAllocationHandle", &d.Retain) &&
           lookup("cuMemGetAddressRange", &d.GetAddressRange);
    return d;
  }();
  return d;
}

#define CU_TRY(expr)                                                                                              \
  do {                                                                                                            \
    CUresult r_ = (expr);                                                                                         \
    if (r_ != CUDA_SUCCESS) return BRAID_ERROR(ncclUnhandledCudaError, "{} failed: CUresult {}", #expr, int(r_)); \
  } while (0)

CUmemAllocationProp allocation_prop(CUdevice dev) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  int rdma = 0;
  driver().DeviceGetAttribute(&rdma, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, dev);
  prop.allocFlags.gpuDirectRDMACapable = rdma ? 1 : 0;
  return prop;
}

CUmemAccessDesc access_from(int device) {
  CUmemAccessDesc a{};
  a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  a.location.id = device;
  a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return a;
}

std::mutex mutex;
std::map<uintptr_t, size_t>& allocations() {            // address -> mapped bytes
  static auto* live = new std::map<uintptr_t, size_t>;  // never freed: used from exit paths
  return *live;
}

}  // namespace

bool available(int device) {
  const Driver& d = driver();
  CUdevice dev = 0;
  if (!d.ok || d.DeviceGet(&dev, device) != CUDA_SUCCESS) return false;
  int vmm = 0, fd = 0;
  d.DeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev);
  d.DeviceGetAttribute(&fd, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev);
  return vmm && fd;
}

uint64_t granularity(int device) {
  const Driver& d = driver();
  CUdevice dev = 0;
  size_t g = 0;
  if (!d.ok || d.DeviceGet(&dev, device) != CUDA_SUCCESS) return uint64_t(2) << 20;
  const CUmemAllocationProp prop = allocation_prop(dev);
  if (d.GetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) != CUDA_SUCCESS || g == 0)
    return uint64_t(2) << 20;
  return g;
}

Status alloc(int device, size_t bytes, void** out) {
  *out = nullptr;
  const Driver& d = driver();
  if (!available(device))
    return BRAID_ERROR(ncclInvalidUsage, "device {} cannot export cuMem allocations as POSIX descriptors", device);
  CUdevice dev = 0;
  CU_TRY(d.DeviceGet(&dev, device));
  const CUmemAllocationProp prop = allocation_prop(dev);
  const size_t g = granularity(device);
  const size_t size = (bytes + g - 1) / g * g;
  CUmemGenericAllocationHandle handle = 0;
  CU_TRY(d.Create(&handle, size, &prop, 0));
  CUdeviceptr p = 0;
  if (CUresult r = d.AddressReserve(&p, size, g, 0, 0); r != CUDA_SUCCESS) {
    d.Release(handle);
    return BRAID_ERROR(ncclUnhandledCudaError, "cuMemAddressReserve of {} bytes: CUresult {}", size, int(r));
  }
  CUresult r = d.Map(p, size, 0, handle, 0);
  d.Release(handle);  // the mapping keeps the memory until it is unmapped
  if (r == CUDA_SUCCESS) {
    // Readable and writable from this device and every device that can reach it.
    std::vector<CUmemAccessDesc> access{access_from(device)};
    int count = 0;
    cudaGetDeviceCount(&count);
    for (int peer = 0; peer < count; ++peer) {
      int can = 0;
      if (peer != device && cudaDeviceCanAccessPeer(&can, peer, device) == cudaSuccess && can)
        access.push_back(access_from(peer));
    }
    r = d.SetAccess(p, size, access.data(), access.size());
    if (r != CUDA_SUCCESS) d.Unmap(p, size);
  }
  if (r != CUDA_SUCCESS) {
    d.AddressFree(p, size);
    return BRAID_ERROR(ncclUnhandledCudaError, "mapping {} bytes of cuMem memory: CUresult {}", size, int(r));
  }
  std::lock_guard<std::mutex> lock(mutex);
  allocations()[uintptr_t(p)] = size;
  *out = reinterpret_cast<void*>(p);
  return Status::ok();
}

bool free(void* p) {
  size_t size = 0;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = allocations().find(reinterpret_cast<uintptr_t>(p));
    if (it == allocations().end()) return false;
    size = it->second;
    allocations().erase(it);
  }
  const Driver& d = driver();
  d.Unmap(CUdeviceptr(p), size);
  d.AddressFree(CUdeviceptr(p), size);
  return true;
}

Status describe(const void* p, size_t bytes, ExportedMemory* out) {
  *out = ExportedMemory{};
  const Driver& d = driver();
  if (!d.ok) return Status::ok();
  CUdeviceptr base = 0;
  size_t size = 0;
  if (d.GetAddressRange(&base, &size, CUdeviceptr(p)) != CUDA_SUCCESS) return Status::ok();  // not device memory
  const uint64_t offset = reinterpret_cast<uintptr_t>(p) - base;
  if (offset + bytes > size) return Status::ok();
  CUmemGenericAllocationHandle handle = 0;
  if (d.Retain(&handle, reinterpret_cast<void*>(base)) != CUDA_SUCCESS) return Status::ok();  // cudaMalloc's
  int fd = -1;
  const CUresult r = d.Export(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  d.Release(handle);
  if (r != CUDA_SUCCESS) {
    BRAID_INFO(kInit, "cuMem allocation at {:#x} cannot be exported as a POSIX descriptor (CUresult {})", base, int(r));
    return Status::ok();
  }
  *out = ExportedMemory{fd, true, offset, size};
  return Status::ok();
}

Status reserve(uint64_t bytes, uint64_t align, char** base) {
  *base = nullptr;
  const Driver& d = driver();
  if (!d.ok) return BRAID_ERROR(ncclUnhandledCudaError, "the CUDA driver has no cuMem entry points");
  CUdeviceptr p = 0;
  CU_TRY(d.AddressReserve(&p, bytes, align, 0, 0));
  *base = reinterpret_cast<char*>(p);
  return Status::ok();
}

void release(char* base, uint64_t bytes) { driver().AddressFree(CUdeviceptr(base), bytes); }

Status map(int device, int fd, uint64_t bytes, char* at) {
  const Driver& d = driver();
  CUmemGenericAllocationHandle handle = 0;
  CU_TRY(d.Import(&handle, reinterpret_cast<void*>(uintptr_t(fd)), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  CUresult r = d.Map(CUdeviceptr(at), bytes, 0, handle, 0);
  d.Release(handle);
  if (r == CUDA_SUCCESS) {
    const CUmemAccessDesc access = access_from(device);
    r = d.SetAccess(CUdeviceptr(at), bytes, &access, 1);
    if (r != CUDA_SUCCESS) d.Unmap(CUdeviceptr(at), bytes);
  }
  if (r != CUDA_SUCCESS)
    return BRAID_ERROR(ncclUnhandledCudaError, "mapping a peer's cuMem allocation ({} bytes) at {}: CUresult {}", bytes,
                       static_cast<void*>(at), int(r));
  return Status::ok();
}

void unmap(char* at, uint64_t bytes) { driver().Unmap(CUdeviceptr(at), bytes); }

}  // namespace braid::vmm

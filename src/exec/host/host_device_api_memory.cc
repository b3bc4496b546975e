// The device API's memory on the host backend (src/exec/device_api_memory.h):
// the "device" is the CPU, so NCCL's structs are plain memory, shareable
// allocations are ncclMemAlloc's memfds (src/transport/host_memory.h), and
// the flat range is an inaccessible reservation (PROT_NONE, no swap
// reserved) into which the peers' memfds are mapped with MAP_FIXED.
// Unmapping puts the reservation back, so that nothing else the process
// maps can land inside the range.
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "src/base/env.h"
#include "src/exec/device_api_memory.h"
#include "src/transport/host_memory.h"

namespace braid {
namespace {

constexpr int kReserved = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;

class HostDeviceApiMemory final : public DeviceApiMemory {
 public:
  const char* name() const override { return "host"; }
  uint64_t granularity() const override { return page_size(); }
  uint64_t capacity() const override { return uint64_t(sysconf(_SC_PHYS_PAGES)) * page_size(); }
  uint64_t memory_id() const override { return 0; }  // the LSA peers are on this host: all share it

  bool can_share() const override { return true; }
  const devapi::GinMemoryOps* gin_ops() const override {
    return env_int("BRAID_TEST_GIN_AS_DEVICE") == 1 ? &devapi::host_gin_memory_as_device()
                                                    : &devapi::host_gin_memory();
  }
  Status describe(const void* p, size_t bytes, ExportedMemory* out) override {
    const SharedHandle h = host_shared_handle(p, bytes);
    *out = ExportedMemory{};
    if (h.fd < 0) return Status::ok();
    *out = ExportedMemory{h.fd, false, h.offset, h.allocation_bytes};
    return Status::ok();
  }

  Status reserve(uint64_t bytes, uint64_t align, char** base) override {
    *base = nullptr;
    void* p = mmap(nullptr, bytes + align, PROT_NONE, kReserved, -1, 0);
    if (p == MAP_FAILED)
      return BRAID_ERROR(ncclSystemError, "cannot reserve {} bytes of address space: {}", bytes, std::strerror(errno));
    // Keep the aligned part and give back the rest.
    const uintptr_t start = reinterpret_cast<uintptr_t>(p);
    const uintptr_t aligned = (start + align - 1) / align * align;
    if (aligned > start) munmap(p, aligned - start);
    if (const uintptr_t tail = start + bytes + align - (aligned + bytes))
      munmap(reinterpret_cast<void*>(aligned + bytes), tail);
    *base = reinterpret_cast<char*>(aligned);
    return Status::ok();
  }
  void release(char* base, uint64_t bytes) override { munmap(base, bytes); }

  Status map(int fd, uint64_t bytes, char* at) override {
    void* p = mmap(at, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
    if (p == MAP_FAILED)
      return BRAID_ERROR(ncclSystemError, "mapping {} bytes of shareable memory at {}: {}", bytes,
                         static_cast<void*>(at), std::strerror(errno));
    return Status::ok();
  }
  void unmap(char* at, uint64_t bytes) override { mmap(at, bytes, PROT_NONE, kReserved | MAP_FIXED, -1, 0); }

  Status alloc_shareable(size_t bytes, void** out) override { return host_shared_alloc(bytes, out); }
  void free_shareable(void* p) override { host_shared_free(p); }
  Status zero(void* p, size_t bytes) override {
    std::memset(p, 0, bytes);
    return Status::ok();
  }

  Status struct_alloc(size_t bytes, void** out) override {
    *out = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!*out) return BRAID_ERROR(ncclSystemError, "out of memory for {} bytes of device API structs", bytes);
    std::memset(*out, 0, bytes);
    return Status::ok();
  }
  Status struct_write(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
    return Status::ok();
  }
  void struct_free(void* p) override { std::free(p); }

  Status host_register(void* p, size_t, void** device) override {
    *device = p;  // the "device" is this host
    return Status::ok();
  }
  void host_unregister(void*) override {}
};

}  // namespace

DeviceApiMemory& host_device_api_memory() {
  static auto* memory = new HostDeviceApiMemory;  // never freed: used from exit paths
  return *memory;
}

}  // namespace braid

#include "src/base/mapped_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace braid {

bool range_is_mapped(const void* p, size_t bytes) {
  if (bytes == 0) return true;
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t start = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + bytes;
  if (end < start) return false;  // wraps around the address space
  // A chunk of pages at a time, so a large buffer needs no large vector.
  constexpr uintptr_t kChunkPages = 4096;
  unsigned char residency[kChunkPages];
  for (uintptr_t at = start; at < end; at += kChunkPages * page) {
    const uintptr_t len = end - at < kChunkPages * page ? end - at : kChunkPages * page;
    if (mincore(reinterpret_cast<void*>(at), len, residency) != 0 && errno == ENOMEM) return false;
  }
  return true;
}

}  // namespace braid

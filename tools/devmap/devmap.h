// What libbraid-devmap.so's parts share: the real CUDA runtime's functions
// (the next definitions after this library) and whether it maps devices.
#pragma once

#include <dlfcn.h>

#include <cstdio>

namespace devmap {

// The real runtime's function `name`.
template <typename F>
F real(const char* name) {
  static_assert(sizeof(F) == sizeof(void*));
  void* p = dlsym(RTLD_NEXT, name);
  if (!p)
    std::fprintf(stderr, "libbraid-devmap: no %s after this library (is the program linked to libcudart.so?)\n", name);
  return reinterpret_cast<F>(p);
}

// BRAID_DEVICES: how many devices the program sees (0: no mapping).
int virtual_count();
inline bool mapping() { return virtual_count() > 0; }
int real_count();  // the devices there are
// Several of the indices the program sees on one real device: ranks that
// are threads then share that device's context.
inline bool shares_devices() { return mapping() && virtual_count() > real_count(); }

}  // namespace devmap

#define REAL(fn) static const auto real_##fn = devmap::real<decltype(&fn)>(#fn)

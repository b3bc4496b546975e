// NCCL 2.32's device API, the bytes that changed from 2.31's
// (src/devapi/abi_v23100.h) for kernels built against 2.32.0-2.32.3's
// headers.  Their requirements (120 bytes) and devComm (248) are 2.31's;
// what they read differently:
//  - GIN proxy contexts of version 3: 2.31's 72 bytes and
//    flushesAllPutsOnAnySignal (whether every put received is visible once
//    any signal arrives, which lets a barrier skip per-peer flushes; braid's
//    proxy promises it not), 80 bytes, in an array of that stride (NCCL
//    gives them to kernels of 2.32.0 and later: its src/gin/gin_host.cc,
//    proxyBackendMinVersions);
//  - windows of 96 bytes: winFlags (the registration flags) in 2.31's
//    padding at 36, and the Compute Fabric Transport's ucLeIdBase at 88
//    (invalid without CFT);
//  - properties of 152 bytes: three CFT flags at 144-146.
// Descriptors are 2.31's (GFD version 2, 128 bytes).  Read from NVIDIA's
// v2.32.3-1 release (github NVIDIA/nccl at 12df1a11: nccl_device/host.h,
// impl/core__types.h, gin/proxy/gin_proxy.h) and the commit that brought
// the version-3 context (3d78f78b, gin_proxy_device_host_common.h); sizes
// measured by an nvcc probe of those headers; nothing of them is committed.
//
// 2.32.4 changed the device ABI again (requirements grew for
// NCCL_GIN_CONNECTION_CUSTOM_ARRAY, GIN barriers of a one-rank team take
// two signals), and NVIDIA's 2.32.4-2.32.6 headers were not at hand whole:
// braid does not serve them (device_comm.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "src/devapi/abi_v23000.h"

namespace braid::devapi::v23200 {

constexpr uint32_t kFirst = 23200, kLast = 23203;  // 2.32.0-2.32.3
constexpr int kProxyContextVersion = 3;           // NCCL_GIN_PROXY_GPU_CONTEXT_VERSION

struct GinProxyGpuCtx {  // ncclGinProxyGpuCtx_t of 2.32
  v23000::GinProxyGpuCtx v23000;
  bool flushesAllPutsOnAnySignal;
};

struct WindowVidmem {  // ncclWindow_vidmem of 2.32 (winFlags: v22809's padding at 36)
  v23000::WindowVidmem v23000;
  uint32_t ucLeIdBase;
};

static_assert(sizeof(GinProxyGpuCtx) == 80 && offsetof(GinProxyGpuCtx, flushesAllPutsOnAnySignal) == 72);
static_assert(sizeof(WindowVidmem) == 96 && offsetof(WindowVidmem, ucLeIdBase) == 88 &&
              offsetof(WindowVidmem, v23000.v22809.winFlags) == 36);

}  // namespace braid::devapi::v23200

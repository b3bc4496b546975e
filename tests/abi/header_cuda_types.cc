// braid's nccl.h, like NVIDIA's, brings CUDA's half, bfloat16 and fp8 types
// (and with them memcpy) to a client that includes nothing else: NCCL's own
// examples (examples/common/src/utils.cc) build on that.  This file includes
// only nccl.h; that it compiles is most of the test, the rest checks that
// the types it names are CUDA's.
#include "nccl.h"

#include <cstdio>

int main() {
  const __half h = __float2half(1.5f);
  const __nv_bfloat16 b = __float2bfloat16(-2.0f);
  const __nv_fp8_e4m3 e(0.5f);
  float back[3] = {__half2float(h), __bfloat162float(b), float(e)};
  float copy[3];
  memcpy(copy, back, sizeof(copy));  // declared through nccl.h, as with NVIDIA's
  if (copy[0] != 1.5f || copy[1] != -2.0f || copy[2] != 0.5f) {
    std::fprintf(stderr, "FAIL: %g %g %g, want 1.5 -2 0.5\n", copy[0], copy[1], copy[2]);
    return 1;
  }
  std::printf("PASS: nccl.h brings __half, __nv_bfloat16, __nv_fp8_e4m3 and memcpy\n");
  return 0;
}

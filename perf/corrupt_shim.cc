// A test library for perf_nccl_tests_compat: preloaded into a perf tool, it
// passes each ncclAllReduce on to the real one and then, when
// BRAID_PERF_TEST_CORRUPT is set, flips the first byte of the result (host
// buffers: BRAID_BACKEND=host), so the tool's data check must fail.  With
// BRAID_PERF_TEST_HANG=<seconds> each call first sleeps that long: a call
// that hangs, for -T.  With BRAID_PERF_TEST_LOG set, each call writes
// "ncclAllReduce send=<address> recv=<address> count=<count>" on stderr.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "nccl.h"

extern "C" ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                                      ncclComm_t comm, cudaStream_t stream) {
  using Real = ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
  static const Real real = reinterpret_cast<Real>(dlsym(RTLD_NEXT, "ncclAllReduce"));
  if (std::getenv("BRAID_PERF_TEST_LOG"))
    std::fprintf(stderr, "ncclAllReduce send=%p recv=%p count=%zu\n", send, recv, count);
  if (const char* hang = std::getenv("BRAID_PERF_TEST_HANG")) sleep(unsigned(std::atoi(hang)));
  const ncclResult_t r = real(send, recv, count, type, op, comm, stream);
  if (r == ncclSuccess && count > 0 && std::getenv("BRAID_PERF_TEST_CORRUPT")) *static_cast<unsigned char*>(recv) ^= 1;
  return r;
}

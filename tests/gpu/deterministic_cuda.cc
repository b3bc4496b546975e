// BRAID_DETERMINISTIC on the CUDA backend: AllReduce, ReduceScatter and
// Reduce on device buffers give, bit for bit, the rank-order fold the host
// test checks (tests/mp/rank_order_fold.h), on the LL path (small calls) and
// on the chain schedule (the rest; or what BRAID_ALGO names, where it folds
// in rank order), in and out of place, float, bfloat16,
// half and double sums and float max.  Holding both backends to one
// reference also shows they compute the same bits.
//
//   braid_gpu_deterministic NRANKS threads|processes [pinned]
//
// Each call's input is copied to the device, and its output back, on the
// rank's stream before it is synchronised, from pageable host memory, or
// with `pinned` from cudaMallocHost memory.  Thread ranks share one
// context, where a pageable copy may wait for the stream's earlier work
// (CUDA's API notes: "the driver may synchronize with the stream" to stage
// it): the two modes tell a failure that comes from that apart from one in
// braid's kernels.
//
// Run with BRAID_DETERMINISTIC=1 (ctest and scripts/device-check set it).
// A failure says when (seconds since start), in or out of place, and what a
// wrong element holds: an out-of-place output is filled with a canary before
// each call, so an output the call never wrote is told apart from a fold
// that missed one rank's input (thread ranks on one H200 failed here, cause
// not found: perf/results/cuda_h200/20261204).
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "../mp/rank_order_fold.h"
#include "nccl.h"
#include "rank_runner.h"

using namespace rank_order;

namespace {

enum class Coll { AllReduce, ReduceScatter, Reduce };
constexpr size_t kCounts[] = {13, 1000, 5001, 70000, 300001};  // LL up to 64 KiB, then the schedule
constexpr size_t kMaxCount = 300001;

struct Kind {
  ncclDataType_t type;
  ncclRedOp_t op;
};
constexpr Kind kKinds[] = {{ncclFloat32, ncclSum}, {ncclBfloat16, ncclSum}, {ncclFloat16, ncclSum},
                           {ncclFloat64, ncclSum}, {ncclFloat32, ncclMax}};

bool g_pinned = false;  // the host side in cudaMallocHost memory (else pageable)

const auto kStart = std::chrono::steady_clock::now();
double seconds_since_start() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - kStart).count();
}

constexpr int kCanaryByte = 0xA5;  // an out-of-place output before the call

// What a wrong element holds, so that a failure says which way it went:
// the canary (the call never wrote it), the fold without one rank's input
// (that rank's contribution was stale or missing), or something else.
std::string what_it_holds(ncclDataType_t t, ncclRedOp_t op, int n, size_t i, uint64_t got, size_t es) {
  uint64_t canary = 0;
  std::memset(&canary, kCanaryByte, es);
  if (got == canary) return "the canary: never written";
  for (int missing = 0; missing < n; ++missing) {
    const int first = missing == 0 ? 1 : 0;
    uint64_t acc = input_bits(t, op, first, i);
    for (int r = first + 1; r < n; ++r)
      if (r != missing) acc = combine(t, op, acc, input_bits(t, op, r, i));
    if (n > 1 && acc == got) return "the fold without rank " + std::to_string(missing) + "'s input";
  }
  return "neither the canary nor the fold without one rank";
}

// One call; the number of elements that differ from the rank-order fold
// (-1: a call failed, said on stderr).
// The host side of a call: its input and output, in pageable or pinned
// memory (`pinned`, the program's third argument).
struct HostSide {
  char* input;
  char* output;
};

long run_case(int rank, int n, ncclComm_t comm, cudaStream_t stream, char* dev, char* dev_out, HostSide side,
              Coll coll, size_t count, Kind k, bool in_place) {
  const size_t es = size_of(k.type), N = size_t(n);
  const size_t send_elems = coll == Coll::ReduceScatter ? N * count : count;
  const size_t in_bytes = send_elems * es, out_bytes = count * es;
  for (size_t i = 0; i < send_elems; ++i) {
    const uint64_t v = input_bits(k.type, k.op, rank, i);
    std::memcpy(side.input + i * es, &v, es);
  }
  char* send = dev;
  char* recv = in_place ? (coll == Coll::ReduceScatter ? dev + size_t(rank) * count * es : dev) : dev_out;
  const int root = n - 1;
  auto fail = [&](const char* what, const char* why) {
    std::fprintf(stderr, "%.3f s: rank %d: %s (coll %d, count %zu, type %d, op %d, %s): %s\n", seconds_since_start(),
                 rank, what, int(coll), count, int(k.type), int(k.op), in_place ? "in place" : "out of place", why);
    return -1L;
  };
  if (cudaError_t e = cudaMemcpyAsync(send, side.input, in_bytes, cudaMemcpyHostToDevice, stream))
    return fail("cudaMemcpyAsync", cudaGetErrorString(e));
  if (!in_place)
    if (cudaError_t e = cudaMemsetAsync(recv, kCanaryByte, out_bytes, stream))
      return fail("cudaMemsetAsync", cudaGetErrorString(e));
  ncclResult_t r = ncclSuccess;
  switch (coll) {
    case Coll::AllReduce: r = ncclAllReduce(send, recv, count, k.type, k.op, comm, stream); break;
    case Coll::ReduceScatter: r = ncclReduceScatter(send, recv, count, k.type, k.op, comm, stream); break;
    case Coll::Reduce: r = ncclReduce(send, recv, count, k.type, k.op, root, comm, stream); break;
  }
  if (r != ncclSuccess) return fail("the collective", ncclGetLastError(comm));
  if (cudaError_t e = cudaMemcpyAsync(side.output, recv, out_bytes, cudaMemcpyDeviceToHost, stream))
    return fail("cudaMemcpyAsync", cudaGetErrorString(e));
  if (cudaError_t e = cudaStreamSynchronize(stream)) return fail("cudaStreamSynchronize", cudaGetErrorString(e));
  if (coll == Coll::Reduce && rank != root) return 0;
  const size_t first = coll == Coll::ReduceScatter ? size_t(rank) * count : 0;
  long wrong = 0, untouched = 0;
  std::string first_wrong;
  for (size_t i = 0; i < count; ++i) {
    const uint64_t got = load_bits(side.output, i, es), want = rank_order_fold(k.type, k.op, n, first + i);
    if (got == want) continue;
    const std::string holds = what_it_holds(k.type, k.op, n, first + i, got, es);
    untouched += holds.rfind("the canary", 0) == 0;
    if (wrong++ == 0)
      first_wrong = "element " + std::to_string(i) + " holds " + holds + " (got " + std::to_string(got) + ", want " +
                    std::to_string(want) + ")";
  }
  if (wrong)
    fail("not the rank-order fold", (std::to_string(wrong) + " elements, " + std::to_string(untouched) +
                                     " of them never written; first: " + first_wrong).c_str());
  // What the kernels said, the first time they said it (a wait that timed
  // out names the peer and the place; later calls only refuse).
  ncclResult_t async = ncclSuccess;
  if (ncclCommGetAsyncError(comm, &async) == ncclSuccess && async != ncclSuccess)
    return fail("the kernels failed", ncclGetLastError(comm));
  return wrong;
}

int rank_main(int rank, int n, ncclUniqueId id) {
  ncclComm_t comm = nullptr;
  if (init_rank_on_device(rank, n, id, &comm) != 0) return 1;
  cudaStream_t stream;
  CHECK_OR_FAIL(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  char *dev = nullptr, *dev_out = nullptr;
  CHECK_OR_FAIL(cudaMalloc(&dev, size_t(n) * kMaxCount * 8));
  CHECK_OR_FAIL(cudaMalloc(&dev_out, kMaxCount * 8));
  std::vector<char> pageable_in, pageable_out;
  HostSide side{};
  if (g_pinned) {
    CHECK_OR_FAIL(cudaMallocHost(&side.input, size_t(n) * kMaxCount * 8));
    CHECK_OR_FAIL(cudaMallocHost(&side.output, kMaxCount * 8));
  } else {
    pageable_in.resize(size_t(n) * kMaxCount * 8);
    pageable_out.resize(kMaxCount * 8);
    side = {pageable_in.data(), pageable_out.data()};
  }
  if (!thread_ranks_meet()) return 1;  // no rank allocates while a peer's kernel waits
  int failed = 0;
  for (Coll coll : {Coll::AllReduce, Coll::ReduceScatter, Coll::Reduce})
    for (Kind k : kKinds)
      for (size_t count : kCounts)
        for (bool in_place : {false, true})
          failed += run_case(rank, n, comm, stream, dev, dev_out, side, coll, count, k, in_place) != 0;
  if (!thread_ranks_meet()) return 1;
  if (g_pinned) {
    CHECK_OR_FAIL(cudaFreeHost(side.input));
    CHECK_OR_FAIL(cudaFreeHost(side.output));
  }
  CHECK_OR_FAIL(cudaFree(dev));
  CHECK_OR_FAIL(cudaFree(dev_out));
  CHECK_OR_FAIL(cudaStreamDestroy(stream));
  CHECK_OR_FAIL(ncclCommDestroy(comm));
  return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  g_pinned = argc > 3 && std::string(argv[3]) == "pinned";
  return run_gpu_ranks(argc, argv, rank_main,
                       g_pinned ? "reductions folded in rank order (BRAID_DETERMINISTIC), pinned host buffers"
                                : "reductions folded in rank order (BRAID_DETERMINISTIC)");
}

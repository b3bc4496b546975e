// MoE dispatch and combine on CUDA communicators (issue 40): braid's kernels
// (src/moe/cuda/) under the host backend's exact checks (tests/moe/
// moe_layer.h), ranks as threads or processes on the GPUs there are.
//
//   braid_gpu_moe NRANKS threads|processes layers|graph|timeout|bad_expert|bad_args|alltoallv [pinned]
//
// layers:  random cases (every element type, both layouts, skew, masked
//          choices, cold experts, ranks with no tokens), a capacity
//          overflow, 100 back-to-back layers, and the issue's shape (128
//          tokens per rank, hidden 7168, top-8, 256 experts, bf16), and
//          random cases and the issue's shape with zero-copy dispatch and
//          combine: every received row, count and combined element
//          bitwise, and the statistics exactly (bytes on the wire,
//          signals, fences).
// graph:   one dispatch+combine captured in a CUDA graph, replayed 20 times
//          with new tokens and routings copied into the captured buffers:
//          counts and combined tokens exact each time, and the statistics
//          count 20 calls, L signal words per destination per call.
// timeout: the last rank never dispatches; the others' kernels give up
//          within the handle's timeout and braidMoeGetAsyncError says
//          ncclTimeout, then every rank destroys its handle.
// bad_expert: the first and last ranks' dispatches route a token to an
//          expert out of range: every rank's dispatch fails within 10 s (the
//          handle's bound is 20 s), those two with ncclInvalidArgument naming
//          the token, the others with ncclRemoteError; then every rank
//          destroys its handle.
// bad_args: the same with numTokens out of range, which the host refuses
//          (and still launches the kernel that tells the peers).
// alltoallv: braidAlltoAllv on the same ranks (tests/moe/alltoallv_calls.h's
//          exact checks: counts drawn anew each call, zeros and full
//          blocks), every element size; then a send count out of range on
//          rank 0, which every rank's braidAlltoAllvGetAsyncError reports
//          (rank 0 ncclInvalidArgument, the others ncclRemoteError).
// Exit 0 when every check holds.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "alltoallv_calls.h"
#include "moe_layer.h"
#include "rank_runner.h"

using namespace moe_test;

namespace {

// moe_layer.h's Side for a CUDA communicator: device copies of the inputs,
// device outputs (prefilled with the host's garbage) copied back in done().
// Allocated and freed stream-ordered: a cudaMalloc or cudaFree that waited
// for the device would wait for a peer rank's kernel (threads share the
// GPU's context), which may be waiting for this rank's next call.  One
// stream per rank for the rank's life (rank_stream): the driver maps streams
// onto its hardware queues in turn (CUDA_DEVICE_MAX_CONNECTIONS, at most
// 32), so with a stream made for every case, two ranks' streams could come
// to share a queue, one rank's kernel queued behind the other's, which
// waits for it.  (Thread ranks timed out on an H200 on 2026-12-04 before
// and after this change: not the only cause.)
cudaStream_t rank_stream() {
  struct Owned {
    cudaStream_t stream = nullptr;
    Owned() { cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); }
    ~Owned() { cudaStreamDestroy(stream); }
  };
  thread_local Owned owned;  // a rank is a thread (or the process's one)
  return owned.stream;
}

// `pinned` (the program's fourth argument): the host side's copies go
// through pinned memory of the rank's own (a bump arena, reset once the
// rank's stream is synchronised; chunks never freed, as cudaFreeHost would
// wait for the device), else straight from and to pageable memory, which
// the driver may stage by waiting for the stream, so for a kernel that
// waits for a peer.  Thread ranks failed on an H200 with pageable copies
// (perf/results/cuda_h200/20261204): the two modes tell whether those
// copies are the cause.
bool g_pinned = false;
class PinnedArena {
 public:
  void* take(size_t bytes) {
    bytes = (bytes + 255) & ~size_t(255);
    if (chunks_.empty() || used_ + bytes > size_) {
      size_ = std::max<size_t>(bytes, 2 * size_);
      void* p = nullptr;
      if (cudaHostAlloc(&p, size_, cudaHostAllocDefault) != cudaSuccess) return nullptr;
      chunks_.push_back(p);
      used_ = 0;
    }
    void* p = static_cast<char*>(chunks_.back()) + used_;
    used_ += bytes;
    return p;
  }
  void reset() { used_ = 0; }  // the stream is synchronised: nothing reads or writes the arena

 private:
  std::vector<void*> chunks_;
  size_t size_ = 0, used_ = 0;
};
PinnedArena& rank_arena() {
  thread_local PinnedArena arena;  // a rank is a thread (or the process's one)
  return arena;
}

class GpuSide {
 public:
  GpuSide() : stream_(rank_stream()) {}
  ~GpuSide() {
    release();
    cudaStreamSynchronize(stream_);  // the stream outlives this side: its frees are done
    rank_arena().reset();
  }
  const void* in(const void* p, size_t bytes) {
    void* d = alloc(bytes);
    if (d) cudaMemcpyAsync(d, staged(p, bytes), bytes, cudaMemcpyHostToDevice, stream_);
    return d;
  }
  void* out(void* p, size_t bytes) {
    void* d = alloc(bytes);
    if (d) cudaMemcpyAsync(d, staged(p, bytes), bytes, cudaMemcpyHostToDevice, stream_);
    outs_.push_back({p, d, bytes, nullptr});
    return d;
  }
  cudaStream_t stream() const { return stream_; }
  bool done(mp::Failures& f) {
    for (Out& o : outs_) {
      if (!o.device) continue;
      if (g_pinned) o.landing = rank_arena().take(o.bytes);
      cudaMemcpyAsync(o.landing ? o.landing : o.host, o.device, o.bytes, cudaMemcpyDeviceToHost, stream_);
    }
    const cudaError_t e = cudaStreamSynchronize(stream_);
    for (const Out& o : outs_)
      if (o.device && o.landing) std::memcpy(o.host, o.landing, o.bytes);
    release();
    rank_arena().reset();
    if (e != cudaSuccess) f.fail(std::string("cudaStreamSynchronize: ") + cudaGetErrorString(e));
    return e == cudaSuccess;
  }
  void to(void* place, const void* host, size_t bytes) {
    cudaMemcpyAsync(place, staged(host, bytes), bytes, cudaMemcpyHostToDevice, stream_);
  }
  void from(void* host, const void* place, size_t bytes) {
    void* landing = g_pinned && bytes ? rank_arena().take(bytes) : nullptr;
    cudaMemcpyAsync(landing ? landing : host, place, bytes, cudaMemcpyDeviceToHost, stream_);
    cudaStreamSynchronize(stream_);
    if (landing) std::memcpy(host, landing, bytes);
    rank_arena().reset();
  }
  void sum(ncclComm_t comm, double* v, mp::Failures& f) {
    double* d = static_cast<double*>(out(v, sizeof(double)));  // reduced in place, copied back by done()
    MP_NCCL(f, ncclAllReduce(d, d, 1, ncclFloat64, ncclSum, comm, stream_));
    done(f);
  }

 private:
  struct Out {
    void* host;
    void* device;
    size_t bytes;
    void* landing;  // pinned (taken in done()), or null: straight into host
  };
  // `p`'s bytes where the copy reads them: p itself, or a pinned copy.
  const void* staged(const void* p, size_t bytes) {
    if (!g_pinned || !bytes) return p;
    void* pinned = rank_arena().take(bytes);
    if (!pinned) return p;
    std::memcpy(pinned, p, bytes);
    return pinned;
  }
  void* alloc(size_t bytes) {
    void* d = nullptr;
    if (bytes && cudaMallocAsync(&d, bytes, stream_) != cudaSuccess) return nullptr;
    if (d) owned_.push_back(d);
    return d;
  }
  void release() {
    for (void* d : owned_) cudaFreeAsync(d, stream_);
    owned_.clear();
    outs_.clear();
  }
  cudaStream_t stream_ = nullptr;
  std::vector<void*> owned_;
  std::vector<Out> outs_;
};

void say_async_error(braidMoe_t moe, ncclComm_t comm, int rank, mp::Failures& f) {
  ncclResult_t async = ncclSuccess;
  MP_NCCL(f, braidMoeGetAsyncError(moe, &async));
  if (async != ncclSuccess) f.fail(fmt::format("rank {}: the kernels failed: {}", rank, ncclGetLastError(comm)));
}

// `layers` layers of case c, checked as the host backend's are.
void run_case(const Case& c, int layers, int rank, int n, ncclComm_t comm, mp::Failures& f, bool expect_drops = false) {
  braidMoeConfig_t cfg = config_of(c);
  braidMoe_t moe = nullptr;
  MP_NCCL(f, braidMoeCreate(comm, &cfg, &moe));
  if (!moe) return;
  const int before = f.count;
  GpuSide side;
  Expected x;
  for (int layer = 0; layer < layers; ++layer)
    if (!run_layer(c, rank, n, moe, layer, f, &x, side)) break;
  say_async_error(moe, comm, rank, f);
  if (f.count == before) check_stats(moe, x, f, rank);
  if (expect_drops && f.count == before) {
    double all = double(x.dropped);
    side.sum(comm, &all, f);
    if (all <= 0) f.fail(fmt::format("rank {}: the case dropped no row; it was meant to overflow", rank));
  }
  if (f.count != before) std::fprintf(stderr, "rank %d: case %s\n", rank, describe(c).c_str());
  MP_NCCL(f, braidMoeDestroy(moe));
}

Case issue_shape() {
  Case c;
  c.experts = 256;
  c.top_k = 8;
  c.hidden = 7168;
  c.max_tokens = 128;
  c.tile = 1;
  c.dtype = ncclBfloat16;
  c.blocks = 8;
  return c;
}

int layers_mode(int rank, int n, ncclComm_t comm, mp::Failures& f) {
  for (uint64_t seed = 1; seed <= 12 && f.count == 0; ++seed) {
    Case c = random_case(n, seed);
    c.blocks = 1 + int(seed % 8);
    run_case(c, 3, rank, n, comm, f);
  }
  Case overflow;
  overflow.experts = 2 * n;
  overflow.top_k = 2;
  overflow.factor = 0.5f;
  overflow.skew = 0.9;
  overflow.dtype = ncclBfloat16;
  if (f.count == 0) run_case(overflow, 4, rank, n, comm, f, /*expect_drops=*/true);
  Case many;
  many.experts = n;
  many.empty_ranks = true;
  many.blocks = 4;
  if (f.count == 0) run_case(many, 100, rank, n, comm, f);
  if (f.count == 0) run_case(issue_shape(), 3, rank, n, comm, f);
  // Zero-copy: the sources read their results in the owners' buffers over
  // LSA, and the owners their rows in the sources' buffers, or some ranks
  // put them (by rank and layer: zero_copy 3, zero_copy_dispatch 2).
  for (int zero_copy = 1; zero_copy <= 3 && f.count == 0; ++zero_copy) {
    Case c = random_case(n, uint64_t(50 + zero_copy));
    c.zero_copy = zero_copy;
    c.zero_copy_dispatch = zero_copy % 2 + 1;
    run_case(c, 6, rank, n, comm, f);
  }
  Case zero_copy_issue = issue_shape();
  zero_copy_issue.zero_copy = 1;
  zero_copy_issue.zero_copy_dispatch = 1;
  if (f.count == 0) run_case(zero_copy_issue, 3, rank, n, comm, f);
  return f.count;
}

// Every rank sends all max_tokens tokens, each to top_k distinct experts
// (a graph captures the token count with the call).
Routing full_routing(const Case& c, int rank, int layer) {
  Rng rng{mix(c.seed * 31 + uint64_t(rank) * 7919 + uint64_t(layer) * 104729)};
  Routing r;
  r.tokens = c.max_tokens;
  r.topk.assign(size_t(c.max_tokens) * c.top_k, -1);
  for (int t = 0; t < c.max_tokens; ++t)
    for (int k = 0; k < c.top_k; ++k) {
      int32_t* row = &r.topk[size_t(t) * c.top_k];
      bool fresh = false;
      while (!fresh) {
        row[k] = rng.below(c.experts);
        fresh = true;
        for (int j = 0; j < k; ++j) fresh = fresh && row[j] != row[k];
      }
    }
  return r;
}

// One rank's captured dispatch+combine, replayed with new inputs; the
// experts are the identity (combine reads the dispatch output), so token t
// comes back as token t times the weights of its sent choices.
int graph_mode(int rank, int n, ncclComm_t comm, mp::Failures& f) {
  Case c;
  c.experts = 4 * n;
  c.top_k = 4;
  c.hidden = 256;
  c.max_tokens = 64;
  c.tile = 8;
  c.dtype = ncclBfloat16;
  c.blocks = 4;
  constexpr int kReplays = 20;
  braidMoeConfig_t cfg = config_of(c);
  braidMoe_t moe = nullptr;
  MP_NCCL(f, braidMoeCreate(comm, &cfg, &moe));
  if (!moe) return f.count;
  void* buffer = nullptr;  // only with braidMoeZeroCopyCombine in config.zeroCopy
  if (braidMoeGetCombineBuffer(moe, &buffer) != ncclInvalidUsage || buffer)
    f.fail(fmt::format("rank {}: braidMoeGetCombineBuffer without zeroCopy was not refused", rank));
  size_t max_rows = 0;
  int capacity = 0;
  MP_NCCL(f, braidMoeGetInfo(moe, &max_rows, &capacity));
  const int K = c.top_k, H = c.hidden, L = c.experts / n;
  const size_t row_bytes = size_t(H) * 2;
  cudaStream_t stream = rank_stream();
  void *tokens, *recv, *out;
  int32_t *topk, *counts;
  float* weights;
  CHECK_OR_FAIL(cudaMallocAsync(&tokens, size_t(c.max_tokens) * row_bytes, stream));
  CHECK_OR_FAIL(cudaMallocAsync(reinterpret_cast<void**>(&topk), size_t(c.max_tokens) * K * 4, stream));
  CHECK_OR_FAIL(cudaMallocAsync(reinterpret_cast<void**>(&weights), size_t(c.max_tokens) * K * 4, stream));
  CHECK_OR_FAIL(cudaMallocAsync(&recv, max_rows * row_bytes, stream));
  CHECK_OR_FAIL(cudaMallocAsync(reinterpret_cast<void**>(&counts), size_t(n) * L * 4, stream));
  CHECK_OR_FAIL(cudaMallocAsync(&out, size_t(c.max_tokens) * row_bytes, stream));
  CHECK_OR_FAIL(cudaStreamSynchronize(stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK_OR_FAIL(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  MP_NCCL(f, braidMoeDispatch(moe, tokens, topk, c.max_tokens, recv, counts, nullptr, stream));
  MP_NCCL(f, braidMoeCombine(moe, recv, weights, out, stream));
  CHECK_OR_FAIL(cudaStreamEndCapture(stream, &graph));
  CHECK_OR_FAIL(cudaGraphInstantiate(&exec, graph, 0));
  CHECK_OR_FAIL(cudaGraphUpload(exec, stream));  // no allocation left for the first replay (tests/gpu/rma_cuda.cc)
  CHECK_OR_FAIL(cudaStreamSynchronize(stream));
  if (!thread_ranks_meet()) f.fail(fmt::format("rank {}: a rank did not reach the first replay", rank));

  std::vector<char> host_tokens(size_t(c.max_tokens) * row_bytes), host_out(host_tokens.size());
  std::vector<float> host_weights(size_t(c.max_tokens) * K);
  std::vector<int32_t> host_counts(size_t(n) * L);
  for (int layer = 0; layer < kReplays && f.count == 0; ++layer) {
    const Routing mine = full_routing(c, rank, layer);
    for (int t = 0; t < c.max_tokens; ++t)
      for (int h = 0; h < H; ++h) put(c.dtype, host_tokens.data(), size_t(t) * H + h, token_value(rank, layer, t, h));
    for (size_t i = 0; i < host_weights.size(); ++i) host_weights[i] = weight(int(i % size_t(K)));
    CHECK_OR_FAIL(cudaMemcpyAsync(tokens, host_tokens.data(), host_tokens.size(), cudaMemcpyHostToDevice, stream));
    CHECK_OR_FAIL(cudaMemcpyAsync(topk, mine.topk.data(), mine.topk.size() * 4, cudaMemcpyHostToDevice, stream));
    CHECK_OR_FAIL(cudaMemcpyAsync(weights, host_weights.data(), host_weights.size() * 4, cudaMemcpyHostToDevice,
                                  stream));
    CHECK_OR_FAIL(cudaGraphLaunch(exec, stream));
    CHECK_OR_FAIL(cudaMemcpyAsync(host_counts.data(), counts, host_counts.size() * 4, cudaMemcpyDeviceToHost, stream));
    CHECK_OR_FAIL(cudaMemcpyAsync(host_out.data(), out, host_out.size(), cudaMemcpyDeviceToHost, stream));
    CHECK_OR_FAIL(cudaStreamSynchronize(stream));
    say_async_error(moe, comm, rank, f);
    for (int src = 0; src < n; ++src) {
      const SourcePlan p = source_plan(c, full_routing(c, src, layer), capacity);
      for (int le = 0; le < L; ++le)
        if (host_counts[size_t(src) * L + le] != int32_t(p.rows[size_t(rank * L + le)].size()))
          f.fail(fmt::format("rank {} replay {}: {} rows from rank {} for local expert {}, want {}", rank, layer,
                             host_counts[size_t(src) * L + le], src, le, p.rows[size_t(rank * L + le)].size()));
    }
    for (int t = 0; t < c.max_tokens && f.count == 0; ++t) {
      float w = 0;
      for (int k = 0; k < K; ++k) w += host_weights[size_t(t) * K + k];  // worst-case capacity: all sent
      for (int h = 0; h < H; ++h) {
        std::vector<char> want(2);
        put(c.dtype, want.data(), 0, w * load(c.dtype, host_tokens.data(), size_t(t) * H + h));
        if (std::memcmp(want.data(), host_out.data() + (size_t(t) * H + h) * 2, 2) != 0) {
          f.fail(fmt::format("rank {} replay {}: token {} element {} is {}, want {}", rank, layer, t, h,
                             load(c.dtype, host_out.data(), size_t(t) * H + h), load(c.dtype, want.data(), 0)));
          break;
        }
      }
    }
  }
  braidMoeStats_t st{};
  MP_NCCL(f, braidMoeGetStats(moe, &st));
  const uint64_t R = kReplays;
  if (f.count == 0 && (st.dispatches != R || st.combines != R || st.signalsRemote != 2 * R * (n - 1) * L ||
                       st.fences != 2 * R * n))
    f.fail(fmt::format("rank {}: stats after {} replays: {} dispatches, {} combines, {} remote signals, {} fences; "
                       "want {}, {}, {}, {}", rank, R, st.dispatches, st.combines, st.signalsRemote, st.fences, R, R,
                       2 * R * (n - 1) * L, 2 * R * n));
  if (rank == 0 && f.count == 0)
    std::printf("graph: %d replays exact; per layer and destination %d signal words per call (one per local expert), "
                "against %.1f routed rows per destination\n", kReplays, L,
                double(st.rowsRouted) / double(R) / double(n));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  MP_NCCL(f, braidMoeDestroy(moe));
  for (void* p : {tokens, recv, out, static_cast<void*>(topk), static_cast<void*>(counts),
                  static_cast<void*>(weights)})
    cudaFreeAsync(p, stream);
  return f.count;
}

// How a rank's dispatch goes wrong: not at all (its peer's does), a bad
// expert index (found by the kernel), numTokens out of range (refused by
// the host, which still launches the kernel to tell the peers).
enum class Fault { None, BadIndex, BadNumTokens };

// One full-routing dispatch of `c`, with `fault`, waited for; then the
// handle's async error must be `want` mentioning `says`, within 10 s (well
// under device-check's 20 s BRAID_TIMEOUT, and for bad arguments the
// handle's 20 s bound), and the handle must refuse its next call.
void failing_dispatch(const Case& c, int rank, braidMoe_t moe, ncclComm_t comm, Fault fault, ncclResult_t want,
                      const std::string& says, GpuSide& side, mp::Failures& f) {
  size_t max_rows = 0;
  MP_NCCL(f, braidMoeGetInfo(moe, &max_rows, nullptr));
  Routing mine = full_routing(c, rank, 0);
  if (fault == Fault::BadIndex) mine.topk[size_t(c.max_tokens - 1) * c.top_k] = c.experts;
  std::vector<char> tokens(size_t(c.max_tokens) * c.hidden * 4), recv(max_rows * c.hidden * 4);
  std::vector<int32_t> counts(size_t(c.experts));
  const auto start = std::chrono::steady_clock::now();
  const ncclResult_t r = braidMoeDispatch(
      moe, side.in(tokens.data(), tokens.size()),
      static_cast<const int32_t*>(side.in(mine.topk.data(), mine.topk.size() * 4)),
      fault == Fault::BadNumTokens ? c.max_tokens + 1 : c.max_tokens, side.out(recv.data(), recv.size()),
      static_cast<int32_t*>(side.out(counts.data(), counts.size() * 4)), nullptr, side.stream());
  if (r != (fault == Fault::BadNumTokens ? ncclInvalidArgument : ncclSuccess))
    f.fail(fmt::format("rank {}: braidMoeDispatch -> {} ({})", rank, int(r), ncclGetLastError(comm)));
  side.done(f);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ncclResult_t async = ncclSuccess;
  MP_NCCL(f, braidMoeGetAsyncError(moe, &async));
  const std::string why = ncclGetLastError(comm);
  if (async != want || why.find(says) == std::string::npos)
    f.fail(fmt::format("rank {}: async error {} ({}), want {} saying '{}'", rank, int(async), why, int(want), says));
  if (s > 10) f.fail(fmt::format("rank {}: the failed dispatch took {:.1f} s", rank, s));
  if (braidMoeCombine(moe, recv.data(), nullptr, nullptr, nullptr) == ncclSuccess)
    f.fail(fmt::format("rank {}: the handle took a call after its kernels failed", rank));
}

// timeout: the last rank never dispatches; the others' 2 s bound ends theirs.
// bad_expert, bad_args: the last rank routes a token to an expert out of
// range, or passes numTokens out of range; its words say its call failed,
// so every rank's dispatch fails at once (the others with ncclRemoteError),
// long before the handle's 20 s bound.
int failure_mode(int rank, int n, ncclComm_t comm, Fault fault, mp::Failures& f) {
  Case c;
  c.experts = 2 * n;
  braidMoeConfig_t cfg = config_of(c);
  cfg.timeoutMs = fault == Fault::None ? 2000 : 20000;
  braidMoe_t moe = nullptr;
  MP_NCCL(f, braidMoeCreate(comm, &cfg, &moe));
  if (!moe) return f.count;
  GpuSide side;  // its stream outlives the handle's last launch
  const bool last = rank == n - 1;
  if (fault == Fault::None && !last)
    failing_dispatch(c, rank, moe, comm, Fault::None, ncclTimeout, "no signal from rank", side, f);
  // A bad index on rank 0 too: two failing ranks each report their own error.
  const bool faulty = last || (fault == Fault::BadIndex && rank == 0);
  if (fault != Fault::None)
    failing_dispatch(c, rank, moe, comm, faulty ? fault : Fault::None, faulty ? ncclInvalidArgument : ncclRemoteError,
                     !faulty                        ? "the call failed on another rank"
                     : fault == Fault::BadNumTokens ? "arguments were refused"
                                                    : "routes to an expert",
                     side, f);
  MP_NCCL(f, braidMoeDestroy(moe));
  return f.count;
}

int alltoallv_mode(int rank, int n, ncclComm_t comm, mp::Failures& f) {
  for (const ncclDataType_t type : {ncclInt8, ncclBfloat16, ncclFloat32, ncclFloat64}) {
    A2aCase c;
    c.type = type;
    c.max_count = type == ncclInt8 ? 4099 : 37;
    c.calls = 20;
    c.seed = uint64_t(type) + 1;
    if (f.count == 0) calls_body<GpuSide>(c)(rank, n, comm, f);
  }
  if (f.count) return f.count;
  braidAlltoAllv_t a2a = nullptr;
  MP_NCCL(f, braidAlltoAllvCreate(comm, ncclFloat32, 8, 5000, &a2a));
  if (!a2a) return f.count;
  std::vector<int64_t> counts(size_t(n), 1);
  if (rank == 0) counts[1 % n] = 9;  // over maxCountPerPeer
  std::vector<float> send(size_t(n) * 8), recv(send.size());
  std::vector<int64_t> recv_counts(static_cast<size_t>(n));
  GpuSide side;
  MP_NCCL(f, braidAlltoAllv(a2a, side.in(send.data(), send.size() * 4),
                            static_cast<const int64_t*>(side.in(counts.data(), counts.size() * 8)),
                            side.out(recv.data(), recv.size() * 4),
                            static_cast<int64_t*>(side.out(recv_counts.data(), recv_counts.size() * 8)),
                            side.stream()));
  side.done(f);
  ncclResult_t async = ncclSuccess;
  MP_NCCL(f, braidAlltoAllvGetAsyncError(a2a, &async));
  const std::string says = ncclGetLastError(comm);
  const std::string want = rank == 0 ? "sendCounts[1]" : "rank 0 passed bad arguments";
  const ncclResult_t code = rank == 0 ? ncclInvalidArgument : ncclRemoteError;
  if (async != code || says.find(want) == std::string::npos)
    f.fail(fmt::format("rank {}: async error {} ({}), want {} saying '{}'", rank, int(async), says, int(code), want));
  MP_NCCL(f, braidAlltoAllvDestroy(a2a));
  return f.count;
}

std::string g_mode = "layers";

int rank_main(int rank, int n, ncclUniqueId id) {
  ncclComm_t comm = nullptr;
  if (init_rank_on_device(rank, n, id, &comm)) return 1;
  mp::Failures f;
  const int failed = g_mode == "graph"       ? graph_mode(rank, n, comm, f)
                     : g_mode == "timeout"   ? failure_mode(rank, n, comm, Fault::None, f)
                     : g_mode == "bad_expert" ? failure_mode(rank, n, comm, Fault::BadIndex, f)
                     : g_mode == "bad_args"  ? failure_mode(rank, n, comm, Fault::BadNumTokens, f)
                     : g_mode == "alltoallv" ? alltoallv_mode(rank, n, comm, f)
                                             : layers_mode(rank, n, comm, f);
  ncclCommDestroy(comm);
  return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 3) g_mode = argv[3];
  g_pinned = argc > 4 && std::string(argv[4]) == "pinned";
  return run_gpu_ranks(argc, argv, rank_main, ("MoE on CUDA, " + g_mode + (g_pinned ? ", pinned" : "")).c_str());
}

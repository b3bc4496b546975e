// A reference persistent MoE kernel (issue 40, item 4): FlashMoE's roles in
// one kernel that runs every layer, built only on braid's public device
// library (braid/moe.cuh) and NCCL's window API, with a small expert
// computation, to show that the primitives compose inside one kernel.
//
//   braid_gpu_moe_persistent NRANKS threads|processes
//
// One launch per rank runs kLayers layers.  The grid is P processor CTAs
// and one control CTA.  Per layer (call l, epoch epoch_of_call(l)):
//   1. plan: the control CTA plans the layer's routing
//      (plan_routes_coop); the others wait for its plan word;
//   2. dispatch: every CTA is a sender agent (dispatch_agent: puts, one
//      arrival per destination, the leaders commit signal words);
//   3. control CTA, warp 0, the subscriber: polls (test) the signal words
//      of this rank's dispatch half and publishes each arrived block in a
//      ready queue; warp 1, the scheduler: hands the ready blocks to the
//      processors round robin, in arrival order;
//      processors: for each block handed to them, the expert (rows times a
//      per-expert scale, into scratch), then back into the source's
//      combine half tile by tile (put_rows, then signal_tile: LSA
//      combine's per-tile signal); once a processor's blocks are done it
//      arrives on every destination's combine counter (arrive_everywhere,
//      P agents; the leaders commit);
//   4. every CTA sums its share of tokens, each row once its tile's word
//      says it landed (test_tile), then waits (bounded) for the blocks'
//      signals: their counts, and the flow control;
//   5. a grid barrier (a counter) before the next layer's plan overwrites
//      this one's.
// Exit 0 when every layer's every combined element is exact (float32,
// small integers), 1 otherwise.
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include "braid/moe.cuh"
#include "rank_runner.h"

using namespace braid::moe;

namespace {

constexpr int kLayers = 6, kProcessors = 4, kThreads = 256, kStage = 1024;
constexpr int kTokens = 48, kTopK = 2, kHidden = 128, kExpertsPerRank = 2, kTileRows = 4;
constexpr uint64_t kTimeoutNs = 20ull * 1000 * 1000 * 1000;

__host__ __device__ float scale_of(int expert) { return float(expert % 4 + 1); }
__host__ __device__ float weight_of(int k) { return 0.5f * float(k + 1); }

struct Args {
  Shape s;
  WindowLayout w;
  ncclWindow_t window;
  int rank;
  const float* tokens;   // [kLayers][kTokens][kHidden]
  const int32_t* topk;   // [kLayers][kTokens][kTopK]
  float* out;            // [kLayers][kTokens][kHidden]
  uint32_t *dispatch_arrivals, *combine_arrivals;  // [nranks]
  int32_t *wanted, *sent, *slots, *received;       // [experts], [experts], [tokens * top_k], [blocks]
  uint64_t* plan_word;                             // the layer (call) whose plan is written
  uint64_t* finished;                              // CTAs done with a layer, all layers
  int32_t* ready;                                  // [blocks] arrived blocks, in arrival order
  uint64_t* ready_seq;                             // [blocks] call number once ready[i] is written
  int32_t* tasks;                                  // [kProcessors][blocks]
  uint64_t* task_seq;                              // [kProcessors][blocks]
  float* scratch;                                  // [kProcessors][capacity][kHidden]
  int32_t* stop;                                   // raised by the first wait that gives up
};

__device__ bool wait_word(const uint64_t* word, uint64_t want, const Timeout& expired) {
  while (cuda::atomic_ref<uint64_t, cuda::thread_scope_device>(*const_cast<uint64_t*>(word))
             .load(cuda::memory_order_acquire) < want)
    if (expired()) return false;
  return true;
}
__device__ void publish(uint64_t* word, uint64_t v) {
  cuda::atomic_ref<uint64_t, cuda::thread_scope_device>(*word).store(v, cuda::memory_order_release);
}
__device__ void give_up(const Args& a) {
  cuda::atomic_ref<int32_t, cuda::thread_scope_system>(*a.stop).store(1, cuda::memory_order_release);
}

__global__ void moe_layers(Args a) {
  __shared__ int32_t stage[kStage];
  // Read in loops while other threads may clear it; whether to stop is one
  // __syncthreads_and(ok), the same answer for every thread.
  __shared__ volatile int32_t ok;
  const Shape& s = a.s;
  const int32_t B = int32_t(s.blocks()), L = s.local_experts, K = s.top_k, H = s.hidden;
  const bool control = blockIdx.x == gridDim.x - 1;
  const int processors = gridDim.x - 1, me = blockIdx.x;
  ncclCoopCta cta;
  LsaMemory<ncclCoopCta> mm(cta, a.window, 0, a.rank);
  const Timeout expired = Timeout::after(kTimeoutNs, a.stop);
  for (int layer = 0; layer < kLayers; ++layer) {
    const uint64_t call = uint64_t(layer) + 1;
    const uint32_t epoch = epoch_of_call(call);
    const int32_t* topk = a.topk + size_t(layer) * kTokens * K;
    if (threadIdx.x == 0) ok = 1;
    // 1. Plan (after every CTA finished the last layer).
    if (control) {
      if (threadIdx.x == 0 && !wait_word(a.finished, uint64_t(layer) * gridDim.x, expired)) ok = 0;
      __syncthreads();
      if (ok) {
        // Nobody reads the last layer's marks now (its combine leaders among them).
        for (int32_t i = threadIdx.x; i < B; i += blockDim.x) a.received[i] = -1;
        plan_routes_coop(cta, s, topk, kTokens, a.wanted, a.slots, stage, kStage);
        for (int e = threadIdx.x; e < s.experts; e += blockDim.x) a.sent[e] = sent_rows(s, a.wanted, e);
        __syncthreads();
        if (threadIdx.x == 0) publish(a.plan_word, call);
      }
    } else if (threadIdx.x == 0 && !wait_word(a.plan_word, call, expired)) {
      ok = 0;
    }
    if (!__syncthreads_and(ok)) break;

    // 2. Dispatch: every CTA is a sender.
    const DispatchRows rows{reinterpret_cast<const char*>(a.tokens + size_t(layer) * kTokens * H), topk, a.slots,
                            a.sent, kTokens};
    dispatch_agent(mm, s, a.w, CallState{a.rank, call, epoch, a.dispatch_arrivals}, rows, me, int32_t(gridDim.x));

    // 3. Subscriber and scheduler (control CTA), processors (the others).
    if (control) {
      const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
      const auto* signals = reinterpret_cast<const uint64_t*>(mm.window(a.rank) + a.w.dispatch_signals);
      if (warp == 0) {  // subscriber: each lane watches blocks lane, lane + 32, ...
        __shared__ int32_t published;
        if (lane == 0) published = 0;
        __syncwarp();
        for (int32_t left = (B - lane + 31) / 32; left > 0 && ok;) {
          for (int32_t i = lane; i < B && ok; i += 32) {
            uint32_t count = 0;
            if (a.received[i] >= 0 || !test(mm, signals, s, i / L, i % L, epoch, &count)) continue;
            a.received[i] = int32_t(count);
            const int32_t slot = atomicAdd(&published, 1);
            a.ready[slot] = i;
            publish(&a.ready_seq[slot], call);
            --left;
          }
          if (expired()) ok = 0;
        }
      } else if (warp == 1 && lane == 0) {  // scheduler: the j-th ready block to processor j % P
        for (int32_t j = 0; j < B && ok; ++j) {
          if (!wait_word(&a.ready_seq[j], call, expired)) {
            ok = 0;
            break;
          }
          const int p = j % processors;
          a.tasks[p * B + j / processors] = a.ready[j];
          publish(&a.task_seq[p * B + j / processors], call);
        }
      }
    } else {
      float* scratch = a.scratch + size_t(me) * s.capacity * H;
      for (int32_t q = 0; me + q * processors < B; ++q) {  // tasks me, me + P, ... of the layer
        if (threadIdx.x == 0 && !wait_word(&a.task_seq[me * B + q], call, expired)) ok = 0;
        if (!__syncthreads_and(ok)) break;
        const int32_t blk = a.tasks[me * B + q], src = blk / L, le = blk % L, rows_in = a.received[blk];
        const float* in = reinterpret_cast<const float*>(mm.window(a.rank) + a.w.dispatch_data +
                                                         WindowLayout::row_offset(s, src, le, 0));
        const float scale = scale_of(a.rank * L + le);
        for (int32_t x = threadIdx.x; x < rows_in * H; x += blockDim.x) scratch[x] = __fmul_rn(in[x], scale);
        __syncthreads();  // the whole block's results, before the group puts them
        // Back tile by tile, each tile's word raised as it lands (LSA combine).
        auto* tiles = reinterpret_cast<uint64_t*>(mm.window(src) + a.w.combine_tiles);
        for (int32_t first = 0, tile = 0; first < rows_in; first += s.tile_rows, ++tile) {
          const int32_t rows = min(s.tile_rows, rows_in - first);
          put_rows(mm, src, mm.window(src) + a.w.combine_data, s, a.rank, le, first, rows, scratch + first * H);
          signal_tile(mm, src, tiles, s, a.rank, le, tile, uint32_t(rows), epoch);
        }
      }
      if (ok)
        arrive_everywhere(mm, s, CallState{a.rank, call, epoch, a.combine_arrivals}, a.w.combine_signals, a.received,
                          processors);
    }
    if (!__syncthreads_and(ok)) break;

    // 4. Every CTA sums its share of tokens, each row as soon as its tile's
    // word says it landed; then waits for the blocks' signals (their counts,
    // and the flow control: every rank's combine is done before the next
    // dispatch writes into it).
    const char* half = mm.window(a.rank) + a.w.combine_data;
    const auto* tiles = reinterpret_cast<const uint64_t*>(mm.window(a.rank) + a.w.combine_tiles);
    float* out = a.out + size_t(layer) * kTokens * H;
    for (int t = me; t < kTokens; t += gridDim.x) {  // ok changes only before a barrier: read after one
      for (int k = 0; k < K; ++k) {
        const int32_t slot = a.slots[t * K + k], e = topk[t * K + k];
        if (slot == kNoSlot) continue;
        if (threadIdx.x == 0)
          while (!test_tile(mm, tiles, s, s.owner(e), s.local(e), slot / s.tile_rows, epoch))
            if (expired()) {
              ok = 0;
              break;
            }
      }
      if (!__syncthreads_and(ok)) break;
      for (int x = threadIdx.x; x < H; x += blockDim.x) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) {
          const int32_t slot = a.slots[t * K + k];
          if (slot == kNoSlot) continue;
          const int32_t e = topk[t * K + k];
          const float* row =
              reinterpret_cast<const float*>(half + WindowLayout::row_offset(s, s.owner(e), s.local(e), slot));
          acc = __fadd_rn(acc, __fmul_rn(weight_of(k), row[x]));
        }
        out[t * H + x] = acc;
      }
    }
    const auto* back = reinterpret_cast<const uint64_t*>(mm.window(a.rank) + a.w.combine_signals);
    for (int32_t i = threadIdx.x; i < B; i += blockDim.x) {
      uint32_t count = 0;
      if (wait(mm, back, s, i / L, i % L, epoch, &count, expired) != WaitResult::Ok || int32_t(count) != a.sent[i])
        ok = 0;
    }
    if (!__syncthreads_and(ok)) break;

    // 5. This CTA is done with the layer.
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();
      atomicAdd(reinterpret_cast<unsigned long long*>(a.finished), 1ull);
    }
  }
  if (!ok && threadIdx.x == 0) give_up(a);  // the other CTAs stop waiting too
}

// Token t's element x on `rank` in `layer`, and its experts: distinct, spread over every rank.
float token(int rank, int layer, int t, int x) { return float((rank * 5 + layer * 3 + t + x) % 9 - 4); }
int32_t expert(int rank, int layer, int t, int k, int experts) {
  return int32_t((rank * 7 + layer * 11 + t * 3 + k * (experts / kTopK)) % experts);
}

// Stream-ordered: a cudaMalloc that waited for the device would wait for a
// peer rank's kernel (threads share the GPU's context), which may be
// waiting for this rank's.
template <class T>
T* device_array(cudaStream_t stream, size_t n, int fill = 0) {
  T* p = nullptr;
  if (cudaMallocAsync(reinterpret_cast<void**>(&p), n * sizeof(T), stream) != cudaSuccess) return nullptr;
  cudaMemsetAsync(p, fill, n * sizeof(T), stream);
  return p;
}

int rank_main(int rank, int n, ncclUniqueId id) {
  ncclComm_t comm = nullptr;
  if (init_rank_on_device(rank, n, id, &comm)) return 1;
  Shape s;
  s.nranks = n;
  s.local_experts = kExpertsPerRank;
  s.experts = n * kExpertsPerRank;
  s.top_k = kTopK;
  s.hidden = kHidden;
  s.elem_bytes = 4;
  s.max_tokens = kTokens;
  s.tile_rows = kTileRows;
  s.capacity = worst_case_capacity(kTokens, kTileRows);
  const WindowLayout w = WindowLayout::of(s);
  cudaStream_t stream;
  CHECK_OR_FAIL(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const int B = int(s.blocks());
  std::vector<float> tokens(size_t(kLayers) * kTokens * kHidden);
  std::vector<int32_t> topk(size_t(kLayers) * kTokens * kTopK);
  for (int l = 0; l < kLayers; ++l)
    for (int t = 0; t < kTokens; ++t) {
      for (int x = 0; x < kHidden; ++x) tokens[(size_t(l) * kTokens + t) * kHidden + x] = token(rank, l, t, x);
      for (int k = 0; k < kTopK; ++k) topk[(size_t(l) * kTokens + t) * kTopK + k] = expert(rank, l, t, k, s.experts);
    }
  Args a{};
  a.s = s;
  a.w = w;
  a.rank = rank;
  float* d_tokens = device_array<float>(stream, tokens.size());
  int32_t* d_topk = device_array<int32_t>(stream, topk.size());
  CHECK_OR_FAIL(cudaMemcpyAsync(d_tokens, tokens.data(), tokens.size() * 4, cudaMemcpyHostToDevice, stream));
  CHECK_OR_FAIL(cudaMemcpyAsync(d_topk, topk.data(), topk.size() * 4, cudaMemcpyHostToDevice, stream));
  a.tokens = d_tokens;
  a.topk = d_topk;
  a.out = device_array<float>(stream, tokens.size());
  a.dispatch_arrivals = device_array<uint32_t>(stream, size_t(n));
  a.combine_arrivals = device_array<uint32_t>(stream, size_t(n));
  a.wanted = device_array<int32_t>(stream, size_t(s.experts));
  a.sent = device_array<int32_t>(stream, size_t(s.experts));
  a.slots = device_array<int32_t>(stream, size_t(kTokens) * kTopK);
  a.received = device_array<int32_t>(stream, size_t(B), 0xff);  // -1: not arrived
  a.plan_word = device_array<uint64_t>(stream, 1);
  a.finished = device_array<uint64_t>(stream, 1);
  a.ready = device_array<int32_t>(stream, size_t(B));
  a.ready_seq = device_array<uint64_t>(stream, size_t(B));
  a.tasks = device_array<int32_t>(stream, size_t(kProcessors) * B);
  a.task_seq = device_array<uint64_t>(stream, size_t(kProcessors) * B);
  a.scratch = device_array<float>(stream, size_t(kProcessors) * s.capacity * kHidden);
  a.stop = device_array<int32_t>(stream, 1);
  void* memory = nullptr;
  CHECK_OR_FAIL(ncclMemAlloc(&memory, w.bytes));
  CHECK_OR_FAIL(cudaMemsetAsync(memory, 0, w.bytes, stream));
  CHECK_OR_FAIL(cudaStreamSynchronize(stream));
  // Collective, and the last thing before the launch (with the meet
  // below): no rank's kernel starts before every rank is done with its setup.
  ncclWindow_t window = nullptr;
  CHECK_OR_FAIL(ncclCommWindowRegister(comm, memory, w.bytes, &window, NCCL_WIN_COLL_SYMMETRIC));
  a.window = window;
  // Registering allocates after its exchange: thread ranks wait for each
  // other here, so that no kernel waits for a rank still allocating.
  if (!thread_ranks_meet()) return 1;

  moe_layers<<<kProcessors + 1, kThreads, 0, stream>>>(a);
  CHECK_OR_FAIL(cudaGetLastError());
  int32_t stopped = 0;
  std::vector<float> out(tokens.size());
  CHECK_OR_FAIL(cudaMemcpyAsync(&stopped, a.stop, 4, cudaMemcpyDeviceToHost, stream));
  CHECK_OR_FAIL(cudaMemcpyAsync(out.data(), a.out, out.size() * 4, cudaMemcpyDeviceToHost, stream));
  CHECK_OR_FAIL(cudaStreamSynchronize(stream));
  int wrong = stopped ? 1 : 0;
  if (stopped) std::fprintf(stderr, "rank %d: a wait gave up (timeout)\n", rank);
  for (int l = 0; l < kLayers && !wrong; ++l)
    for (int t = 0; t < kTokens && !wrong; ++t)
      for (int x = 0; x < kHidden; ++x) {
        float want = 0;
        for (int k = 0; k < kTopK; ++k) {
          const int e = topk[(size_t(l) * kTokens + t) * kTopK + k];
          want += weight_of(k) * (token(rank, l, t, x) * scale_of(e));
        }
        const float got = out[(size_t(l) * kTokens + t) * kHidden + x];
        if (got != want) {
          std::fprintf(stderr, "rank %d layer %d: token %d element %d is %g, want %g\n", rank, l, t, x, got, want);
          wrong = 1;
          break;
        }
      }
  CHECK_OR_FAIL(cudaStreamDestroy(stream));
  // Every peer's last write into this window came before this rank's kernel ended.
  CHECK_OR_FAIL(ncclCommWindowDeregister(comm, window));
  CHECK_OR_FAIL(ncclMemFree(memory));
  CHECK_OR_FAIL(ncclCommDestroy(comm));
  if (!wrong) std::printf("rank %d: %d layers in one persistent kernel exact\n", rank, kLayers);
  return wrong;
}

}  // namespace

int main(int argc, char** argv) { return run_gpu_ranks(argc, argv, rank_main, "persistent MoE kernel"); }

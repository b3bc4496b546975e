// Host-launched MoE dispatch and combine (issue 40): one kernel each, on the
// caller's stream, with counts kept on the device, so a dispatch+combine can
// be captured in a CUDA graph.  They are users of braid's device library
// (include/braid/moe.cuh): every CTA is one agent of calls.h's
// dispatch_agent / combine_agent over LsaMemory, exactly what the host
// backend's block threads run.
//
// Dispatch: CTA 0 copies the top-k indices (combine needs them after the
// caller's buffer moved on) and plans (plan_routes_coop: the host planner's
// slots); the other CTAs wait for its plan_ready word.  Then every CTA
// puts its share of tokens and arrives; the leaders commit.  Then every
// CTA waits, bounded, for every (source, local expert) signal of this
// rank's dispatch half, computes the output offsets and copies its share of
// the blocks into the output; CTA 0 writes the counts.
// Combine: every CTA puts its share of the received blocks back into the
// sources' combine halves and arrives; then it waits for every block of
// its own combine half, checks the rows that came back, and sums its share
// of tokens with their weights, in float, rounding as the host does.
//
// All CTAs of a kernel must be resident at once (CTAs wait for CTA 0's plan
// and for peers): the host launches few (config blocks, default 8).  A
// failed wait raises the state's stop word, so the CTAs still waiting give
// up at once, and records the first error for the host (DeviceMoeError);
// a handle stopped so sends nothing in later calls (stopped_earlier).
#include <cuda_runtime.h>

#include <algorithm>

#include "braid/moe.cuh"
#include "braid/moe/pulls.h"
#include "src/moe/cuda/device_moe.h"
#include "src/moe/cuda/kernel_common.cuh"
#include "src/moe/elements.h"
#include "src/moe/cuda/chunked_weighted_sum.h"

namespace braid::moe::cuda {

namespace {

constexpr int32_t kStage = 1024;  // ints of shared memory the planner stages the indices through
constexpr int32_t kSumTokens = 8;  // tokens one pass of combine's sum takes, at most
// Combine's sum keeps up to kThreadsPerCta row pointers where dispatch has
// its stage (kernel_shared_bytes).
static_assert(kStage * sizeof(int32_t) >= kThreadsPerCta * sizeof(const char*), "combine's row pointers fit");

__device__ void report(const DeviceMoe& h, DeviceErrorCode code, bool combine, int32_t peer, int32_t le,
                       int64_t value, uint32_t epoch) {
  cuda::report(h.error, &h.state->stop, code, combine, peer, le, value, epoch);
}

// Every (source, local expert) signal of one half, by the CTA's threads;
// counts[] gets the counts (0 where the wait gave up, or where the source's
// call failed).  A peer's failed call (kFailedSender) is reported only
// after the whole wait: this rank's own words to itself, waited for too,
// come from the last of its CTAs to arrive, so the stop that the report
// raises cannot keep a CTA of this call that has not started yet from
// arriving (stopped_earlier).  A rank whose own call failed (own_failed)
// reports its own error instead.
__device__ void wait_half(const DeviceMoe& h, LsaMemory<ncclCoopCta>& mm, uint64_t signals_at, uint32_t epoch,
                          bool combine, bool own_failed, int32_t* counts) {
  const Shape& s = h.shape;
  const auto* signals = reinterpret_cast<const uint64_t*>(mm.window(h.rank) + signals_at);
  __shared__ int32_t failed_peer;
  if (threadIdx.x == 0) failed_peer = INT32_MAX;
  __syncthreads();
  Timeout expired = Timeout::after(h.timeout_ns, &h.state->stop);
  for (int64_t i = threadIdx.x; i < s.blocks(); i += blockDim.x) {
    const int32_t src = int32_t(i / s.local_experts), le = int32_t(i % s.local_experts);
    uint32_t count = 0;
    if (wait(mm, signals, s, src, le, epoch, &count, expired) != WaitResult::Ok) {
      if (!load_acquire(h.state->stop)) report(h, kDeviceTimeout, combine, src, le, 0, epoch);
      count = 0;
    } else if (count == kFailedSender) {
      if (src != h.rank) atomicMin(&failed_peer, src);
      count = 0;
    } else if (count > uint32_t(s.capacity)) {
      report(h, kDeviceOverCapacity, combine, src, le, count, epoch);
      count = 0;
    }
    counts[i] = int32_t(count);
  }
  __syncthreads();
  if (threadIdx.x == 0 && failed_peer != INT32_MAX && !own_failed)
    report(h, kDevicePeerFailed, combine, failed_peer, -1, 0, epoch);
  __syncthreads();
}

// Thread 0 adds the CTA's counters to the handle's statistics; the last
// CTA of the call advances the call number.
__device__ void finish(const DeviceMoe& h, const LsaMemory<ncclCoopCta>& mm, uint64_t call, bool combine) {
  __syncthreads();
  if (threadIdx.x != 0) return;
  braidMoeStats_t& st = h.state->stats;
  const Counters& c = mm.counters();
  atomicAdd(reinterpret_cast<unsigned long long*>(&st.payloadBytesRemote), c.bytes_remote);
  atomicAdd(reinterpret_cast<unsigned long long*>(&st.signalBytesRemote), c.signal_bytes_remote);
  atomicAdd(reinterpret_cast<unsigned long long*>(&st.bytesLocal), c.bytes_local);
  atomicAdd(reinterpret_cast<unsigned long long*>(&st.signalsRemote), c.signals_remote);
  atomicAdd(reinterpret_cast<unsigned long long*>(&st.signalsLocal), c.signals_local);
  atomicAdd(reinterpret_cast<unsigned long long*>(&st.fences), c.fences);
  if (last_to_finish(combine ? &h.state->combine_exits : &h.state->dispatch_exits, call))
    (combine ? h.state->combine_calls : h.state->dispatch_calls) = call;
}

// Zero-copy dispatch, CTA 0 once the plan is in: whether each destination
// reads this call's rows in this rank's dispatch buffer, and which token
// fills each of their slots (layout.h), before any arrival.
__device__ void publish_dispatch_pulls(const DeviceMoe& h, const LsaMemory<ncclCoopCta>& mm, bool pull,
                                       int32_t ntokens) {
  char* mine = mm.window(h.rank);
  write_dispatch_pulls(mine, h.shape, h.layout, nullptr, pull, threadIdx.x, blockDim.x);
  if (pull) write_pull_list(mine, h.shape, h.layout, h.topk, h.slots, ntokens, nullptr, threadIdx.x, blockDim.x);
}

// Whether an earlier call's error stopped the handle (the CTA agrees: its
// threads return together or not at all).  Its host then refuses calls, but
// a replayed graph cannot be refused, and that call may have left the plan
// and the call count behind: a CTA that gave up waiting for the plan never
// finished it, so a replay would run under the same call number and read
// the plan while CTA 0 rewrites it.  A stopped handle sends and writes
// nothing; its peers' waits give up.
__device__ bool stopped_earlier(const DeviceMoe& h) {
  __shared__ int32_t stopped;
  if (threadIdx.x == 0) stopped = load_acquire(h.state->stop);
  __syncthreads();
  return stopped != 0;
}

// Block (src, le)'s received rows into the output, from src's dispatch
// buffer where src left them there (a warp per row, so that the CTA has
// several rows' loads in flight), else from the dispatch half; returns the
// bytes read in src's buffer.
__device__ uint64_t copy_block_out(const DeviceMoe& h, const LsaMemory<ncclCoopCta>& mm, const ncclCoopCta& cta,
                                   int32_t src, int32_t le, int32_t rows, char* to) {
  const Shape& s = h.shape;
  if (h.layout.dispatch_buffer && dispatch_pulled(mm.window(src), h.layout, h.rank)) {
    const int32_t warps = int32_t(blockDim.x / 32);
    for (int32_t j = int32_t(threadIdx.x / 32); j < rows; j += warps)
      copy_coop(ncclCoopWarp(), to + j * s.row_bytes(), pulled_token_row(mm.window(src), s, h.layout, h.rank, le, j),
                size_t(s.row_bytes()));
    return uint64_t(rows) * uint64_t(s.row_bytes());
  }
  copy_coop(cta, to, mm.window(h.rank) + h.layout.dispatch_data + WindowLayout::row_offset(s, src, le, 0),
            size_t(rows) * size_t(s.row_bytes()));
  return 0;
}

// pull: tokens is this rank's dispatch buffer, read in place by the
// experts' owners (zero-copy dispatch, layout.h).  Both kernels' launch
// bounds hold them to the registers a CTA of kThreadsPerCta can have.
__global__ void __launch_bounds__(kThreadsPerCta, 1)
    dispatch_kernel(DeviceMoe h, const char* tokens, bool pull, const int32_t* topk, int32_t ntokens, char* out,
                    int32_t* recv_counts, int64_t* dropped, bool refused) {
  if (stopped_earlier(h)) return;
  extern __shared__ int64_t shared[];
  const Shape& s = h.shape;
  int64_t* first_row = shared;                                        // [blocks]
  int32_t* counts = reinterpret_cast<int32_t*>(first_row + s.blocks());  // [blocks]
  int32_t* stage = counts + s.blocks();                               // [kStage]
  const ncclCoopCta cta;
  const uint64_t call = h.state->dispatch_calls + 1;
  const uint32_t epoch = epoch_of_call(call);

  __shared__ int32_t planned;  // thread 0's answer, so that the whole CTA goes on or returns alike
  // A bad index, or arguments the host refused, fail the call on every
  // rank: this rank's CTAs put no rows and commit kFailedSender words
  // (calls.h), so each peer's wait sees it at once, and the plan says so to
  // every CTA.
  __shared__ int32_t failed, bad_token;
  if (blockIdx.x == 0) {
    copy_coop(cta, h.topk, topk, size_t(ntokens) * s.top_k * sizeof(int32_t));
    const PlanResult plan = plan_routes_coop(cta, s, topk, ntokens, h.wanted, h.slots, stage, kStage);
    for (int32_t e = threadIdx.x; e < s.experts; e += blockDim.x) h.sent[e] = sent_rows(s, h.wanted, e);
    if (threadIdx.x == 0) {
      bad_token = plan.bad_token;
      failed = refused || plan.bad_token >= 0;
    }
    __syncthreads();
    if (h.layout.dispatch_buffer && !failed)
      publish_dispatch_pulls(h, LsaMemory<ncclCoopCta>(cta, h.window, 0, h.rank), pull, ntokens);
    __syncthreads();
    if (threadIdx.x == 0) {
      if (!failed) {
        h.state->stats.dispatches += 1;
        h.state->stats.rowsRouted += uint64_t(plan.routed);
        h.state->stats.rowsDropped += uint64_t(plan.dropped);
        if (dropped) *dropped = plan.dropped;
      }
      h.state->tokens = ntokens;
      h.state->plan_failed = failed;
      __threadfence();
      store_release(h.state->plan_ready, call);
      planned = 1;
    }
  } else if (threadIdx.x == 0) {
    // Bounded (CTA 0 may not be resident if the grid is too large for the
    // device beside the other ranks' grids).
    const Timeout expired = Timeout::after(h.timeout_ns, nullptr);
    planned = 1;
    while (load_acquire(h.state->plan_ready) != call) {
      if (expired()) {
        report(h, kDevicePlanTimeout, false, h.rank, -1, 0, epoch);
        planned = 0;
        break;
      }
      __nanosleep(32);
    }
    failed = planned ? h.state->plan_failed : 0;
  }
  __syncthreads();
  // Without the plan this CTA sends nothing: the peers' waits give up too.
  if (!planned) return;

  LsaMemory<ncclCoopCta> mm(cta, h.window, 0, h.rank);
  const CallState c{h.rank, call, epoch, h.dispatch_arrivals, failed != 0};
  DispatchRows rows{tokens, h.topk, h.slots, h.sent, ntokens};
  rows.pulled_all = pull;
  dispatch_agent(mm, s, h.layout, c, rows, int32_t(blockIdx.x), int32_t(gridDim.x));

  wait_half(h, mm, h.layout.dispatch_signals, epoch, false, failed != 0, counts);
  if (failed) {
    // Only now the error, which stops the handle (wait_half says why).
    if (blockIdx.x == 0 && threadIdx.x == 0)
      report(h, refused ? kDeviceRefused : kDeviceBadExpert, false, h.rank, -1, bad_token, epoch);
    finish(h, mm, call, false);
    return;
  }
  if (threadIdx.x == 0) output_offsets(s, h.output, counts, first_row);
  __syncthreads();
  // Rows read in a source's buffer count as the payload its put would have
  // (the host's statistics do the same).
  uint64_t pulled_remote = 0, pulled_local = 0;
  for (int64_t i = blockIdx.x; i < s.blocks(); i += gridDim.x) {
    const int32_t src = int32_t(i / s.local_experts), le = int32_t(i % s.local_experts);
    const uint64_t bytes = copy_block_out(h, mm, cta, src, le, counts[i], out + first_row[i] * s.row_bytes());
    (src == h.rank ? pulled_local : pulled_remote) += bytes;
  }
  if (threadIdx.x == 0) {
    braidMoeStats_t& st = h.state->stats;
    if (pulled_remote) atomicAdd(reinterpret_cast<unsigned long long*>(&st.payloadBytesRemote), pulled_remote);
    if (pulled_local) atomicAdd(reinterpret_cast<unsigned long long*>(&st.bytesLocal), pulled_local);
  }
  if (blockIdx.x == 0)
    for (int64_t i = threadIdx.x; i < s.blocks(); i += blockDim.x) {
      recv_counts[i] = counts[i];
      h.received[i] = counts[i];
      h.first_row[i] = first_row[i];
    }
  finish(h, mm, call, false);
}

// Where the results of the row (expert e, slot) this rank sent came back:
// its combine half, or the owner's combine buffer (zero-copy combine: the
// owner's pull index says where, layout.h).
__device__ const char* returned_row(const DeviceMoe& h, const LsaMemory<ncclCoopCta>& mm, int32_t e, int32_t slot,
                                    bool* pulled) {
  const Shape& s = h.shape;
  const int32_t owner = s.owner(e), le = s.local(e);
  *pulled = false;
  if (h.layout.combine_buffer)
    if (const char* row = pulled_result_row(mm.window(owner), s, h.layout, h.rank, le, slot)) {
      *pulled = true;
      return row;
    }
  return mm.window(h.rank) + h.layout.combine_data + WindowLayout::row_offset(s, owner, le, slot);
}

template <ncclDataType_t T>
__global__ void __launch_bounds__(kThreadsPerCta, 1)
    combine_kernel(DeviceMoe h, const char* expert_out, bool pull, const float* weights, char* out, bool refused) {
  if (stopped_earlier(h)) return;
  extern __shared__ int64_t shared[];
  const Shape& s = h.shape;
  int32_t* back = reinterpret_cast<int32_t*>(shared);              // [blocks]
  const char** rows = reinterpret_cast<const char**>(shared + (s.blocks() + 1) / 2);  // [group][top_k], after back
  const ncclCoopCta cta;
  const uint64_t call = h.state->combine_calls + 1;
  const uint32_t epoch = epoch_of_call(call);

  LsaMemory<ncclCoopCta> mm(cta, h.window, 0, h.rank);
  // Zero-copy combine: where this rank's results for each source start in
  // its buffer, or kRowsPut, written before any arrival (so before every
  // signal of the call) and read by the sources once signalled.
  if (h.layout.combine_buffer && blockIdx.x == 0 && !refused)
    write_pull_index(mm.window(h.rank), s, h.layout, h.first_row, nullptr, pull, threadIdx.x, blockDim.x);
  const CallState c{h.rank, call, epoch, h.combine_arrivals, refused};
  CombineRows results{expert_out, h.received, h.first_row};
  results.pulled_all = pull;
  combine_agent(mm, s, h.layout, c, results, int32_t(blockIdx.x), int32_t(gridDim.x));

  wait_half(h, mm, h.layout.combine_signals, epoch, true, refused, back);
  if (refused) {  // as a failed dispatch: the error only once every CTA has arrived
    if (blockIdx.x == 0 && threadIdx.x == 0) report(h, kDeviceRefused, true, h.rank, -1, 0, epoch);
    finish(h, mm, call, true);
    return;
  }
  if (blockIdx.x == 0)
    for (int64_t i = threadIdx.x; i < s.blocks(); i += blockDim.x)
      if (back[i] != h.sent[i] && !load_acquire(h.state->stop))
        report(h, kDeviceRowsMismatch, true, int32_t(i / s.local_experts), int32_t(i % s.local_experts), back[i],
               epoch);

  // Each token's weighted sum (chunked_weighted_sum.h), a pass of up to
  // `group` tokens at a time: the threads first find the pass's rows (in
  // the owners' buffers for pulled results), then each takes 16-byte
  // chunks of the tokens' rows, all top_k loads of a chunk in flight at
  // once.  Results read in an owner's buffer count as the payload its put
  // would have (the host's statistics do the same).
  const int32_t K = s.top_k, tokens = h.state->tokens;
  const int32_t group = K >= kThreadsPerCta ? 1 : min(kSumTokens, kThreadsPerCta / K);  // rows: group x K
  const bool chunked = s.row_bytes() % 16 == 0 && (reinterpret_cast<uintptr_t>(out) & 15) == 0;
  const int64_t per_row = chunked ? s.row_bytes() / 16 : s.hidden;  // a thread's items in one token's row
  const int64_t lo = int64_t(tokens) * blockIdx.x / gridDim.x, hi = int64_t(tokens) * (blockIdx.x + 1) / gridDim.x;
  uint64_t pulled_remote = 0, pulled_local = 0;
  for (int64_t t0 = lo; t0 < hi; t0 += group) {
    const int32_t g = hi - t0 < group ? int32_t(hi - t0) : group;
    for (int32_t i = int32_t(threadIdx.x); i < g * K; i += int32_t(blockDim.x)) {
      const int32_t slot = h.slots[t0 * K + i], e = h.topk[t0 * K + i];
      bool pulled = false;
      // Not past what came back: after a failed wait (reported above) an
      // owner's pull index may still be its last call's, whose rows
      // plus this call's slot can lie past its buffer.
      rows[i] = slot == kNoSlot || slot >= back[e] ? nullptr : returned_row(h, mm, e, slot, &pulled);
      if (pulled) (s.owner(e) == h.rank ? pulled_local : pulled_remote) += uint64_t(s.row_bytes());
    }
    __syncthreads();
    for (int64_t item = threadIdx.x; item < g * per_row; item += blockDim.x) {
      const int64_t j = item / per_row, x = item % per_row, t = t0 + j;
      char* to = out + t * s.row_bytes();
      if (chunked) weighted_sum_chunk<T>(rows + j * K, weights + t * K, K, x * 16, to);
      else weighted_sum_element<T>(rows + j * K, weights + t * K, K, x, to);
    }
    __syncthreads();
  }
  braidMoeStats_t& st = h.state->stats;
  if (pulled_remote) atomicAdd(reinterpret_cast<unsigned long long*>(&st.payloadBytesRemote), pulled_remote);
  if (pulled_local) atomicAdd(reinterpret_cast<unsigned long long*>(&st.bytesLocal), pulled_local);
  if (blockIdx.x == 0 && threadIdx.x == 0) h.state->stats.combines += 1;
  finish(h, mm, call, true);
}

template <ncclDataType_t T>
int launch_combine_as(const DeviceMoe& h, int ctas, const void* expert_out, bool pull, const float* weights,
                      void* out, bool refused, cudaStream_t stream) {
  combine_kernel<T><<<ctas, kThreadsPerCta, kernel_shared_bytes(h.shape), stream>>>(
      h, static_cast<const char*>(expert_out), pull, weights, static_cast<char*>(out), refused);
  return int(cudaGetLastError());
}

}  // namespace

// Dispatch: first_row [blocks] int64, counts [blocks] int32, the planner's
// stage.  Combine: back [blocks] int32, then its sum's row pointers
// [group][top_k]: at most kThreadsPerCta of them, or one token's top_k <=
// experts = blocks.
size_t kernel_shared_bytes(const Shape& s) {
  return size_t(s.blocks()) * (sizeof(int64_t) + sizeof(int32_t)) + kStage * sizeof(int32_t);
}

int launch_dispatch(const DeviceMoe& h, int ctas, const void* tokens, bool pull, const int32_t* topk,
                    int32_t ntokens, void* out, int32_t* recv_counts, int64_t* dropped, bool refused,
                    cudaStream_t stream) {
  dispatch_kernel<<<ctas, kThreadsPerCta, kernel_shared_bytes(h.shape), stream>>>(
      h, static_cast<const char*>(tokens), pull, topk, ntokens, static_cast<char*>(out), recv_counts, dropped,
      refused);
  return int(cudaGetLastError());
}

int launch_combine(const DeviceMoe& h, int ctas, const void* expert_out, bool pull, const float* weights, void* out,
                   bool refused, cudaStream_t stream) {
  if (element_bytes(h.dtype) == 0) return int(cudaErrorInvalidValue);
  return with_element_type(h.dtype, [&]<ncclDataType_t T>() {
    return launch_combine_as<T>(h, ctas, expert_out, pull, weights, out, refused, stream);
  });
}

size_t kernel_static_shared_bytes() {
  cudaFuncAttributes attr;
  size_t most = cudaFuncGetAttributes(&attr, dispatch_kernel) == cudaSuccess ? attr.sharedSizeBytes : 0;
  for (ncclDataType_t type : {ncclFloat32, ncclFloat16, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2})
    with_element_type(type, [&]<ncclDataType_t T>() {
      if (cudaFuncGetAttributes(&attr, combine_kernel<T>) == cudaSuccess) most = std::max(most, attr.sharedSizeBytes);
      return 0;
    });
  return most;
}

int preload_moe_kernels() {
  cudaFuncAttributes attr;
  int e = int(cudaFuncGetAttributes(&attr, dispatch_kernel));
  for (ncclDataType_t type : {ncclFloat32, ncclFloat16, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2})
    if (e == 0)
      e = with_element_type(type, [&]<ncclDataType_t T>() {
        return int(cudaFuncGetAttributes(&attr, combine_kernel<T>));
      });
  return e;
}

int lsa_team_size(ncclComm_t comm) { return ncclTeamLsa(comm).nRanks; }

}  // namespace braid::moe::cuda

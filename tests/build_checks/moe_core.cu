// braid's MoE device library (include/braid/moe.cuh, on NCCL's nccl_device
// headers, over the protocol core of include/braid/moe/) compiles for a
// device as a user's kernel would use it: the memory model with every kind
// of NCCL cooperative group (a CTA, a warp, a tile, some lanes, a warp
// span), the planner, the senders of calls.h, and bounded waits.  Compiled
// (not run) by ctest moe_core_nvcc where nvcc exists; tests/gpu runs it.
#include "braid/moe.cuh"

using namespace braid::moe;

template <class Coop>
__device__ void every_primitive(Coop coop, ncclWindow_t window, const Shape& s, const WindowLayout& w,
                                const CallState& call, const DispatchRows& d, const CombineRows& c, int32_t* stop) {
  LsaMemory<Coop> mm(coop, window, 0, call.rank);
  dispatch_agent(mm, s, w, call, d, 0, 1);
  combine_agent(mm, s, w, call, c, 0, 1);
  put_rows(mm, 1, mm.window(1) + w.dispatch_data, s, call.rank, 0, 0, 1, d.tokens);
  if (arrive(mm, call.arrivals, call.call, 1))
    commit(mm, 1, reinterpret_cast<uint64_t*>(mm.window(1) + w.dispatch_signals), s, call.rank, d.sent, call.epoch);
  Timeout expired = Timeout::after(1000000000ull, stop);
  uint32_t count = 0;
  const auto* mine = reinterpret_cast<const uint64_t*>(mm.window(call.rank) + w.dispatch_signals);
  if (wait(mm, mine, s, 0, 0, call.epoch, &count, expired) == WaitResult::Timeout) *stop = 1;
  if (test(mm, mine, s, 1, 0, call.epoch, &count)) *stop = int32_t(count);
}

__global__ void moe_device_library(ncclWindow_t window, Shape s, CallState call, DispatchRows d, CombineRows c,
                                   int32_t* topk, int32_t* wanted, int32_t* slots, int32_t* stop) {
  __shared__ int32_t stage[256];
  const WindowLayout w = WindowLayout::of(s);
  const PlanResult plan = plan_routes_coop(ncclCoopCta(), s, topk, 64, wanted, slots, stage, 256);
  if (plan.bad_token >= 0) *stop = 1;
  every_primitive(ncclCoopCta(), window, s, w, call, d, c, stop);
  every_primitive(ncclCoopWarp(), window, s, w, call, d, c, stop);
  every_primitive(ncclCoopTile<8>(), window, s, w, call, d, c, stop);
  every_primitive(ncclCoopLanes(0xffu), window, s, w, call, d, c, stop);
  every_primitive(ncclCoopWarpSpan(0, 2, 1), window, s, w, call, d, c, stop);
}

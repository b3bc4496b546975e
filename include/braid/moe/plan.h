// MoE dispatch planning from the router's top-k indices (issue 40), written
// once for host C++ and CUDA (BRAID_HD).
//
// Input: topk[t * top_k + k], the global expert of token t's k-th choice, or
// -1 for none (a masked choice sends nothing).  Output: for every expert, the
// rows this rank wants to send it (`wanted`), and for every (token, k) the
// row of its (destination rank, local expert) block it goes to (`slots`), or
// kNoSlot when it sends nothing: no expert, or the block is full (an
// overflow row, counted in the result, never sent).
//
// Rows take their block's rows in token order, so the plan is deterministic
// and a block's first min(wanted, capacity) rows are exactly the rows sent.
// plan_routes is the sequential form (the host; one device thread);
// plan_routes_coop gets the same slots with a cooperative group's threads,
// one expert each, as the CUDA kernels plan, so both backends put every row
// in the same place.
#pragma once

#include <stdint.h>

#include "braid/hd.h"
#include "braid/moe/layout.h"

namespace braid::moe {

constexpr int32_t kNoSlot = -1;

struct PlanResult {
  int64_t routed = 0;   // (token, k) pairs with an expert
  int64_t dropped = 0;  // of those, past their block's capacity: not sent
  int64_t bad_token = -1;  // the first token whose index is out of range (then nothing else is valid)
};

// wanted[experts], slots[tokens * top_k].
BRAID_HD PlanResult plan_routes(const Shape& s, const int32_t* topk, int32_t tokens, int32_t* wanted,
                                int32_t* slots) {
  PlanResult r;
  for (int32_t e = 0; e < s.experts; ++e) wanted[e] = 0;
  for (int64_t i = 0; i < int64_t(tokens) * s.top_k; ++i) {
    const int32_t e = topk[i];
    if (e < 0) {
      slots[i] = kNoSlot;
      if (e != -1 && r.bad_token < 0) r.bad_token = i / s.top_k;
      continue;
    }
    if (e >= s.experts) {
      slots[i] = kNoSlot;
      if (r.bad_token < 0) r.bad_token = i / s.top_k;
      continue;
    }
    ++r.routed;
    const int32_t row = wanted[e]++;
    if (row < s.capacity) {
      slots[i] = row;
    } else {
      slots[i] = kNoSlot;
      ++r.dropped;
    }
  }
  return r;
}

// Rows actually sent to `expert`: its block's capacity bounds them.
BRAID_HD int32_t sent_rows(const Shape& s, const int32_t* wanted, int32_t expert) {
  return wanted[expert] < s.capacity ? wanted[expert] : s.capacity;
}

// *p = min(*p, v), atomically among the group's threads.
BRAID_HD void atomic_min(int32_t* p, int32_t v) {
#if defined(__CUDA_ARCH__)
  atomicMin(p, v);
#else
  int32_t seen = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (v < seen && !__atomic_compare_exchange_n(p, &seen, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
#endif
}

// plan_routes by a cooperative group (a CTA, a warp; NCCL's ncclCoop*
// interface: thread_rank(), size(), sync()), with the same slots and
// counts: the thread that owns expert e scans the (token, k) choices in
// order (staged through `stage`, `stage_len` ints of memory the group
// shares: shared memory on a device) and numbers e's choices as the
// sequential planner does.  The result is thread 0's.  The host tests run
// it with threads as the group.
template <class Coop>
BRAID_HD PlanResult plan_routes_coop(Coop coop, const Shape& s, const int32_t* topk, int32_t tokens, int32_t* wanted,
                                       int32_t* slots, int32_t* stage, int32_t stage_len) {
  const int64_t n = int64_t(tokens) * s.top_k;
  // Choices of no expert (-1) send nothing; any other out of range is a bad index.
  int32_t bad_token = -1;
  for (int64_t i = coop.thread_rank(); i < n; i += coop.size()) {
    const int32_t e = topk[i];
    if (e >= 0 && e < s.experts) continue;
    slots[i] = kNoSlot;
    if (e != -1 && bad_token < 0) bad_token = int32_t(i / s.top_k);
  }
  for (int32_t e0 = 0; e0 < s.experts; e0 += coop.size()) {
    const int32_t e = e0 + coop.thread_rank();
    int32_t count = 0;
    for (int64_t first = 0; first < n; first += stage_len) {
      const int32_t len = int32_t(n - first < stage_len ? n - first : stage_len);
      coop.sync();
      for (int32_t j = coop.thread_rank(); j < len; j += coop.size()) stage[j] = topk[first + j];
      coop.sync();
      if (e < s.experts)
        for (int32_t j = 0; j < len; ++j)
          if (stage[j] == e) {
            slots[first + j] = count < s.capacity ? count : kNoSlot;
            ++count;
          }
    }
    if (e < s.experts) wanted[e] = count;
  }
  coop.sync();
  if (coop.thread_rank() == 0) stage[0] = INT32_MAX;
  coop.sync();
  if (bad_token >= 0) atomic_min(&stage[0], bad_token);
  coop.sync();
  PlanResult r;
  if (coop.thread_rank() == 0) {
    for (int32_t e = 0; e < s.experts; ++e) {
      r.routed += wanted[e];
      if (wanted[e] > s.capacity) r.dropped += wanted[e] - s.capacity;
    }
    r.bad_token = stage[0] == INT32_MAX ? -1 : stage[0];
  }
  coop.sync();  // `stage` is the caller's again
  return r;
}

}  // namespace braid::moe

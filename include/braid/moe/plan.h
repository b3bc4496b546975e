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
// The sequential form here is what the host runs and what one device thread
// may run; a device-wide planner gets the same counts with one atomic per
// (token, k) and may order rows within a block differently, which the
// protocol allows: the slot travels with nothing, both sides read it from
// the plan.
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

}  // namespace braid::moe

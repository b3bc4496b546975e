// What a tuner plugin is shown and what its answer picks (tuner_choice.h).
#include "src/plan/tuner_choice.h"

#include <algorithm>
#include <array>

#include "braid/algorithms.h"
#include "braid/chunking.h"

namespace braid {

TunerTable tuner_table(const TunerOffer& offer) {
  TunerTable t;
  for (auto& row : t.cost)
    for (float& entry : row) entry = kTunerIgnore;
  if (offer.ring) t.cost[BRAID_TUNER_ALGO_RING][BRAID_TUNER_PROTO_SIMPLE] = float(offer.ring_us);
  if (offer.ll) t.cost[BRAID_TUNER_ALGO_RING][BRAID_TUNER_PROTO_LL] = float(offer.ll_us);
  return t;
}

TunerPick tuner_pick(const TunerOffer& offer, const TunerTable& answered) {
  const TunerTable shown = tuner_table(offer);
  const float ll = answered.cost[BRAID_TUNER_ALGO_RING][BRAID_TUNER_PROTO_LL];
  const float simple = answered.cost[BRAID_TUNER_ALGO_RING][BRAID_TUNER_PROTO_SIMPLE];
  const bool changed = (offer.ll && ll != shown.cost[BRAID_TUNER_ALGO_RING][BRAID_TUNER_PROTO_LL]) ||
                       (offer.ring && simple != shown.cost[BRAID_TUNER_ALGO_RING][BRAID_TUNER_PROTO_SIMPLE]);
  if (!changed) return TunerPick::BraidsOwn;
  // An entry the plugin set negative it took away (NCCL skips those too).
  const bool ll_runs = offer.ll && ll >= 0, ring_runs = offer.ring && simple >= 0;
  if (ll_runs && (!ring_runs || ll <= simple)) return TunerPick::LL;
  if (ring_runs) return TunerPick::Ring;
  return TunerPick::BraidsOwn;  // it took every offered entry away: nothing of braid's left to pick from
}

void apply_v2_answer(int algorithm, int protocol, TunerTable* table) {
  if (algorithm < 0 || algorithm >= kTunerAlgorithms || protocol < 0 || protocol >= kTunerProtocols) return;
  float& entry = table->cost[algorithm][protocol];
  if (entry != kTunerIgnore) entry = 0;
}

int tuner_func(Collective c) {
  switch (c) {
    case Collective::Broadcast: return BRAID_TUNER_BROADCAST;
    case Collective::Reduce: return BRAID_TUNER_REDUCE;
    case Collective::AllGather: return BRAID_TUNER_ALLGATHER;
    case Collective::ReduceScatter: return BRAID_TUNER_REDUCESCATTER;
    case Collective::AllReduce: return BRAID_TUNER_ALLREDUCE;
    default: return -1;
  }
}

uint64_t tuner_bytes(Collective c, int nranks, uint64_t count_bytes) {
  return count_bytes * std::max(input_blocks(c, nranks), output_blocks(c, nranks));
}

uint32_t ring_algorithm_bit(Collective c) {
  // Asked on every tuned call: the registry's names are looked through once.
  static const auto bits = [] {
    std::array<uint32_t, size_t(Collective::Custom) + 1> found{};
    const auto& registry = algorithm_registry();
    for (size_t i = 0; i < registry.size(); ++i)
      if (registry[i].name == "ring") found[size_t(registry[i].collective)] |= 1u << i;
    return found;
  }();
  return size_t(c) < bits.size() ? bits[size_t(c)] : 0;
}

}  // namespace braid

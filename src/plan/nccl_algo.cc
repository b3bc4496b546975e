#include "src/plan/nccl_algo.h"

#include <algorithm>
#include <vector>

#include "braid/algorithms.h"
#include "src/base/hash.h"
#include "src/plan/alg_selection.h"
#include "src/plan/nccl_lists.h"

namespace braid {
namespace {

// NCCL_ALGO's names, and the algSelection prefix each stands for ("ring"
// is braid's ring and NCCL's RING_*, so that "^ring" excludes both).
struct NcclAlgorithm {
  const char* name;
  const char* selects;
};
constexpr NcclAlgorithm kAlgorithms[] = {{"ring", "ring"},
                                         {"tree", "tree_"},
                                         {"collnet", "collnet_"},
                                         {"collnetchain", "collnet_chain"},
                                         {"collnetdirect", "collnet_direct"},
                                         {"nvls", "nvls_"},
                                         {"nvlstree", "nvlstree_"},
                                         {"pat", "pat_"}};

// A function's list as an algSelection: "ring,tree" stays a union,
// "^tree,nvls" becomes "^tree_+^nvls_" (excluded, all of them).
std::string list_as_selection(const NcclList& list) {
  std::string selection;
  for (const std::string& name : list.names) {
    const auto* a = std::find_if(std::begin(kAlgorithms), std::end(kAlgorithms),
                                 [&](const NcclAlgorithm& k) { return name == k.name; });
    if (!selection.empty()) selection += list.exclude ? "+" : ",";
    selection += std::string(list.exclude ? "^" : "") + a->selects;
  }
  return selection;
}

}  // namespace

Status parse_nccl_algo(const std::string& value, NcclAlgo* out) {
  *out = NcclAlgo{};
  std::vector<std::string> names;
  for (const NcclAlgorithm& a : kAlgorithms) names.push_back(a.name);
  NcclFunctionLists lists;
  BRAID_TRY(parse_nccl_function_lists("NCCL_ALGO", "algorithm", value, names, &lists));
  const auto& registry = algorithm_registry();
  for (const Collective collective : kNcclFunctions) {
    const int c = int(collective);
    const NcclList& list = lists.of[c];
    if (!list.set || (list.exclude && list.names.empty())) continue;  // "^": everything
    uint32_t admitted = 0;
    BRAID_TRY(parse_alg_selection(list_as_selection(list), collective, &admitted));
    uint32_t all = kFastPathsBit;
    for (size_t i = 0; i < registry.size() && i < 31; ++i)
      if (registry[i].collective == collective) all |= 1u << i;
    if (!(admitted & ~kFastPathsBit)) {  // no algorithm: the fast paths alone cannot serve every call
      out->unserved += fmt::format("{}{} ({})", out->unserved.empty() ? "" : ", ", nccl_function_name(collective),
                                   list.text());
      admitted = all;
    }
    out->admitted[c] = admitted == all ? 0 : admitted;
  }
  return Status::ok();
}

uint64_t nccl_algo_hash(const NcclAlgo& algo) {
  std::string text;
  for (int c = 0; c < int(Collective::Custom); ++c)
    if (algo.admitted[c]) text += fmt::format("{}:{:x};", c, algo.admitted[c]);
  return text.empty() ? 0 : fnv1a(text);
}

}  // namespace braid

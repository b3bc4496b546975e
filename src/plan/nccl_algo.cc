#include "src/plan/nccl_algo.h"

#include <algorithm>
#include <cctype>
#include <vector>

#include "braid/algorithms.h"
#include "src/plan/alg_selection.h"

namespace braid {
namespace {

struct NcclFunction {
  const char* name;
  Collective collective;
};
constexpr NcclFunction kFunctions[] = {{"broadcast", Collective::Broadcast},
                                       {"reduce", Collective::Reduce},
                                       {"allgather", Collective::AllGather},
                                       {"reducescatter", Collective::ReduceScatter},
                                       {"allreduce", Collective::AllReduce}};

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

std::string lower(std::string s) {
  std::string out;
  for (char c : s)
    if (!std::isspace(static_cast<unsigned char>(c))) out += char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// An entry's list as an algSelection: "ring,tree" stays a union,
// "^tree,nvls" becomes "^tree_+^nvls_" (excluded, all of them).
Status list_as_selection(const std::string& value, std::string list, std::string* selection) {
  const bool exclude = !list.empty() && list[0] == '^';
  if (exclude) list.erase(0, 1);
  selection->clear();
  for (const std::string& name : split(list, ',')) {
    const auto* a = std::find_if(std::begin(kAlgorithms), std::end(kAlgorithms),
                                 [&](const NcclAlgorithm& k) { return name == k.name; });
    if (a == std::end(kAlgorithms))
      return BRAID_ERROR(ncclInvalidArgument, "NCCL_ALGO=\"{}\": unknown algorithm \"{}\" (NCCL's: ring, tree, collnet, "
                         "collnetchain, collnetdirect, nvls, nvlstree, pat)", value, name);
    if (!selection->empty()) *selection += exclude ? "+" : ",";
    *selection += std::string(exclude ? "^" : "") + a->selects;
  }
  return Status::ok();
}

}  // namespace

Status parse_nccl_algo(const std::string& value, NcclAlgo* out) {
  *out = NcclAlgo{};
  const std::string text = lower(value);
  if (text.empty()) return Status::ok();
  // Each function's list: the last entry naming it, else the first entry's
  // if that names none.
  std::string all_list;
  bool have_all = false;
  std::string lists[int(Collective::Custom)];
  bool named[int(Collective::Custom)] = {};
  const std::vector<std::string> entries = split(text, ';');
  for (size_t e = 0; e < entries.size(); ++e) {
    const std::string& entry = entries[e];
    const size_t colon = entry.find(':');
    if (colon == std::string::npos) {
      if (e != 0)
        return BRAID_ERROR(ncclInvalidArgument, "NCCL_ALGO=\"{}\": entry \"{}\" names no function (only the first may "
                           "omit it)", value, entry);
      all_list = entry;
      have_all = true;
      continue;
    }
    const std::string function = entry.substr(0, colon);
    const auto* f = std::find_if(std::begin(kFunctions), std::end(kFunctions),
                                 [&](const NcclFunction& k) { return function == k.name; });
    if (f == std::end(kFunctions))
      return BRAID_ERROR(ncclInvalidArgument, "NCCL_ALGO=\"{}\": unknown function \"{}\" (NCCL's: broadcast, reduce, "
                         "allgather, reducescatter, allreduce)", value, function);
    lists[int(f->collective)] = entry.substr(colon + 1);
    named[int(f->collective)] = true;
  }
  const auto& registry = algorithm_registry();
  for (const NcclFunction& f : kFunctions) {
    const int c = int(f.collective);
    if (!named[c] && !have_all) continue;
    const std::string& list = named[c] ? lists[c] : all_list;
    if (list.empty() || list == "^")
      return BRAID_ERROR(ncclInvalidArgument, "NCCL_ALGO=\"{}\": no algorithm listed for {}", value, f.name);
    std::string selection;
    BRAID_TRY(list_as_selection(value, list, &selection));
    uint32_t admitted = 0;
    BRAID_TRY(parse_alg_selection(selection, f.collective, &admitted));
    uint32_t all = 0;
    for (size_t i = 0; i < registry.size() && i < 32; ++i)
      if (registry[i].collective == f.collective) all |= 1u << i;
    if (admitted == 0)
      out->unserved += fmt::format("{}{} ({})", out->unserved.empty() ? "" : ", ", f.name, list);
    out->admitted[c] = admitted == all ? 0 : admitted;
  }
  return Status::ok();
}

}  // namespace braid

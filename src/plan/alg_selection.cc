#include "src/plan/alg_selection.h"

#include <algorithm>
#include <cctype>
#include <vector>

#include "braid/algorithms.h"

namespace braid {
namespace {

// NCCL 2.31's selectable names (its algorithm registry), and the braid
// algorithm each stands for: "" where braid has none.
struct NcclName {
  const char* name;
  const char* braid;
};
constexpr NcclName kNcclNames[] = {
    {"TREE_LL", ""}, {"TREE_LL128", ""}, {"TREE_SIMPLE", ""},
    {"RING_LL", "ring"}, {"RING_LL128", "ring"}, {"RING_SIMPLE", "ring"},
    {"COLLNET_DIRECT_SIMPLE", ""}, {"COLLNET_CHAIN_SIMPLE", ""}, {"NVLS_SIMPLE", ""}, {"NVLSTREE_SIMPLE", ""},
    {"PAT_SIMPLE", ""},
    {"SYMK_AGxLL_R", ""}, {"SYMK_AGxLLMC_R", ""}, {"SYMK_RSxTmaLD_AGxTmaST", ""}, {"SYMK_RSxLD_AGxST", ""},
    {"SYMK_RSxLDMC_AGxSTMC", ""}, {"SYMK_LL", ""}, {"SYMK_LLMC", ""}, {"SYMK_TmaST", ""}, {"SYMK_ST", ""},
    {"SYMK_TmaSTMC", ""}, {"SYMK_STMC", ""}, {"SYMK_RailRing_LsaSTMC", ""}, {"SYMK_TmaLD", ""}, {"SYMK_LD", ""},
    {"SYMK_LDMC", ""}, {"SYMK_RailA2A_LsaLD", ""}, {"SYMK_RailA2A_LsaLDMC", ""},
};

// One selectable name: what it selects for the collective at hand (a
// registry index, kFastPaths, or -1).
struct Selectable {
  std::string name;
  int algorithm;
};
constexpr int kFastPaths = -2;

std::vector<Selectable> selectable_for(Collective c) {
  std::vector<Selectable> all;
  const auto& registry = algorithm_registry();
  auto index_of = [&](const std::string& name) {
    for (size_t i = 0; i < registry.size(); ++i)
      if (registry[i].collective == c && registry[i].name == name) return int(i);
    return -1;
  };
  std::vector<std::string> seen;
  for (const AlgorithmInfo& a : registry) {  // every collective's names: known words everywhere
    if (std::find(seen.begin(), seen.end(), a.name) != seen.end()) continue;
    seen.push_back(a.name);
    all.push_back({a.name, index_of(a.name)});
  }
  for (const NcclName& n : kNcclNames) all.push_back({n.name, *n.braid ? index_of(n.braid) : -1});
  all.push_back({"", kFastPaths});  // no name matches it: only a complement admits it
  return all;
}

bool starts_with_nocase(const std::string& name, const std::string& prefix) {
  if (prefix.size() > name.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(name[i])) != std::tolower(static_cast<unsigned char>(prefix[i])))
      return false;
  return true;
}

}  // namespace

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    size_t end = text.find(sep, start);
    parts.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return parts;
    start = end + 1;
  }
}

Status parse_alg_selection(const std::string& selection, Collective c, uint32_t* admitted) {
  *admitted = 0;
  std::string text;
  for (char ch : selection)
    if (!std::isspace(static_cast<unsigned char>(ch))) text += ch;
  const std::vector<Selectable> names = selectable_for(c);
  // Sets over `names`, as bit vectors.
  using Set = std::vector<bool>;
  Set chosen(names.size(), false);
  for (const std::string& term : split(text, ',')) {
    Set in_term(names.size(), true);
    for (std::string factor : split(term, '+')) {
      const bool negate = !factor.empty() && factor[0] == '^';
      if (negate) factor.erase(0, 1);
      if (factor.empty())
        return BRAID_ERROR(ncclInvalidArgument, "algSelection \"{}\": an empty name in term \"{}\"", selection, term);
      bool known = false;
      for (size_t i = 0; i < names.size(); ++i) {
        const bool match = starts_with_nocase(names[i].name, factor);
        known |= match;
        in_term[i] = in_term[i] && (match != negate);
      }
      if (!known)
        return BRAID_ERROR(ncclInvalidArgument, "algSelection \"{}\": no algorithm is named \"{}\" (braid's: ring, rd, "
                           "stragglar, direct, binomial, pairwise; or NCCL's)", selection, factor);
    }
    for (size_t i = 0; i < names.size(); ++i) chosen[i] = chosen[i] || in_term[i];
  }
  for (size_t i = 0; i < names.size(); ++i) {
    if (!chosen[i]) continue;
    if (names[i].algorithm >= 0) *admitted |= 1u << names[i].algorithm;
    if (names[i].algorithm == kFastPaths) *admitted |= kFastPathsBit;
  }
  return Status::ok();
}

std::string admitted_names(uint32_t admitted) {
  std::string out;
  const auto& registry = algorithm_registry();
  for (size_t i = 0; i < registry.size() && i < 31; ++i)
    if (admitted >> i & 1) out += (out.empty() ? "" : ", ") + registry[i].name;
  if (admitted & kFastPathsBit) out += out.empty() ? "fast paths" : ", fast paths";
  return out.empty() ? "none" : out;
}

}  // namespace braid

#include "src/plan/braid_algo.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "braid/algorithms.h"
#include "src/base/hash.h"
#include "src/plan/alg_selection.h"

namespace braid {
namespace {

std::string trimmed_lower(const std::string& s) {
  size_t begin = 0, end = s.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(s[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(s[end - 1]))) --end;
  std::string out = s.substr(begin, end - begin);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool has_algorithm(Collective c, const std::string& name) {
  const auto& registry = algorithm_registry();
  return std::any_of(registry.begin(), registry.end(),
                     [&](const AlgorithmInfo& a) { return a.collective == c && a.name == name; });
}

std::string algorithms_of(Collective c) {
  std::string names;
  for (const AlgorithmInfo& a : algorithm_registry())
    if (a.collective == c) names += (names.empty() ? "" : ", ") + a.name;
  return names;
}

}  // namespace

const std::string& BraidAlgo::of(Collective c) const {
  static const std::string none;
  return c < Collective::Custom ? pinned[int(c)] : none;
}

uint64_t BraidAlgo::pins_hash() const {
  std::string text;
  for (int c = 0; c < int(Collective::Custom); ++c)
    if (!pinned[c].empty()) text += fmt::format("{}={};", to_string(Collective(c)), pinned[c]);
  return text.empty() ? 0 : fnv1a(text);
}

BraidAlgo parse_braid_algo(const std::string& spec) {
  BraidAlgo out;
  if (spec.find('=') == std::string::npos) {  // one name, for every collective that has it
    const std::string name = trimmed_lower(spec);
    if (name.empty()) return out;
    for (int c = 0; c < int(Collective::Custom); ++c)
      if (has_algorithm(Collective(c), name)) out.pinned[c] = name;
    if (std::none_of(std::begin(out.pinned), std::end(out.pinned), [](const std::string& p) { return !p.empty(); }))
      out.problems.push_back(fmt::format("no collective has an algorithm named '{}'", name));
    return out;
  }
  for (const std::string& raw : split(spec, ',')) {
    const std::string entry = trimmed_lower(raw);
    if (entry.empty()) continue;
    const size_t eq = entry.find('=');
    if (eq == std::string::npos) {
      out.problems.push_back(fmt::format("'{}' names no collective (a list's entries are collective=algorithm)",
                                         entry));
      continue;
    }
    const std::string collective = trimmed_lower(entry.substr(0, eq)), name = trimmed_lower(entry.substr(eq + 1));
    const std::optional<Collective> c = collective_from_string(collective);
    if (!c || *c == Collective::Custom) {
      out.problems.push_back(fmt::format("'{}': no collective is named '{}' (allreduce, allgather, reducescatter, "
                                         "broadcast, reduce, alltoall, gather, scatter)", entry, collective));
      continue;
    }
    if (!has_algorithm(*c, name)) {
      out.problems.push_back(fmt::format("'{}': {} has no algorithm named '{}' ({}'s: {})", entry, collective, name,
                                         collective, algorithms_of(*c)));
      continue;
    }
    out.pinned[int(*c)] = name;
  }
  return out;
}

}  // namespace braid

#include "src/plan/nccl_lists.h"

#include <algorithm>
#include <cctype>

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

std::string lower_without_spaces(const std::string& s) {
  std::string out;
  for (char c : s)
    if (!std::isspace(static_cast<unsigned char>(c))) out += char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

bool NcclList::admits(const std::string& name) const {
  const bool listed = std::find(names.begin(), names.end(), name) != names.end();
  return exclude ? !listed : listed;
}

std::string NcclList::text() const {
  std::string out = exclude ? "^" : "";
  for (size_t i = 0; i < names.size(); ++i) out += (i ? "," : "") + names[i];
  return out;
}

const char* nccl_function_name(Collective c) {
  for (const NcclFunction& f : kFunctions)
    if (f.collective == c) return f.name;
  return nullptr;
}

Status parse_nccl_function_lists(const char* variable, const char* noun, const std::string& value,
                                 const std::vector<std::string>& names, NcclFunctionLists* out) {
  *out = NcclFunctionLists{};
  // Later entries overwrite earlier ones, as in NCCL; empty entries and
  // names are skipped (NCCL splits with strtok).
  bool first = true;
  for (const std::string& entry : split(lower_without_spaces(value), ';')) {
    if (entry.empty()) continue;
    const size_t colon = entry.find(':');
    if (colon == std::string::npos && !first)
      return BRAID_ERROR(ncclInvalidUsage, "{}=\"{}\": entry \"{}\" names no function (only the first may omit it)",
                         variable, value, entry);
    first = false;
    const NcclFunction* f = nullptr;
    if (colon != std::string::npos) {
      const std::string function = entry.substr(0, colon);
      f = std::find_if(std::begin(kFunctions), std::end(kFunctions),
                       [&](const NcclFunction& k) { return function == k.name; });
      if (f == std::end(kFunctions))
        return BRAID_ERROR(ncclInvalidUsage, "{}=\"{}\": unknown function \"{}\" (NCCL's: broadcast, reduce, "
                           "allgather, reducescatter, allreduce)", variable, value, function);
    }
    std::string text = colon == std::string::npos ? entry : entry.substr(colon + 1);
    NcclList list;
    list.set = true;
    list.exclude = !text.empty() && text[0] == '^';
    if (list.exclude) text.erase(0, 1);
    for (const std::string& name : split(text, ',')) {
      if (name.empty()) continue;
      if (std::find(names.begin(), names.end(), name) == names.end())
        return BRAID_ERROR(ncclInvalidUsage, "{}=\"{}\": unknown {} \"{}\" (NCCL's: {})", variable, value, noun,
                           name, joined(names));
      list.names.push_back(name);
    }
    // "^" alone excludes nothing: everything, as in NCCL.  An empty list
    // would admit nothing, which NCCL fails later, when no algorithm is left.
    if (!list.exclude && list.names.empty())
      return BRAID_ERROR(ncclInvalidUsage, "{}=\"{}\": no {} listed for {}", variable, value, noun,
                         f ? f->name : "any function");
    if (f) {
      out->of[int(f->collective)] = list;
    } else {
      for (const NcclFunction& k : kFunctions) out->of[int(k.collective)] = list;
    }
  }
  return Status::ok();
}

}  // namespace braid

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
  const std::string text = lower_without_spaces(value);
  if (text.empty()) return Status::ok();
  // Each function's list text: the last entry naming it, else the first
  // entry's if that names none.
  std::string all_list, lists[int(Collective::Custom)];
  bool have_all = false, named[int(Collective::Custom)] = {};
  const std::vector<std::string> entries = split(text, ';');
  for (size_t e = 0; e < entries.size(); ++e) {
    const std::string& entry = entries[e];
    const size_t colon = entry.find(':');
    if (colon == std::string::npos) {
      if (e != 0)
        return BRAID_ERROR(ncclInvalidArgument, "{}=\"{}\": entry \"{}\" names no function (only the first may omit "
                           "it)", variable, value, entry);
      all_list = entry;
      have_all = true;
      continue;
    }
    const std::string function = entry.substr(0, colon);
    const auto* f = std::find_if(std::begin(kFunctions), std::end(kFunctions),
                                 [&](const NcclFunction& k) { return function == k.name; });
    if (f == std::end(kFunctions))
      return BRAID_ERROR(ncclInvalidArgument, "{}=\"{}\": unknown function \"{}\" (NCCL's: broadcast, reduce, "
                         "allgather, reducescatter, allreduce)", variable, value, function);
    lists[int(f->collective)] = entry.substr(colon + 1);
    named[int(f->collective)] = true;
  }
  for (const NcclFunction& f : kFunctions) {
    const int c = int(f.collective);
    if (!named[c] && !have_all) continue;
    std::string list = named[c] ? lists[c] : all_list;
    NcclList& l = out->of[c];
    l.set = true;
    l.exclude = !list.empty() && list[0] == '^';
    if (l.exclude) list.erase(0, 1);
    if (list.empty())
      return BRAID_ERROR(ncclInvalidArgument, "{}=\"{}\": no {} listed for {}", variable, value, noun, f.name);
    for (const std::string& name : split(list, ',')) {
      if (std::find(names.begin(), names.end(), name) == names.end())
        return BRAID_ERROR(ncclInvalidArgument, "{}=\"{}\": unknown {} \"{}\" (NCCL's: {})", variable, value, noun,
                           name, joined(names));
      l.names.push_back(name);
    }
  }
  return Status::ok();
}

}  // namespace braid

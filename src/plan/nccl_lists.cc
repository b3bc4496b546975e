#include "src/plan/nccl_lists.h"

#include <algorithm>
#include <cctype>

#include "src/plan/alg_selection.h"

namespace braid {
namespace {

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
  switch (c) {
    case Collective::Broadcast: return "broadcast";
    case Collective::Reduce: return "reduce";
    case Collective::AllGather: return "allgather";
    case Collective::ReduceScatter: return "reducescatter";
    case Collective::AllReduce: return "allreduce";
    default: return nullptr;
  }
}

Status parse_nccl_function_lists(const char* variable, const char* noun, const std::string& value,
                                 const std::vector<std::string>& names, NcclFunctionLists* out) {
  *out = NcclFunctionLists{};
  const std::string lowered = lower_without_spaces(value);
  // Later entries overwrite earlier ones, as in NCCL; empty entries and
  // names are skipped (NCCL splits with strtok).  Only the entry the value
  // starts with may omit the function (NCCL compares the entry's address
  // with the string's: ";ring" fails there).
  size_t at = 0;
  for (const std::string& entry : split(lowered, ';')) {
    const bool first = at == 0;
    at += entry.size() + 1;
    if (entry.empty()) continue;
    // NCCL's strtok on ':': the function, then the list up to the next ':'
    // (the rest is ignored), empty pieces skipped.
    std::vector<std::string> pieces;
    for (const std::string& piece : split(entry, ':'))
      if (!piece.empty()) pieces.push_back(piece);
    if (pieces.empty()) continue;
    const auto function_named = [](const std::string& name) {
      return std::find_if(std::begin(kNcclFunctions), std::end(kNcclFunctions),
                          [&](Collective c) { return name == nccl_function_name(c); });
    };
    // "allreduce:" lists nothing (NCCL reads it as a list of one unknown name).
    if (pieces.size() == 1 && entry.find(':') != std::string::npos &&
        function_named(pieces[0]) != std::end(kNcclFunctions))
      return BRAID_ERROR(ncclInvalidUsage, "{}=\"{}\": no {} listed for {}", variable, value, noun, pieces[0]);
    if (pieces.size() == 1 && !first)
      return BRAID_ERROR(ncclInvalidUsage, "{}=\"{}\": entry \"{}\" names no function (only the first may omit it)",
                         variable, value, entry);
    const Collective* f = nullptr;  // null: every function
    if (pieces.size() > 1) {
      f = function_named(pieces[0]);
      if (f == std::end(kNcclFunctions))
        return BRAID_ERROR(ncclInvalidUsage, "{}=\"{}\": unknown function \"{}\" (NCCL's: broadcast, reduce, "
                           "allgather, reducescatter, allreduce)", variable, value, pieces[0]);
    }
    std::string text = pieces.size() > 1 ? pieces[1] : pieces[0];
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
                         f ? nccl_function_name(*f) : "any function");
    if (f) {
      out->of[int(*f)] = list;
    } else {
      for (const Collective c : kNcclFunctions) out->of[int(c)] = list;
    }
  }
  return Status::ok();
}

}  // namespace braid

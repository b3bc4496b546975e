#include "tools/braid/schedule_source.h"

#include <fmt/format.h>

#include <algorithm>

#include "braid/algorithms.h"
#include "braid/schedule_library.h"

namespace braid::cli {

namespace {

// A file says its collective, ranks and root: an option that says otherwise
// is a mistake to point out (verifying the file for 8 ranks would check nothing of the sort).
bool check_file_matches(const ScheduleSource& source, const Schedule& s, std::string* error) {
  std::string why;
  if (!source.algorithm.empty())
    why = fmt::format("-a {} names a built-in algorithm; give a file or -a, not both", source.algorithm);
  else if (auto c = collective_from_string(source.collective); !source.collective.empty() && c != s.collective)
    why = fmt::format("-c {}, but the file's schedule is {}", source.collective, to_string(s.collective));
  else if (source.nranks != 0 && source.nranks != s.nranks)
    why = fmt::format("-n {}, but the file's schedule is for {} ranks", source.nranks, s.nranks);
  else if (source.root >= 0 && source.root != s.root)
    why = s.root < 0 ? fmt::format("-r {}, but the file's {} schedule has no root", source.root, to_string(s.collective))
                     : fmt::format("-r {}, but the file's schedule has root {}", source.root, s.root);
  if (why.empty()) return true;
  return *error = fmt::format("{}: {}", source.file, why), false;
}

}  // namespace

bool load_schedule(const ScheduleSource& source, Schedule* out, std::string* error) {
  if (!source.file.empty()) {  // braid JSON or MSCCL XML
    return load_schedule_file(source.file, out, error) && check_file_matches(source, *out, error);
  }
  if (source.collective.empty() && source.algorithm.empty())
    return *error = "give a schedule file, or a built-in one with -a ALGO -c COLL -n N", false;
  auto collective = collective_from_string(source.collective);
  if (!collective) {
    *error = fmt::format("unknown collective '{}'", source.collective);
    return false;
  }
  if (source.nranks < 1) {
    *error = "need -n/--nranks >= 1";
    return false;
  }
  for (const AlgorithmInfo& algo : algorithm_registry()) {
    if (algo.name != source.algorithm || algo.collective != *collective) continue;
    const int root = std::max(source.root, 0);
    if (algo.rooted && root >= source.nranks) {
      *error = fmt::format("root {} out of range for {} ranks", root, source.nranks);
      return false;
    }
    *out = algo.make(source.nranks, root);
    return true;
  }
  std::string known;
  for (const AlgorithmInfo& algo : algorithm_registry())
    if (algo.collective == *collective) known += (known.empty() ? "" : ", ") + algo.name;
  *error = fmt::format("no algorithm '{}' for {} (known: {})", source.algorithm, source.collective, known);
  return false;
}

}  // namespace braid::cli

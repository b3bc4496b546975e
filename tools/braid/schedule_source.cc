#include "tools/braid/schedule_source.h"

#include <fmt/format.h>


#include "braid/algorithms.h"
#include "braid/schedule_library.h"

namespace braid::cli {

bool load_schedule(const ScheduleSource& source, Schedule* out, std::string* error) {
  if (!source.file.empty()) {
    return load_schedule_file(source.file, out, error);  // braid JSON or MSCCL XML
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
    if (algo.rooted && (source.root < 0 || source.root >= source.nranks)) {
      *error = fmt::format("root {} out of range for {} ranks", source.root, source.nranks);
      return false;
    }
    *out = algo.make(source.nranks, source.root);
    return true;
  }
  std::string known;
  for (const AlgorithmInfo& algo : algorithm_registry())
    if (algo.collective == *collective) known += (known.empty() ? "" : ", ") + algo.name;
  *error = fmt::format("no algorithm '{}' for {} (known: {})", source.algorithm, source.collective, known);
  return false;
}

}  // namespace braid::cli

// Schedules loaded from files: one file (braid JSON or MSCCL XML, by
// extension) or a directory of them (BRAID_SCHEDULES), and the lookup the
// planner does for each call.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "braid/schedule.h"

namespace braid {

// .xml: MSCCL XML; anything else: braid JSON.  Never throws.
bool load_schedule_file(const std::string& path, Schedule* out, std::string* error);
// Writes .xml as MSCCL XML (current dialect) and anything else as braid JSON.
bool save_schedule_file(const std::string& path, const Schedule& schedule, std::string* error);

enum class Placement { InPlace, OutOfPlace, Unknown };

struct ScheduleLibrary {
  std::vector<std::shared_ptr<const Schedule>> schedules;  // each verified
  std::vector<std::string> rejected;                       // "file: why", one per skipped file
  std::vector<std::string> files;                          // the file each schedule came from

  // Every *.json and *.xml in `dir` (not recursive), verified; files that do
  // not parse or verify are listed in `rejected`, not loaded.
  static ScheduleLibrary load_directory(const std::string& dir);

  // The first schedule (in file name order) for this call: same collective and
  // rank count, the placement supported (Unknown: both must be), and
  // min_bytes <= bytes <= max_bytes; nullptr if none.
  std::shared_ptr<const Schedule> find(Collective c, int nranks, Placement placement, uint64_t bytes) const;
};

}  // namespace braid

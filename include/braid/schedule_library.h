// Schedules loaded from files, and the lookup the planner does for each call.
//
// Where they come from (src/plan/planner.h reads the variables):
//   BRAID_SCHEDULES  a file, a directory (searched recursively: msccl-scheduler
//                    keeps one folder per SKU) or a colon-separated list of them
//   MSCCL_XML_FILES  colon-separated MSCCL XML files (the older MSCCL runtime)
//   MSCCL_CONFIG     an MSCCL registration file, <msccl_algos><load path=...
//                    minbytes=... maxbytes=... proto=.../></msccl_algos>
//   MSCCL_ALGO_DIR   the *.xml files of one directory (msccl-executor)
// All of them are loaded, in that order; a call takes the first schedule that
// fits it, so BRAID_SCHEDULES comes before anything the MSCCL variables name.
// Inside a directory files are taken in path order, as msccl-executor does.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "braid/schedule.h"

namespace braid {

// MSCCL XML or braid JSON, told apart by the first character (XML starts
// with '<', whatever the file is called).  An MSCCL file gets the fewest
// Schedule::slots it verifies with (its multi-chunk steps and allpairs
// exchanges may need more than kMinSlots) and, where it declares one
// placement, the other too if the same steps verify there.  Never throws.
bool load_schedule_file(const std::string& path, Schedule* out, std::string* error);
// Writes .xml as MSCCL XML (current dialect) and anything else as braid JSON.
bool save_schedule_file(const std::string& path, const Schedule& schedule, std::string* error);

enum class Placement { InPlace, OutOfPlace, Unknown };

struct ScheduleLibrary {
  std::vector<std::shared_ptr<const Schedule>> schedules;  // each verified
  std::vector<std::string> rejected;                       // "file: why", one per skipped file
  std::vector<std::string> files;                          // the file each schedule came from

  // What `path` names: a schedule file, a registration file (<msccl_algos>,
  // whose relative paths start from its own directory) or a directory: its
  // *.json and *.xml files, in path order, recursively unless `recursive`
  // is false.  Files that do not parse or verify go to `rejected`.
  void add(const std::string& path, bool recursive = true);
  // Each entry of a colon-separated list, in order.
  void add_list(const std::string& paths, bool recursive = true);

  // The first schedule loaded for this call: same collective and rank
  // count, the placement supported (Unknown: both must be), and
  // min_bytes <= message_bytes <= max_bytes (message_bytes in schedule.h);
  // nullptr if none.  `file`, if given, gets where it came from.
  std::shared_ptr<const Schedule> find(Collective c, int nranks, Placement placement, uint64_t message_bytes,
                                       std::string* file = nullptr) const;

 private:
  // `registered`: named by a registration file, where another registration
  // file is refused (MSCCL's registrations load schedules; one that loaded
  // itself, or two that loaded each other, would recurse without end).
  void add_file(const std::string& path, const std::string& shown, bool registered = false);
  void add_registrations(const std::string& path, const std::string& text);
};

// The variables above, as given.
struct ScheduleSources {
  std::string braid_schedules, msccl_xml_files, msccl_config, msccl_algo_dir;
};
ScheduleLibrary load_schedule_sources(const ScheduleSources& sources);

}  // namespace braid

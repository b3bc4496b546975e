// Where the CLI gets a schedule: a file (JSON or MSCCL XML), or a built-in generator named by
// algorithm, collective, rank count and root.
#pragma once

#include <string>

#include "braid/schedule.h"

namespace braid::cli {

struct ScheduleSource {
  std::string file;        // a schedule file (braid JSON, or MSCCL XML if .xml), or empty
  std::string algorithm;   // registry name, e.g. "ring"
  std::string collective;  // e.g. "allreduce"
  int nranks = 0;
  int root = -1;  // -1: not given (0 for a rooted built-in)
};

// Loads or generates the schedule; false with a message on bad input, and
// where -a/-c/-n/-r contradict the file rather than let them pass unread.
bool load_schedule(const ScheduleSource& source, Schedule* out, std::string* error);

}  // namespace braid::cli

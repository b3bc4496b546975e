// A human-readable listing of a schedule: one block per rank, one line per op.
#pragma once

#include <string>

#include "braid/schedule.h"

namespace braid::cli {

std::string schedule_to_text(const Schedule& schedule);

}  // namespace braid::cli

// braid's JSON form of a Schedule (lossless round trip).
#pragma once

#include <string>

#include "braid/schedule.h"

namespace braid {

std::string schedule_to_json(const Schedule& schedule);
// Parses and checks the shape (types, enum names, ranges); returns false with
// a message naming the offending field on bad input.  Never throws.
bool schedule_from_json(const std::string& text, Schedule* out, std::string* error);

}  // namespace braid

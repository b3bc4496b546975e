// The time at the head of a log line, as NCCL 2.26+ writes it:
//
// - NCCL_DEBUG_TIMESTAMP_LEVELS: the levels whose lines get one, a comma
//   list of VERSION, WARN, INFO, ABORT, TRACE or ALL, any case, "^" in
//   front for all but those; default WARN.  A name NCCL does not know makes
//   the whole value NCCL's default, as NCCL's parser does.  (braid writes
//   no ABORT lines: the name is taken and changes nothing.)
// - NCCL_DEBUG_TIMESTAMP_FORMAT: a strftime format, default "[%F %T] ";
//   "%1f".."%9f" is that many digits of the second's fraction, and "_"
//   stands for a space (hard to pass on a command line).  The same on
//   every line, so it is prepared once.
#pragma once

#include <cstdint>
#include <ctime>
#include <string>

namespace braid {

// Bit (1 << int(LogLevel)) for each level that gets a timestamp.
uint32_t parse_timestamp_levels(const char* text);  // nullptr: unset

class TimestampFormat {
 public:
  explicit TimestampFormat(const char* text);  // nullptr: unset
  // The head for the moment `now` (local time), "" for an empty format.
  std::string format(const timespec& now) const;

 private:
  std::string before_, after_;  // around the fraction, if the format has one
  int digits_ = 0;              // of the fraction; 0: none
};

}  // namespace braid

// The time at the head of log lines (src/base/log_timestamp.h): which levels
// get it and how it is written, as NCCL 2.26+'s NCCL_DEBUG_TIMESTAMP_LEVELS
// and NCCL_DEBUG_TIMESTAMP_FORMAT; then a real log line with it.
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "src/base/log.h"
#include "src/base/log_timestamp.h"

using namespace braid;

namespace {

constexpr uint32_t bit(LogLevel l) { return 1u << int(l); }

// 2026-12-05 13:04:05.123456789 local time.
timespec moment() {
  std::tm tm{};
  tm.tm_year = 126, tm.tm_mon = 11, tm.tm_mday = 5, tm.tm_hour = 13, tm.tm_min = 4, tm.tm_sec = 5, tm.tm_isdst = -1;
  return timespec{std::mktime(&tm), 123456789};
}

std::string formatted(const char* format) { return TimestampFormat(format).format(moment()); }

}  // namespace

TEST_CASE("timestamp levels: NCCL's names, any case, ^ for all but, WARN by default", "[log]") {
  CHECK(parse_timestamp_levels(nullptr) == bit(LogLevel::Warn));
  CHECK(parse_timestamp_levels("INFO") == bit(LogLevel::Info));
  CHECK(parse_timestamp_levels(" warn , trace ") == (bit(LogLevel::Warn) | bit(LogLevel::Trace)));
  CHECK(parse_timestamp_levels("ALL") ==
        (bit(LogLevel::Version) | bit(LogLevel::Warn) | bit(LogLevel::Info) | bit(LogLevel::Trace)));
  CHECK(parse_timestamp_levels("ABORT") == 0);  // taken; braid writes no ABORT lines
  CHECK(parse_timestamp_levels("") == 0);
  const uint32_t all_but_info = parse_timestamp_levels("^INFO");
  CHECK((all_but_info & bit(LogLevel::Info)) == 0);
  CHECK((all_but_info & bit(LogLevel::Warn)) != 0);
  CHECK(parse_timestamp_levels("INFO,NOISE") == bit(LogLevel::Warn));  // a name NCCL lacks: its default
}

TEST_CASE("timestamp format: strftime, %Nf for the fraction, _ for a space", "[log]") {
  CHECK(formatted(nullptr) == "[2026-12-05 13:04:05] ");
  CHECK(formatted("%H:%M:%S.%3f ") == "13:04:05.123 ");
  CHECK(formatted("%T.%9f") == "13:04:05.123456789");
  CHECK(formatted("%1f|") == "1|");
  CHECK(formatted("[%F_%T]_") == "[2026-12-05 13:04:05] ");
  CHECK(formatted("%%3f %S") == "%3f 05");  // a literal percent sign is no fraction
  CHECK(formatted("") == "");
  CHECK(formatted("%0f") == "%0f");  // no digits: strftime's own (unknown) conversion
}

TEST_CASE("log lines start with the time at the levels NCCL_DEBUG_TIMESTAMP_LEVELS names", "[log]") {
  const std::string file = "/tmp/braid-timestamp-test-" + std::to_string(getpid()) + ".log";
  setenv("BRAID_DEBUG", "INFO", 1);
  setenv("BRAID_DEBUG_FILE", file.c_str(), 1);
  setenv("NCCL_DEBUG_TIMESTAMP_LEVELS", "INFO", 1);
  setenv("NCCL_DEBUG_TIMESTAMP_FORMAT", "<%Y>_", 1);
  log_reset();
  BRAID_INFO(kInit, "with the time");
  BRAID_WARN("without it");
  std::FILE* f = std::fopen(file.c_str(), "r");
  REQUIRE(f);
  char line[256] = {};
  REQUIRE(std::fgets(line, sizeof line, f));
  const std::string info = line;
  REQUIRE(std::fgets(line, sizeof line, f));
  const std::string warn = line;
  std::fclose(f);
  CHECK(info.rfind("<20", 0) == 0);
  CHECK(info.find("> ") == 5);  // "<2026> host:pid:tid ..."
  CHECK(info.find("braid INFO with the time") != std::string::npos);
  CHECK(warn.rfind("<", 0) == std::string::npos);
  CHECK(warn.find("braid WARN without it") != std::string::npos);
  for (const char* name :
       {"BRAID_DEBUG", "BRAID_DEBUG_FILE", "NCCL_DEBUG_TIMESTAMP_LEVELS", "NCCL_DEBUG_TIMESTAMP_FORMAT"})
    unsetenv(name);
  log_reset();
  std::remove(file.c_str());
}

TEST_CASE("NCCL_WARN_ENABLE_DEBUG_INFO=1: the first warning turns INFO on", "[log]") {
  setenv("BRAID_DEBUG", "WARN", 1);
  setenv("NCCL_WARN_ENABLE_DEBUG_INFO", "1", 1);
  log_reset();
  CHECK_FALSE(log_enabled(LogLevel::Info, kInit));
  // (to stderr: the line itself is not what this checks)
  BRAID_WARN("a warning that turns INFO on (expected in this test's output)");
  CHECK(log_enabled(LogLevel::Info, kInit));
  unsetenv("NCCL_WARN_ENABLE_DEBUG_INFO");
  log_reset();
  CHECK_FALSE(log_enabled(LogLevel::Info, kInit));
  unsetenv("BRAID_DEBUG");
  log_reset();
}

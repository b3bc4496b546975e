// NCCL-style logging: `host:pid:tid [dev] braid LEVEL msg`.
//
// Level from BRAID_DEBUG, else NCCL_DEBUG (VERSION|WARN|INFO|TRACE); subsystem
// filter from BRAID_DEBUG_SUBSYS / NCCL_DEBUG_SUBSYS (comma list, leading ^
// negates); output to BRAID_DEBUG_FILE / NCCL_DEBUG_FILE (%h host, %p pid)
// or stderr; the time in front of the levels NCCL_DEBUG_TIMESTAMP_LEVELS
// names (WARN by default), as NCCL_DEBUG_TIMESTAMP_FORMAT says
// (log_timestamp.h).  Settings are read once, on first use (log_reset
// re-reads).
#pragma once

#include <fmt/format.h>

#include <cstdarg>
#include <cstdint>
#include <string>

namespace braid {

enum class LogLevel : int { None = 0, Version = 1, Warn = 2, Info = 3, Trace = 4 };

enum LogSubsys : uint32_t {
  kInit = 1u << 0,
  kColl = 1u << 1,
  kP2P = 1u << 2,
  kShm = 1u << 3,
  kNet = 1u << 4,
  kGraph = 1u << 5,
  kTuning = 1u << 6,
  kEnv = 1u << 7,
  kAlloc = 1u << 8,
  kBootstrap = 1u << 9,
  kProfile = 1u << 10,
  kAllSubsys = ~0u,
};

bool log_enabled(LogLevel level, uint32_t subsys);
void log_write(LogLevel level, uint32_t subsys, const std::string& message);
void log_reset();  // re-read the environment (ncclResetDebugInit)

// Where lines go instead of braid's own output: a net plugin's copy of braid
// hands them to the logger of the NCCL that loaded it (its prefix, its
// NCCL_DEBUG_FILE).  Writing that file itself would write over the host's
// lines.  nullptr: braid's own output again.
using LogForward = void (*)(LogLevel level, uint32_t subsys, const char* message);
void log_forward_to(LogForward forward);

// NCCL's subsystem flags (ncclDebugLogSubSys) and braid's: the same bits
// up to ALLOC; NCCL_BOOTSTRAP (0x1000) and NCCL_PROFILE (0x4000) elsewhere.
// NCCL's bits braid lacks (CALL, PROXY, NVLS, REG, RAS) are dropped; no
// bit of braid's left gives `fallback`.
uint32_t subsys_from_nccl_flags(unsigned long flags, uint32_t fallback);
unsigned long nccl_flags_from_subsys(uint32_t subsys);

// What NCCL's plugins log through the ncclDebugLogger_t they are given:
// NCCL's level (NCCL_LOG_WARN 2, INFO 3, TRACE 5, else VERSION) and
// subsystem flags (none of braid's: `fallback`), printf arguments; written
// to braid's log as "`who`: message (file:line)".
void plugin_vlog(int nccl_level, unsigned long nccl_flags, uint32_t fallback, const char* who, const char* file,
                 int line, const char* fmt, va_list args);
// NCCL's level as braid's: NCCL_LOG_WARN 2, INFO 3, TRACE 5, else VERSION.
LogLevel log_level_from_nccl(int nccl_level);

// A line from code that must not log now: it runs while the log reads its
// settings (the env plugin, env_plugin.h).  Written before the next line
// the log writes, or at log_write_later_lines, where its level and
// subsystem are enabled then; beyond 1000 waiting lines, only counted.
void log_later(LogLevel level, uint32_t subsys, std::string message);
void log_write_later_lines();

}  // namespace braid

#define BRAID_LOG(level, subsys, ...)                                                     \
  do {                                                                                    \
    if (::braid::log_enabled(::braid::LogLevel::level, (subsys)))                         \
      ::braid::log_write(::braid::LogLevel::level, (subsys), ::fmt::format(__VA_ARGS__)); \
  } while (0)
#define BRAID_WARN(...) BRAID_LOG(Warn, ::braid::kAllSubsys, __VA_ARGS__)
#define BRAID_INFO(subsys, ...) BRAID_LOG(Info, (subsys), __VA_ARGS__)
#define BRAID_TRACE(subsys, ...) BRAID_LOG(Trace, (subsys), __VA_ARGS__)

// NCCL-style logging.  Settings are parsed once (under a mutex) and cached in
// atomics so log_enabled() costs two loads on the hot path.
#include "src/base/log.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "src/base/env.h"
#include "src/base/log_timestamp.h"

namespace braid {
namespace {

struct SubsysName {
  const char* name;
  uint32_t bit;
};
constexpr SubsysName kSubsysNames[] = {
    {"INIT", kInit}, {"COLL", kColl},   {"P2P", kP2P},     {"SHM", kShm},     {"NET", kNet},
    {"GRAPH", kGraph}, {"TUNING", kTuning}, {"ENV", kEnv}, {"ALLOC", kAlloc}, {"BOOTSTRAP", kBootstrap},
    {"PROFILE", kProfile},
    {"ALL", kAllSubsys},
};

std::mutex g_mutex;
std::atomic<bool> g_initialized{false};
std::atomic<int> g_level{0};
std::atomic<uint32_t> g_subsys{kAllSubsys};
FILE* g_file = nullptr;  // guarded by g_mutex; nullptr means stderr
uint32_t g_timestamp_levels = 0;  // guarded by g_mutex (log_timestamp.h)
TimestampFormat g_timestamp_format{nullptr};  // idem
bool g_warn_raises_to_info = false;  // NCCL_WARN_ENABLE_DEBUG_INFO; idem
std::atomic<LogForward> g_forward{nullptr};

// The first of two variables that is set; "" when neither is.
std::string first_env(const char* a, const char* b) {
  std::string v = env_raw(a);
  return v.empty() ? env_raw(b) : v;
}

const char* or_null(const std::string& s) { return s.empty() ? nullptr : s.c_str(); }

LogLevel parse_level(const char* text) {
  if (!text) return LogLevel::None;
  if (strcasecmp(text, "VERSION") == 0) return LogLevel::Version;
  if (strcasecmp(text, "WARN") == 0) return LogLevel::Warn;
  if (strcasecmp(text, "INFO") == 0) return LogLevel::Info;
  if (strcasecmp(text, "TRACE") == 0 || strcasecmp(text, "ABORT") == 0) return LogLevel::Trace;
  return LogLevel::None;
}

// "INIT,COLL" selects those; "^INIT" selects everything but INIT.
uint32_t parse_subsys(const char* text) {
  if (!text) return kInit | kBootstrap | kEnv;  // NCCL's default subsystem mask
  bool negate = text[0] == '^';
  if (negate) ++text;
  uint32_t mask = 0;
  std::string_view rest(text);
  while (!rest.empty()) {
    size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    for (const SubsysName& s : kSubsysNames)
      if (item.size() == std::strlen(s.name) && strncasecmp(item.data(), s.name, item.size()) == 0)
        mask |= s.bit;
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  }
  return negate ? ~mask : mask;
}

std::string hostname() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  char* dot = std::strchr(host, '.');
  if (dot) *dot = '\0';
  return host;
}

// Expands %h (host) and %p (pid) in a NCCL_DEBUG_FILE pattern.
std::string expand_file_pattern(const char* pattern) {
  std::string out;
  for (const char* p = pattern; *p; ++p) {
    if (p[0] == '%' && p[1] == 'h') {
      out += hostname();
      ++p;
    } else if (p[0] == '%' && p[1] == 'p') {
      out += std::to_string(getpid());
      ++p;
    } else {
      out += *p;
    }
  }
  return out;
}

void init_locked() {
  if (g_file) std::fclose(g_file);
  g_file = nullptr;
  std::string file = first_env("BRAID_DEBUG_FILE", "NCCL_DEBUG_FILE");
  // Forwarded lines go to the host's file: opening it here would truncate it.
  if (!file.empty() && !g_forward.load()) g_file = std::fopen(expand_file_pattern(file.c_str()).c_str(), "w");
  g_subsys.store(parse_subsys(or_null(first_env("BRAID_DEBUG_SUBSYS", "NCCL_DEBUG_SUBSYS"))));
  g_timestamp_levels = parse_timestamp_levels(or_null(env_raw("NCCL_DEBUG_TIMESTAMP_LEVELS")));
  g_timestamp_format = TimestampFormat(or_null(env_raw("NCCL_DEBUG_TIMESTAMP_FORMAT")));
  g_warn_raises_to_info = env_raw("NCCL_WARN_ENABLE_DEBUG_INFO") == "1";
  g_level.store(static_cast<int>(parse_level(or_null(first_env("BRAID_DEBUG", "NCCL_DEBUG")))));
  g_initialized.store(true, std::memory_order_release);
}

void ensure_initialized() {
  if (g_initialized.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_initialized.load()) init_locked();
}

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::Version: return "VERSION";
    case LogLevel::Warn: return "WARN";
    case LogLevel::Info: return "INFO";
    case LogLevel::Trace: return "TRACE";
    default: return "";
  }
}

}  // namespace

bool log_enabled(LogLevel level, uint32_t subsys) {
  ensure_initialized();
  if (static_cast<int>(level) > g_level.load(std::memory_order_relaxed)) return false;
  // Warnings and the version line are shown whatever the subsystem filter says.
  if (level <= LogLevel::Warn) return true;
  return (g_subsys.load(std::memory_order_relaxed) & subsys) != 0;
}

namespace {

// log_write's work, without the lines waiting.
void write_line(LogLevel level, uint32_t subsys, const std::string& message) {
  if (LogForward forward = g_forward.load(std::memory_order_acquire)) return forward(level, subsys, message.c_str());
  static const std::string host = hostname();
  long tid = syscall(SYS_gettid);
  std::string line = fmt::format("{}:{}:{} [-] braid {} {}\n", host, getpid(), tid, level_name(level), message);
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_timestamp_levels & (1u << int(level))) {
    timespec now{};
    clock_gettime(CLOCK_REALTIME, &now);
    line.insert(0, g_timestamp_format.format(now));
  }
  // As NCCL: the first warning turns INFO on, to say what led to the next.
  if (level == LogLevel::Warn && g_warn_raises_to_info && g_level.load() < int(LogLevel::Info))
    g_level.store(int(LogLevel::Info));
  FILE* out = g_file ? g_file : stderr;
  std::fwrite(line.data(), 1, line.size(), out);
  std::fflush(out);
}

// Lines logged later (log_later).
struct LaterLine {
  LogLevel level;
  uint32_t subsys;
  std::string message;
};
constexpr size_t kMaxLaterLines = 1000;
std::mutex g_later_mutex;  // never held while writing: log_later may be called under g_mutex
std::vector<LaterLine> g_later;
size_t g_later_dropped = 0;
std::atomic<bool> g_later_waiting{false};

}  // namespace

void log_later(LogLevel level, uint32_t subsys, std::string message) {
  std::lock_guard<std::mutex> lock(g_later_mutex);
  if (g_later.size() < kMaxLaterLines) g_later.push_back({level, subsys, std::move(message)});
  else ++g_later_dropped;
  g_later_waiting.store(true, std::memory_order_release);
}

void log_write_later_lines() {
  if (!g_later_waiting.load(std::memory_order_acquire)) return;
  std::vector<LaterLine> lines;
  size_t dropped = 0;
  {
    std::lock_guard<std::mutex> lock(g_later_mutex);
    lines.swap(g_later);
    dropped = std::exchange(g_later_dropped, 0);
    g_later_waiting.store(false, std::memory_order_relaxed);
  }
  for (const LaterLine& l : lines)
    if (log_enabled(l.level, l.subsys)) write_line(l.level, l.subsys, l.message);
  if (dropped && log_enabled(LogLevel::Info, kEnv))
    write_line(LogLevel::Info, kEnv, fmt::format("{} more lines logged while the log could not write were dropped",
                                                 dropped));
}

void log_write(LogLevel level, uint32_t subsys, const std::string& message) {
  log_write_later_lines();
  write_line(level, subsys, message);
}

void log_forward_to(LogForward forward) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_forward.store(forward, std::memory_order_release);
  g_initialized.store(false, std::memory_order_release);  // open (or not) the file again
  if (g_file) std::fclose(g_file);
  g_file = nullptr;
}

void log_reset() {
  std::lock_guard<std::mutex> lock(g_mutex);
  init_locked();
}

namespace {
constexpr unsigned long kNcclBootstrap = 0x1000, kNcclProfile = 0x4000;
constexpr uint32_t kSharedBits = kBootstrap - 1;  // INIT .. ALLOC: the same bits in both
}  // namespace

uint32_t subsys_from_nccl_flags(unsigned long flags, uint32_t fallback) {
  uint32_t subsys = uint32_t(flags) & kSharedBits;
  if (flags & kNcclBootstrap) subsys |= kBootstrap;
  if (flags & kNcclProfile) subsys |= kProfile;
  return subsys ? subsys : fallback;
}

unsigned long nccl_flags_from_subsys(uint32_t subsys) {
  unsigned long flags = subsys & kSharedBits;
  if (subsys & kBootstrap) flags |= kNcclBootstrap;
  if (subsys & kProfile) flags |= kNcclProfile;
  return flags;
}

LogLevel log_level_from_nccl(int nccl_level) {
  return nccl_level == 2 ? LogLevel::Warn : nccl_level == 5 ? LogLevel::Trace
                                          : nccl_level == 3 ? LogLevel::Info
                                                            : LogLevel::Version;
}

void plugin_vlog(int nccl_level, unsigned long nccl_flags, uint32_t fallback, const char* who, const char* file,
                 int line, const char* fmt, va_list args) {
  const uint32_t subsys = subsys_from_nccl_flags(nccl_flags, fallback);
  const LogLevel level = log_level_from_nccl(nccl_level);
  if (!log_enabled(level, subsys)) return;
  char text[1024];
  std::vsnprintf(text, sizeof(text), fmt, args);
  log_write(level, subsys, fmt::format("{}: {} ({}:{})", who, text, file ? file : "?", line));
}

}  // namespace braid

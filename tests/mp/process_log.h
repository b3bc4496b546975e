// A log file per forked rank process, which the rank reads back to check
// what braid said (the path a call took, a warning): log_to_own_file() in
// the rank before its init, own_log() after.
#pragma once

#include <fmt/format.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>

#include "nccl.h"
#include "read_file.h"

namespace mp {

// One directory per test binary, made on first use (mkdtemp's template).
inline std::string process_log_dir() {
  static const std::string dir = [] {
    char templ[] = "/tmp/braid-rank-logs-XXXXXX";
    return std::string(mkdtemp(templ));
  }();
  return dir;
}

// BRAID_DEBUG=INFO for `subsystems` ("INIT,NET"), to this process's file.
inline void log_to_own_file(const char* subsystems) {
  setenv("BRAID_DEBUG", "INFO", 1);
  setenv("BRAID_DEBUG_SUBSYS", subsystems, 1);
  setenv("BRAID_DEBUG_FILE", (process_log_dir() + "/%p.log").c_str(), 1);
  // The forked child inherits the parent's settings, read once.  (NVIDIA's
  // 2.28.9 nccl.h, which the device API tests compile against, marks the
  // call deprecated; braid keeps it.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  ncclResetDebugInit();
#pragma GCC diagnostic pop
}

inline std::string own_log() { return read_file(fmt::format("{}/{}.log", process_log_dir(), getpid())); }

}  // namespace mp

// What the shared-memory board tests (arrival and duration boards) open:
// a board of this process's name space, every rank this process.
#pragma once

#include <unistd.h>

#include <chrono>
#include <string>

#include "src/transport/shm_board.h"

namespace board_test {

// A name no other test process uses: /braid-test-<kind>-<pid>-<what>.
inline std::string board_name(const char* kind, const char* what) {
  return "/braid-test-" + std::string(kind) + "-" + std::to_string(::getpid()) + "-" + what;
}

inline braid::BoardSetup setup_for(const std::string& name, int rank, int n, std::chrono::milliseconds timeout) {
  braid::BoardSetup s;
  s.name = name;
  s.what = "the test's board";
  s.rank = rank;
  s.nranks = n;
  s.pids.assign(size_t(n), int32_t(::getpid()));
  s.timeout = timeout;
  return s;
}

}  // namespace board_test

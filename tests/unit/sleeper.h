// A child process for the tests of process watches: it lives until it is
// killed (the test kills and reaps it).
#pragma once

#include <sys/types.h>
#include <unistd.h>

inline pid_t sleeper() {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::pause();
    ::_exit(0);
  }
  return pid;
}

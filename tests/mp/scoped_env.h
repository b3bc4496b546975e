// Sets an environment variable for a scope: tests that run in one process
// one after another (a whole test binary, as the TSan step runs them) must
// not leave their settings to the next.
#pragma once

#include <cstdlib>
#include <string>

struct ScopedEnv {
  ScopedEnv(const char* name, const std::string& value) : name(name) { setenv(name, value.c_str(), 1); }
  ~ScopedEnv() { unsetenv(name); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  const char* name;
};

// The registry of braid's configuration variables.
//
// Every BRAID_* variable is declared once in env.cc with its default and a
// one-line description; `braid env` prints the table.  Values are read from
// the environment when first asked for.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace braid {

struct EnvVar {
  const char* name;
  const char* default_value;
  const char* description;
};

const std::vector<EnvVar>& env_registry();

// The variable's value, or its registered default if unset.  Asking for an
// unregistered name is a programming error (aborts in debug builds).
std::string env_string(const char* name);
int64_t env_int(const char* name);
bool env_is_set(const char* name);

}  // namespace braid

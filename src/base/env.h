// Reading braid's configuration variables.
//
// Every BRAID_* variable (and the MSCCL_* ones braid honours as MSCCL does) is
// declared once in env_registry.h with its default
// and a one-line description; `braid env` prints the table.  Values are read
// from the environment when asked for, except on threads braid owns (below).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "src/base/env_registry.h"
#include "src/base/status.h"

namespace braid {

std::span<const EnvVar> env_registry();
// The NCCL_* variables braid honours (env_raw reads them), with what each does.
std::span<const EnvVar> nccl_env_vars();

// A registered variable's name, checked when braid compiles: env_int("BRAID_X")
// with a name not in env_registry.h does not build.
class EnvName {
 public:
  consteval EnvName(const char* name) : index_(find(name)) {}
  const char* name() const { return kEnvVars[index_].name; }
  const EnvVar& var() const { return kEnvVars[index_]; }

 private:
  static consteval size_t find(const char* name) {
    for (size_t i = 0; i < std::size(kEnvVars); ++i)
      if (std::string_view(kEnvVars[i].name) == name) return i;
    throw "not a variable of src/base/env_registry.h";  // a compile error: consteval cannot throw
  }
  size_t index_;
};

// The variable's value, or its registered default if unset.
std::string env_string(EnvName name);
int64_t env_int(EnvName name);
// The value as a number; nullopt if it is not one (a word such as "auto",
// or a malformed value, which env_int reads as the registered default).
std::optional<int64_t> env_number(EnvName name);
bool env_is_set(EnvName name);
// A variable that takes one of a few words: *index is the value's position
// in `allowed`; any other value is ncclInvalidArgument, naming the words.
Status env_choice(EnvName name, std::initializer_list<const char*> allowed, int* index);
// Any variable (BRAID_* or the NCCL_* ones braid honours); "" when unset.
std::string env_raw(const char* name);
// Any variable, nullopt when unset (set and empty is ""): from the env
// plugin where one answers (env_plugin.h), else the environment; on a
// braid thread, from its snapshot.
std::optional<std::string> env_value(const char* name);
// braid's net plugin library inside NCCL 2.30 or later: every variable is
// read through that NCCL's ncclParamEnvPluginGet (its env plugin's answer,
// else its environment), not this copy's own reading.  Set once, at the
// plugin's init, before any read.
using HostEnvGetter = const char* (*)(const char* name, bool env_init);
void env_read_through_host(HostEnvGetter getter);
// An NCCL integer parameter as NCCL reads one (strtoll, any base: 0x10
// too); nullopt where unset or not a number.
std::optional<int64_t> env_nccl_int(const char* name);
// Every set NCCL_* and BRAID_* variable, known to braid or not, as
// "NAME=value" sorted by name: what the ranks compare in the init
// diagnostics (src/runtime/diagnostics_consistency.cc).
std::vector<std::string> env_nccl_and_braid();
// A BRAID_* variable that mirrors an NCCL one: its value if set, else the
// NCCL variable's if set, else the registered default.
std::string env_string_or_nccl(EnvName name, const char* nccl_name);
int64_t env_int_or_nccl(EnvName name, const char* nccl_name);

// Threads braid starts (the bootstrap root, non-blocking groups) must not
// call getenv: the application may setenv meanwhile, and getenv racing
// setenv is undefined behaviour (TSan caught it).  The starting thread takes
// a snapshot; the new thread installs it, and env_* there read the copy.
class EnvSnapshot {
 public:
  static EnvSnapshot capture();
  const std::string* find(const char* name) const;
  const std::vector<std::string>& nccl_and_braid() const { return nccl_and_braid_; }

 private:
  std::vector<std::pair<std::string, std::string>> values_;  // name, value ("" = unset)
  std::vector<std::string> nccl_and_braid_;  // env_nccl_and_braid() when captured
};

// While alive, env_* calls on this thread read `snapshot` (which must outlive it).
// Threads usually get one through with_caller_env below.
class ScopedEnv {
 public:
  explicit ScopedEnv(const EnvSnapshot& snapshot);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const EnvSnapshot* previous_;
};

// `fn`, wrapped to run under a snapshot of the calling thread's environment:
// the body to give every thread braid starts.
template <class Fn>
auto with_caller_env(Fn fn) {
  return [fn = std::move(fn), env = EnvSnapshot::capture()]() mutable {
    ScopedEnv scoped(env);
    return fn();
  };
}

}  // namespace braid

// NCCL's environment plugin (NCCL_ENV_PLUGIN: ncclEnvPlugin_v1 of NCCL
// 2.28.9, _v2 of 2.30; env_plugin_abi.h): a library that answers every
// variable braid reads, NCCL_* and BRAID_* alike, in place of the process
// environment, so that a site can serve its settings from a store of its own.
//
// Found as NCCL finds it (its src/plugin/env.cc), once per process, at the
// first read of a variable and after NCCL's configuration files are applied
// (nccl_conf.h: NCCL_ENV_PLUGIN may be set in one): NCCL_ENV_PLUGIN=none
// loads none; a value opens that library, else libnccl-env-VALUE.so for a
// bare name; unset, libnccl-env.so where it loads (plugin_library.h).  The
// table taken is ncclEnvPlugin_v2, else _v1.  A library that does not open,
// or exports neither table, leaves the environment answering, and INFO says
// why.  A plugin whose init fails is not used (nor closed), and every
// ncclGetUniqueId and communicator init of the process then fails with that
// error (NCCL's fail too).
//
// - The plugin's answer is the value: null is unset, whatever the
//   environment holds.  getEnv is called under one lock and its string
//   copied at once (NCCL's contract keeps it valid only until the next call
//   for that name, which another thread may make).
// - finalize runs at exit (atexit, as NCCL); later reads go to the
//   environment.
// - What the plugin logs (v2's init gets a logger) and what loading says are
//   written later (log_later, log.h): the log reads its own settings through
//   this plugin, under its lock.  They go out before the log's next line,
//   at the first init, at each destroy and at exit.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "src/base/status.h"

namespace braid {

class EnvPlugin {
 public:
  struct Loaded {
    std::unique_ptr<EnvPlugin> plugin;  // null: the environment answers
    Status failure;                     // the plugin's init failed
  };
  // `value`: NCCL_ENV_PLUGIN's, null where it is unset.
  static Loaded load(const char* value);
  ~EnvPlugin();  // finalizes (where not yet) and closes the library

  // The plugin's value of `name`, nullopt where it has none; after
  // finalize, the environment's.
  std::optional<std::string> get(const char* name);
  void finalize();
  // "NAME (ncclEnvPlugin_vN, LIBRARY)".
  std::string describe() const;

 private:
  EnvPlugin() = default;

  std::mutex mutex_;
  void* lib_ = nullptr;
  std::string library_, name_;
  int version_ = 0;
  ncclResult_t (*finalize_)() = nullptr;
  const char* (*get_env_)(const char*) = nullptr;
  bool finalized_ = false;
};

// The process's plugin, loaded by the first call (env.cc calls it before
// its first read); null where none is in use.
EnvPlugin* process_env_plugin();
// ok, or why the process's plugin failed its init (for the init calls).
Status env_plugin_status();
// A copy of braid inside another NCCL (the net plugin library, plugins/)
// loads no env plugin: the host NCCL has loaded its own, and a second init
// of that library would surprise it (it reads through the host's instead
// where it can, env.h's env_read_through_host).  Called before the first
// read of a variable.
void env_plugin_never_load();

}  // namespace braid

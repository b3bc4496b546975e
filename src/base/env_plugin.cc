#include "src/base/env_plugin.h"

#include <dlfcn.h>
#include <strings.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>

#include "src/base/env_plugin_abi.h"
#include "src/base/log.h"
#include "src/base/nccl_conf.h"
#include "src/base/plugin_library.h"

namespace braid {
namespace {

// The logger v2's init gets: the line waits for the log (env_plugin.h).
extern "C" void env_plugin_logger(int level, unsigned long flags, const char* file, int line, const char* format,
                                  ...) {
  char text[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(text, sizeof(text), format, args);
  va_end(args);
  log_later(log_level_from_nccl(level), subsys_from_nccl_flags(flags, kEnv),
            fmt::format("env plugin: {} ({}:{})", text, file ? file : "?", line));
}

}  // namespace

EnvPlugin::Loaded EnvPlugin::load(const char* value) {
  Loaded out;
  if (value && strcasecmp(value, "none") == 0) return out;
  std::string opened, error;
  void* lib = open_plugin_library("libnccl-env", value ? value : "", &opened, &error);
  if (!lib) {
    // Unset, the default library is seldom there: that is not worth a line,
    // one that is there and does not load is.
    if ((value && *value) || error.find("No such file or directory") == std::string::npos)
      log_later(LogLevel::Info, kInit | kEnv, fmt::format("env plugin: {}; the environment answers", error));
    return out;
  }
  std::unique_ptr<EnvPlugin> p(new EnvPlugin);
  p->lib_ = lib;
  p->library_ = opened;
  auto take = [&](int version, const auto* table) {
    p->version_ = version;
    p->name_ = table->name ? table->name : "?";
    p->finalize_ = table->finalize;
    p->get_env_ = table->getEnv;
  };
  ncclResult_t init = ncclSuccess;
  if (auto* v2 = static_cast<const braidNcclEnv_v2_t*>(dlsym(lib, "ncclEnvPlugin_v2")); v2 && v2->getEnv) {
    take(2, v2);
    if (v2->init) init = v2->init(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, NCCL_SUFFIX, env_plugin_logger);
  } else if (auto* v1 = static_cast<const braidNcclEnv_v1_t*>(dlsym(lib, "ncclEnvPlugin_v1")); v1 && v1->getEnv) {
    take(1, v1);
    if (v1->init) init = v1->init(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, NCCL_SUFFIX);
  } else {
    log_later(LogLevel::Info, kInit | kEnv,
              fmt::format("env plugin {}: no ncclEnvPlugin_v2 or _v1 table with a getEnv; the environment answers",
                          opened));
    p->finalized_ = true;  // nothing of it ran
    return out;
  }
  if (init != ncclSuccess) {
    // ncclInProgress would read as a non-blocking init still running.
    const bool plain = init > ncclSuccess && init < ncclNumResults && init != ncclInProgress;
    out.failure = BRAID_ERROR(plain ? init : ncclInternalError, "env plugin {}: its init returned {}; it is not "
                              "used, and every init of this process fails", p->describe(), nccl_result_name(init));
    // Neither finalized nor closed, as NCCL leaves it: its init may have
    // started what closing the library would pull from under.
    p->finalized_ = true;
    p->lib_ = nullptr;
    return out;
  }
  log_later(LogLevel::Info, kInit | kEnv, fmt::format("env plugin {} answers every variable", p->describe()));
  out.plugin = std::move(p);
  return out;
}

EnvPlugin::~EnvPlugin() {
  finalize();
  if (lib_) dlclose(lib_);
}

std::optional<std::string> EnvPlugin::get(const char* name) {
  std::lock_guard<std::mutex> lock(mutex_);
  const char* value = finalized_ ? std::getenv(name) : get_env_(name);
  if (!value) return std::nullopt;
  return std::string(value);
}

void EnvPlugin::finalize() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (finalized_) return;
  finalized_ = true;
  if (finalize_) finalize_();
}

std::string EnvPlugin::describe() const {
  return fmt::format("{} (ncclEnvPlugin_v{}, {})", name_, version_, library_);
}

namespace {

std::atomic<bool> g_never_load{false};
thread_local bool t_loading = false;

struct ProcessPlugin {
  EnvPlugin* plugin = nullptr;  // never freed: variables are read until the process ends
  Status failure;
};

ProcessPlugin& process_plugin() {
  static ProcessPlugin* loaded = [] {
    auto* p = new ProcessPlugin;
    if (g_never_load.load()) return p;
    apply_nccl_conf_files_once();  // NCCL_ENV_PLUGIN may be set in one
    t_loading = true;
    EnvPlugin::Loaded l = EnvPlugin::load(std::getenv("NCCL_ENV_PLUGIN"));
    t_loading = false;
    p->plugin = l.plugin.release();
    p->failure = std::move(l.failure);
    if (p->plugin)
      std::atexit([] {
        process_plugin().plugin->finalize();
        log_write_later_lines();  // what the plugin said last
      });
    return p;
  }();
  return *loaded;
}

}  // namespace

EnvPlugin* process_env_plugin() {
  // A plugin's init that reads a variable through braid (its param API) gets
  // the environment, not a wait for itself.
  if (t_loading) return nullptr;
  return process_plugin().plugin;
}

Status env_plugin_status() {
  if (t_loading) return Status::ok();
  return process_plugin().failure;
}

void env_plugin_never_load() { g_never_load.store(true); }

}  // namespace braid

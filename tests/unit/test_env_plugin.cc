// NCCL's environment plugin (src/base/env_plugin.h) against test plugins
// written as a site writes one (tests/env/env_plugin_test.c): which library
// a value names, which table is taken, what the plugin's answers mean, what
// an init that fails does, finalize, the plugin's log lines, and calls from
// many threads.  The process's own plugin is the end-to-end test's
// (tests/env/env_plugin.sh): it is loaded once per process.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "src/base/env_plugin.h"
#include "src/base/log.h"
#include "src/base/plugin_library.h"

using namespace braid;

namespace {

// The test plugin's file of NAME=value lines, named by BRAID_TEST_ENV_FILE
// while the test runs.
class PluginFile {
 public:
  explicit PluginFile(const std::string& text) : path_(fmt::format("/tmp/braid-env-plugin-{}.txt", getpid())) {
    std::ofstream(path_) << text;
    setenv("BRAID_TEST_ENV_FILE", path_.c_str(), 1);
  }
  ~PluginFile() {
    unsetenv("BRAID_TEST_ENV_FILE");
    std::remove(path_.c_str());
  }

 private:
  std::string path_;
};

// Loading logs later (log_later): each test leaves no line waiting for
// the next test's log.
struct NoLinesLeft {
  ~NoLinesLeft() {
    log_forward_to([](LogLevel, uint32_t, const char*) {});
    log_write_later_lines();
    log_forward_to(nullptr);
  }
};

std::vector<std::string> g_lines;
void capture(LogLevel level, uint32_t subsys, const char* message) {
  g_lines.push_back(fmt::format("{} {:#x} {}", int(level), subsys, message));
}

bool captured(const std::string& text) {
  for (const std::string& line : g_lines)
    if (line.find(text) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("an env plugin's library is named as NCCL names it", "[env][plugin]") {
  const NoLinesLeft no_lines_left;
  using V = std::vector<std::string>;
  CHECK(plugin_library_names("libnccl-env", "") == V{"libnccl-env.so"});
  CHECK(plugin_library_names("libnccl-env", "site") == V{"site", "libnccl-env-site.so"});
  CHECK(plugin_library_names("libnccl-env", "/opt/site/libenv.so") == V{"/opt/site/libenv.so"});
  CHECK(plugin_library_names("libnccl-env", "./mine") == V{"./mine"});
  CHECK(plugin_library_names("libnccl-env", "libsite.so") == V{"libsite.so"});
  CHECK(plugin_library_names("libnccl-net", "aws-ofi") == V{"aws-ofi", "libnccl-net-aws-ofi.so"});
}

TEST_CASE("an env plugin answers in the environment's place: a value, a hidden name, the rest", "[env][plugin]") {
  const NoLinesLeft no_lines_left;
  const PluginFile file("BRAID_TEST_ONLY_PLUGIN=from the plugin\nBRAID_TEST_HIDDEN=\n");
  setenv("BRAID_TEST_HIDDEN", "from the environment", 1);
  setenv("BRAID_TEST_PLAIN", "plain", 1);
  EnvPlugin::Loaded loaded = EnvPlugin::load(BRAID_ENV_PLUGIN_LIB);
  REQUIRE(loaded.failure.is_ok());
  REQUIRE(loaded.plugin);
  EnvPlugin& plugin = *loaded.plugin;
  CHECK(plugin.describe() == fmt::format("braidtest-v2 (ncclEnvPlugin_v2, {})", BRAID_ENV_PLUGIN_LIB));
  CHECK(plugin.get("BRAID_TEST_ONLY_PLUGIN") == "from the plugin");
  CHECK(plugin.get("BRAID_TEST_HIDDEN") == std::nullopt);  // the plugin's null is unset
  CHECK(plugin.get("BRAID_TEST_PLAIN") == "plain");        // this plugin passes the rest through
  CHECK(plugin.get("BRAID_TEST_NOWHERE") == std::nullopt);
  unsetenv("BRAID_TEST_HIDDEN");
  unsetenv("BRAID_TEST_PLAIN");
}

TEST_CASE("a v1-only env plugin is taken, and a library without a table is not", "[env][plugin]") {
  const NoLinesLeft no_lines_left;
  const PluginFile file("BRAID_TEST_ONLY_PLUGIN=v1\n");
  EnvPlugin::Loaded v1 = EnvPlugin::load(BRAID_ENV_PLUGIN_V1_LIB);
  REQUIRE(v1.plugin);
  CHECK(v1.plugin->describe() == fmt::format("braidtest-v1 (ncclEnvPlugin_v1, {})", BRAID_ENV_PLUGIN_V1_LIB));
  CHECK(v1.plugin->get("BRAID_TEST_ONLY_PLUGIN") == "v1");

  EnvPlugin::Loaded empty = EnvPlugin::load(BRAID_ENV_PLUGIN_EMPTY_LIB);
  CHECK_FALSE(empty.plugin);
  CHECK(empty.failure.is_ok());  // the environment answers, as NCCL falls back to its own
  EnvPlugin::Loaded missing = EnvPlugin::load("/nonexistent/libnccl-env-nothing.so");
  CHECK_FALSE(missing.plugin);
  CHECK(missing.failure.is_ok());
  EnvPlugin::Loaded none = EnvPlugin::load("NONE");
  CHECK_FALSE(none.plugin);
  CHECK(none.failure.is_ok());
}

TEST_CASE("an env plugin whose init fails is not used, and the failure names it", "[env][plugin]") {
  const NoLinesLeft no_lines_left;
  EnvPlugin::Loaded failing = EnvPlugin::load(BRAID_ENV_PLUGIN_FAILING_LIB);
  CHECK_FALSE(failing.plugin);
  REQUIRE_FALSE(failing.failure.is_ok());
  CHECK(failing.failure.code() == ncclSystemError);
  CHECK_THAT(failing.failure.message(), Catch::Contains(BRAID_ENV_PLUGIN_FAILING_LIB) &&
                                            Catch::Contains("its init returned ncclSystemError"));
}

TEST_CASE("an env plugin is finalized once, and the environment answers after", "[env][plugin]") {
  const NoLinesLeft no_lines_left;
  const std::string marker = fmt::format("/tmp/braid-env-finalized-{}", getpid());
  std::remove(marker.c_str());
  setenv("BRAID_TEST_ENV_FINALIZED", marker.c_str(), 1);
  const PluginFile file("BRAID_TEST_PLAIN=the plugin's\n");
  setenv("BRAID_TEST_PLAIN", "the environment's", 1);
  EnvPlugin::Loaded loaded = EnvPlugin::load(BRAID_ENV_PLUGIN_LIB);
  REQUIRE(loaded.plugin);
  CHECK(loaded.plugin->get("BRAID_TEST_PLAIN") == "the plugin's");
  loaded.plugin->finalize();
  std::ifstream finalized(marker);
  std::string word;
  CHECK((finalized >> word && word == "finalized"));
  std::remove(marker.c_str());
  CHECK(loaded.plugin->get("BRAID_TEST_PLAIN") == "the environment's");
  loaded.plugin.reset();  // finalize is not called again
  std::ifstream again(marker);
  CHECK_FALSE(again.good());
  unsetenv("BRAID_TEST_ENV_FINALIZED");
  unsetenv("BRAID_TEST_PLAIN");
}

TEST_CASE("an env plugin's log lines wait, then go out at their own level", "[env][plugin][log]") {
  const NoLinesLeft no_lines_left;
  const PluginFile file("A=1\nB=2\n");
  setenv("BRAID_DEBUG", "INFO", 1);
  setenv("BRAID_DEBUG_SUBSYS", "ENV", 1);
  log_reset();
  g_lines.clear();
  log_forward_to(capture);
  EnvPlugin::Loaded loaded = EnvPlugin::load(BRAID_ENV_PLUGIN_LIB);
  REQUIRE(loaded.plugin);
  CHECK(g_lines.empty());  // nothing written while the plugin ran
  (void)loaded.plugin->get("BRAID_TEST_ENV_WARN");  // the plugin warns from getEnv
  log_write_later_lines();
  CHECK(captured(fmt::format("{} {:#x} env plugin: braidtest env plugin serving 2 variables to NCCL", int(LogLevel::Info),
                             uint32_t(kEnv))));
  CHECK(captured(fmt::format("env plugin braidtest-v2 (ncclEnvPlugin_v2, {}) answers every variable",
                             BRAID_ENV_PLUGIN_LIB)));
  CHECK(captured(fmt::format("{} {:#x} env plugin: braidtest env plugin asked for BRAID_TEST_ENV_WARN",
                             int(LogLevel::Warn), uint32_t(kEnv))));
  const size_t written = g_lines.size();
  log_write_later_lines();  // each line once
  CHECK(g_lines.size() == written);
  log_forward_to(nullptr);
  unsetenv("BRAID_DEBUG");
  unsetenv("BRAID_DEBUG_SUBSYS");
  log_reset();
}

TEST_CASE("an env plugin called from many threads gives each its own copy", "[env][plugin]") {
  const NoLinesLeft no_lines_left;
  const PluginFile file("BRAID_TEST_A=alpha\nBRAID_TEST_B=beta\n");
  EnvPlugin::Loaded loaded = EnvPlugin::load(BRAID_ENV_PLUGIN_LIB);
  REQUIRE(loaded.plugin);
  std::vector<int> wrong(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        if (loaded.plugin->get("BRAID_TEST_A") != "alpha") ++wrong[size_t(t)];
        if (loaded.plugin->get("BRAID_TEST_B") != "beta") ++wrong[size_t(t)];
      }
    });
  for (std::thread& t : threads) t.join();
  CHECK(wrong == std::vector<int>(4, 0));
}

#include "src/base/nccl_conf.h"

#include <cstdlib>
#include <mutex>
#include <sstream>

#include "src/base/text_file.h"

namespace braid {
namespace {

// A configuration file is a few lines: one larger is not one.
constexpr uintmax_t kMostConfBytes = uintmax_t(1) << 20;

std::mutex g_mutex;
std::vector<ConfSetting> g_settings;
std::vector<std::string> g_unread;  // why a file that exists was not read

}  // namespace

std::vector<std::string> nccl_conf_files(const char* conf_file, const char* home) {
  std::vector<std::string> files;
  if (conf_file && *conf_file) files.emplace_back(conf_file);
  else if (home) files.push_back(std::string(home) + "/.nccl.conf");
  files.emplace_back("/etc/nccl.conf");
  return files;
}

void apply_conf_file(const std::string& path, std::vector<ConfSetting>* set, std::vector<std::string>* unread) {
  if (!path_exists(path)) return;  // the usual case: no such file
  std::string text, error;
  if (!read_text_file(path, &text, &error, kMostConfBytes)) {
    if (unread) unread->push_back(error);
    return;
  }
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    const size_t eq = line.find('=');
    if (eq == std::string::npos || eq == 0) continue;  // NCCL would call setenv(""), which fails
    std::string name = line.substr(0, eq), value = line.substr(eq + 1);
    if (std::getenv(name.c_str())) continue;
    if (setenv(name.c_str(), value.c_str(), 0) == 0) set->push_back({std::move(name), std::move(value), path});
  }
}

void apply_nccl_conf_files_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<ConfSetting> set;
    std::vector<std::string> unread;
    for (const std::string& file : nccl_conf_files(std::getenv("NCCL_CONF_FILE"), std::getenv("HOME")))
      apply_conf_file(file, &set, &unread);
    std::lock_guard lock(g_mutex);
    g_settings = std::move(set);
    g_unread = std::move(unread);
  });
}

std::vector<ConfSetting> nccl_conf_settings() {
  std::lock_guard lock(g_mutex);
  return g_settings;
}

std::vector<std::string> nccl_conf_unread() {
  std::lock_guard lock(g_mutex);
  return g_unread;
}

}  // namespace braid

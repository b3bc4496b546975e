#include "src/base/nccl_conf.h"

#include <cstdlib>
#include <fstream>
#include <mutex>

namespace braid {
namespace {

std::mutex g_mutex;
std::vector<ConfSetting> g_settings;

}  // namespace

std::vector<std::string> nccl_conf_files(const char* conf_file, const char* home) {
  std::vector<std::string> files;
  if (conf_file && *conf_file) files.emplace_back(conf_file);
  else if (home) files.push_back(std::string(home) + "/.nccl.conf");
  files.emplace_back("/etc/nccl.conf");
  return files;
}

void apply_conf_file(const std::string& path, std::vector<ConfSetting>* set) {
  std::ifstream in(path);
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
    for (const std::string& file : nccl_conf_files(std::getenv("NCCL_CONF_FILE"), std::getenv("HOME")))
      apply_conf_file(file, &set);
    std::lock_guard lock(g_mutex);
    g_settings = std::move(set);
  });
}

std::vector<ConfSetting> nccl_conf_settings() {
  std::lock_guard lock(g_mutex);
  return g_settings;
}

}  // namespace braid

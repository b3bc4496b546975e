#include "src/base/plugin_library.h"

#include <dlfcn.h>

#include <fmt/format.h>

namespace braid {

std::vector<std::string> plugin_library_names(const std::string& prefix, const std::string& value) {
  if (value.empty()) return {prefix + ".so"};
  const bool library_file = value.rfind("lib", 0) == 0 && value.size() >= 3 &&
                            value.compare(value.size() - 3, 3, ".so") == 0;
  const bool bare = value.find('/') == std::string::npos && !library_file;
  if (!bare) return {value};
  return {value, prefix + "-" + value + ".so"};
}

void* open_plugin_library(const std::string& prefix, const std::string& value, std::string* opened,
                          std::string* error) {
  for (const std::string& name : plugin_library_names(prefix, value)) {
    if (void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      *opened = name;
      return lib;
    }
    const char* why = dlerror();
    *error += fmt::format("{}{}: {}", error->empty() ? "" : "; ", name, why ? why : "?");
  }
  return nullptr;
}

}  // namespace braid

#include "src/base/text_file.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace braid {
namespace fs = std::filesystem;

bool read_text_file(const std::string& path, std::string* text, std::string* error, uintmax_t most_bytes) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) return *error = fmt::format("cannot open {}", path), false;
  if (!fs::is_regular_file(st))
    return *error = fmt::format("{} is not a regular file (a directory, device or FIFO)", path), false;
  if (const uintmax_t size = fs::file_size(path, ec); !ec && size > most_bytes)
    return *error = fmt::format("{} is {} bytes: more than the {} a file may have here", path, size, most_bytes),
           false;
  std::ifstream in(path);
  if (!in) return *error = fmt::format("cannot open {}", path), false;
  std::stringstream s;
  s << in.rdbuf();
  *text = s.str();
  return true;
}

bool path_exists(const std::string& path) {
  std::error_code ec;
  return fs::exists(path, ec);
}

}  // namespace braid

// A file's whole text ("" when it cannot be read), for tests that check
// what a run wrote to a log or a dump.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

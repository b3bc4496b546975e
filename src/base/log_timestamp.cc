#include "src/base/log_timestamp.h"

#include <strings.h>

#include <algorithm>
#include <array>
#include <cstdio>

#include "src/base/log.h"

namespace braid {
namespace {

constexpr const char* kDefaultFormat = "[%F %T] ";
constexpr uint32_t bit(LogLevel level) { return 1u << int(level); }
constexpr uint32_t kDefaultLevels = bit(LogLevel::Warn);

std::string trim(std::string s) {
  s.erase(0, s.find_first_not_of(" \t"));
  s.erase(s.find_last_not_of(" \t") + 1);
  return s;
}

std::string strftime_of(const std::string& format, const std::tm& tm) {
  if (format.empty()) return "";
  std::array<char, 512> out{};
  size_t n = std::strftime(out.data(), out.size(), format.c_str(), &tm);
  if (n == 0) n = std::strftime(out.data(), out.size(), kDefaultFormat, &tm);  // too long: NCCL's fallback
  return std::string(out.data(), n);
}

}  // namespace

uint32_t parse_timestamp_levels(const char* text) {
  if (!text) return kDefaultLevels;
  struct Name {
    const char* name;
    uint32_t bits;
  };
  static constexpr Name kNames[] = {{"VERSION", bit(LogLevel::Version)}, {"WARN", bit(LogLevel::Warn)},
                                    {"INFO", bit(LogLevel::Info)},       {"ABORT", 0},
                                    {"TRACE", bit(LogLevel::Trace)},
                                    {"ALL", bit(LogLevel::Version) | bit(LogLevel::Warn) | bit(LogLevel::Info) |
                                                bit(LogLevel::Trace)}};
  std::string s = text;
  const bool invert = !s.empty() && s[0] == '^';
  if (invert) s.erase(0, 1);
  uint32_t levels = invert ? ~0u : 0u;
  for (size_t start = 0; start <= s.size();) {
    const size_t end = std::min(s.find(',', start), s.size());
    const std::string token = trim(s.substr(start, end - start));
    start = end + 1;
    if (token.empty()) continue;
    const Name* found = std::find_if(std::begin(kNames), std::end(kNames),
                                     [&](const Name& n) { return strcasecmp(n.name, token.c_str()) == 0; });
    if (found == std::end(kNames)) return kDefaultLevels;
    levels = invert ? levels & ~found->bits : levels | found->bits;
  }
  return levels;
}

TimestampFormat::TimestampFormat(const char* text) {
  std::string f = text ? text : kDefaultFormat;
  std::replace(f.begin(), f.end(), '_', ' ');
  for (size_t i = 0; i + 2 < f.size(); ++i) {
    if (f[i] != '%') continue;
    if (f[i + 1] == '%') {  // a literal percent sign
      ++i;
      continue;
    }
    if (f[i + 1] >= '1' && f[i + 1] <= '9' && f[i + 2] == 'f') {
      digits_ = f[i + 1] - '0';
      before_ = f.substr(0, i);
      after_ = f.substr(i + 3);
      return;
    }
  }
  before_ = f;
}

std::string TimestampFormat::format(const timespec& now) const {
  std::tm tm{};
  const time_t seconds = now.tv_sec;
  localtime_r(&seconds, &tm);
  if (digits_ == 0) return strftime_of(before_, tm);
  long scale = 1;
  for (int d = digits_; d < 9; ++d) scale *= 10;
  char fraction[16];
  std::snprintf(fraction, sizeof fraction, "%0*ld", digits_, now.tv_nsec / scale);
  return strftime_of(before_, tm) + fraction + strftime_of(after_, tm);
}

}  // namespace braid

// An NCCL_VERSION_CODE as the release people name: 23102 is "2.31.2"
// (NCCL_VERSION's encoding: x * 10000 + y * 100 + z from 2.9 on, x * 1000 +
// y * 100 + z before).
#pragma once

#include <string>

#include <fmt/format.h>

namespace braid {

inline std::string nccl_version_name(unsigned code) {
  if (code < 10000) return fmt::format("{}.{}.{}", code / 1000, code / 100 % 10, code % 100);
  return fmt::format("{}.{}.{}", code / 10000, code / 100 % 100, code % 100);
}

}  // namespace braid

// A verifier result's errors as one string, one per line, so a failed
// REQUIRE shows every error at once.
#pragma once

#include <string>

#include "braid/verify.h"

inline std::string joined(const braid::VerifyResult& r) {
  std::string all;
  for (const std::string& e : r.errors) all += e + "\n";
  return all;
}

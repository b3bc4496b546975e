// What src/plan/output_stores.h says a call of the tests does on this
// machine: whether it streams its output, for the tests that check the
// paths follow the rule.
#pragma once

#include "collective_check.h"
#include "src/plan/output_stores.h"

namespace mp {

// The rule for a call of `count` floats per block on n ranks of this host.
inline bool rule_streams(Coll coll, int n, size_t count, bool in_place) {
  return braid::should_stream_output(braid::cache_share(n), to_collective(coll), n, count * sizeof(float), in_place);
}

}  // namespace mp

// BRAID_ALGO: the built-in algorithm a collective must run, whatever its
// size (src/plan/planner.h).
//
// Either one name, which pins every collective that has an algorithm of
// that name ("ring": AllReduce, AllGather and ReduceScatter; Broadcast and
// the others keep their own choice and fast paths), or a comma-separated
// list of "collective=name" entries ("allreduce=rd, allgather=direct").
// Names are matched in any case, spaces around them ignored; a later entry
// for the same collective replaces an earlier one.  An entry that names no
// collective braid has, or an algorithm the collective does not have, pins
// nothing and is reported (`problems`), as is a single name no collective
// has: BRAID_ALGO is braid's own variable, and a misspelt one should not
// quietly run the default.
//
// The ranks of a communicator must pin alike (they would run different
// schedules for one call): init agrees on pins_hash(), which depends only on
// what is pinned, not on how it was spelt.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "braid/schedule.h"

namespace braid {

struct BraidAlgo {
  std::string pinned[int(Collective::Custom)];  // by Collective: the algorithm's name, "" where none
  std::vector<std::string> problems;            // what was ignored and why, for a warning

  bool pins(Collective c) const { return c < Collective::Custom && !pinned[int(c)].empty(); }
  const std::string& of(Collective c) const;
  // 0 where nothing is pinned; equal for equal pins.
  uint64_t pins_hash() const;
};

BraidAlgo parse_braid_algo(const std::string& spec);

}  // namespace braid

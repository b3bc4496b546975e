// MSCCL XML, the schedule interchange format of MSCCL/msccl-tools/TACCL.
//
// Import reads both the current spelling (minBytes, maxBytes, outofplace,
// coll="reducescatter") and the older one (no size range, no outofplace,
// coll="reduce_scatter").  An in-place file names the aliased memory with
// one buffer letter; import turns a write of an aliased input chunk into a
// write of the output chunk it aliases, and a read into the output chunk when
// a write of that chunk happens before it.  If the result also verifies out
// of place, the schedule claims both placements.
//
// Export writes one <tb> per lane; a lane must send to at most one peer and
// receive from at most one peer (MSCCL's thread-block rule).  Ops with more
// than one dependency get nop steps in front, one dependency each.
#pragma once

#include <string>

#include "braid/schedule.h"

namespace braid {

enum class MscclDialect {
  Current,  // minBytes, maxBytes, outofplace; coll="reducescatter"
  Legacy,   // none of those; coll="reduce_scatter"
};

// Never throws; false with a message naming the element on bad input.
bool schedule_from_msccl_xml(const std::string& text, Schedule* out, std::string* error);
bool schedule_to_msccl_xml(const Schedule& schedule, std::string* out, std::string* error,
                           MscclDialect dialect = MscclDialect::Current);

}  // namespace braid

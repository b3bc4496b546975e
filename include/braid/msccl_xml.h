// MSCCL XML, the schedule interchange format of MSCCL/msccl-tools/TACCL.
//
// Import reads both the current spelling (minBytes, maxBytes, outofplace,
// coll="reducescatter") and the older one (no outofplace, coll="reduce_scatter"),
// and takes each file as the runtime of its dialect would:
//  - size range: msccl-executor selects minBytes <= size <= maxBytes, with
//    maxBytes="0" unbounded (msccl-tools writes minBytes="0" maxBytes="0");
//    the older runtime size < maxBytes, 128 MiB without one.  Sizes are whole
//    messages (message_bytes, schedule.h);
//  - layout: nchunksperloop cuts the whole message into that many equal
//    chunks; a buffer the file gives 0 chunks (the one in-place files alias)
//    gets the count it implies, and a count that disagrees is refused;
//  - steps: a nop (srcoff="-1" dstoff="-1" cnt="0") only carries its
//    dependency; cnt=k moves k consecutive chunks;
//  - proto must be Simple, LL or LL128.  The host backend moves every
//    protocol's data the same way; the file's deadlock freedom is checked
//    with as many slots per connection as it needs (load_schedule_file).
// An in-place file names the aliased memory with one buffer letter; import
// turns a write of an aliased input chunk into a write of the output chunk
// it aliases, and a read into the output chunk when a write of that chunk
// happens before it.
//
// Export writes one <tb> per lane, except that a lane sending to (or
// receiving from) several peers becomes one <tb> per peer, chained by
// depid/deps in lane order (MSCCL's thread-block rule); tbs move to other
// channels where one would hold more than MSCCL's 32 sending or receiving
// tbs, and a tb of more than 256 steps is refused (src/ir/msccl_tbs.h).  Ops
// with more than one dependency get nop steps in front, one dependency each.
// Rooted schedules are refused: the format has no root.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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

// One <load> of an MSCCL registration file (<msccl_algos>, the older
// runtime's MSCCL_CONFIG): an algorithm file, and the size range and
// protocol that replace the file's own.  minbytes (default 0) <= size <
// maxbytes (default -1, unbounded).
struct MscclRegistration {
  std::string path;
  uint64_t min_bytes = 0;
  uint64_t max_bytes = UINT64_MAX;  // inclusive, as in Schedule
  std::string protocol;             // "" keeps the file's
};

// Whether the document's top element is <msccl_algos>.
bool is_msccl_registration(const std::string& text);
bool msccl_registrations_from_xml(const std::string& text, std::vector<MscclRegistration>* out, std::string* error);

}  // namespace braid

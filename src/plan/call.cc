#include "src/plan/call.h"

#include "src/base/byte_ranges.h"
#include "src/ops/datatype.h"

namespace braid {

Placement placement_of(const CollectiveCall& c, int rank, int nranks) {
  const uint64_t block = c.count * datatype_size(c.type);
  const char *send = static_cast<const char*>(c.sendbuff), *recv = static_cast<const char*>(c.recvbuff);
  const uint64_t at = uint64_t(rank) * block;
  const bool gathers = c.collective == Collective::AllGather || c.collective == Collective::Gather;
  const bool scatters = c.collective == Collective::ReduceScatter || c.collective == Collective::Scatter;
  const bool in_place = gathers ? send == recv + at : scatters ? recv == send + at : send == recv;
  if (in_place) return Placement::InPlace;
  const bool overlap = ranges_overlap(send, block * input_blocks(c.collective, nranks), recv,
                                      block * output_blocks(c.collective, nranks));
  return overlap ? Placement::Unknown : Placement::OutOfPlace;
}

}  // namespace braid

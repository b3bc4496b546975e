// How MSCCL XML export turns a schedule's lanes into thread blocks, within
// the limits MSCCL's runtime parser enforces (msccl.h, mscclGetAlgoFromXmlFile):
//  - a <tb> sends to one peer and receives from one peer.  A lane that talks
//    to several is split into one tb per peer, each op after the first
//    waiting (depid/deps) for the op before it in the lane, so the lane's
//    order holds;
//  - at most 32 tbs that send, and 32 that receive, per channel
//    (MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL), over at most 32 channels
//    (MAXCHANNELS).  Where a channel holds more, the tbs move to other
//    channels, each with the tbs at the other ends of its connections;
//  - step numbers below 256 (MSCCL_MAX_NUM_STEPS): a tb with more steps is
//    refused, as nothing here can spread one connection's steps.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "braid/schedule.h"

namespace braid {

inline constexpr int kMscclMaxSteps = 256;
inline constexpr int kMscclMaxTbsPerChannel = 32;
inline constexpr int kMscclMaxChannels = 32;

struct MscclTb {
  uint16_t lane = 0;              // the lane its ops come from
  int send = -1, recv = -1;       // peers, or -1
  uint16_t channel = 0;
  std::vector<uint32_t> ops;      // indices into the lane's ops, in lane order
};

struct MscclOpPlace {
  uint32_t tb = 0;
  bool waits_for_previous = false;  // the lane's previous op is in another tb: a dep on it
};

struct MscclTbPlan {
  std::vector<std::vector<MscclTb>> tbs;                     // per rank
  std::vector<std::vector<std::vector<MscclOpPlace>>> place;  // [rank][lane][op]
};

// False with a message naming the rank, lane or tb and MSCCL's limit.
bool plan_msccl_tbs(const Schedule& s, MscclTbPlan* out, std::string* error);

// The deps one op's steps carry: the op's own, then the chain dep (if any).
std::vector<Dep> msccl_step_deps(const Schedule& s, const MscclTbPlan& plan, size_t rank, uint16_t lane, uint32_t op);

}  // namespace braid

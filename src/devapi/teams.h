// Teams of NCCL 2.28.9's device API, computed as NCCL computes them.
//
// A team is {nRanks, rank, stride}: world ranks rank0 + i*stride.  The LSA
// ("load/store accessible") team is a block of consecutive world ranks that
// can map each other's memory; for braid, ranks on one host.  NCCL makes
// every LSA team the same size, the gcd of the lengths of the runs of
// consecutive ranks on one host, so that world rank r is LSA rank
// r % lsaSize of LSA team r / lsaSize, and the rail team (stride lsaSize)
// is the same LSA rank on every team (src/dev_runtime.cc, ncclDevrInitOnce).
// Uneven or interleaved hosts therefore shrink the LSA team, down to one
// rank; the device code's pointer arithmetic depends on exactly this shape.
#pragma once

#include <cstdint>
#include <vector>

#include "src/base/status.h"
#include "src/devapi/abi_v22809.h"

namespace braid::devapi {

using Team = v22809::Team;

struct LsaShape {
  int size = 1;     // ranks per LSA team
  int rank = 0;     // this rank's index in its LSA team
  int n_teams = 1;  // world size / size
};

// The shape from each world rank's host (host_of_rank[r]: any id equal for
// ranks of one host) as seen by world rank `rank`.
Status lsa_shape(const std::vector<uint64_t>& host_of_rank, int rank, LsaShape* out);

Team world_team(int n_ranks, int rank);
Team lsa_team(const LsaShape& lsa);
Team rail_team(int n_ranks, int rank, const LsaShape& lsa);

// A team that can exist in a world of n_ranks containing world rank
// `world_rank`: positive size and stride, its rank inside it, and every
// member a world rank.
Status check_team(const Team& team, int n_ranks, int world_rank);

// World rank of `team` member `member` (ncclTeamRankToWorld), refusing a
// member outside the team.
Status team_rank_to_world(const Team& team, int n_ranks, int world_rank, int member, int* out);
// Its index in this rank's LSA team (ncclTeamRankToLsa), refusing a member
// that is not in that LSA team.
Status team_rank_to_lsa(const Team& team, int n_ranks, int world_rank, const LsaShape& lsa, int member, int* out);

}  // namespace braid::devapi

// Team arithmetic, with the checks NCCL leaves out: NCCL's host functions
// return whatever the arithmetic gives, and a bad team or member becomes a
// wild pointer on the device later.  braid refuses it here instead.
#include "src/devapi/teams.h"

#include <numeric>

namespace braid::devapi {

Status lsa_shape(const std::vector<uint64_t>& host_of_rank, int rank, LsaShape* out) {
  const int n = int(host_of_rank.size());
  if (n == 0) return BRAID_ERROR(ncclInvalidArgument, "no ranks");
  if (rank < 0 || rank >= n) return BRAID_ERROR(ncclInvalidArgument, "rank {} out of range [0, {})", rank, n);
  int size = 0, run = 1;
  for (int r = 1; r < n; ++r) {
    if (host_of_rank[r] == host_of_rank[r - 1]) {
      ++run;
    } else {
      size = std::gcd(size, run);
      run = 1;
    }
  }
  size = std::gcd(size, run);
  out->size = size;
  out->rank = rank % size;
  out->n_teams = n / size;
  return Status::ok();
}

Team world_team(int n_ranks, int rank) { return Team{n_ranks, rank, 1}; }
Team lsa_team(const LsaShape& lsa) { return Team{lsa.size, lsa.rank, 1}; }
Team rail_team(int n_ranks, int rank, const LsaShape& lsa) { return Team{n_ranks / lsa.size, rank / lsa.size, lsa.size}; }

Status check_team(const Team& t, int n_ranks, int world_rank) {
  if (t.nRanks <= 0 || t.stride <= 0 || t.rank < 0 || t.rank >= t.nRanks)
    return BRAID_ERROR(ncclInvalidArgument, "team {{nRanks {}, rank {}, stride {}}} is not a team", t.nRanks, t.rank,
                       t.stride);
  // Members are world_rank + (i - t.rank) * stride for i in [0, nRanks).
  const int64_t first = int64_t(world_rank) - int64_t(t.rank) * t.stride;
  const int64_t last = int64_t(world_rank) + int64_t(t.nRanks - 1 - t.rank) * t.stride;
  if (first < 0 || last >= n_ranks)
    return BRAID_ERROR(ncclInvalidArgument,
                       "team {{nRanks {}, rank {}, stride {}}} reaches world ranks {}..{}, outside [0, {}) of rank {}",
                       t.nRanks, t.rank, t.stride, first, last, n_ranks, world_rank);
  return Status::ok();
}

Status team_rank_to_world(const Team& team, int n_ranks, int world_rank, int member, int* out) {
  BRAID_TRY(check_team(team, n_ranks, world_rank));
  if (member < 0 || member >= team.nRanks)
    return BRAID_ERROR(ncclInvalidArgument, "rank {} is not in a team of {} ranks", member, team.nRanks);
  *out = world_rank + (member - team.rank) * team.stride;
  return Status::ok();
}

Status team_rank_to_lsa(const Team& team, int n_ranks, int world_rank, const LsaShape& lsa, int member, int* out) {
  int world = 0;
  BRAID_TRY(team_rank_to_world(team, n_ranks, world_rank, member, &world));
  const int lsa_index = lsa.rank + (world - world_rank);
  if (lsa_index < 0 || lsa_index >= lsa.size)
    return BRAID_ERROR(ncclInvalidArgument, "team rank {} (world rank {}) is not in world rank {}'s LSA team of {}",
                       member, world, world_rank, lsa.size);
  *out = lsa_index;
  return Status::ok();
}

}  // namespace braid::devapi

// Teams of the device API (src/devapi/teams.h): NCCL 2.28.9's LSA shape
// (gcd of the runs of consecutive ranks on one host), world, LSA and rail
// teams, and the conversions with their refusals.
#include <catch2/catch.hpp>

#include "src/devapi/teams.h"

using namespace braid::devapi;

namespace {

LsaShape shape(const std::vector<uint64_t>& hosts, int rank) {
  LsaShape s;
  braid::Status st = lsa_shape(hosts, rank, &s);
  INFO(st.to_string());
  REQUIRE(st.is_ok());
  return s;
}

bool same(const Team& a, const Team& b) { return a.nRanks == b.nRanks && a.rank == b.rank && a.stride == b.stride; }

}  // namespace

TEST_CASE("teams: the LSA team is the gcd of the runs of ranks on one host", "[devapi][teams]") {
  // 2 hosts x 4 ranks.
  std::vector<uint64_t> even{7, 7, 7, 7, 9, 9, 9, 9};
  for (int r = 0; r < 8; ++r) {
    LsaShape s = shape(even, r);
    CHECK(s.size == 4);
    CHECK(s.rank == r % 4);
    CHECK(s.n_teams == 2);
    CHECK(same(lsa_team(s), {4, r % 4, 1}));
    CHECK(same(rail_team(8, r, s), {2, r / 4, 4}));
    CHECK(same(world_team(8, r), {8, r, 1}));
  }
  CHECK(shape({1, 1, 1}, 2).size == 3);                  // one host: everyone
  CHECK(shape({1, 1, 1, 1, 1, 1, 2, 2, 2}, 7).size == 3);  // runs 6 and 3
  CHECK(shape({1, 1, 1, 1, 2, 2}, 5).size == 2);          // runs 4 and 2
  LsaShape uneven = shape({1, 1, 1, 2, 2}, 4);            // runs 3 and 2: singletons
  CHECK(uneven.size == 1);
  CHECK(uneven.rank == 0);
  CHECK(uneven.n_teams == 5);
  CHECK(shape({1, 2, 1, 2}, 1).size == 1);  // interleaved hosts
  CHECK(shape({1, 1, 2, 2, 1, 1}, 4).size == 2);  // a host's ranks in two runs: runs still 2
  CHECK(shape({5}, 0).size == 1);

  LsaShape s;
  CHECK(lsa_shape({}, 0, &s).code() == ncclInvalidArgument);
  CHECK(lsa_shape({1, 1}, 2, &s).code() == ncclInvalidArgument);
  CHECK(lsa_shape({1, 1}, -1, &s).code() == ncclInvalidArgument);
}

TEST_CASE("teams: rank conversions as NCCL computes them, refusing non-members", "[devapi][teams]") {
  std::vector<uint64_t> hosts{7, 7, 7, 7, 9, 9, 9, 9};
  const int me = 6;  // host 9, LSA rank 2, rail rank 1
  LsaShape lsa = shape(hosts, me);
  Team world = world_team(8, me), rail = rail_team(8, me, lsa), team_lsa = lsa_team(lsa);
  int out = -7;
  REQUIRE(team_rank_to_world(rail, 8, me, 0, &out).is_ok());
  CHECK(out == 2);
  REQUIRE(team_rank_to_world(team_lsa, 8, me, 0, &out).is_ok());
  CHECK(out == 4);
  REQUIRE(team_rank_to_world(world, 8, me, 3, &out).is_ok());
  CHECK(out == 3);
  REQUIRE(team_rank_to_lsa(world, 8, me, lsa, 5, &out).is_ok());
  CHECK(out == 1);
  REQUIRE(team_rank_to_lsa(team_lsa, 8, me, lsa, 3, &out).is_ok());
  CHECK(out == 3);
  REQUIRE(team_rank_to_lsa(rail, 8, me, lsa, 1, &out).is_ok());  // itself
  CHECK(out == 2);

  out = -7;
  braid::Status other_host = team_rank_to_lsa(world, 8, me, lsa, 1, &out);
  CHECK(other_host.code() == ncclInvalidArgument);
  CHECK_THAT(other_host.message(), Catch::Contains("not in world rank 6's LSA team"));
  CHECK(team_rank_to_lsa(rail, 8, me, lsa, 0, &out).code() == ncclInvalidArgument);
  CHECK(out == -7);  // nothing written on refusal
  CHECK(team_rank_to_world(rail, 8, me, 2, &out).code() == ncclInvalidArgument);   // member out of the team
  CHECK(team_rank_to_world(world, 8, me, -1, &out).code() == ncclInvalidArgument);
  // Teams that cannot exist around rank 6 of 8.
  CHECK(team_rank_to_world({0, 0, 1}, 8, me, 0, &out).code() == ncclInvalidArgument);
  CHECK(team_rank_to_world({4, 4, 1}, 8, me, 0, &out).code() == ncclInvalidArgument);
  CHECK(team_rank_to_world({4, 1, 0}, 8, me, 0, &out).code() == ncclInvalidArgument);
  braid::Status too_far = team_rank_to_world({4, 0, 2}, 8, me, 1, &out);  // would reach 6..12
  CHECK(too_far.code() == ncclInvalidArgument);
  CHECK_THAT(too_far.message(), Catch::Contains("outside [0, 8)"));
  CHECK(out == -7);
  CHECK(check_team({2, 1, 4}, 8, me).is_ok());  // ranks 2 and 6
}

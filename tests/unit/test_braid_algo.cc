// BRAID_ALGO read as pins (src/plan/braid_algo.h): one name pins only the
// collectives that have it, entries are read in any case and spacing, what
// cannot pin is reported, and the agreement hash follows what is pinned,
// not how it was spelt.  And the planner pins as it says.
#include <catch2/catch.hpp>

#include <string>

#include "scoped_env.h"
#include "src/plan/braid_algo.h"
#include "src/plan/planner.h"

using namespace braid;

namespace {

// The pins as "collective=name;..." in Collective order.
std::string pins_of(const BraidAlgo& a) {
  std::string out;
  for (int c = 0; c < int(Collective::Custom); ++c)
    if (a.pins(Collective(c))) out += std::string(to_string(Collective(c))) + "=" + a.of(Collective(c)) + ";";
  return out;
}

}  // namespace

TEST_CASE("BRAID_ALGO: one name pins only the collectives that have an algorithm of that name", "[braid_algo]") {
  const BraidAlgo ring = parse_braid_algo("ring");
  CHECK(pins_of(ring) == "allreduce=ring;allgather=ring;reducescatter=ring;");
  CHECK(ring.problems.empty());
  CHECK_FALSE(ring.pins(Collective::Broadcast));  // no ring: its own choice and fast paths stay
  CHECK(pins_of(parse_braid_algo(" Ring ")) == pins_of(ring));
  CHECK(pins_of(parse_braid_algo("direct")) ==
        "allreduce=direct;allgather=direct;reducescatter=direct;alltoall=direct;gather=direct;scatter=direct;");
  CHECK(pins_of(parse_braid_algo("binomial")) == "broadcast=binomial;reduce=binomial;");
  const BraidAlgo none = parse_braid_algo("rign");
  CHECK(pins_of(none).empty());
  REQUIRE(none.problems.size() == 1);
  CHECK(none.problems[0] == "no collective has an algorithm named 'rign'");
  CHECK(pins_of(parse_braid_algo("")).empty());
  CHECK(parse_braid_algo("").problems.empty());
}

TEST_CASE("BRAID_ALGO: entries in any case and spacing, later ones first, what cannot pin reported", "[braid_algo]") {
  for (const char* spelt :
       {"allreduce=rd", "AllReduce=rd", "allreduce = rd", " ALLREDUCE=RD ,", "allreduce=ring,allreduce=rd"}) {
    INFO(spelt);
    const BraidAlgo a = parse_braid_algo(spelt);
    CHECK(pins_of(a) == "allreduce=rd;");
    CHECK(a.problems.empty());
  }
  CHECK(pins_of(parse_braid_algo("allreduce=rd, allgather=direct")) == "allreduce=rd;allgather=direct;");
  const BraidAlgo bad = parse_braid_algo("allreduce=rd,allgathr=direct,broadcast=ring,ring,alltoall=direct");
  CHECK(pins_of(bad) == "allreduce=rd;alltoall=direct;");
  REQUIRE(bad.problems.size() == 3);
  CHECK(bad.problems[0] == "'allgathr=direct': no collective is named 'allgathr' (allreduce, allgather, "
                           "reducescatter, broadcast, reduce, alltoall, gather, scatter)");
  CHECK(bad.problems[1] == "'broadcast=ring': broadcast has no algorithm named 'ring' (broadcast's: binomial, oneshot)");
  CHECK(bad.problems[2] == "'ring' names no collective (a list's entries are collective=algorithm)");
  CHECK(parse_braid_algo("custom=ring").problems.size() == 1);
}

TEST_CASE("BRAID_ALGO: the ranks agree on what is pinned, however it was spelt", "[braid_algo][agree]") {
  CHECK(parse_braid_algo("").pins_hash() == 0);
  CHECK(parse_braid_algo("rign").pins_hash() == 0);  // pins nothing, as unset
  const uint64_t ring = parse_braid_algo("ring").pins_hash();
  CHECK(ring != 0);
  CHECK(parse_braid_algo("reducescatter=ring, AllGather=Ring,allreduce=ring").pins_hash() == ring);
  CHECK(parse_braid_algo("allreduce=ring,allgather=ring").pins_hash() != ring);
  CHECK(parse_braid_algo("allreduce=rd").pins_hash() != parse_braid_algo("allreduce=direct").pins_hash());
}

TEST_CASE("BRAID_ALGO=ring: the planner pins what has a ring, and plans the rest as usual", "[braid_algo][planner]") {
  ScopedEnv algo("BRAID_ALGO", "ring");  // read when a cache is made
  PlanCache plans;
  CHECK(plans.forces(Collective::AllReduce));
  CHECK(plans.forces(Collective::AllGather));
  for (Collective c : {Collective::Broadcast, Collective::Reduce, Collective::Gather, Collective::Scatter,
                       Collective::AlltoAll})
    CHECK_FALSE(plans.forces(c));
  std::shared_ptr<const Schedule> s;
  REQUIRE(plans.schedule_for(Collective::AllReduce, 4, -1, 8, &s).is_ok());
  CHECK(s->name == "ring_allreduce");
  REQUIRE(plans.schedule_for(Collective::Broadcast, 4, 0, 8, &s).is_ok());
  CHECK(s->name == "binomial_broadcast");
}

TEST_CASE("BRAID_ALGO: spelt loosely, the planner still pins", "[braid_algo][planner]") {
  ScopedEnv algo("BRAID_ALGO", "AllReduce = direct, allgather=direct");
  PlanCache plans;
  std::shared_ptr<const Schedule> s;
  REQUIRE(plans.schedule_for(Collective::AllReduce, 4, -1, 8, &s).is_ok());
  CHECK(s->name == "direct_allreduce");
  REQUIRE(plans.schedule_for(Collective::AllGather, 4, -1, 8, &s).is_ok());
  CHECK(s->name == "direct_allgather");
}

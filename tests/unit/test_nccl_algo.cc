// NCCL_ALGO read as braid's algorithms (src/plan/nccl_algo.h), and
// NCCL_PROTO as braid's protocols (src/plan/nccl_proto.h): NCCL's grammar
// (entries, functions, exclusions; src/plan/nccl_lists.h), what each admits
// of braid's, what braid cannot serve, and every token NCCL refuses.
#include <catch2/catch.hpp>

#include <string>

#include "braid/algorithms.h"
#include "src/plan/alg_selection.h"
#include "src/plan/nccl_algo.h"
#include "src/plan/nccl_proto.h"

using namespace braid;

namespace {

// The registry bit of braid's algorithm `name` for `c` (0: none).
uint32_t bit(const char* name, Collective c) {
  const auto& registry = algorithm_registry();
  for (size_t i = 0; i < registry.size(); ++i)
    if (registry[i].collective == c && registry[i].name == name) return 1u << i;
  return 0;
}
uint32_t all_of(Collective c) {
  uint32_t bits = 0;
  const auto& registry = algorithm_registry();
  for (size_t i = 0; i < registry.size(); ++i)
    if (registry[i].collective == c) bits |= 1u << i;
  return bits;
}
NcclAlgo parsed(const std::string& value) {
  NcclAlgo a;
  const Status s = parse_nccl_algo(value, &a);
  INFO(value << ": " << s.to_string());
  REQUIRE(s.is_ok());
  return a;
}
uint32_t admitted(const NcclAlgo& a, Collective c) { return a.admitted[int(c)]; }

}  // namespace

TEST_CASE("NCCL_ALGO: ring admits braid's ring where it has one, and restricts nothing else", "[nccl_algo]") {
  const uint32_t ring = bit("ring", Collective::AllReduce);
  REQUIRE(ring != 0);
  for (const char* value : {"ring", "Ring", " RING ", "ring,tree", "tree,ring,nvls"}) {
    const NcclAlgo a = parsed(value);
    CHECK(admitted(a, Collective::AllReduce) == ring);
    CHECK(admitted(a, Collective::AllGather) == bit("ring", Collective::AllGather));
    CHECK(admitted(a, Collective::ReduceScatter) == bit("ring", Collective::ReduceScatter));
    CHECK(admitted(a, Collective::AlltoAll) == 0);  // not one of NCCL_ALGO's functions
  }
  // Broadcast and Reduce have no ring in braid: "ring" cannot be served there.
  const NcclAlgo a = parsed("ring");
  CHECK(admitted(a, Collective::Broadcast) == 0);
  CHECK(a.unserved == "broadcast (ring), reduce (ring)");
  CHECK(parsed("").unserved.empty());
  for (int c = 0; c < int(Collective::Custom); ++c) CHECK(parsed("").admitted[c] == 0);
}

TEST_CASE("NCCL_ALGO: exclusions, functions, and what braid cannot serve", "[nccl_algo]") {
  // ^tree excludes nothing braid has: no restriction anywhere.
  for (int c = 0; c < int(Collective::Custom); ++c) CHECK(parsed("^tree").admitted[c] == 0);
  CHECK(parsed("^tree").unserved.empty());
  // ^ring: everything braid has but its ring, its fast paths included.
  const uint32_t all = all_of(Collective::AllReduce), ring = bit("ring", Collective::AllReduce);
  const uint32_t but_ring = (all & ~ring) | kFastPathsBit;
  CHECK(admitted(parsed("^ring"), Collective::AllReduce) == but_ring);
  CHECK(admitted(parsed("^ring,tree"), Collective::AllReduce) == but_ring);  // the caret covers the list
  // The first entry for every function not named later; later ones for theirs.
  const NcclAlgo a = parsed("ring;allreduce:^ring;broadcast:^tree");
  CHECK(admitted(a, Collective::AllReduce) == but_ring);
  CHECK(admitted(a, Collective::AllGather) == bit("ring", Collective::AllGather));
  CHECK(admitted(a, Collective::Broadcast) == 0);
  CHECK(a.unserved == "reduce (ring)");
  // Only a function named: the others unrestricted.
  const NcclAlgo only = parsed("allreduce:ring");
  CHECK(admitted(only, Collective::AllReduce) == ring);
  CHECK(admitted(only, Collective::AllGather) == 0);
  // Tree alone: braid has none of it, anywhere.
  const NcclAlgo tree = parsed("allreduce:tree;allgather:nvls,pat");
  CHECK(admitted(tree, Collective::AllReduce) == 0);
  CHECK(tree.unserved == "allgather (nvls,pat), allreduce (tree)");
}

TEST_CASE("NCCL_ALGO: tokens NCCL refuses are refused", "[nccl_algo]") {
  const std::pair<const char*, const char*> bad[] = {
      {"rings", "unknown algorithm \"rings\""},
      {"allreduce:rd", "unknown algorithm \"rd\""},  // braid's names are BRAID_ALGO's, not NCCL_ALGO's
      {"alltoall:ring", "unknown function \"alltoall\""},
      {"ring;tree", "names no function"},
      {"allreduce:", "no algorithm listed for allreduce"},
      {"allreduce:,", "no algorithm listed for allreduce"},
      {"bogus;broadcast:ring;reduce:ring;allgather:ring;reducescatter:ring;allreduce:ring",
       "unknown algorithm \"bogus\""},  // every entry is checked, also one every later entry overrides
  };
  for (const auto& [value, why] : bad) {
    INFO(value);
    NcclAlgo a;
    const Status s = parse_nccl_algo(value, &a);
    CHECK(s.code() == ncclInvalidUsage);  // NCCL's parseList
    CHECK(s.message().find(why) != std::string::npos);
  }
}

namespace {
NcclProto parsed_proto(const std::string& value) {
  NcclProto p;
  const Status s = parse_nccl_proto(value, &p);
  INFO(s.message());
  REQUIRE(s.is_ok());
  return p;
}
constexpr uint32_t bit(Collective c) { return 1u << int(c); }
constexpr uint32_t kNcclFunctionBits = bit(Collective::Broadcast) | bit(Collective::Reduce) |
                                       bit(Collective::AllGather) | bit(Collective::ReduceScatter) |
                                       bit(Collective::AllReduce);
}  // namespace

TEST_CASE("NCCL_PROTO: a list without LL keeps NCCL's functions off braid's LL path", "[nccl_algo]") {
  CHECK(parsed_proto("").ll_excluded == 0);
  CHECK(parsed_proto("Simple").ll_excluded == kNcclFunctionBits);  // AlltoAll is none of them: its LL path stays
  CHECK(parsed_proto("^LL").ll_excluded == kNcclFunctionBits);
  CHECK(parsed_proto("^LL128").ll_excluded == 0);
  CHECK(parsed_proto("LL,Simple").ll_excluded == 0);
  CHECK(parsed_proto("ll;allreduce:simple").ll_excluded == bit(Collective::AllReduce));
  CHECK(parsed_proto("simple;reducescatter:^ll128").ll_excluded ==
        (kNcclFunctionBits & ~bit(Collective::ReduceScatter)));
  // LL alone: the LL path where it serves, braid's schedules above it.
  const NcclProto ll = parsed_proto("LL");
  CHECK(ll.ll_excluded == 0);
  CHECK(ll.unserved.empty());
}

TEST_CASE("NCCL_PROTO: LL128 alone is none of braid's protocols and keeps braid's own choice", "[nccl_algo]") {
  const NcclProto p = parsed_proto("LL128;allgather:simple");
  CHECK(p.ll_excluded == bit(Collective::AllGather));
  CHECK(p.unserved == "broadcast (ll128), reduce (ll128), reducescatter (ll128), allreduce (ll128)");
  CHECK(parsed_proto("^ll,simple").unserved == "broadcast (^ll,simple), reduce (^ll,simple), allgather (^ll,simple), "
                                               "reducescatter (^ll,simple), allreduce (^ll,simple)");
}

TEST_CASE("NCCL_PROTO: tokens NCCL refuses are refused", "[nccl_algo]") {
  const std::pair<const char*, const char*> bad[] = {
      {"LL256", "unknown protocol \"ll256\""},
      {"allreduce:ring", "unknown protocol \"ring\""},
      {"alltoall:simple", "unknown function \"alltoall\""},
      {"simple;ll", "names no function"},
      {"allreduce:", "no protocol listed for allreduce"},
  };
  for (const auto& [value, why] : bad) {
    INFO(value);
    NcclProto p;
    const Status s = parse_nccl_proto(value, &p);
    CHECK(s.code() == ncclInvalidUsage);
    CHECK_THAT(s.message(), Catch::Contains("NCCL_PROTO=") && Catch::Contains(why));
  }
}

TEST_CASE("NCCL_ALGO and NCCL_PROTO: empty entries and names are skipped, and ^ alone admits everything, as NCCL", "[nccl_algo]") {
  CHECK(admitted(parsed("ring,"), Collective::AllReduce) == admitted(parsed("ring"), Collective::AllReduce));
  CHECK(admitted(parsed("ring;;allreduce:ring,,"), Collective::AllGather) ==
        admitted(parsed("ring"), Collective::AllGather));
  const NcclAlgo everything = parsed("^");
  for (int c = 0; c < int(Collective::Custom); ++c) CHECK(everything.admitted[c] == 0);
  CHECK(everything.unserved.empty());
  CHECK(parsed_proto("^LL128;").ll_excluded == 0);
  CHECK(parsed_proto("simple;allreduce:^").ll_excluded == (kNcclFunctionBits & ~bit(Collective::AllReduce)));
}

TEST_CASE("NCCL_ALGO and NCCL_PROTO: an entry's list ends at its second ':', as NCCL's strtok reads it",
          "[nccl_algo]") {
  // NCCL's parseList takes the function, then the list up to the next ':'
  // and ignores the rest; empty pieces between ':' are skipped.
  const uint32_t ring = admitted(parsed("allreduce:ring"), Collective::AllReduce);
  CHECK(admitted(parsed("allreduce:ring:tree"), Collective::AllReduce) == ring);
  CHECK(admitted(parsed("allreduce::ring"), Collective::AllReduce) == ring);
  CHECK(admitted(parsed("allreduce:ring:bogus:words"), Collective::AllReduce) == ring);
  CHECK(parsed_proto("allreduce:LL128,LL:Simple").ll_excluded == 0);  // "LL128,LL": LL stays
  CHECK(parsed_proto("allreduce:Simple:LL").ll_excluded == bit(Collective::AllReduce));
  // Only an entry at the very start may lack a function: NCCL refuses ";ring".
  NcclAlgo a;
  const Status late = parse_nccl_algo(";ring", &a);
  CHECK(late.code() == ncclInvalidUsage);
  CHECK(late.message().find("names no function") != std::string::npos);
}

TEST_CASE("NCCL_ALGO: the ranks agree on what it admits, however it is spelt", "[nccl_algo][agree]") {
  const uint64_t ring = nccl_algo_hash(parsed("ring"));
  CHECK(ring != 0);
  for (const char* same : {"Ring", "RING", " ring ", "ring,tree", "ring;broadcast:ring", "ring;reduce:ring:tree"})
    CHECK(nccl_algo_hash(parsed(same)) == ring);
  // Restricting nothing braid has is no restriction: as unset.
  for (const char* nothing : {"", "^tree", "tree", "^", "nvls,pat"}) CHECK(nccl_algo_hash(parsed(nothing)) == 0);
  CHECK(nccl_algo_hash(parsed("^ring")) != ring);
  CHECK(nccl_algo_hash(parsed("^ring")) != 0);
  CHECK(nccl_algo_hash(parsed("allreduce:ring")) != ring);
}

TEST_CASE("NCCL_ALGO: an exclusion keeps braid's fast paths, a list of names does not", "[nccl_algo]") {
  CHECK(admitted(parsed("^ring"), Collective::AllReduce) & kFastPathsBit);
  CHECK(admitted(parsed("^ring"), Collective::AllGather) & kFastPathsBit);
  CHECK_FALSE(admitted(parsed("ring"), Collective::AllReduce) & kFastPathsBit);
  CHECK_FALSE(admitted(parsed("ring,tree"), Collective::AllGather) & kFastPathsBit);
  // A call's own selection the same way.
  uint32_t bits = 0;
  REQUIRE(parse_alg_selection("^ring", Collective::AllReduce, &bits).is_ok());
  CHECK(admits_fast_paths(bits));
  CHECK((bits & ~kFastPathsBit) == (all_of(Collective::AllReduce) & ~bit("ring", Collective::AllReduce)));
  REQUIRE(parse_alg_selection("^RING_LL+^RING_SIMPLE+^RING_LL128", Collective::AllReduce, &bits).is_ok());
  CHECK(admits_fast_paths(bits));
  for (const char* names : {"ring", "rd,direct", "RING_SIMPLE", "ring+^rd"}) {
    REQUIRE(parse_alg_selection(names, Collective::AllReduce, &bits).is_ok());
    CHECK_FALSE(admits_fast_paths(bits));
  }
  CHECK(admits_fast_paths(0));  // no selection: everything
  CHECK(algorithm_registry().size() < 31);  // the registry's bits stay below kFastPathsBit
}

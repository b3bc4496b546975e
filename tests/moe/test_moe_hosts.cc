// MoE dispatch and combine across hosts: ranks that cannot map each
// other's windows (emulated hosts, BRAID_HOSTID: sockets between them)
// reach each other through one-sided RMA (src/moe/window_routes.h), ranks
// of one host still by loads and stores, in one layer.  Every row, count
// and combined token checked exactly, and the statistics too: the routed
// payload plus L signal words per destination, whichever the route; with
// zero-copy, rows read in place within a host and put between hosts.
// BRAID_MOE_RMA=1 takes the RMA route between threads of one process,
// where ThreadSanitizer sees both ends of it.
#include <catch2/catch.hpp>

#include "moe_layer.h"
#include "scoped_env.h"

using namespace moe_test;

namespace {

// Ranks 2h and 2h+1 share host h (hosts_of = 2), or every rank has its own (1).
std::function<void(int)> hosts_of(int ranks_per_host) {
  return [ranks_per_host](int rank) {
    setenv("BRAID_HOSTID", fmt::format("moe-host-{}", rank / ranks_per_host).c_str(), 1);
  };
}

void run_hosts(int n, int ranks_per_host, Case c, int layers, bool expect_drops = false) {
  c.ranks_per_host = ranks_per_host;
  INFO("n=" << n << " ranks/host=" << ranks_per_host << " " << describe(c));
  CHECK(mp::run_ranks_as_processes(n, layers_body(c, layers, expect_drops), 240, hosts_of(ranks_per_host)) == 0);
}

}  // namespace

TEST_CASE("moe across hosts: exact over random routings, RMA between hosts, stores within", "[moe][processes][hosts]") {
  for (uint64_t seed = 1; seed <= 3; ++seed) run_hosts(4, 2, random_case(4, seed * 31 + 4), 3);
  run_hosts(3, 1, random_case(3, 77), 3);
  run_hosts(6, 2, random_case(6, 91), 2);
}

TEST_CASE("moe across hosts: zero-token experts, skew and overflow, 100 layers", "[moe][processes][hosts]") {
  Case empty;
  empty.experts = 8;
  empty.top_k = 3;
  empty.masked = 0.4;
  empty.cold = true;
  empty.empty_ranks = true;
  run_hosts(4, 2, empty, 4);

  Case overflow;
  overflow.experts = 8;
  overflow.top_k = 4;
  overflow.skew = 0.9;
  overflow.factor = 1.0f;
  overflow.max_tokens = 40;
  overflow.blocks = 3;
  run_hosts(4, 1, overflow, 3, /*expect_drops=*/true);

  run_hosts(3, 1, Case{.experts = 6, .top_k = 2, .hidden = 4, .max_tokens = 12, .blocks = 2}, 100);
}

TEST_CASE("moe across hosts, zero-copy dispatch and combine: read in place within a host, put between hosts",
          "[moe][processes][hosts]") {
  for (int zero_copy : {1, 2, 3}) {
    Case c = random_case(4, uint64_t(700 + zero_copy));
    c.zero_copy = zero_copy;
    c.zero_copy_dispatch = zero_copy % 2 + 1;
    run_hosts(4, 2, c, 4);
  }
}

TEST_CASE("moe with BRAID_MOE_RMA=1: ranks as threads put to each other over RMA, exact", "[moe][threads][hosts]") {
  ScopedEnv rma("BRAID_MOE_RMA", "1");
  for (int n : {2, 4})
    for (uint64_t seed = 1; seed <= 2; ++seed) {
      Case c = random_case(n, seed * 53 + n);
      INFO("n=" << n << " seed=" << c.seed);
      CHECK(mp::run_ranks_as_threads(n, layers_body(c, 3)) == 0);
    }
  for (int zero_copy : {1, 3}) {  // only a rank's own rows and results are read in place
    Case c = random_case(4, uint64_t(900 + zero_copy));
    c.zero_copy = zero_copy;
    c.zero_copy_dispatch = zero_copy == 1 ? 1 : 2;
    INFO("zero_copy=" << zero_copy);
    CHECK(mp::run_ranks_as_threads(4, layers_body(c, 3)) == 0);
  }
  Case busy;
  busy.experts = 8;
  busy.top_k = 4;
  busy.blocks = 4;  // four agents of each rank put at once, to one communicator
  busy.hidden = 64;
  CHECK(mp::run_ranks_as_threads(4, layers_body(busy, 20)) == 0);
}

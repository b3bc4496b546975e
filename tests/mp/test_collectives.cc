// Every collective on real ranks (threads and forked processes), exact results.
#include <catch2/catch.hpp>

#include "collective_check.h"
#include "scoped_env.h"

using namespace mp;

TEST_CASE("every collective on threads, rank counts 1..5 and 8, sizes 0/1/odd", "[mp][threads]") {
  for (int n : {1, 2, 3, 4, 5, 8}) {
    INFO("nranks " << n);
    CHECK(run_ranks_as_threads(n, sweep({0, 1, 7, 1031})) == 0);
  }
}

TEST_CASE("every collective on forked processes", "[mp][processes]") {
  for (int n : {2, 3, 4}) {
    INFO("nranks " << n);
    CHECK(run_ranks_as_processes(n, sweep({0, 1, 7, 4099})) == 0);
  }
}

TEST_CASE("large messages span many fragments (tiling, pipelining)", "[mp][processes]") {
  // 1M+3 floats per rank: several hundred fragments, uneven chunks.
  CHECK(run_ranks_as_processes(3, sweep({(1u << 20) + 3})) == 0);
}

TEST_CASE("outputs of 32 MB and more are streamed to memory, exact all the same", "[mp][processes]") {
  // The executor writes these outputs with non-temporal stores: two ranks'
  // buffers of 32 MB overflow a last-level cache of up to 64 MB in place,
  // 128 MB out of place (src/plan/output_stores.h).  Two processes over
  // shared memory (pulling off, so every collective runs through the
  // slots), then three over sockets, one rank per "host", whose ring steps
  // also receive, reduce or copy, and send on.
  const size_t count = (size_t(32) << 20) / sizeof(float) + 3;
  CHECK(run_ranks_as_processes(2, sweep({count}), 120, [](int) { setenv("BRAID_CMA", "off", 1); }) == 0);
  auto apart = [](int rank) {
    setenv("BRAID_HOSTID", fmt::format("test-host-{}", rank).c_str(), 1);
    setenv("BRAID_SOCKET_ADDR", fmt::format("127.0.0.{}", rank + 1).c_str(), 1);
  };
  CHECK(run_ranks_as_processes(3, sweep({count}), 120, apart) == 0);
}

TEST_CASE("non-root ranks may pass NULL for buffers they do not use", "[mp][threads]") {
  CHECK(run_ranks_as_threads(4, sweep({5, 300}, ncclFloat, true)) == 0);
}

TEST_CASE("every datatype and reduction op", "[mp][threads]") {
  const ncclDataType_t types[] = {ncclInt8,   ncclUint8,   ncclInt32,    ncclUint32,     ncclInt64,     ncclUint64,
                                  ncclFloat16, ncclFloat32, ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};
  const ncclRedOp_t ops[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
  for (int n : {3, 4}) {
    INFO("nranks " << n);
    CHECK(run_ranks_as_threads(n, [&](int rank, int nr, ncclComm_t comm, Failures& f) {
            for (ncclDataType_t t : types)
              for (ncclRedOp_t op : ops)
                for (Coll coll : {Coll::AllReduce, Coll::ReduceScatter, Coll::Reduce}) {
                  CollCase c;
                  c.coll = coll;
                  c.count = 1003;
                  c.type = t;
                  c.op = op;
                  c.root = 1;
                  run_and_check(c, rank, nr, comm, f);
                }
            for (ncclDataType_t t : types) {  // data movement is type-agnostic but sizes are not
              CollCase c;
              c.coll = Coll::AllGather;
              c.count = 333;
              c.type = t;
              run_and_check(c, rank, nr, comm, f);
            }
          }) == 0);
  }
}

// ctest runs "every datatype and reduction op" a second time with
// BRAID_REDUCE_ISA=baseline (tests/CMakeLists.txt): the loops a CPU without
// AVX2 runs.  A value init does not know fails it.
TEST_CASE("a bad BRAID_REDUCE_ISA fails init", "[mp][processes]") {
  CHECK(run_ranks_as_processes(1, [](int, int, ncclComm_t, Failures&) {}, 60,
                               [](int) { setenv("BRAID_REDUCE_ISA", "avx512", 1); }) == 1);
}

TEST_CASE("every root of rooted collectives", "[mp][threads]") {
  CHECK(run_ranks_as_threads(5, [](int rank, int n, ncclComm_t comm, Failures& f) {
          for (int root = 0; root < n; ++root)
            for (Coll coll : {Coll::Broadcast, Coll::Reduce, Coll::Gather, Coll::Scatter}) {
              CollCase c;
              c.coll = coll;
              c.count = 77;
              c.root = root;
              run_and_check(c, rank, n, comm, f);
            }
        }) == 0);
}

TEST_CASE("BRAID_ALGO forces allreduce algorithms, any rank count", "[mp][threads]") {
  for (const char* algo : {"rd", "ring"}) {
    setenv("BRAID_ALGO", algo, 1);
    for (int n : {1, 2, 3, 5, 6, 7, 8}) {
      INFO(algo << " nranks " << n);
      CHECK(run_ranks_as_threads(n, [](int rank, int nr, ncclComm_t comm, Failures& f) {
              for (size_t count : {1, 13, 70000})
                for (bool in_place : {false, true}) {
                  CollCase c;
                  c.count = count;
                  c.in_place = in_place;
                  run_and_check(c, rank, nr, comm, f);
                }
            }) == 0);
    }
  }
  unsetenv("BRAID_ALGO");
}

// AllGather and AlltoAll in either peer order: ring/pairwise (one lane) and
// direct (a lane per peer), which hosts with more ranks than cores pick.
RankBody exchange_sweep() {
  return [](int rank, int n, ncclComm_t comm, Failures& f) {
    for (size_t count : {1, 13, 70000})
      for (Coll coll : {Coll::AllGather, Coll::AlltoAll})
        for (bool in_place : {false, true}) {
          CollCase c;
          c.coll = coll;
          c.count = count;
          c.in_place = in_place;
          run_and_check(c, rank, n, comm, f);
        }
  };
}

constexpr const char* kExchangeOrders[] = {"allgather=ring,alltoall=pairwise", "allgather=direct,alltoall=direct"};

TEST_CASE("BRAID_ALGO forces allgather and alltoall orders on threads", "[mp][threads]") {
  for (const char* algo : kExchangeOrders) {
    setenv("BRAID_ALGO", algo, 1);
    for (int n : {2, 3, 4, 5, 8}) {
      INFO(algo << " nranks " << n);
      CHECK(run_ranks_as_threads(n, exchange_sweep()) == 0);
    }
  }
  unsetenv("BRAID_ALGO");
}

TEST_CASE("BRAID_ALGO forces allgather and alltoall orders on processes", "[mp][processes]") {
  for (const char* algo : kExchangeOrders) {
    setenv("BRAID_ALGO", algo, 1);
    INFO(algo);
    CHECK(run_ranks_as_processes(4, exchange_sweep()) == 0);
  }
  unsetenv("BRAID_ALGO");
}

TEST_CASE("sockets between processes that act as different hosts", "[mp][processes][socket]") {
  // Each rank claims its own host identity and binds its own loopback address,
  // so every byte crosses TCP as it would between machines.
  auto setup = [](int rank) {
    setenv("BRAID_HOSTID", fmt::format("test-host-{}", rank).c_str(), 1);
    setenv("BRAID_SOCKET_ADDR", fmt::format("127.0.0.{}", rank + 1).c_str(), 1);
  };
  CHECK(run_ranks_as_processes(3, sweep({1, 4099, 300000}), 90, setup) == 0);
}

TEST_CASE("two hosts of two ranks: shared memory within a host, sockets across", "[mp][processes][socket]") {
  // Every wait sleeps on the shared-memory doorbell with the sockets
  // forwarding their traffic to it (src/transport/doorbell.h,
  // ForwardedDoorbell); four ranks on a machine of fewer cores sleep soon.
  auto setup = [](int rank) {
    setenv("BRAID_HOSTID", fmt::format("test-host-{}", rank / 2).c_str(), 1);
    setenv("BRAID_SOCKET_ADDR", fmt::format("127.0.0.{}", rank / 2 + 1).c_str(), 1);
  };
  CHECK(run_ranks_as_processes(4, sweep({1, 4099, 300000}), 90, setup) == 0);
}

TEST_CASE("BRAID_TRANSPORT=socket on one host, ranks as threads", "[mp][threads][socket]") {
  setenv("BRAID_TRANSPORT", "socket", 1);
  CHECK(run_ranks_as_threads(3, sweep({1, 5000})) == 0);
  unsetenv("BRAID_TRANSPORT");
}

// Fragments smaller than a Signal (144 bytes) failed every call whose
// schedule signals ("does not fit a 128-byte slot"): they are raised to
// kMinFragmentBytes instead.
TEST_CASE("slot sizes below a Signal are raised: every collective exact over shm and sockets", "[mp][threads]") {
  ScopedEnv shm("BRAID_SHM_SLOT_BYTES", "100"), socket("BRAID_SOCKET_SLOT_BYTES", "1");
  CHECK(run_ranks_as_threads(3, sweep({7, 70001})) == 0);
  ScopedEnv sockets("BRAID_TRANSPORT", "socket");
  CHECK(run_ranks_as_threads(3, sweep({7, 70001})) == 0);
}

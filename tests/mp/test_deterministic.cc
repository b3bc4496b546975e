// BRAID_DETERMINISTIC: AllReduce, ReduceScatter and Reduce fold every element
// in rank order, x0 (+) x1 (+) ... (+) x(n-1), in the element type, whatever
// path the call takes: the host's one-shot and eager boards, its single-copy
// exchange, the direct and chain schedules on shared-memory slots and on
// sockets, a group, and a schedule BRAID_ALGO or a late rank would have
// picked instead.
//
// The inputs are random values spread over many binary orders of magnitude,
// so that another order of additions gives other bits; the test checks that
// (ring without the mode differs), and then compares every output element,
// bit for bit, with the rank-order fold of rank_order_fold.h.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <string>
#include <vector>

#include "harness.h"
#include "rank_order_fold.h"
#include "scoped_env.h"

using namespace mp;
using namespace rank_order;

namespace {

enum class Coll { AllReduce, ReduceScatter, Reduce };
const char* coll_name(Coll c) {
  return c == Coll::AllReduce ? "allreduce" : c == Coll::ReduceScatter ? "reducescatter" : "reduce";
}

struct Case {
  Coll coll = Coll::AllReduce;
  size_t count = 0;
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t op = ncclSum;
  bool in_place = false;
  bool grouped = false;  // inside ncclGroupStart/End: the executor runs it
  const char* selection = nullptr;  // through nccl*Config with this algSelection
};

std::string describe(const Case& c, int rank, int n) {
  return fmt::format("{} count={} type={} op={} {}{} rank {}/{}", coll_name(c.coll), c.count, int(c.type),
                     int(c.op), c.in_place ? "in place" : "out of place", c.grouped ? " grouped" : "", rank, n);
}

// Runs `c` (Reduce: root n-1) and returns how many output elements differ
// from the rank-order fold; -1 if the call failed.
long run_case(const Case& c, int rank, int n, ncclComm_t comm, Failures& f) {
  const size_t es = size_of(c.type), N = size_t(n);
  const size_t send_elems = c.coll == Coll::ReduceScatter ? N * c.count : c.count;
  std::vector<char> main(send_elems * es), separate(c.in_place ? 0 : c.count * es);
  char* send = main.data();
  char* recv = c.in_place ? (c.coll == Coll::ReduceScatter ? send + size_t(rank) * c.count * es : send)
                          : separate.data();
  for (size_t i = 0; i < send_elems; ++i) {
    const uint64_t v = input_bits(c.type, c.op, rank, i);
    std::memcpy(send + i * es, &v, es);
  }
  const int root = n - 1;
  if (c.grouped) MP_NCCL(f, ncclGroupStart());
  ncclResult_t r = ncclSuccess;
  ncclCollConfig_t config = NCCL_COLLCONFIG_INITIALIZER;  // with a selection: the nccl*Config calls
  config.algSelection = c.selection;
  switch (c.coll) {
    case Coll::AllReduce:
      r = c.selection ? ncclAllReduceConfig(send, recv, c.count, c.type, c.op, comm, nullptr, &config)
                      : ncclAllReduce(send, recv, c.count, c.type, c.op, comm, nullptr);
      break;
    case Coll::ReduceScatter:
      r = c.selection ? ncclReduceScatterConfig(send, recv, c.count, c.type, c.op, comm, nullptr, &config)
                      : ncclReduceScatter(send, recv, c.count, c.type, c.op, comm, nullptr);
      break;
    case Coll::Reduce:
      r = c.selection ? ncclReduceConfig(send, recv, c.count, c.type, c.op, root, comm, nullptr, &config)
                      : ncclReduce(send, recv, c.count, c.type, c.op, root, comm, nullptr);
      break;
  }
  if (c.grouped) MP_NCCL(f, ncclGroupEnd());
  if (r != ncclSuccess) {
    f.fail(describe(c, rank, n) + ": " + ncclGetErrorString(r) + ": " + ncclGetLastError(comm));
    return -1;
  }
  if (c.coll == Coll::Reduce && rank != root) return 0;
  const size_t first = c.coll == Coll::ReduceScatter ? size_t(rank) * c.count : 0;
  long wrong = 0;
  for (size_t i = 0; i < c.count; ++i)
    wrong += load_bits(recv, i, es) != rank_order_fold(c.type, c.op, n, first + i);
  return wrong;
}

// Every collective, placement and type at counts that take every path: the
// boards (up to 4 KiB), schedules on the slots, single-copy (threads, from
// 32 KiB), several fragments.
RankBody every_path(std::vector<size_t> counts) {
  return [counts](int rank, int n, ncclComm_t comm, Failures& f) {
    const std::pair<ncclDataType_t, ncclRedOp_t> kinds[] = {
        {ncclFloat32, ncclSum}, {ncclBfloat16, ncclSum}, {ncclFloat16, ncclSum}, {ncclFloat64, ncclSum},
        {ncclFloat32, ncclMax}};
    for (Coll coll : {Coll::AllReduce, Coll::ReduceScatter, Coll::Reduce})
      for (auto [type, op] : kinds)
        for (size_t count : counts)
          for (bool in_place : {false, true})
            for (bool grouped : {false, true}) {
              if (grouped && (type != ncclFloat32 || op != ncclSum)) continue;
              const Case c{coll, count, type, op, in_place, grouped};
              if (long wrong = run_case(c, rank, n, comm, f); wrong > 0)
                f.fail(fmt::format("{}: {} elements not the rank-order fold", describe(c, rank, n), wrong));
            }
  };
}

}  // namespace

TEST_CASE("the inputs tell reduction orders apart: ring gives other bits", "[mp][threads][deterministic]") {
  ScopedEnv ring("BRAID_ALGO", "ring");
  long differing = 0;
  CHECK(run_ranks_as_threads(4, [&](int rank, int n, ncclComm_t comm, Failures& f) {
          const long wrong = run_case({Coll::AllReduce, 70000}, rank, n, comm, f);
          if (rank == 0) differing = wrong;
        }) == 0);
  CHECK(differing > 1000);  // of 70000
}

TEST_CASE("BRAID_DETERMINISTIC folds in rank order on every path, threads", "[mp][threads][deterministic]") {
  ScopedEnv on("BRAID_DETERMINISTIC", "1");
  for (int n : {1, 2, 3, 5}) {
    INFO("nranks " << n);
    CHECK(run_ranks_as_threads(n, every_path({1, 13, 1000, 5001, 70000, 300001})) == 0);
  }
}

TEST_CASE("BRAID_DETERMINISTIC folds in rank order on every path, processes", "[mp][processes][deterministic]") {
  ScopedEnv on("BRAID_DETERMINISTIC", "1");
  CHECK(run_ranks_as_processes(4, every_path({13, 1000, 5001, 300001}), 120) == 0);
  ScopedEnv pull("BRAID_CMA", "on");  // reductions pull the peers' inputs with cross-memory attach
  CHECK(run_ranks_as_processes(3, every_path({70000, 300001}), 120) == 0);
}

TEST_CASE("BRAID_DETERMINISTIC folds in rank order over sockets", "[mp][processes][socket][deterministic]") {
  ScopedEnv on("BRAID_DETERMINISTIC", "1");
  auto as_hosts = [](int rank) {
    setenv("BRAID_HOSTID", fmt::format("test-host-{}", rank).c_str(), 1);
    setenv("BRAID_SOCKET_ADDR", fmt::format("127.0.0.{}", rank + 1).c_str(), 1);
  };
  CHECK(run_ranks_as_processes(3, every_path({13, 5001, 300001}), 120, as_hosts) == 0);
  // Two hosts of two ranks: shared memory within a host, sockets across.
  auto two_by_two = [](int rank) {
    setenv("BRAID_HOSTID", fmt::format("test-host-{}", rank / 2).c_str(), 1);
    setenv("BRAID_SOCKET_ADDR", fmt::format("127.0.0.{}", rank / 2 + 1).c_str(), 1);
  };
  CHECK(run_ranks_as_processes(4, every_path({5001, 300001}), 120, two_by_two) == 0);
}

TEST_CASE("BRAID_DETERMINISTIC with BRAID_ALGO naming the one-sided ordered folds, threads",
          "[mp][threads][deterministic]") {
  // Threads load each other's buffers directly: every fold alone and fused.
  ScopedEnv on("BRAID_DETERMINISTIC", "1");
  ScopedEnv named("BRAID_ALGO", "allreduce=twoshot_ordered,reducescatter=oneshot_ordered");
  for (int n : {2, 3, 4}) {
    INFO("nranks " << n);
    CHECK(run_ranks_as_threads(n, every_path({1000, 70000})) == 0);
  }
}

TEST_CASE("BRAID_DETERMINISTIC outranks BRAID_ALGO and a late rank", "[mp][threads][deterministic]") {
  ScopedEnv on("BRAID_DETERMINISTIC", "1");
  for (const char* setting : {"BRAID_ALGO=ring", "BRAID_ALGO=rd", "BRAID_ALGO=reduce=binomial",
                              "BRAID_STRAGGLER=2"}) {
    const std::string s = setting;
    const size_t eq = s.find('=');
    const std::string name = s.substr(0, eq);
    ScopedEnv forced(name.c_str(), s.substr(eq + 1));
    INFO(setting);
    CHECK(run_ranks_as_threads(4, every_path({5001, 70000})) == 0);
  }
}

TEST_CASE("one call folds in rank order by selecting chain or direct", "[mp][threads][deterministic]") {
  CHECK(run_ranks_as_threads(4, [](int rank, int n, ncclComm_t comm, Failures& f) {
          for (Coll coll : {Coll::AllReduce, Coll::ReduceScatter, Coll::Reduce})
            for (const char* selection : {"chain", "direct"})
              for (size_t count : {5001, 70000})
                for (bool in_place : {false, true}) {
                  if (coll == Coll::Reduce && std::string(selection) == "direct") continue;  // no such Reduce
                  Case c{coll, count, ncclFloat32, ncclMax, in_place};
                  c.selection = selection;
                  if (long wrong = run_case(c, rank, n, comm, f); wrong > 0)
                    f.fail(fmt::format("{} selecting {}: {} elements not the rank-order fold", describe(c, rank, n),
                                       selection, wrong));
                }
        }) == 0);
}

TEST_CASE("BRAID_DETERMINISTIC must be the same on every rank", "[mp][processes][deterministic]") {
  CHECK(init_must_fail(3, [](int rank) { setenv("BRAID_DETERMINISTIC", rank == 1 ? "1" : "0", 1); },
                       ncclInvalidUsage, "BRAID_DETERMINISTIC") == 0);
  CHECK(init_must_fail(2, [](int) { setenv("BRAID_DETERMINISTIC", "yes", 1); }, ncclInvalidArgument,
                       "BRAID_DETERMINISTIC") == 0);
}

// How many slices a call between hosts over TCP runs in
// (HostPaths::slices_for, NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD), and
// NCCL's bounds on those two variables.
#include <catch2/catch.hpp>
#include <cstdlib>

#include "braid/algorithms.h"
#include "src/plan/host_path.h"
#include "src/transport/transport_policy.h"

using namespace braid;

namespace {

HostPathSettings between_hosts(uint32_t remote_slices) {
  HostPathSettings s;
  s.rank = 0;
  s.nranks = 2;
  s.tile_bytes = s.wide_tile_bytes = 128 * 1024;  // kRemoteFragmentBytes
  s.remote_slices = remote_slices;
  return s;
}

CollectiveCall allreduce(size_t floats) {
  CollectiveCall c;
  c.collective = Collective::AllReduce;
  c.count = floats;
  c.type = ncclFloat;
  return c;
}

struct Env {
  Env(const char* threads, const char* per_thread) {
    set("NCCL_SOCKET_NTHREADS", threads);
    set("NCCL_NSOCKS_PERTHREAD", per_thread);
  }
  ~Env() {
    unsetenv("NCCL_SOCKET_NTHREADS");
    unsetenv("NCCL_NSOCKS_PERTHREAD");
  }
  static void set(const char* name, const char* value) {
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
};

}  // namespace

TEST_CASE("A call between hosts over TCP runs in as many slices as give each a whole fragment", "[tcp_slices]") {
  const Schedule ring = ring_allreduce(2);  // 2 chunks: half the buffer each
  HostPaths four(between_hosts(4));
  CHECK(four.slices_for(allreduce(8), ring) == 1);                   // 16 B chunks
  CHECK(four.slices_for(allreduce(64 * 1024), ring) == 1);           // 128 KiB chunks: one fragment
  CHECK(four.slices_for(allreduce(3 * 64 * 1024), ring) == 3);       // 384 KiB: three fragments
  CHECK(four.slices_for(allreduce(32 * 1024 * 1024), ring) == 4);    // bounded by the setting
  HostPaths one(between_hosts(1));
  CHECK(one.slices_for(allreduce(32 * 1024 * 1024), ring) == 1);
}

TEST_CASE("A send/recv message to a peer on another host over TCP runs in slices of whole fragments",
          "[tcp_slices]") {
  HostPathSettings s = between_hosts(4);
  s.nranks = 3;
  s.sliced_peers = {false, false, true};  // rank 1 on this host, rank 2 on another over TCP
  HostPaths four(s);
  CHECK(four.p2p_slices(2, 0) == 1);
  CHECK(four.p2p_slices(2, 128 * 1024) == 1);
  CHECK(four.p2p_slices(2, 3 * 128 * 1024 + 5) == 3);
  CHECK(four.p2p_slices(2, 32 << 20) == 4);
  CHECK(four.p2p_slices(1, 32 << 20) == 1);   // within the host
  CHECK(four.p2p_slices(0, 32 << 20) == 1);   // itself
  CHECK(four.p2p_slices(5, 32 << 20) == 1);   // no such rank
  CHECK(four.p2p_slices(-1, 32 << 20) == 1);
  s.remote_slices = 1;
  CHECK(HostPaths(s).p2p_slices(2, 32 << 20) == 1);
}

TEST_CASE("NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD as NCCL bounds them", "[tcp_slices]") {
  {
    Env e(nullptr, nullptr);
    CHECK(tcp_slices_from_env() == 1);
  }
  {
    Env e("2", "4");
    CHECK(tcp_slices_from_env() == 8);
  }
  {
    Env e("40", "8");  // 16 threads at most, 64 sockets at most: 4 per thread
    CHECK(tcp_slices_from_env() == 64);
  }
  {
    Env e("3", "30");  // 64 / 3 = 21 per thread
    CHECK(tcp_slices_from_env() == 63);
  }
  {
    Env e("0", "-2");  // below 1 counts as 1
    CHECK(tcp_slices_from_env() == 1);
  }
  {
    Env e("x", "5");  // malformed: unset
    CHECK(tcp_slices_from_env() == 5);
  }
}

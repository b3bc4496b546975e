// Grouped send/recv (AlltoAllv as PyTorch issues it), send-to-self, groups
// mixing collectives and p2p, and groups spanning communicators of one thread.
#include <catch2/catch.hpp>

#include "collective_check.h"

using namespace mp;

namespace {

// Elements rank `from` sends to rank `to`: uneven, sometimes zero.
size_t split(int from, int to) { return size_t((from * 5 + to * 3) % 7) * 1000 + ((from + to) % 3 == 0 ? 0 : 17); }

int32_t value(int from, int to, size_t i) { return int32_t(from * 1000003 + to * 1009 + int(i)); }

void alltoallv(int rank, int n, ncclComm_t comm, Failures& f) {
  std::vector<size_t> send_off(n + 1), recv_off(n + 1);
  for (int p = 0; p < n; ++p) {
    send_off[p + 1] = send_off[p] + split(rank, p);
    recv_off[p + 1] = recv_off[p] + split(p, rank);
  }
  std::vector<int32_t> send(send_off[n]), recv(recv_off[n], -1);
  for (int p = 0; p < n; ++p)
    for (size_t i = 0; i < split(rank, p); ++i) send[send_off[p] + i] = value(rank, p, i);
  MP_NCCL(f, ncclGroupStart());
  for (int p = 0; p < n; ++p) {
    MP_NCCL(f, ncclSend(send.data() + send_off[p], split(rank, p), ncclInt32, p, comm, nullptr));
    MP_NCCL(f, ncclRecv(recv.data() + recv_off[p], split(p, rank), ncclInt32, p, comm, nullptr));
  }
  MP_NCCL(f, ncclGroupEnd());
  size_t wrong = 0;
  for (int p = 0; p < n; ++p)
    for (size_t i = 0; i < split(p, rank); ++i) wrong += recv[recv_off[p] + i] != value(p, rank, i);
  if (wrong) f.fail(fmt::format("alltoallv rank {}: {} wrong", rank, wrong));
}

}  // namespace

TEST_CASE("alltoallv through grouped send/recv, including self and zero counts", "[mp][p2p]") {
  for (int n : {1, 2, 3, 5}) {
    INFO("threads, nranks " << n);
    CHECK(run_ranks_as_threads(n, alltoallv) == 0);
  }
  CHECK(run_ranks_as_processes(4, alltoallv) == 0);
}

TEST_CASE("ring exchange with several messages to the same peer keeps their order", "[mp][p2p][threads]") {
  CHECK(run_ranks_as_threads(4, [](int rank, int n, ncclComm_t comm, Failures& f) {
          int next = (rank + 1) % n, prev = (rank + n - 1) % n;
          const size_t sizes[] = {1, 70000, 0, 3};  // several fragments, then tiny ones
          std::vector<std::vector<float>> out, in;
          for (size_t s : sizes) {
            out.emplace_back(s, float(rank * 10 + int(out.size())));
            in.emplace_back(s, -1.f);
          }
          MP_NCCL(f, ncclGroupStart());
          for (size_t k = 0; k < 4; ++k) {
            MP_NCCL(f, ncclRecv(in[k].data(), sizes[k], ncclFloat, prev, comm, nullptr));
            MP_NCCL(f, ncclSend(out[k].data(), sizes[k], ncclFloat, next, comm, nullptr));
          }
          MP_NCCL(f, ncclGroupEnd());
          for (size_t k = 0; k < 4; ++k)
            for (float v : in[k])
              if (v != float(prev * 10 + int(k))) return f.fail(fmt::format("message {} from {} wrong", k, prev));
        }) == 0);
}

TEST_CASE("a single blocking send/recv pair outside a group", "[mp][p2p]") {
  CHECK(run_ranks_as_processes(2, [](int rank, int, ncclComm_t comm, Failures& f) {
          std::vector<double> buf(123457, rank == 0 ? 3.5 : 0.0);
          if (rank == 0) MP_NCCL(f, ncclSend(buf.data(), buf.size(), ncclDouble, 1, comm, nullptr));
          else MP_NCCL(f, ncclRecv(buf.data(), buf.size(), ncclDouble, 0, comm, nullptr));
          for (double v : buf)
            if (v != 3.5) return f.fail("received wrong data");
        }) == 0);
}

TEST_CASE("send/recv size mismatch is reported, not silently truncated", "[mp][p2p][errors]") {
  setenv("BRAID_TIMEOUT", "5", 1);
  CHECK(run_ranks_as_threads(2, [](int rank, int, ncclComm_t comm, Failures& f) {
          std::vector<float> buf(100, 1.f);
          ncclResult_t r = rank == 0 ? ncclSend(buf.data(), 100, ncclFloat, 1, comm, nullptr)
                                     : ncclRecv(buf.data(), 50, ncclFloat, 0, comm, nullptr);
          if (rank == 1 && r != ncclInvalidUsage) f.fail(fmt::format("receiver got {} not ncclInvalidUsage", int(r)));
          if (rank == 1 && std::string(ncclGetLastError(comm)).find("100") == std::string::npos)
            f.fail(std::string("message does not name the sizes: ") + ncclGetLastError(comm));
        }) == 0);
  unsetenv("BRAID_TIMEOUT");
}

TEST_CASE("one group mixing collectives and send/recv", "[mp][p2p][threads]") {
  CHECK(run_ranks_as_threads(3, [](int rank, int n, ncclComm_t comm, Failures& f) {
          std::vector<float> a(1000, float(rank + 1)), b(1000), c(3000), msg(10, float(rank)), got(10, -1);
          MP_NCCL(f, ncclGroupStart());
          MP_NCCL(f, ncclAllReduce(a.data(), b.data(), a.size(), ncclFloat, ncclSum, comm, nullptr));
          MP_NCCL(f, ncclSend(msg.data(), 10, ncclFloat, (rank + 1) % n, comm, nullptr));
          MP_NCCL(f, ncclAllGather(a.data(), c.data(), a.size(), ncclFloat, comm, nullptr));
          MP_NCCL(f, ncclRecv(got.data(), 10, ncclFloat, (rank + n - 1) % n, comm, nullptr));
          MP_NCCL(f, ncclGroupEnd());
          for (float v : b)
            if (v != 6.f) return f.fail("allreduce in group wrong");
          for (size_t i = 0; i < c.size(); ++i)
            if (c[i] != float(i / 1000 + 1)) return f.fail("allgather in group wrong");
          for (float v : got)
            if (v != float((rank + n - 1) % n)) return f.fail("send/recv in group wrong");
        }) == 0);
}

TEST_CASE("ncclCommInitAll and one thread driving a group over all its communicators", "[mp][initall][threads]") {
  const int n = 4;
  std::vector<ncclComm_t> comms(n);
  REQUIRE(ncclCommInitAll(comms.data(), n, nullptr) == ncclSuccess);
  for (int i = 0; i < n; ++i) {
    int rank = -1, count = -1;
    REQUIRE(ncclCommUserRank(comms[i], &rank) == ncclSuccess);
    REQUIRE(ncclCommCount(comms[i], &count) == ncclSuccess);
    CHECK(rank == i);
    CHECK(count == n);
  }
  std::vector<std::vector<int64_t>> in(n), out(n);
  for (int i = 0; i < n; ++i) in[i].assign(100003, i + 1), out[i].assign(100003, 0);
  REQUIRE(ncclGroupStart() == ncclSuccess);
  for (int i = 0; i < n; ++i)
    REQUIRE(ncclAllReduce(in[i].data(), out[i].data(), in[i].size(), ncclInt64, ncclSum, comms[i], nullptr) ==
            ncclSuccess);
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  for (int i = 0; i < n; ++i)
    for (int64_t v : out[i]) REQUIRE(v == 10);
  for (ncclComm_t c : comms) CHECK(ncclCommDestroy(c) == ncclSuccess);
}

TEST_CASE("init of several ranks inside one group from one thread", "[mp][initall][threads]") {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclComm_t comms[3] = {};
  REQUIRE(ncclGroupStart() == ncclSuccess);
  for (int r = 0; r < 3; ++r) REQUIRE(ncclCommInitRank(&comms[r], 3, id, r) == ncclSuccess);
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  float x[3] = {1, 2, 4}, y[3] = {};
  REQUIRE(ncclGroupStart() == ncclSuccess);
  for (int r = 0; r < 3; ++r) REQUIRE(ncclAllReduce(&x[r], &y[r], 1, ncclFloat, ncclMax, comms[r], nullptr) == ncclSuccess);
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  for (float v : y) CHECK(v == 4.f);
  for (ncclComm_t c : comms) CHECK(ncclCommDestroy(c) == ncclSuccess);
}

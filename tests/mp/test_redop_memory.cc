// PreMulSum ops, buffer registration, symmetric windows and
// ncclGroupSimulateEnd, each checked exactly on real ranks.
#include <catch2/catch.hpp>

#include <cstring>

#include "collective_check.h"

using namespace mp;

TEST_CASE("PreMulSum: immediate and pointer scalars, every collective that reduces", "[mp][premulsum][threads]") {
  CHECK(run_ranks_as_threads(3, [](int rank, int n, ncclComm_t comm, Failures& f) {
          // Immediate scalar 0.5 (copied at creation), pointer scalar read at run time.
          float half = 0.5f;
          ncclRedOp_t imm, ptr;
          MP_NCCL(f, ncclRedOpCreatePreMulSum(&imm, &half, ncclFloat, ncclScalarHostImmediate, comm));
          half = 99.f;  // must not matter for the immediate op
          float scalar = 2.f;
          MP_NCCL(f, ncclRedOpCreatePreMulSum(&ptr, &scalar, ncclFloat, ncclScalarDevice, comm));
          if (int(imm) < int(ncclNumOps) || imm == ptr) f.fail("op ids not dynamic/distinct");
          const size_t count = 3000;
          std::vector<float> in(count * n), out(count * n, -1.f);
          for (size_t i = 0; i < in.size(); ++i) in[i] = float(rank + 1) * float(i % 7);
          const float ranksum = float(n * (n + 1) / 2);
          MP_NCCL(f, ncclAllReduce(in.data(), out.data(), count, ncclFloat, imm, comm, nullptr));
          for (size_t i = 0; i < count; ++i)
            if (out[i] != 0.5f * ranksum * float(i % 7)) return f.fail(fmt::format("allreduce imm at {}", i));
          scalar = 3.f;  // pointer scalars are read when the collective runs
          MP_NCCL(f, ncclReduceScatter(in.data(), out.data(), count, ncclFloat, ptr, comm, nullptr));
          for (size_t i = 0; i < count; ++i)
            if (out[i] != 3.f * ranksum * float((rank * count + i) % 7))
              return f.fail(fmt::format("reducescatter ptr at {}", i));
          MP_NCCL(f, ncclReduce(in.data(), out.data(), count, ncclFloat, imm, 1, comm, nullptr));
          if (rank == 1)
            for (size_t i = 0; i < count; ++i)
              if (out[i] != 0.5f * ranksum * float(i % 7)) return f.fail(fmt::format("reduce at {}", i));
          // In place.
          std::vector<float> io(in.begin(), in.begin() + count);
          MP_NCCL(f, ncclAllReduce(io.data(), io.data(), count, ncclFloat, ptr, comm, nullptr));
          for (size_t i = 0; i < count; ++i)
            if (io[i] != 3.f * ranksum * float(i % 7)) return f.fail(fmt::format("in-place at {}", i));
          // Wrong datatype for the op; destroyed op; builtin destroy.
          if (ncclAllReduce(in.data(), out.data(), count, ncclDouble, imm, comm, nullptr) != ncclInvalidArgument)
            f.fail("op used with another datatype accepted");
          MP_NCCL(f, ncclRedOpDestroy(imm, comm));
          if (ncclAllReduce(in.data(), out.data(), count, ncclFloat, imm, comm, nullptr) != ncclInvalidArgument)
            f.fail("destroyed op accepted");
          if (ncclRedOpDestroy(imm, comm) != ncclInvalidArgument) f.fail("double RedOpDestroy accepted");
          if (ncclRedOpDestroy(ncclSum, comm) != ncclInvalidArgument) f.fail("destroying ncclSum accepted");
          MP_NCCL(f, ncclRedOpDestroy(ptr, comm));
        }) == 0);
}

TEST_CASE("PreMulSum on integers and half precision", "[mp][premulsum][threads]") {
  CHECK(run_ranks_as_threads(2, [](int rank, int n, ncclComm_t comm, Failures& f) {
          int32_t k = -3;
          ncclRedOp_t op;
          MP_NCCL(f, ncclRedOpCreatePreMulSum(&op, &k, ncclInt32, ncclScalarHostImmediate, comm));
          std::vector<int32_t> in(100), out(100);
          for (int i = 0; i < 100; ++i) in[i] = (rank + 1) * i;
          MP_NCCL(f, ncclAllReduce(in.data(), out.data(), 100, ncclInt32, op, comm, nullptr));
          for (int i = 0; i < 100; ++i)
            if (out[i] != -3 * 3 * i) return f.fail(fmt::format("int32 premulsum at {}: {}", i, out[i]));
          MP_NCCL(f, ncclRedOpDestroy(op, comm));
          // NCCL allows destroying the op right after the call that uses it,
          // even inside a group that has not run yet.
          MP_NCCL(f, ncclGroupStart());
          MP_NCCL(f, ncclRedOpCreatePreMulSum(&op, &k, ncclInt32, ncclScalarHostImmediate, comm));
          MP_NCCL(f, ncclAllReduce(in.data(), out.data(), 100, ncclInt32, op, comm, nullptr));
          MP_NCCL(f, ncclRedOpDestroy(op, comm));
          MP_NCCL(f, ncclGroupEnd());
          if (out[7] != -3 * 3 * 7) f.fail("premulsum op destroyed inside the group changed the result");
          uint16_t two_half = 0x4000;  // 2.0 in IEEE half
          MP_NCCL(f, ncclRedOpCreatePreMulSum(&op, &two_half, ncclHalf, ncclScalarHostImmediate, comm));
          std::vector<uint16_t> hin(10, 0x3c00), hout(10);  // 1.0
          MP_NCCL(f, ncclAllReduce(hin.data(), hout.data(), 10, ncclHalf, op, comm, nullptr));
          for (uint16_t h : hout)
            if (h != 0x4400) return f.fail(fmt::format("half premulsum: {:#x}, want 4.0 (0x4400)", h));
          MP_NCCL(f, ncclRedOpDestroy(op, comm));
        }) == 0);
}

TEST_CASE("buffer registration: handles, unknown handles refused", "[mp][register][threads]") {
  CHECK(run_ranks_as_threads(2, [](int rank, int n, ncclComm_t comm, Failures& f) {
          std::vector<float> buf(1024, float(rank));
          void* h1 = nullptr;
          void* h2 = nullptr;
          MP_NCCL(f, ncclCommRegister(comm, buf.data(), buf.size() * 4, &h1));
          MP_NCCL(f, ncclCommRegister(comm, buf.data(), 16, &h2));
          if (!h1 || !h2 || h1 == h2) f.fail("registration handles not distinct");
          std::vector<float> out(1024);
          MP_NCCL(f, ncclAllReduce(buf.data(), out.data(), 1024, ncclFloat, ncclSum, comm, nullptr));
          if (out[5] != 1.f) f.fail("allreduce on registered buffer wrong");
          MP_NCCL(f, ncclCommDeregister(comm, h1));
          if (ncclCommDeregister(comm, h1) != ncclInvalidArgument) f.fail("double deregister accepted");
          int x;
          if (ncclCommDeregister(comm, &x) != ncclInvalidArgument) f.fail("foreign handle accepted");
          if (ncclCommRegister(comm, nullptr, 16, &h1) != ncclInvalidArgument) f.fail("NULL buffer registered");
          MP_NCCL(f, ncclCommDeregister(comm, h2));
        }) == 0);
}

TEST_CASE("windows: collective registration gathers every rank's extent", "[mp][window]") {
  CHECK(run_ranks_as_processes(3, [](int rank, int n, ncclComm_t comm, Failures& f) {
          void* mem = nullptr;
          size_t bytes = 4096 * size_t(rank + 1);
          MP_NCCL(f, ncclMemAlloc(&mem, bytes));
          ncclWindow_t win = nullptr;
          MP_NCCL(f, ncclCommWindowRegister(comm, mem, bytes, &win, NCCL_WIN_COLL_SYMMETRIC));
          if (!win) return f.fail("no window");
          ncclWindow_t plain = nullptr;
          std::vector<char> other(100);
          MP_NCCL(f, ncclCommWindowRegister(comm, other.data(), other.size(), &plain, NCCL_WIN_DEFAULT));
          // Misaligned symmetric base: refused locally before any exchange.
          ncclWindow_t bad = nullptr;
          if (ncclCommWindowRegister(comm, static_cast<char*>(mem) + 8, 64, &bad, NCCL_WIN_COLL_SYMMETRIC) !=
              ncclInvalidArgument)
            f.fail("misaligned symmetric window accepted");
          if (ncclCommWindowRegister(comm, mem, 64, &bad, 0x40) != ncclInvalidArgument) f.fail("bad winFlags accepted");
          MP_NCCL(f, ncclCommWindowDeregister(comm, win));
          if (ncclCommWindowDeregister(comm, win) != ncclInvalidArgument) f.fail("double window deregister");
          MP_NCCL(f, ncclCommWindowDeregister(comm, plain));
          MP_NCCL(f, ncclMemFree(mem));
        }) == 0);
}

// A bad NCCL_WIN_STRIDE on one rank: every rank refuses the window in step,
// and the communicator is not broken (NCCL_WIN_STRIDE is NCCL's variable).
TEST_CASE("windows: a bad NCCL_WIN_STRIDE on one rank is refused on every rank, the communicator goes on",
          "[mp][window]") {
  CHECK(run_ranks_as_processes(
            3,
            [](int rank, int n, ncclComm_t comm, Failures& f) {
              void* mem = nullptr;
              MP_NCCL(f, ncclMemAlloc(&mem, 4096));
              ncclWindow_t win = nullptr;
              if (ncclCommWindowRegister(comm, mem, 4096, &win, NCCL_WIN_COLL_SYMMETRIC) != ncclInvalidArgument ||
                  std::string(ncclGetLastError(comm)).find("NCCL_WIN_STRIDE on rank 1") == std::string::npos)
                f.fail(fmt::format("rank {}: a bad stride gave: {}", rank, ncclGetLastError(comm)));
              barrier_all(comm, f);  // not broken
              if (rank == 1) unsetenv("NCCL_WIN_STRIDE");
              MP_NCCL(f, ncclCommWindowRegister(comm, mem, 4096, &win, NCCL_WIN_COLL_SYMMETRIC));
              if (win) MP_NCCL(f, ncclCommWindowDeregister(comm, win));
              MP_NCCL(f, ncclMemFree(mem));
            },
            60,
            [](int rank) {
              if (rank == 1) setenv("NCCL_WIN_STRIDE", "12345", 1);
            }) == 0);
}

TEST_CASE("ncclGroupSimulateEnd estimates and discards the group", "[mp][simulate][threads]") {
  CHECK(run_ranks_as_threads(2, [](int rank, int n, ncclComm_t comm, Failures& f) {
          std::vector<float> in(1 << 20, 1.f), out(1 << 20, -7.f);
          ncclSimInfo_t small = NCCL_SIM_INFO_INITIALIZER, large = NCCL_SIM_INFO_INITIALIZER;
          MP_NCCL(f, ncclGroupStart());
          MP_NCCL(f, ncclAllReduce(in.data(), out.data(), 16, ncclFloat, ncclSum, comm, nullptr));
          MP_NCCL(f, ncclGroupSimulateEnd(&small));
          MP_NCCL(f, ncclGroupStart());
          MP_NCCL(f, ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat, ncclSum, comm, nullptr));
          MP_NCCL(f, ncclSend(in.data(), 100, ncclFloat, 1 - rank, comm, nullptr));
          MP_NCCL(f, ncclRecv(out.data(), 100, ncclFloat, 1 - rank, comm, nullptr));
          MP_NCCL(f, ncclGroupSimulateEnd(&large));
          if (!(small.estimatedTime > 0 && large.estimatedTime > small.estimatedTime))
            f.fail(fmt::format("estimates {} and {} us", small.estimatedTime, large.estimatedTime));
          if (out[0] != -7.f) f.fail("a simulated group moved data");
          if (ncclGroupSimulateEnd(&small) != ncclInvalidUsage) f.fail("SimulateEnd without GroupStart accepted");
          ncclSimInfo_t bad = NCCL_SIM_INFO_INITIALIZER;
          bad.magic = 0;
          MP_NCCL(f, ncclGroupStart());
          if (ncclGroupSimulateEnd(&bad) != ncclInvalidArgument) f.fail("bad simInfo magic accepted");
          // As NCCL's: the bad simInfo ended the group, and NULL is ncclGroupEnd (no group open now).
          if (ncclGroupSimulateEnd(nullptr) != ncclInvalidUsage) f.fail("the group was left open");
          // The communicator still works.
          MP_NCCL(f, ncclAllReduce(in.data(), out.data(), 16, ncclFloat, ncclSum, comm, nullptr));
          if (out[3] != 2.f) f.fail("allreduce after simulation wrong");
        }) == 0);
}

// Settings every rank of a communicator must agree on (src/runtime/
// agreement.h): a rank that took another path than its peers would wait for
// them forever, so a difference fails init on every rank, and a value out of
// range is refused with the variable named.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "harness.h"

using namespace mp;

TEST_CASE("BRAID_STRAGGLAR_LANES: ranks that disagree fail init, a bad value is refused",
          "[mp][processes][stragglar]") {
  // A rank planning other lanes than its peers would wait for them forever.
  auto disagree = [](int rank) { setenv("BRAID_STRAGGLAR_LANES", rank == 0 ? "compact" : "connection", 1); };
  CHECK(init_must_fail(2, disagree, ncclInvalidUsage, "stragglar_lanes") == 0);
  auto bad = [](int) { setenv("BRAID_STRAGGLAR_LANES", "diagonal", 1); };
  CHECK(init_must_fail(2, bad, ncclInvalidArgument, "BRAID_STRAGGLAR_LANES=diagonal") == 0);
}

TEST_CASE("BRAID_CUDA_LL_MAX_BYTES out of range is refused at init", "[mp][processes]") {
  // Every rank sizes its LL region by it, so it is checked on every backend.
  auto huge = [](int) { setenv("BRAID_CUDA_LL_MAX_BYTES", "2097152", 1); };
  CHECK(init_must_fail(2, huge, ncclInvalidArgument, "BRAID_CUDA_LL_MAX_BYTES=2097152 (0..1048576)") == 0);
  auto negative = [](int) { setenv("BRAID_CUDA_LL_MAX_BYTES", "-1", 1); };
  CHECK(init_must_fail(2, negative, ncclInvalidArgument, "BRAID_CUDA_LL_MAX_BYTES=-1") == 0);
}

// Both ends of a shared-memory ring lay it out by them: set apart, one end's
// check failed its call while the other waited until BRAID_TIMEOUT.
TEST_CASE("BRAID_SHM_SLOTS and BRAID_SHM_SLOT_BYTES: ranks that set them apart fail init", "[mp][processes]") {
  auto slots = [](int rank) { setenv("BRAID_SHM_SLOTS", rank == 1 ? "4" : "8", 1); };
  CHECK(init_must_fail(3, slots, ncclInvalidUsage, "shm_slots (BRAID_SHM_SLOTS") == 0);
  auto bytes = [](int rank) { setenv("BRAID_SHM_SLOT_BYTES", rank == 0 ? "65536" : "262144", 1); };
  CHECK(init_must_fail(2, bytes, ncclInvalidUsage, "shm_slot_bytes (BRAID_SHM_SLOT_BYTES") == 0);
}

TEST_CASE("BRAID_CUDA_* and BRAID_TUNING_FILE: checked at init, and the same on every rank or none",
          "[mp][processes][tuning]") {
  // They lay out every rank's FIFOs and LL region (src/runtime/cuda_settings.h),
  // so they are agreed on every backend.
  auto channels_on_one = [](int rank) {
    if (rank == 1) setenv("BRAID_CUDA_CHANNELS", "16", 1);
  };
  CHECK(init_must_fail(2, channels_on_one, ncclInvalidUsage, "cuda_channels (BRAID_CUDA_CHANNELS") == 0);
  auto slots_differ = [](int rank) { setenv("BRAID_CUDA_SLOTS", rank == 0 ? "2" : "4", 1); };
  CHECK(init_must_fail(2, slots_differ, ncclInvalidUsage, "cuda_slots") == 0);
  auto odd_slot = [](int) { setenv("BRAID_CUDA_SLOT_BYTES", "5000", 1); };
  CHECK(init_must_fail(2, odd_slot, ncclInvalidArgument, "BRAID_CUDA_SLOT_BYTES=5000 (4096..1073741824, a multiple "
                                                           "of 256)") == 0);
  auto words = [](int) { setenv("BRAID_CUDA_CHANNELS", "many", 1); };
  CHECK(init_must_fail(2, words, ncclInvalidArgument, "BRAID_CUDA_CHANNELS=many (1..64)") == 0);
  auto missing = [](int) { setenv("BRAID_TUNING_FILE", "/nonexistent/tuning.json", 1); };
  CHECK(init_must_fail(2, missing, ncclInvalidArgument, "BRAID_TUNING_FILE=/nonexistent/tuning.json: cannot read") ==
        0);
  // A table on one rank only: the ranks would resolve different settings.
  static char path[] = "/tmp/braid_tuning_agree_XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  const char table[] =
      R"({"format": "braid-cuda-tuning-1", "rows": [{"channels": 8, "measured": "the agreement test"}]})";
  REQUIRE(write(fd, table, sizeof table - 1) == ssize_t(sizeof table - 1));
  close(fd);
  auto file_on_one = [](int rank) {
    if (rank == 0) setenv("BRAID_TUNING_FILE", path, 1);
  };
  CHECK(init_must_fail(2, file_on_one, ncclInvalidUsage, "tuning_table") == 0);
  unlink(path);
}

TEST_CASE("a bad setting on one rank fails init on every rank at once", "[mp][processes]") {
  // Its failure travels in init's first exchange: the next rank of the
  // bootstrap ring does not wait until BRAID_TIMEOUT (20 s here) for it.
  const int n = 3, bad = 1;
  std::vector<pid_t> pids = fork_ranks(n, 60, 1, [&](int r, const std::vector<ncclUniqueId>& ids) {
    setenv("BRAID_TIMEOUT", "20", 1);
    if (r == bad) setenv("BRAID_STRAGGLAR_LANES", "diagonal", 1);
    const auto start = std::chrono::steady_clock::now();
    ncclComm_t comm = nullptr;
    const ncclResult_t got = ncclCommInitRank(&comm, n, ids[0], r);
    const std::string why = ncclGetLastError(nullptr);
    const bool in_time = std::chrono::steady_clock::now() - start < std::chrono::seconds(5);
    const ncclResult_t code = r == bad ? ncclInvalidArgument : ncclRemoteError;
    const std::string says = r == bad ? "BRAID_STRAGGLAR_LANES=diagonal" : "rank 1's init failed before its first";
    if (got != code || why.find(says) == std::string::npos || !in_time) {
      std::fprintf(stderr, "rank %d: init gave %d (%s)%s\n", r, int(got), why.c_str(), in_time ? "" : " after 5 s");
      return 1;
    }
    return 0;
  });
  CHECK(reap_with_one_killed(pids, -1) == 0);
}

// Pins (BRAID_ALGO, schedule files) and BRAID_STRAGGLER change the schedule
// a call runs: ranks that differ would run different schedules for one call
// (wrong data, or a wait until BRAID_TIMEOUT), so init fails on every rank
// naming the setting.  What they agree on is the effect, not the spelling.
namespace {

// 2 ranks: a 64 KiB AllReduce (16384 floats), exact.
void allreduce_64k(int rank, int n, ncclComm_t comm, Failures& f) {
  std::vector<float> in(16384, float(rank + 1)), out(16384, -1.0f);
  MP_NCCL(f, ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat, ncclSum, comm, nullptr));
  if (std::count(out.begin(), out.end(), float(n * (n + 1) / 2)) != ptrdiff_t(out.size())) f.fail("wrong sums");
}

}  // namespace

TEST_CASE("BRAID_ALGO: ranks that pin different algorithms fail init, alike ones spelt apart agree",
          "[mp][processes][agree]") {
  auto on_one = [](int rank) {
    if (rank == 0) setenv("BRAID_ALGO", "allreduce=direct", 1);
  };
  CHECK(init_must_fail(2, on_one, ncclInvalidUsage, "ranks disagree on braid_algo (BRAID_ALGO") == 0);
  auto apart = [](int rank) { setenv("BRAID_ALGO", rank == 0 ? "allreduce=direct" : "allreduce=rd", 1); };
  CHECK(init_must_fail(2, apart, ncclInvalidUsage, "braid_algo") == 0);
  // The same pins, spelt apart (and a name that pins nothing, as unset).
  CHECK(run_ranks_as_processes(2, allreduce_64k, 60, [](int rank) {
          setenv("BRAID_ALGO", rank == 0 ? "ring" : " AllReduce = ring, allgather=RING,reducescatter=ring", 1);
        }) == 0);
  CHECK(run_ranks_as_processes(2, allreduce_64k, 60, [](int rank) {
          if (rank == 1) setenv("BRAID_ALGO", "allreduce=nosuch", 1);
        }) == 0);
}

TEST_CASE("schedule files: ranks that load different ones fail init, files for other rank counts agree",
          "[mp][processes][agree]") {
  // 4-rank schedules (tests/data/synth/schedules) on one rank of 4.
  auto on_one = [](int rank) {
    if (rank == 2) setenv("BRAID_SCHEDULES", BRAID_TEST_DATA "/synth/schedules", 1);
  };
  CHECK(init_must_fail(4, on_one, ncclInvalidUsage, "ranks disagree on schedule_files (the schedule files") == 0);
  // None of them is for 2 ranks: nothing to disagree on.
  CHECK(run_ranks_as_processes(2, allreduce_64k, 60, [](int rank) {
          if (rank == 1) setenv("BRAID_SCHEDULES", BRAID_TEST_DATA "/synth/schedules", 1);
        }) == 0);
}

TEST_CASE("BRAID_STRAGGLER: ranks that set it apart fail init", "[mp][processes][agree][stragglar]") {
  auto fixed_on_one = [](int rank) { setenv("BRAID_STRAGGLER", rank == 2 ? "2" : "off", 1); };
  CHECK(init_must_fail(3, fixed_on_one, ncclInvalidUsage, "ranks disagree on straggler (BRAID_STRAGGLER") == 0);
  auto modes = [](int rank) { setenv("BRAID_STRAGGLER", rank == 0 ? "auto" : "eager", 1); };
  CHECK(init_must_fail(3, modes, ncclInvalidUsage, "straggler") == 0);
  auto ranks = [](int rank) { setenv("BRAID_STRAGGLER", rank == 0 ? "1" : "2", 1); };
  CHECK(init_must_fail(3, ranks, ncclInvalidUsage, "straggler") == 0);
  // "off" and unset are one setting, and so is a rank out of range (off, with a warning).
  CHECK(run_ranks_as_processes(2, allreduce_64k, 60, [](int rank) {
          if (rank == 1) setenv("BRAID_STRAGGLER", "off", 1);
          if (rank == 0) setenv("BRAID_STRAGGLER", "7", 1);
        }) == 0);
}

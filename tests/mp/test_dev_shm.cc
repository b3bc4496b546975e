// Ranks whose /dev/shm is small, as in a container (docker's default is
// 64 MB).
//
// tmpfs allocates a page when it is first touched, and a touch that finds
// /dev/shm full raises SIGBUS.  8 thread ranks in a 64 MB /dev/shm died of
// a bare "Bus error" at their first 128 KB AllReduce: every connection's
// 4 MB ring was made present whole, and the single-copy paths alone connect
// every pair.  Now a ring holds the pages its fragments reach, so 8 ranks
// fit with room to spare, and what does not fit fails the call with an
// error that names /dev/shm and the remedies, on every rank, promptly.
//
// Needs root (mount namespaces); says it skipped, and passes, otherwise.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <vector>

#include "collective_check.h"
#include "scoped_env.h"

using namespace mp;

namespace {

constexpr int kNoMountNamespace = 30;

// Runs `ranks` in a child whose /dev/shm is a fresh tmpfs of `size`: the
// child's exit code, or kNoMountNamespace where it cannot have one.
int with_dev_shm(const char* size, const std::function<int()>& ranks) {
  std::fflush(nullptr);
  const pid_t child = fork();
  if (child == 0) {
    if (!own_dev_shm(size)) _exit(kNoMountNamespace);
    const int code = ranks();
    std::fflush(nullptr);
    _exit(code);
  }
  int status = 0;
  return child > 0 && waitpid(child, &status, 0) == child ? exit_code(status) : -1;
}

void every_collective(int rank, int n, ncclComm_t comm, Failures& f) {
  for (Coll c : kAllColls)
    for (size_t count : {size_t(7), size_t(1) << 15, size_t(1) << 18})
      run_and_check({.coll = c, .count = count, .root = 1}, rank, n, comm, f);
}

// What a rank of the too-small case saw.
enum : int { kFailedNamingDevShm = 0, kFailedOtherwise = 40, kSucceeded = 41, kInitFailed = 42 };

// An AlltoAll of 256 KB per peer, which needs a connection to every peer.
int alltoall_once(int rank, int n, const ncclUniqueId& id) {
  ncclComm_t comm = nullptr;
  if (ncclCommInitRank(&comm, n, id, rank) != ncclSuccess) return kInitFailed;
  const size_t count = size_t(1) << 16;
  std::vector<float> in(count * size_t(n), float(rank)), out(in.size());
  const ncclResult_t r = ncclAlltoAll(in.data(), out.data(), count, ncclFloat, comm, nullptr);
  const std::string error = ncclGetLastError(comm);
  std::fprintf(stderr, "rank %d: %s: %s\n", rank, ncclGetErrorString(r), error.c_str());
  if (r == ncclSuccess) {
    ncclCommDestroy(comm);
    return kSucceeded;
  }
  ncclCommAbort(comm);
  return error.find("/dev/shm has no room") != std::string::npos ? kFailedNamingDevShm : kFailedOtherwise;
}

}  // namespace

TEST_CASE("8 ranks in a /dev/shm of docker's default 64 MB: every collective exact (threads, processes)",
          "[mp][processes][containers]") {
  ScopedEnv shm("BRAID_TRANSPORT", "shm");
  const int threads = with_dev_shm("64m", [] { return run_ranks_as_threads(8, every_collective); });
  if (threads == kNoMountNamespace) {
    WARN("skipped: cannot make mount namespaces here (needs root)");
    return;
  }
  CHECK(threads == 0);
  // With the single-copy paths (CMA) every pair connects; a call of small
  // chunks backed whole tiles of each ring, and 8 processes' rings outgrew
  // 64 MB at a 1 MB AllReduce.
  CHECK(with_dev_shm("64m", [] { return run_ranks_as_processes(8, every_collective, 240); }) == 0);
  ScopedEnv pipes("BRAID_CMA", "off");  // every byte between processes through the rings
  CHECK(with_dev_shm("64m", [] { return run_ranks_as_processes(8, every_collective, 240); }) == 0);
}

TEST_CASE("a /dev/shm too small for the connections: every rank's call fails, one naming /dev/shm, none crashes",
          "[mp][processes][containers][faults]") {
  ScopedEnv shm("BRAID_TRANSPORT", "shm"), pipes("BRAID_CMA", "off"), quick("BRAID_TIMEOUT", "20");
  const int n = 4;
  const auto start = std::chrono::steady_clock::now();
  std::vector<int> codes;
  const int child = with_dev_shm("1m", [&] {
    std::vector<pid_t> pids =
        fork_ranks(n, 60, 1, [&](int r, const std::vector<ncclUniqueId>& ids) { return alltoall_once(r, n, ids[0]); });
    int named = 0, failed = 0;
    for (pid_t pid : pids) {
      int status = 0;
      const int code = waitpid(pid, &status, 0) == pid ? exit_code(status) : -1;
      std::fprintf(stderr, "rank exit code %d\n", code);
      named += code == kFailedNamingDevShm;
      failed += code == kFailedNamingDevShm || code == kFailedOtherwise;
    }
    return failed == n && named >= 1 ? 0 : 1;
  });
  if (child == kNoMountNamespace) {
    WARN("skipped: cannot make mount namespaces here (needs root)");
    return;
  }
  CHECK(child == 0);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(seconds < 40);  // within BRAID_TIMEOUT and its margin: no rank waits for ever
}

// A job's processes often end without ncclCommDestroy (a script's last
// line, an exception, a killed launcher).  Nothing of braid's may stay in
// /dev/shm then: every segment's name goes once its last user has mapped it.
// A pipe to oneself (a send to oneself, as PyTorch's all_to_all_single
// makes) has one end to map, and its 4 MB segment stayed.
TEST_CASE("processes that end without ncclCommDestroy leave nothing in /dev/shm", "[mp][processes][containers]") {
  ScopedEnv shm("BRAID_TRANSPORT", "shm"), pipes("BRAID_CMA", "off");
  const int n = 3;
  const int child = with_dev_shm("64m", [&] {
    std::vector<pid_t> pids = fork_ranks(n, 60, 1, [&](int r, const std::vector<ncclUniqueId>& ids) {
      ncclComm_t comm = nullptr;
      if (ncclCommInitRank(&comm, n, ids[0], r) != ncclSuccess) return 1;
      const size_t count = 1 << 10;
      std::vector<float> in(size_t(n) * count, float(r)), out(in.size());
      ncclGroupStart();
      for (int p = 0; p < n; ++p) {  // AlltoAll as sends and receives, one's own block included
        ncclSend(in.data() + size_t(p) * count, count, ncclFloat, p, comm, nullptr);
        ncclRecv(out.data() + size_t(p) * count, count, ncclFloat, p, comm, nullptr);
      }
      if (ncclGroupEnd() != ncclSuccess) return 2;
      for (size_t i = 0; i < out.size(); ++i)
        if (out[i] != float(i / count)) return 3;
      return ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat, ncclSum, comm, nullptr) == ncclSuccess ? 0 : 4;
    });  // each rank _exits with its communicator alive
    int failed = 0;
    for (pid_t pid : pids) {
      int status = 0;
      failed += waitpid(pid, &status, 0) != pid || exit_code(status) != 0;
    }
    if (failed) return 1;
    int left = 0;
    for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
      std::fprintf(stderr, "left in /dev/shm: %s\n", entry.path().c_str());
      ++left;
    }
    return left ? 2 : 0;
  });
  if (child == kNoMountNamespace) {
    WARN("skipped: cannot make mount namespaces here (needs root)");
    return;
  }
  CHECK(child == 0);
}

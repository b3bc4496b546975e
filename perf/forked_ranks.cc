#include "perf/forked_ranks.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>

namespace perf {

namespace {

// Forks body(first + i) for i < count, host_of(rank) naming its emulated
// host (nullptr: none), and reaps them all.
int fork_and_reap(int first, int count, const std::function<std::string(int rank)>& host_of,
                  const std::function<int(int rank)>& body) {
  std::vector<pid_t> pids;
  for (int r = first; r < first + count; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      if (host_of) setenv("BRAID_HOSTID", host_of(r).c_str(), 1);
      _exit(body(r));
    }
    pids.push_back(pid);
  }
  int rc = 0;
  for (pid_t pid : pids) {
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
  }
  return rc;
}

}  // namespace

int run_forked_ranks(int nranks, int hosts, const char* host_prefix, const std::function<int(int rank)>& body) {
  return fork_and_reap(0, nranks, [&](int r) { return host_prefix + std::to_string(r * hosts / nranks); }, body);
}

int run_local_ranks(int first, int local, const std::function<int(int rank)>& body) {
  return fork_and_reap(first, local, nullptr, body);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace perf

// The init diagnostics' entry and report (diagnostics.h).
#include "src/runtime/diagnostics.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <mutex>

#include "src/base/host_identity.h"
#include "src/base/log.h"
#include "src/runtime/comm.h"
#include "src/runtime/init.h"

namespace braid {

void DiagnosticsReport::print(const std::string& line) {
  if (!printing_) return;
  // One line at a time: ranks of one process may report on several
  // communicators at once.
  static std::mutex mutex;
  static const std::string host = [] {
    char name[256] = {};
    return gethostname(name, sizeof name - 1) == 0 ? std::string(name) : std::string("?");
  }();
  const std::string text = fmt::format("{}:{} NCCL DIAG {}\n", host, this_pid(), line);
  if (sink_) {
    *sink_ += text;
    return;
  }
  std::lock_guard<std::mutex> lock(mutex);
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
}

std::string rank_set(const std::vector<int>& ranks) {
  constexpr size_t kShown = 8;
  std::string s = "{";
  for (size_t i = 0; i < ranks.size() && i < kShown; ++i) s += fmt::format("{}{}", i ? "," : "", ranks[i]);
  if (ranks.size() > kShown) return s + fmt::format(",...}} (N={})", ranks.size());
  return s + "}";
}

Status run_init_diagnostics(ncclComm* comm) {
  const AgreedValues& agreed = comm->setup->agreed;
  DiagnosticsReport report(comm->rank == 0);
  // The completion line follows each check whatever it found, as NCCL's.
  auto run = [&](const char* title, const char* name, Status (*check)(ncclComm*, DiagnosticsReport&)) {
    const auto t0 = std::chrono::steady_clock::now();
    report.print(fmt::format("=== {} ===", title));
    Status s = check(comm, report);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    report.print(fmt::format("{} completed in {:.1f} ms across {} ranks", name, ms, comm->nranks));
    return std::move(s).context(name);
  };
  if (agreed.run_ras_diagnostics) BRAID_TRY(run("RAS Diagnostics", "RAS diagnostics", check_consistency));
  if (agreed.run_diagnostics) BRAID_TRY(run("NCCL Diagnostics", "NCCL diagnostics", check_paths));
  return Status::ok();
}

}  // namespace braid

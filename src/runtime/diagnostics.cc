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
  char host[64] = "?";
  if (gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "?");
  std::lock_guard<std::mutex> lock(mutex);
  std::fprintf(stdout, "%s:%d NCCL DIAG %s\n", host, this_pid(), line.c_str());
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
  using Clock = std::chrono::steady_clock;
  auto elapsed_ms = [](Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  // The completion line follows each check whatever it found, as NCCL's.
  if (agreed.run_ras_diagnostics) {
    const auto t0 = Clock::now();
    report.print("=== RAS Diagnostics ===");
    Status s = check_consistency(comm, report);
    report.print(fmt::format("RAS diagnostics completed in {:.1f} ms across {} ranks", elapsed_ms(t0), comm->nranks));
    BRAID_TRY(std::move(s).context("RAS diagnostics"));
  }
  if (agreed.run_diagnostics) {
    const auto t0 = Clock::now();
    report.print("=== NCCL Diagnostics ===");
    Status s = check_paths(comm, report);
    report.print(fmt::format("NCCL diagnostics completed in {:.1f} ms across {} ranks", elapsed_ms(t0), comm->nranks));
    BRAID_TRY(std::move(s).context("active diagnostics"));
  }
  return Status::ok();
}

}  // namespace braid

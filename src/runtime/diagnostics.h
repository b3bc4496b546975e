// NCCL 2.31's init diagnostics, on braid's communicators.
//
// Two checks, each run at every communicator init when asked for (the ranks
// agree to run one if any rank asks, src/runtime/agreement.h):
//  - NCCL_RUN_DIAGNOSTICS=1, the active check (diagnostics_paths.cc): every
//    rank sends every other a pattern through the communicator's own
//    backend, as its sends and receives go, and checks what arrived;
//  - NCCL_RUN_RAS_DIAGNOSTICS=1, the comparison (diagnostics_consistency.cc):
//    the ranks compare what they run with (NCCL_* and BRAID_* variables,
//    library version, GPUs, CUDA driver) without moving data.
// Rank 0 prints the report on its standard output, each line prefixed
// "host:pid NCCL DIAG", as NCCL does; the other ranks print nothing.  A
// finding is informational and init goes on (as in NCCL), except where the
// exchange itself failed: then the communicator cannot carry anything, and
// init fails with the error on every rank.
#pragma once

#include <string>
#include <vector>

#include "src/base/status.h"

struct ncclComm;

namespace braid {

// What a rank's diagnostics print, where rank 0 prints it.
class DiagnosticsReport {
 public:
  explicit DiagnosticsReport(bool printing) : printing_(printing) {}
  void ok(const std::string& line) { print("[OK]   " + line); }
  void info(const std::string& line) { print("[INFO] " + line); }
  void print(const std::string& line);

 private:
  bool printing_;
};

// "{0,1,2}", at most 8 ranks shown, then ",...} (N=total)" (NCCL's format).
std::string rank_set(const std::vector<int>& ranks);

// The checks the ranks agreed to run; collective.
Status run_init_diagnostics(ncclComm* comm);

// Each check, collective (every rank of `comm` calls it), reporting on `report`.
Status check_paths(ncclComm* comm, DiagnosticsReport& report);
Status check_consistency(ncclComm* comm, DiagnosticsReport& report);

}  // namespace braid

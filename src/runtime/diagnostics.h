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

// What a rank's diagnostics print, where rank 0 prints it: on standard
// output, or (RAS's on-demand diagnostics) appended to `sink`.
class DiagnosticsReport {
 public:
  explicit DiagnosticsReport(bool printing, std::string* sink = nullptr) : printing_(printing), sink_(sink) {}
  void ok(const std::string& line) { print("[OK]   " + line); }
  void info(const std::string& line) { print("[INFO] " + line); }
  void print(const std::string& line);

 private:
  bool printing_;
  std::string* sink_;
};

// What the comparison (NCCL_RUN_RAS_DIAGNOSTICS) compares of one rank.
struct RankFacts {
  std::string library;     // braid's version and the NCCL API it presents
  std::string model;       // the GPU the rank runs on ("" on the host backend)
  int devices = 0;         // CUDA devices its process sees
  int driver_version = 0;  // the CUDA driver's (0: none)
  std::string env;         // "NAME=value\0..." of its NCCL_* and BRAID_* variables, secrets hashed
  bool env_cut = false;    // it had more than fit
};
// This process's facts, for a rank running on `model`.
RankFacts this_process_facts(const std::string& model);
// The comparison's lines for the ranks of communicator `comm_hash` of
// `nranks` ranks, given the facts of `ranks` (those reported, in order).
void compare_rank_facts(uint64_t comm_hash, int nranks, const std::vector<int>& ranks,
                        const std::vector<RankFacts>& facts, DiagnosticsReport& report);

// "{0,1,2}", at most 8 ranks shown, then ",...} (N=total)" (NCCL's format).
std::string rank_set(const std::vector<int>& ranks);

// The checks the ranks agreed to run; collective.
Status run_init_diagnostics(ncclComm* comm);

// Each check, collective (every rank of `comm` calls it), reporting on `report`.
Status check_paths(ncclComm* comm, DiagnosticsReport& report);
Status check_consistency(ncclComm* comm, DiagnosticsReport& report);

}  // namespace braid

// The processes of a perf run: one process (ranks as threads), an MPI job, or
// processes a launcher told their place (BRAID_PERF_RANK / BRAID_PERF_NRANKS).
// Only the first thread of each process calls into a World.
#pragma once

#include <memory>
#include <string>

#include "nccl.h"

namespace perf {

class World {
 public:
  virtual ~World() = default;
  virtual int procs() const = 0;
  virtual int proc() const = 0;
  // NCCL_TESTS_SPLIT_MASK / NCCL_TESTS_SPLIT (split_color): the processes of
  // one colour make one communicator, numbered by process within it; the
  // harness's barriers and reductions stay over every process, as in
  // nccl-tests.  By default a world can only keep everyone in one group
  // (false, with `error`, when the colours differ); the MPI world splits.
  virtual bool split(int color, std::string* error);
  virtual int group_procs() const { return procs(); }
  virtual int group_proc() const { return proc(); }
  // Process 0 of the group creates the id (ncclGetUniqueId) and shares it in the group.
  virtual bool share_unique_id(ncclUniqueId* id) = 0;
  virtual void barrier() = 0;
  virtual double sum(double v) = 0;
  virtual double min(double v) = 0;
  virtual double max(double v) = 0;
  virtual double broadcast_from_zero(double v) = 0;
  // Process 0 gets every process's `lines`, in process order.
  virtual std::string gather_text(const std::string& lines) = 0;
  [[noreturn]] virtual void abort(int code) = 0;
  virtual int finish(int rc) = 0;
};

// nccl-tests' colour of process `proc` (0 without either variable):
// NCCL_TESTS_SPLIT_MASK=<hex>: proc & mask; NCCL_TESTS_SPLIT="AND|&|OR|||MOD|%|DIV|/ <n>"
// (n in C notation or 0b binary): proc & n, proc | n, proc % n, proc / n.
// False with `error` for a zero divisor; `warning` set where nccl-tests
// silently takes colour 0 (no operator and number it knows).
bool split_color(int proc, int* color, std::string* error, std::string* warning);

// An MPI world when built with MPI and launched by mpirun (or `require_mpi`);
// a launcher's world when BRAID_PERF_NRANKS is set (launcher_world.cc).
std::unique_ptr<World> make_world(int* argc, char*** argv, bool require_mpi);

// Processes told their rank and count by the environment (BRAID_PERF_RANK,
// BRAID_PERF_NRANKS), as scripts/cluster starts them; nullptr on bad values.
bool launched_by_environment();
std::unique_ptr<World> make_launcher_world();

}  // namespace perf

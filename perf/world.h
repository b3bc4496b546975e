// The processes of a perf run: one (threads only) or an MPI job.
#pragma once

#include <memory>

#include "nccl.h"

namespace perf {

class World {
 public:
  virtual ~World() = default;
  virtual int procs() const = 0;
  virtual int proc() const = 0;
  // Process 0 creates the id (ncclGetUniqueId) and shares it.
  virtual bool setup_unique_id() = 0;
  const ncclUniqueId& unique_id() const { return id_; }
  // Collective over processes, called by one thread per process.
  virtual void barrier() = 0;
  virtual double sum(double v) = 0;
  virtual double min(double v) = 0;
  virtual double max(double v) = 0;
  virtual double broadcast_from_zero(double v) = 0;
  virtual void print_devices(int threads) = 0;
  [[noreturn]] virtual void abort(int code) = 0;
  virtual int finish(int rc) = 0;

 protected:
  ncclUniqueId id_{};
};

// MPI when built with it and launched by mpirun (or when `require_mpi`).
std::unique_ptr<World> make_world(int* argc, char*** argv, bool require_mpi);

}  // namespace perf

#include "perf/world.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>

#ifdef BRAID_PERF_MPI
#include <mpi.h>
#endif

namespace perf {
namespace {

std::string hostname() {
  char h[256] = {};
  gethostname(h, sizeof(h) - 1);
  return h;
}

void print_rank_line(int rank, int proc) {
  fmt::print("#  Rank {:2} Group  0 Pid {:6} on {:>10} device  0 [host] CPU (braid host backend, process {})\n", rank,
             getpid(), hostname(), proc);
}

class SingleProcess final : public World {
 public:
  int procs() const override { return 1; }
  int proc() const override { return 0; }
  bool setup_unique_id() override {
    ncclResult_t r = ncclGetUniqueId(&id_);
    if (r != ncclSuccess) fmt::print(stderr, "ncclGetUniqueId failed: {}\n", ncclGetErrorString(r));
    return r == ncclSuccess;
  }
  void barrier() override {}
  double sum(double v) override { return v; }
  double min(double v) override { return v; }
  double max(double v) override { return v; }
  double broadcast_from_zero(double v) override { return v; }
  void print_devices(int threads) override {
    for (int t = 0; t < threads; ++t) print_rank_line(t, 0);
    std::fflush(stdout);
  }
  void abort(int code) override {
    std::fflush(nullptr);
    std::_Exit(code);
  }
  int finish(int rc) override { return rc; }
};

#ifdef BRAID_PERF_MPI
class MpiWorld final : public World {
 public:
  MpiWorld() {
    MPI_Comm_size(MPI_COMM_WORLD, &procs_);
    MPI_Comm_rank(MPI_COMM_WORLD, &proc_);
  }
  int procs() const override { return procs_; }
  int proc() const override { return proc_; }
  bool setup_unique_id() override {
    int ok = 1;
    if (proc_ == 0 && !peer_only_) ok = ncclGetUniqueId(&id_) == ncclSuccess;
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Bcast(&id_, sizeof(id_), MPI_BYTE, 0, MPI_COMM_WORLD);
    if (!ok && proc_ == 0) fmt::print(stderr, "ncclGetUniqueId failed\n");
    return ok;
  }
  void barrier() override { MPI_Barrier(MPI_COMM_WORLD); }
  double sum(double v) override { return reduce(v, MPI_SUM); }
  double min(double v) override { return reduce(v, MPI_MIN); }
  double max(double v) override { return reduce(v, MPI_MAX); }
  double broadcast_from_zero(double v) override {
    MPI_Bcast(&v, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    return v;
  }
  void print_devices(int threads) override {
    for (int p = 0; p < procs_; ++p) {
      if (p == proc_)
        for (int t = 0; t < threads; ++t) print_rank_line(proc_ * threads + t, proc_);
      std::fflush(stdout);
      MPI_Barrier(MPI_COMM_WORLD);
    }
  }
  void abort(int code) override {
    std::fflush(nullptr);
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }
  int finish(int rc) override {
    int worst = rc;
    MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return worst;
  }
  bool peer_only_ = false;

 private:
  double reduce(double v, MPI_Op op) {
    double out = v;
    MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, op, MPI_COMM_WORLD);
    return out;
  }
  int procs_ = 1, proc_ = 0;
};

bool launched_by_mpirun() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(var)) return true;
  return false;
}
#endif

}  // namespace

std::unique_ptr<World> make_world(int* argc, char*** argv, bool require_mpi) {
#ifdef BRAID_PERF_MPI
  if (require_mpi || launched_by_mpirun()) {
    int provided = 0;
    MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    auto w = std::make_unique<MpiWorld>();
    w->peer_only_ = require_mpi;
    return w;
  }
#else
  if (require_mpi) {
    fmt::print(stderr, "this tool needs MPI, and braid's perf tools were built without it\n");
    return nullptr;
  }
#endif
  return std::make_unique<SingleProcess>();
}

}  // namespace perf

#include "perf/world.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#ifdef BRAID_PERF_MPI
#include <mpi.h>
#endif

namespace perf {
namespace {

class SingleProcess final : public World {
 public:
  int procs() const override { return 1; }
  int proc() const override { return 0; }
  bool share_unique_id(ncclUniqueId* id) override {
    ncclResult_t r = ncclGetUniqueId(id);
    if (r != ncclSuccess) fmt::print(stderr, "ncclGetUniqueId failed: {}\n", ncclGetErrorString(r));
    return r == ncclSuccess;
  }
  void barrier() override {}
  double sum(double v) override { return v; }
  double min(double v) override { return v; }
  double max(double v) override { return v; }
  double broadcast_from_zero(double v) override { return v; }
  std::string gather_text(const std::string& lines) override { return lines; }
  void abort(int code) override {
    std::fflush(nullptr);
    std::_Exit(code);
  }
  int finish(int rc) override { return rc; }
};

#ifdef BRAID_PERF_MPI
class MpiWorld final : public World {
 public:
  explicit MpiWorld(bool peer_only) : peer_only_(peer_only) {
    MPI_Comm_size(MPI_COMM_WORLD, &procs_);
    MPI_Comm_rank(MPI_COMM_WORLD, &proc_);
  }
  int procs() const override { return procs_; }
  int proc() const override { return proc_; }
  bool share_unique_id(ncclUniqueId* id) override {
    int ok = 1;
    if (proc_ == 0 && !peer_only_) {
      ncclResult_t r = ncclGetUniqueId(id);
      if (r != ncclSuccess) fmt::print(stderr, "ncclGetUniqueId failed: {}\n", ncclGetErrorString(r));
      ok = r == ncclSuccess;
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Bcast(id, int(sizeof(*id)), MPI_BYTE, 0, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
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
  std::string gather_text(const std::string& lines) override {
    int len = int(lines.size());
    std::vector<int> lens(static_cast<size_t>(procs_)), offsets(static_cast<size_t>(procs_));
    MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
    int total = 0;
    for (int p = 0; p < procs_; ++p) {
      offsets[size_t(p)] = total;
      total += lens[size_t(p)];
    }
    std::string all(size_t(proc_ == 0 ? total : 0), '\0');
    MPI_Gatherv(lines.data(), len, MPI_CHAR, all.data(), lens.data(), offsets.data(), MPI_CHAR, 0, MPI_COMM_WORLD);
    return all;
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

 private:
  double reduce(double v, MPI_Op op) {
    double out = v;
    MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, op, MPI_COMM_WORLD);
    return out;
  }
  bool peer_only_;
  int procs_ = 1, proc_ = 0;
};

bool launched_by_mpirun() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS", "MV2_COMM_WORLD_SIZE"})
    if (std::getenv(var)) return true;
  return false;
}
#endif

}  // namespace

std::unique_ptr<World> make_world(int* argc, char*** argv, bool require_mpi) {
  if (!require_mpi && launched_by_environment()) return make_launcher_world();
#ifdef BRAID_PERF_MPI
  if (require_mpi || launched_by_mpirun()) {
    // Only the first thread of a process calls MPI.
    int provided = 0;
    MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    return std::make_unique<MpiWorld>(require_mpi);
  }
#else
  if (require_mpi) {
    fmt::print(stderr, "this tool needs MPI, and braid's perf tools were built without it\n");
    return nullptr;
  }
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (size && std::atoi(size) > 1)
    fmt::print(stderr, "warning: launched by mpirun, but the perf tools were built without MPI: "
                       "each process runs a separate job of its own threads\n");
#endif
  return std::make_unique<SingleProcess>();
}

}  // namespace perf

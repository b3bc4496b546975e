#include "perf/world.h"

#include <fmt/format.h>

#include <strings.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#ifdef BRAID_PERF_MPI
#include <mpi.h>
#endif

namespace perf {

bool World::split(int color, std::string* error) {
  if (min(color) == max(color)) return true;
  *error = "NCCL_TESTS_SPLIT_MASK / NCCL_TESTS_SPLIT put these processes in different groups, which only an MPI "
           "launch (mpirun) can split; a launcher's processes share one NCCL_COMM_ID";
  return false;
}

namespace {

// nccl-tests' parseInt: leading blanks, then 0b<binary> or strtoul's base 0.
bool parse_split_number(const char* s, int* out) {
  while (*s && std::isspace(static_cast<unsigned char>(*s))) ++s;
  if (!*s) return false;
  char* end = nullptr;
  const bool binary = strncasecmp(s, "0b", 2) == 0;
  const unsigned long v = binary ? std::strtoul(s + 2, &end, 2) : std::strtoul(s, &end, 0);
  if (end == (binary ? s + 2 : s)) return false;
  *out = int(v);
  return true;
}

}  // namespace

bool split_color(int proc, int* color, std::string* error, std::string* warning) {
  *color = 0;
  if (const char* mask = std::getenv("NCCL_TESTS_SPLIT_MASK")) {
    *color = proc & int(std::strtoul(mask, nullptr, 16));
    return true;
  }
  const char* split = std::getenv("NCCL_TESTS_SPLIT");
  if (!split) return true;
  struct Op {
    const char *word, *sign;
  };
  static constexpr Op kOps[] = {{"AND", "&"}, {"OR", "|"}, {"MOD", "%"}, {"DIV", "/"}};
  for (size_t k = 0; k < 4; ++k) {
    const Op& op = kOps[k];
    int n = 0;
    const size_t word = std::strlen(op.word);
    const bool matched = (strncasecmp(split, op.word, word) == 0 && parse_split_number(split + word, &n)) ||
                         (std::strncmp(split, op.sign, 1) == 0 && parse_split_number(split + 1, &n));
    if (!matched) continue;
    if (k >= 2 && n == 0) {
      *error = fmt::format("NCCL_TESTS_SPLIT={}: divides by zero", split);
      return false;
    }
    *color = k == 0 ? (proc & n) : k == 1 ? (proc | n) : k == 2 ? proc % n : proc / n;
    return true;
  }
  *warning = fmt::format("NCCL_TESTS_SPLIT={}: no AND, OR, MOD or DIV (&, |, %, /) and number; one group, as "
                         "nccl-tests", split);
  return true;
}

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
    group_procs_ = procs_;
    group_proc_ = proc_;
  }
  int procs() const override { return procs_; }
  int proc() const override { return proc_; }
  bool split(int color, std::string* error) override {
    if (peer_only_ && min(color) != max(color)) {
      *error = "NCCL_TESTS_SPLIT_MASK / NCCL_TESTS_SPLIT: the MPI peer tools time MPI_COMM_WORLD's collectives";
      return false;
    }
    MPI_Comm_split(MPI_COMM_WORLD, color, proc_, &group_);
    MPI_Comm_size(group_, &group_procs_);
    MPI_Comm_rank(group_, &group_proc_);
    return true;
  }
  int group_procs() const override { return group_procs_; }
  int group_proc() const override { return group_proc_; }
  bool share_unique_id(ncclUniqueId* id) override {
    int ok = 1;
    if (group_proc_ == 0 && !peer_only_) {
      ncclResult_t r = ncclGetUniqueId(id);
      if (r != ncclSuccess) fmt::print(stderr, "ncclGetUniqueId failed: {}\n", ncclGetErrorString(r));
      ok = r == ncclSuccess;
    }
    MPI_Bcast(id, int(sizeof(*id)), MPI_BYTE, 0, group_);
    ok = int(min(ok));  // whichever group failed, all stop here together
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
    if (group_ != MPI_COMM_WORLD) MPI_Comm_free(&group_);
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
  MPI_Comm group_ = MPI_COMM_WORLD;  // this process's colour's processes
  int group_procs_ = 1, group_proc_ = 0;
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

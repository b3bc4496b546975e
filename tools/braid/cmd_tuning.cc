#include "tools/braid/cmd_tuning.h"

#include <fmt/format.h>

#include "src/base/env.h"
#include "src/exec/cuda_arena.h"
#include "src/plan/device_tuning.h"
#include "src/plan/host_tuning.h"
#include "src/plan/planner.h"
#include "src/runtime/cuda_settings.h"

namespace braid::cli {
namespace {

struct TuningArgs {
  std::string device = "NVIDIA H200";
  int nranks = 2;
  int per_device = 0;  // 0: all ranks on the one device
  std::string sizes = "8,64K,1M,256M";
};

constexpr Collective kCollectives[] = {Collective::AllReduce, Collective::ReduceScatter, Collective::AllGather,
                                       Collective::AlltoAll,  Collective::Broadcast,     Collective::Reduce};

int run(const TuningArgs& args) {
  std::shared_ptr<const TuningTable> table;  // BRAID_TUNING_FILE's rows, then the built-in ones, as at init
  Status s = TuningTable::current(&table);
  AgreedValues requests;
  if (s.is_ok()) s = read_cuda_requests(*table, &requests);
  if (s.is_ok()) s = env_choice("BRAID_DETERMINISTIC", {"0", "1"}, &requests.deterministic);
  std::vector<uint64_t> sizes;
  std::string error;
  if (s.is_ok() && !parse_sizes(args.sizes, &sizes, &error)) s = BRAID_ERROR(ncclInvalidArgument, "--sizes: {}", error);
  if (s.is_ok() && (args.nranks < 1 || args.per_device < 0 || args.per_device > args.nranks))
    s = BRAID_ERROR(ncclInvalidArgument, "need 1 <= --per-device <= -n");
  if (!s.is_ok()) {
    fmt::print(stderr, "braid tuning: {}\n", s.message());
    return 2;
  }
  // Ranks spread over devices as evenly as --per-device allows.
  const int per_device = args.per_device ? args.per_device : args.nranks;
  std::vector<uint64_t> gpus;
  for (int r = 0; r < args.nranks; ++r) gpus.push_back(uint64_t(r / per_device) + 1);
  const CudaSettings settings =
      resolve_cuda_settings(table, requests, gpus, std::vector<std::string>(args.nranks, args.device));
  const CommTuning& t = settings.comm;
  const TuningKey& key = settings.calls->key();
  fmt::print("'{}', {} ranks, {} per device; {} table rows (BRAID_TUNING_FILE's first, then tuning/cuda.json's)\n",
             key.device, key.nranks, key.per_device, table->rows().size());
  fmt::print("communicator\n");
  fmt::print("  {:<13} {:>10}  {}\n", "channels", t.channels, describe(t.channels_from));
  fmt::print("  {:<13} {:>10}  {}\n", "slots", t.slots, describe(t.slots_from));
  fmt::print("  {:<13} {:>10}  {}\n", "slot_bytes", t.slot_bytes, describe(t.slot_bytes_from));
  fmt::print("  {:<13} {:>10}  {}\n", "ll_max_bytes", t.ll_max_bytes, describe(t.ll_max_bytes_from));
  // What the arenas cost (src/exec/cuda_arena.h): every rank holds one.
  const uint64_t arena = CudaArenaLayout(key.nranks, t).bytes;
  fmt::print("  device memory: {:.1f} MiB of FIFOs and LL region a rank, {:.1f} MiB on a device of {} ranks\n",
             double(arena) / (1 << 20), double(arena) * key.per_device / (1 << 20), key.per_device);
  fmt::print(
      "calls (size: count x type size; the algorithm of the schedule path, by the table or else by the size "
      "rule as this machine's cores see it; from: what the table decided)\n");
  fmt::print("  {:<14} {:>12}  {:<8} {:<10} {:>11}  {}\n", "collective", "size", "path", "algorithm", "slice_bytes",
             "from");
  for (Collective c : kCollectives)
    for (uint64_t bytes : sizes) {
      const CallTuning call = settings.calls->call(c, bytes);
      const bool ll = ll_path(c, key.nranks, bytes, t.ll_max_bytes, call.path);
      std::string algorithm = ll                        ? "-"
                              : !call.algorithm.empty() ? std::string(call.algorithm)
                                                        : default_algorithm(c, key.nranks, bytes);
      std::string from;  // the settings a row decided, not braid's defaults
      auto add = [&](const std::string& what) { from += fmt::format("{}{}", from.empty() ? "" : "; ", what); };
      auto note = [&](const char* what, const TuningSource& source) {
        if (source.row != TuningSource::kDefault) add(fmt::format("{}: {}", what, describe(source)));
      };
      note("path", call.path_from);
      note("algorithm", call.algorithm_from);
      note("slice", call.slice_bytes_from);
      if (requests.deterministic && !ll) {  // the LL path folds in rank order
        const std::string ordered =  // as the CUDA backend plans: never the one-sided host choices
            rank_order_choice(c, key.nranks, bytes, local_host_tuning(key.nranks), false, algorithm);
        if (ordered != algorithm) add(fmt::format("BRAID_DETERMINISTIC: not '{}'", algorithm));
        algorithm = ordered;
      }
      fmt::print("  {:<14} {:>12}  {:<8} {:<10} {:>11}  {}\n", to_string(c), bytes, ll ? "ll" : "schedule", algorithm,
                 call.slice_bytes, from);
    }
  return 0;
}

}  // namespace

Command add_tuning_command(CLI::App& app) {
  static TuningArgs args;
  CLI::App* cmd = app.add_subcommand(
      "tuning", "the CUDA backend's settings from its tuning table (BRAID_TUNING_FILE, BRAID_CUDA_*, "
      "BRAID_DETERMINISTIC apply)");
  cmd->add_option("-d,--device", args.device, "device name, as CUDA reports it (default: NVIDIA H200)");
  cmd->add_option("-n,--nranks", args.nranks, "ranks in the communicator (default 2)")->check(CLI::Range(1, 65536));
  cmd->add_option("--per-device", args.per_device, "ranks sharing one device (default: all of them)");
  cmd->add_option("--sizes", args.sizes, "sizes to resolve the calls for, e.g. 8,64K,1M (default 8,64K,1M,256M)");
  return Command{cmd, [] { return run(args); }};
}

}  // namespace braid::cli

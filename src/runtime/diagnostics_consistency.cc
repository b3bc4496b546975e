// The comparison of the init diagnostics (NCCL_RUN_RAS_DIAGNOSTICS=1,
// diagnostics.h): do the ranks run with the same things?
//
// Every rank publishes what it runs with, in two bootstrap allgathers (the
// fixed facts with the size of its environment, then the environments
// padded to the largest); rank 0 groups the ranks by value and prints one
// line per check, [OK] where all agree, else [INFO] lines naming which
// ranks have which value.  The checks (NCCL's RAS diagnostics, whose ECC
// and NVLink checks need NVML, which braid does not load):
//  - library: braid's version and the NCCL API it presents;
//  - GPU inventory: the CUDA devices each rank sees and the model of its
//    own (left out where no rank has one);
//  - CUDA driver version (likewise);
//  - NCCL environment and braid environment: every NCCL_* and BRAID_*
//    variable set on any rank.  Values of variables whose names say they
//    hold a secret (KEY, SECRET, PASSWORD, TOKEN) travel and print as a
//    hash.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "src/base/env.h"
#include "src/base/hash.h"
#include "src/exec/device_backend.h"
#include "src/runtime/comm.h"
#include "src/runtime/diagnostics.h"
#include "src/runtime/init.h"

namespace braid {
namespace {

constexpr size_t kEnvLimitBytes = 64 * 1024;  // per rank; longer environments are cut and said so

struct Facts {
  char library[64] = {};
  char model[64] = {};  // the GPU this rank runs on ("" on the host backend)
  int32_t devices = 0;
  int32_t driver_version = 0;
  uint64_t env_bytes = 0;
  uint8_t env_cut = 0;
};

bool secret_name(const std::string& name) {
  for (const char* word : {"KEY", "SECRET", "PASSWORD", "TOKEN"})
    if (name.find(word) != std::string::npos) return true;
  return false;
}

// "NAME=value\0..." of this rank's NCCL_* and BRAID_* variables, secrets hashed.
std::string environment_blob(bool* cut) {
  std::string blob;
  *cut = false;
  for (std::string entry : env_nccl_and_braid()) {
    const size_t eq = entry.find('=');
    if (eq != std::string::npos && secret_name(entry.substr(0, eq))) {
      const uint64_t h = fnv1a(std::string_view(entry).substr(eq + 1));
      entry = fmt::format("{}=<hidden, hash {:016x}>", entry.substr(0, eq), h);
    }
    if (blob.size() + entry.size() + 1 > kEnvLimitBytes) {
      *cut = true;
      break;
    }
    blob += entry;
    blob += '\0';
  }
  return blob;
}

// Each rank's value of one thing; nullopt: the rank has none (a variable
// it does not set).
using Values = std::vector<std::optional<std::string>>;

bool all_equal(const Values& v) { return std::all_of(v.begin(), v.end(), [&](const auto& x) { return x == v[0]; }); }

// A value as a report line can hold it: control characters as '?', at most
// 256 bytes (NCCL's rule), so one line stays one line.
std::string shown(const std::optional<std::string>& v) {
  if (!v) return "(unset)";
  constexpr size_t kShownBytes = 256;
  std::string s = v->substr(0, kShownBytes);
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 32 || c == 127) c = '?';
  return v->size() > kShownBytes ? s + "..." : s;
}

class Comparison {
 public:
  Comparison(uint64_t comm_hash, int nranks, const std::vector<int>& ranks, DiagnosticsReport& report)
      : report_(report), ranks_(ranks), scope_(fmt::format("across {} ranks in comm {:#x}", nranks, comm_hash)) {}

  // One line if every rank has the same value, else one per value.
  void same(const std::string& check, const Values& values) {
    if (all_equal(values)) {
      report_.ok(fmt::format("{}: {} consistent {}", check, shown(values[0]), scope_));
      return;
    }
    report_.info(fmt::format("{}: mismatch {}", check, scope_));
    for (const auto& [value, ranks] : groups(values))
      report_.info(fmt::format("{}: {} on rank(s) {}", check, shown(value), rank_set(ranks)));
  }

  // Every variable with `prefix` that any rank sets.
  void environment(const std::string& check, const std::string& prefix, const std::vector<RankFacts>& facts) {
    std::vector<std::map<std::string, std::string>> vars(facts.size());
    std::set<std::string> names;
    for (size_t r = 0; r < facts.size(); ++r) {
      const std::string& blob = facts[r].env;
      for (size_t at = 0; at < blob.size();) {
        const size_t end = blob.find('\0', at);
        const std::string entry = blob.substr(at, end - at);
        at = end == std::string::npos ? blob.size() : end + 1;
        const size_t eq = entry.find('=');
        if (eq == std::string::npos || entry.compare(0, prefix.size(), prefix) != 0) continue;
        vars[r][entry.substr(0, eq)] = entry.substr(eq + 1);
        names.insert(entry.substr(0, eq));
      }
    }
    int differ = 0;
    for (const std::string& name : names) {
      Values values;
      for (const auto& v : vars) {
        auto it = v.find(name);
        values.push_back(it == v.end() ? std::nullopt : std::optional<std::string>(it->second));
      }
      if (all_equal(values)) continue;
      ++differ;
      report_.info(fmt::format("{}: mismatch {} for {}", check, scope_, name));
      for (const auto& [value, ranks] : groups(values))
        report_.info(fmt::format("{}: {}={} on rank(s) {}", check, shown(name), shown(value), rank_set(ranks)));
    }
    if (differ == 0) report_.ok(fmt::format("{}: {}* env vars consistent {}", check, prefix, scope_));
    else report_.info(fmt::format("{}: {} {}* env var(s) differ {}", check, differ, prefix, scope_));
  }

 private:
  // The ranks holding each value, in order of first rank (as the communicator numbers them).
  std::vector<std::pair<std::optional<std::string>, std::vector<int>>> groups(const Values& v) const {
    std::vector<std::pair<std::optional<std::string>, std::vector<int>>> out;
    for (size_t i = 0; i < v.size(); ++i) {
      auto it = std::find_if(out.begin(), out.end(), [&](const auto& g) { return g.first == v[i]; });
      if (it == out.end()) out.push_back({v[i], {ranks_[i]}});
      else it->second.push_back(ranks_[i]);
    }
    return out;
  }

  DiagnosticsReport& report_;
  const std::vector<int>& ranks_;
  std::string scope_;
};

}  // namespace

RankFacts this_process_facts(const std::string& model) {
  RankFacts f;
  f.library = fmt::format("braid {}.{}.{} (NCCL {}.{}.{} API)", BRAID_VERSION_MAJOR, BRAID_VERSION_MINOR,
                          BRAID_VERSION_PATCH, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
  f.model = model;
  const DeviceInventory inventory = probe_device_inventory();
  f.devices = inventory.devices;
  f.driver_version = inventory.driver_version;
  f.env = environment_blob(&f.env_cut);
  return f;
}

void compare_rank_facts(uint64_t comm_hash, int nranks, const std::vector<int>& ranks,
                        const std::vector<RankFacts>& facts, DiagnosticsReport& report) {
  Comparison compare(comm_hash, nranks, ranks, report);
  auto field = [&](auto get) {
    Values v;
    for (const RankFacts& f : facts) v.push_back(get(f));
    return v;
  };
  compare.same("library", field([](const RankFacts& f) { return f.library; }));
  const bool any_gpu = std::any_of(facts.begin(), facts.end(), [](const RankFacts& f) { return f.devices > 0; });
  if (any_gpu) {
    compare.same("GPU inventory", field([](const RankFacts& f) {
                   return fmt::format("{}x visible, running on {}", f.devices, f.model.empty() ? "no GPU" : f.model);
                 }));
    compare.same("CUDA driver version", field([](const RankFacts& f) {
                   return f.driver_version ? std::to_string(f.driver_version) : std::string("unavailable");
                 }));
  }
  const auto cut_ranks = std::count_if(facts.begin(), facts.end(), [](const RankFacts& f) { return f.env_cut; });
  if (cut_ranks)
    report.info(fmt::format("environment: {} rank(s) had over {} bytes of NCCL_* and BRAID_* variables; the "
                            "comparison is partial", cut_ranks, kEnvLimitBytes));
  compare.environment("NCCL environment", "NCCL_", facts);
  compare.environment("braid environment", "BRAID_", facts);
}

Status check_consistency(ncclComm* comm, DiagnosticsReport& report) {
  const int n = comm->nranks;
  const DeviceProbe& device = comm->setup->local.device;
  const RankFacts own = this_process_facts(device.usable ? std::string(device.name, strnlen(device.name, 64)) : "");
  // Two allgathers: the fixed facts with each environment's size, then the
  // environments padded to the largest.
  std::vector<Facts> facts(static_cast<size_t>(n));
  Facts& mine = facts[size_t(comm->rank)];
  std::snprintf(mine.library, sizeof mine.library, "%s", own.library.c_str());
  std::snprintf(mine.model, sizeof mine.model, "%s", own.model.c_str());
  mine.devices = own.devices;
  mine.driver_version = own.driver_version;
  mine.env_bytes = own.env.size();
  mine.env_cut = own.env_cut;
  BRAID_TRY(comm->bootstrap->allgather(facts.data(), sizeof(Facts)));
  uint64_t widest = 0;
  for (const Facts& f : facts) widest = std::max(widest, std::min<uint64_t>(f.env_bytes, kEnvLimitBytes));
  std::vector<char> all(size_t(n) * widest);
  std::memcpy(all.data() + size_t(comm->rank) * widest, own.env.data(), own.env.size());
  if (widest) BRAID_TRY(comm->bootstrap->allgather(all.data(), widest));
  std::vector<RankFacts> gathered;
  std::vector<int> ranks;
  for (int r = 0; r < n; ++r) {
    const Facts& f = facts[size_t(r)];
    gathered.push_back({std::string(f.library, strnlen(f.library, 64)), std::string(f.model, strnlen(f.model, 64)),
                        f.devices, f.driver_version,
                        std::string(all.data() + size_t(r) * widest, std::min<uint64_t>(f.env_bytes, widest)),
                        f.env_cut != 0});
    ranks.push_back(r);
  }
  compare_rank_facts(comm->comm_hash, n, ranks, gathered, report);
  return Status::ok();
}

}  // namespace braid

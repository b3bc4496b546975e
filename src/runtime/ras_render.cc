// NCCL's RAS reports from a JobView (ras_report.h): the text `ncclras`
// prints and its JSON, in NCCL 2.30's layout, so that people and scripts
// used to NCCL's read braid's the same way.
//
// Each communicator gets a status (the furthest any rank got: INIT,
// RUNNING, FINALIZE, ABORT; NOCOMM for a rank whose process answered
// without it) and errors: MISMATCH when its ranks disagree on their status
// or on how many operations of a collective they launched, ERROR when a
// rank's init or asynchronous state is an error, INCOMPLETE when ranks are
// missing because their process did not answer.  Communicators alike
// (size, nodes, status, errors) share a row of the table; the Errors and
// Warnings sections then say which ranks differ, listing them by name only
// where they are outliers (few, or, verbose, fewer than half), as NCCL does.
// Ranks on the host backend have no GPU: "GPU none".
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include "src/runtime/ras_report.h"

namespace braid::ras {
namespace {

enum StatusBit { kNoComm = 1, kInit = 2, kRunning = 4, kFinalize = 8, kAbort = 16 };
const char* const kStatusNames[] = {"NOCOMM", "INIT", "RUNNING", "FINALIZE", "ABORT"};
enum ErrorBit { kMismatch = 1, kError = 2, kIncomplete = 4 };
const char* const kErrorNames[] = {"OK",
                                   "MISMATCH",
                                   "ERROR",
                                   "ERROR,MISMATCH",
                                   "INCOMPLETE",
                                   "INCOMPLETE,MISMATCH",
                                   "INCOMPLETE,ERROR",
                                   "INCOMPLETE,ERROR,MISMATCH"};

int highest_bit(int mask) {
  int i = -1;
  for (; mask; mask >>= 1) ++i;
  return i;
}
const char* status_name(int mask) { return mask ? kStatusNames[highest_bit(mask)] : "NOCOMM"; }

int status_of(const RankState& s) {
  if (s.abort_flag) return kAbort;
  if (s.finalize_called || s.destroy_flag) return kFinalize;
  return s.init_state == 0 ? kRunning : kInit;
}
bool is_error(int result) { return result != 0 && result != 7; }  // neither ncclSuccess nor ncclInProgress

// NCCL's rule for listing a group's members by name: always one alone;
// else few of them, or (verbose) fewer than half.  total < 0: not known.
bool outlier(int count, int total, bool verbose) {
  if (count == 1) return true;
  if (verbose) return total < 0 || count < 0.5 * total;
  return count <= 10 && (total < 0 || count <= 0.25 * total);
}

const char* plural(int n, const char* one, const char* many) { return n == 1 ? one : many; }

std::string result_text(int r) {
  switch (r) {
    case 1: return "Unhandled CUDA error";
    case 2: return "System error";
    case 3: return "Internal error";
    case 4: return "Invalid argument";
    case 5: return "Invalid usage";
    case 6: return "Remote process error";
    case 7: return "NCCL operation in progress";
    case 8: return "Timeout";
    default: return "Unexpected error";
  }
}

std::string devs_text(const std::vector<int>& devs) {
  return devs.empty() ? "none" : fmt::format("{}", fmt::join(devs, ","));
}

// A rank of a communicator: reported (state) or missing (home only).
struct RankRow {
  int rank = -1;
  int cuda_dev = -1;
  const ProcessInfo* process = nullptr;  // nullptr: not known
  const RankState* state = nullptr;      // nullptr: nobody reported it
};

std::string where(const RankRow& r) {
  const std::string gpu = r.cuda_dev >= 0 ? std::to_string(r.cuda_dev) : "none";
  if (!r.process) return fmt::format("Rank {} -- [process information not found]", r.rank);
  return fmt::format("Rank {} -- GPU {} managed by process {} on node {}", r.rank, gpu, r.process->pid,
                     r.process->host);
}

struct CommSummary {
  CommId id;
  int nranks = 0;
  std::vector<RankRow> ranks;       // reported, by rank
  std::vector<RankRow> nocomm;      // missing; their process answered without it
  std::vector<RankRow> incomplete;  // missing; their process did not answer (or is not known)
  int nodes = 0, per_node_min = 0, per_node_max = 0;
  int status = 0, errors = 0;
  std::set<std::pair<std::string, int>> gpus;  // (process, device or -1-rank): "ranks in group"
};

class Analysis {
 public:
  explicit Analysis(const JobView& v) : view_(v) {
    for (const ProcessReport& r : v.answered) {
      answered_.insert(r.process.addr);
      processes_[r.process.addr] = &r.process;
    }
    for (const auto* list : {&v.unresponsive, &v.dead})
      for (const ProcessInfo& p : *list) processes_.emplace(p.addr, &p);
    std::map<CommId, CommSummary> comms;
    for (const ProcessReport& r : v.answered)
      for (const CommReport& c : r.comms) {
        CommSummary& s = comms[c.id];
        s.id = c.id;
        s.nranks = c.nranks;
        for (const RankState& st : c.ranks) s.ranks.push_back({st.rank, st.cuda_dev, &r.process, &st});
      }
    for (auto& [id, s] : comms) {
      finish(&s);
      comms_.push_back(std::move(s));
    }
    // NCCL's order: big first, spread first, furthest status first, errors first, fewest reported first.
    std::stable_sort(comms_.begin(), comms_.end(), [](const CommSummary& a, const CommSummary& b) {
      if (a.nranks != b.nranks) return a.nranks > b.nranks;
      if (a.nodes != b.nodes) return a.nodes > b.nodes;
      if (highest_bit(a.status) != highest_bit(b.status)) return highest_bit(a.status) > highest_bit(b.status);
      if (a.errors != b.errors) return a.errors > b.errors;
      return a.ranks.size() < b.ranks.size();
    });
    for (size_t i = 0; i < comms_.size(); ++i) {
      const bool same = i > 0 && alike(comms_[i - 1], comms_[i]);
      if (!same) groups_.emplace_back();
      groups_.back().push_back(&comms_[i]);
    }
  }

  const std::vector<std::vector<const CommSummary*>>& groups() const { return groups_; }
  const JobView& view() const { return view_; }

 private:
  static bool alike(const CommSummary& a, const CommSummary& b) {
    return a.nranks == b.nranks && a.nodes == b.nodes && highest_bit(a.status) == highest_bit(b.status) &&
           a.errors == b.errors;
  }

  const ProcessInfo* process(const std::string& addr) const {
    auto it = processes_.find(addr);
    return it == processes_.end() ? nullptr : it->second;
  }

  void finish(CommSummary* s) const {
    std::sort(s->ranks.begin(), s->ranks.end(), [](const RankRow& a, const RankRow& b) { return a.rank < b.rank; });
    std::map<std::string, int> per_node;
    for (const RankRow& r : s->ranks) {
      ++per_node[r.process->host];
      s->status |= status_of(*r.state);
      if (is_error(r.state->init_state) || is_error(r.state->async_error)) s->errors |= kError;
      s->gpus.emplace(r.process->addr, r.cuda_dev >= 0 ? r.cuda_dev : -1 - r.rank);
    }
    s->nodes = int(per_node.size());
    for (const auto& [host, n] : per_node) {
      s->per_node_min = s->per_node_min ? std::min(s->per_node_min, n) : n;
      s->per_node_max = std::max(s->per_node_max, n);
    }
    // The missing ranks: where they live, if any process said.
    std::vector<bool> seen(size_t(std::max(s->nranks, 0)));
    for (const RankRow& r : s->ranks)
      if (r.rank >= 0 && r.rank < s->nranks) seen[size_t(r.rank)] = true;
    const auto homes = view_.homes.find(s->id);
    const bool all_answered = view_.unresponsive.empty() && view_.dead.empty();
    for (int rank = 0; rank < s->nranks; ++rank) {
      if (seen[size_t(rank)]) continue;
      RankRow row{rank, -1, nullptr, nullptr};
      if (homes != view_.homes.end())
        for (const RankHome& h : homes->second)
          if (h.rank == rank) row.cuda_dev = h.cuda_dev, row.process = process(h.addr);
      const bool answered = row.process ? answered_.count(row.process->addr) != 0 : all_answered;
      (answered ? s->nocomm : s->incomplete).push_back(row);
    }
    if (!s->nocomm.empty()) s->status |= kNoComm;
    if (!s->incomplete.empty()) s->errors |= kIncomplete;
    bool counts_differ = false;
    for (const RankRow& r : s->ranks) counts_differ |= r.state->coll_counts != s->ranks.front().state->coll_counts;
    if (counts_differ || (s->status & (s->status - 1))) s->errors |= kMismatch;
  }

  const JobView& view_;
  std::set<std::string> answered_;
  std::map<std::string, const ProcessInfo*> processes_;
  std::vector<CommSummary> comms_;
  std::vector<std::vector<const CommSummary*>> groups_;
};

std::vector<const ProcessInfo*> all_processes(const JobView& v) {
  std::vector<const ProcessInfo*> all;
  for (const ProcessReport& r : v.answered) all.push_back(&r.process);
  for (const auto* list : {&v.unresponsive, &v.dead})
    for (const ProcessInfo& p : *list) all.push_back(&p);
  return all;
}

std::string process_line(const ProcessInfo& p) { return "  " + process_text(p) + "\n"; }

std::string job_summary(const JobView& v) {
  const auto all = all_processes(v);
  std::map<std::string, std::vector<const ProcessInfo*>> nodes;
  std::map<size_t, int> gpus_per_process;  // GPUs -> processes
  size_t gpus = 0;
  for (const ProcessInfo* p : all) {
    nodes[p->host].push_back(p);
    ++gpus_per_process[p->cuda_devs.size()];
    gpus += p->cuda_devs.size();
  }
  std::map<size_t, int> per_node;  // processes per node -> nodes
  for (const auto& [host, ps] : nodes) ++per_node[ps.size()];
  std::string out = "Job summary\n===========\n\n";
  if (per_node.size() <= 1 && gpus_per_process.size() <= 1) {
    out += "  Nodes  Processes         GPUs  Processes     GPUs\n(total)   per node  per process    (total)  (total)\n";
    return out + fmt::format("{:7}  {:9}  {:11}  {:9}  {:7}\n", nodes.size(),
                             per_node.empty() ? 0 : per_node.begin()->first,
                             gpus_per_process.empty() ? 0 : gpus_per_process.begin()->first, all.size(), gpus);
  }
  auto by_frequency = [](const std::map<size_t, int>& m) {
    std::vector<std::pair<size_t, int>> rows(m.begin(), m.end());
    std::stable_sort(rows.begin(), rows.end(), [](auto& a, auto& b) { return a.second > b.second; });
    return rows;
  };
  if (gpus_per_process.size() == 1) {
    out += "  Nodes  Processes         GPUs\n          per node  per process\n";
    for (const auto& [n, count] : by_frequency(per_node))
      out += fmt::format("{:7}  {:9}  {:11}\n", count, n, gpus_per_process.begin()->first);
  } else {
    out += "  Nodes  Processes\n          per node\n";
    for (const auto& [n, count] : by_frequency(per_node)) out += fmt::format("{:7}  {:9}\n", count, n);
    out += "\n         Processes         GPUs\n                    per process\n";
    for (const auto& [n, count] : by_frequency(gpus_per_process))
      out += fmt::format("         {:9}  {:11}\n", count, n);
  }
  out += fmt::format("\n  Nodes  Processes         GPUs\n(total)    (total)      (total)\n{:7}  {:9}  {:11}\n",
                     nodes.size(), all.size(), gpus);
  // The nodes whose process count is rare, by name.
  const auto rows = by_frequency(per_node);
  for (size_t i = 1; i < rows.size(); ++i) {
    if (!outlier(rows[i].second, int(nodes.size()), false)) continue;
    out += fmt::format("\nThe outlier node{}:\n", rows[i].second > 1 ? "s" : "");
    for (const auto& [host, ps] : nodes) {
      if (ps.size() != rows[i].first) continue;
      std::vector<int64_t> pids;
      for (const ProcessInfo* p : ps) pids.push_back(p->pid);
      out += fmt::format("  Node {} running process{} {}\n", host, ps.size() > 1 ? "es" : "", fmt::join(pids, ","));
    }
  }
  return out;
}

std::string comm_name(size_t group, size_t index, const CommSummary& c) {
  return fmt::format("#{}-{} ({:016x})", group, index, c.id.hash);
}

// Ranks grouped by a value: biggest group first, then by `key` descending.
template <class Key>
std::vector<std::vector<const RankRow*>> grouped(const std::vector<const RankRow*>& rows, Key key) {
  std::map<decltype(key(*rows.front())), std::vector<const RankRow*>> by;
  for (const RankRow* r : rows) by[key(*r)].push_back(r);
  std::vector<std::pair<decltype(key(*rows.front())), std::vector<const RankRow*>>> sorted(by.rbegin(), by.rend());
  std::stable_sort(sorted.begin(), sorted.end(), [](auto& a, auto& b) { return a.second.size() > b.second.size(); });
  std::vector<std::vector<const RankRow*>> out;
  for (auto& [k, v] : sorted) out.push_back(std::move(v));
  return out;
}

// "  N ranks <what>" and the outliers by name, or "  Rank r <what1> -- where".
std::string describe_group(const std::vector<const RankRow*>& g, const std::string& what_many,
                           const std::string& what_one, int total, bool verbose) {
  if (g.size() == 1) {
    const std::string w = where(*g.front());
    return fmt::format("  Rank {} {} -- {}\n", g.front()->rank, what_one, w.substr(w.find("-- ") + 3));
  }
  std::string out = fmt::format("  {} ranks {}\n", g.size(), what_many);
  if (outlier(int(g.size()), total, verbose))
    for (const RankRow* r : g) out += "  " + where(*r) + "\n";
  return out;
}

std::string errors_section(const Analysis& a, bool verbose) {
  const JobView& v = a.view();
  std::string out = "\nErrors\n======\n\n";
  auto list = [&](const std::vector<ProcessInfo>& ps) {
    std::string s;
    if (outlier(int(ps.size()), -1, verbose))
      for (const ProcessInfo& p : ps) s += process_line(p);
    return s + "\n";
  };
  const int missing = int(v.unresponsive.size()), dead = int(v.dead.size());
  if (missing)
    out += fmt::format("INCOMPLETE\n  Missing communicator data from {} job process{}\n", missing,
                       plural(missing, "", "es")) + list(v.unresponsive);
  if (dead)
    out += fmt::format("DEAD\n  {} job process{} considered dead (unreachable via the RAS network)\n", dead,
                       plural(dead, " is", "es are")) + list(v.dead);
  for (size_t g = 0; g < a.groups().size(); ++g)
    for (size_t i = 0; i < a.groups()[g].size(); ++i) {
      const CommSummary& c = *a.groups()[g][i];
      if (c.errors & kIncomplete) {
        const int n = int(c.incomplete.size());
        out += fmt::format("{} INCOMPLETE\n  Missing communicator data from {} rank{}\n", comm_name(g, i, c), n,
                           plural(n, "", "s"));
        if (outlier(n, -1, verbose))
          for (const RankRow& r : c.incomplete) out += "  " + where(r) + "\n";
        out += "\n";
      }
      if (!(c.errors & kError)) continue;
      out += comm_name(g, i, c) + " ERROR\n";
      for (bool init : {true, false}) {
        std::vector<const RankRow*> failed;
        for (const RankRow& r : c.ranks)
          if (is_error(init ? r.state->init_state : r.state->async_error)) failed.push_back(&r);
        if (failed.empty()) continue;
        const int n = int(failed.size());
        out += fmt::format("  {} error{} on {} rank{}\n", init ? "Initialization" : "Asynchronous", plural(n, "", "s"),
                           n, plural(n, "", "s"));
        auto error_of = [init](const RankRow& r) { return init ? r.state->init_state : r.state->async_error; };
        for (const auto& group : grouped(failed, error_of)) {
          const std::string text = result_text(error_of(*group.front()));
          out += describe_group(group, "reported " + text, "reported " + text, -1, verbose);
        }
      }
      out += "\n";
    }
  return out;
}

std::string warnings_section(const Analysis& a, bool verbose) {
  std::string out = "Warnings\n========\n\n";
  const int timeouts = a.view().timeouts;
  if (timeouts)
    out += fmt::format("TIMEOUT\n  Encountered {} communication timeout{} while gathering communicator data\n\n",
                       timeouts, plural(timeouts, "", "s"));
  for (size_t g = 0; g < a.groups().size(); ++g)
    for (size_t i = 0; i < a.groups()[g].size(); ++i) {
      const CommSummary& c = *a.groups()[g][i];
      if (!(c.errors & kMismatch)) continue;
      out += comm_name(g, i, c) + " MISMATCH\n";
      std::vector<const RankRow*> rows;
      for (const RankRow& r : c.ranks) rows.push_back(&r);
      if (c.status & (c.status - 1)) {
        out += "  Communicator ranks have different status\n";
        std::vector<const RankRow*> all = rows;
        for (const RankRow& r : c.nocomm) all.push_back(&r);
        auto status_bit = [](const RankRow& r) { return r.state ? status_of(*r.state) : int(kNoComm); };
        for (const auto& group : grouped(all, status_bit)) {
          const char* name = status_name(status_bit(*group.front()));
          out += describe_group(group, fmt::format("have status {}", name), fmt::format("has status {}", name),
                                c.nranks, verbose);
        }
        out += "\n";
      }
      for (int k = 0; k < kCounted; ++k) {
        bool differ = false;
        for (const RankRow* r : rows) differ |= r->state->coll_counts[k] != rows.front()->state->coll_counts[k];
        if (!differ) continue;
        out += fmt::format("  Communicator ranks have different {} operation counts\n", kCountedNames[k]);
        for (const auto& group : grouped(rows, [k](const RankRow& r) { return r.state->coll_counts[k]; })) {
          const uint64_t n = group.front()->state->coll_counts[k];
          out += n ? describe_group(group, fmt::format("have launched up to operation {}", n),
                                    fmt::format("has launched up to operation {}", n), c.nranks, verbose)
                   : describe_group(group, "have not launched any operations", "has not launched any operations",
                                    c.nranks, verbose);
        }
        out += "\n";
      }
    }
  return out;
}

}  // namespace

std::string process_text(const ProcessInfo& p) {
  return fmt::format("Process {} on node {} managing GPU{} {}", p.pid, p.host, p.cuda_devs.size() > 1 ? "s" : "",
                     devs_text(p.cuda_devs));
}

std::string render_text(const JobView& v, bool verbose) {
  const Analysis a(v);
  std::string out = v.cuda_compiled
                        ? fmt::format("NCCL version {} compiled with CUDA {}.{}\n", v.nccl_version,
                                      v.cuda_compiled / 1000, v.cuda_compiled % 1000 / 10)
                        : fmt::format("NCCL version {} compiled without CUDA\n", v.nccl_version);
  out += fmt::format("CUDA runtime version {}, driver version {}\n\n", v.cuda_runtime, v.cuda_driver);
  out += job_summary(v);
  out += fmt::format("\nCommunicators... ({:.3f}s)\n=============\n\n", v.collection_sec);
  if (a.groups().empty()) out += "No communicator data collected!\n";
  else
    out += "Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors\n"
           "    #  in group  per comm  per node  per comm  in group\n";
  for (size_t g = 0; g < a.groups().size(); ++g) {
    const auto& group = a.groups()[g];
    int lo = 0, hi = 0;
    std::set<std::pair<std::string, int>> gpus;
    for (const CommSummary* c : group) {
      lo = lo ? std::min(lo, c->per_node_min) : c->per_node_min;
      hi = std::max(hi, c->per_node_max);
      gpus.insert(c->gpus.begin(), c->gpus.end());
    }
    const std::string per_node = lo == hi ? std::to_string(lo) : fmt::format("{}-{}", lo, hi);
    const CommSummary& c = *group.front();
    out += fmt::format("{:5}  {:8}  {:8}  {:>8}  {:8}  {:8}  {:>8}  {:>6}\n", g, group.size(), c.nodes, per_node,
                       c.nranks, gpus.size(), status_name(c.status), kErrorNames[c.errors]);
  }
  out += errors_section(a, verbose);
  out += warnings_section(a, verbose);
  return out;
}

std::string render_json(const JobView& v) {
  using nlohmann::ordered_json;
  const Analysis a(v);
  std::vector<const CommSummary*> comms;  // NCCL's JSON order: by id
  for (const auto& g : a.groups()) comms.insert(comms.end(), g.begin(), g.end());
  std::sort(comms.begin(), comms.end(), [](auto* x, auto* y) { return x->id < y->id; });
  auto host = [](const RankRow& r) { return r.process ? r.process->host : std::string("unknown"); };
  auto pid = [](const RankRow& r) { return r.process ? r.process->pid : int64_t(-1); };
  ordered_json list = ordered_json::array();
  for (const CommSummary* c : comms) {
    ordered_json ranks = ordered_json::array(), missing = ordered_json::array();
    for (const RankRow& r : c->ranks) {
      const RankState& s = *r.state;
      ordered_json counts;
      for (int k = 0; k < kCounted; ++k) counts[kCountedNames[k]] = s.coll_counts[k];
      ranks.push_back({{"rank", r.rank}, {"host", host(r)}, {"pid", pid(r)}, {"cuda_dev", r.cuda_dev},
                       {"nvml_dev", r.cuda_dev},
                       {"status", {{"init_state", s.init_state}, {"async_error", s.async_error},
                                   {"finalize_called", s.finalize_called}, {"destroy_flag", s.destroy_flag},
                                   {"abort_flag", s.abort_flag}}},
                       {"collective_counts", counts}});
    }
    std::vector<std::pair<const RankRow*, bool>> gone;  // rank, unresponsive
    for (const RankRow& r : c->nocomm) gone.emplace_back(&r, false);
    for (const RankRow& r : c->incomplete) gone.emplace_back(&r, true);
    std::sort(gone.begin(), gone.end(), [](auto& x, auto& y) { return x.first->rank < y.first->rank; });
    for (const auto& [r, unresponsive] : gone) {
      const bool dead = r->process && std::any_of(v.dead.begin(), v.dead.end(), [&](const ProcessInfo& p) {
                          return p.addr == r->process->addr;
                        });
      missing.push_back({{"rank", r->rank}, {"host", host(*r)}, {"pid", pid(*r)}, {"cuda_dev", r->cuda_dev},
                         {"nvml_dev", r->cuda_dev},
                         {"status", {{"unresponsive", unresponsive && !dead}, {"considered_dead", dead}}}});
    }
    list.push_back({{"hash", fmt::format("{:#x}", c->id.hash)},
                    {"secondary_hash", fmt::format("{:#x}:{:#x}", c->id.host_hash, c->id.pid_hash)},
                    {"size", c->nranks}, {"ranks_count", c->ranks.size()}, {"missing_ranks_count", gone.size()},
                    {"ranks", std::move(ranks)}, {"missing_ranks", std::move(missing)}});
  }
  ordered_json doc = {{"nccl_version", v.nccl_version},
                      {"cuda_runtime_version", v.cuda_runtime},
                      {"cuda_driver_version", v.cuda_driver},
                      {"timestamp", v.timestamp},
                      {"communicators_count", comms.size()},
                      {"communicators", std::move(list)},
                      {"ras", {{"collection_time_sec", std::round(v.collection_sec * 1000) / 1000},
                               {"timeouts_count", v.timeouts}}}};
  return dump(doc, 2) + "\n";
}

}  // namespace braid::ras

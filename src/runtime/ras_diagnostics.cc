// RAS's on-demand diagnostics (NCCL 2.31's `ncclras -D`): the comparison
// the init diagnostics run (diagnostics_consistency.cc: library, GPUs, CUDA
// driver, NCCL_* and BRAID_* variables, secrets hashed), for every
// communicator of the running job at once, without its ranks taking part.
//
// The answering process finds every process as a status query does
// (ras_collect), asks each for its facts and the ranks it runs (a Facts
// request), and compares each communicator's ranks.  A communicator some of
// whose ranks did not answer is compared over those that did, after a line
// saying how many that is.  Lines are NCCL's: "host:pid NCCL DIAG ...",
// between "=== RAS Diagnostics ===" and the completion line.
#include <chrono>
#include <map>

#include <fmt/format.h>

#include "src/runtime/diagnostics.h"
#include "src/runtime/ras_node.h"

namespace braid {
namespace {

using nlohmann::json;

// A process's facts, and the ranks of each communicator it runs.
struct ProcessFacts {
  RankFacts facts;  // model left empty: it is per rank
  std::vector<RasLocalRank> ranks;
};

bool parse_facts(const json& j, ProcessFacts* out) {
  try {
    const json& f = j.at("facts");
    out->facts = {f.at("library").get<std::string>(), "", f.at("devices").get<int>(),
                  f.at("driver_version").get<int>(), f.at("env").get<std::string>(), f.at("env_cut").get<bool>()};
    for (const json& r : j.at("ranks"))
      out->ranks.push_back({{r.at("hash").get<uint64_t>(), r.at("host_hash").get<uint64_t>(),
                             r.at("pid_hash").get<uint64_t>()},
                            r.at("rank").get<int>(), r.at("nranks").get<int>(), r.at("model").get<std::string>()});
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

json ras_facts_reply(RasNode& node) {
  const RankFacts f = this_process_facts("");
  json ranks = json::array();
  for (const RasLocalRank& r : node.local_ranks())
    ranks.push_back({{"hash", r.id.hash}, {"host_hash", r.id.host_hash}, {"pid_hash", r.id.pid_hash},
                     {"rank", r.rank}, {"nranks", r.nranks}, {"model", r.model}});
  return {{"facts",
           {{"library", f.library}, {"devices", f.devices}, {"driver_version", f.driver_version}, {"env", f.env},
            {"env_cut", f.env_cut}}},
          {"ranks", std::move(ranks)}};
}

std::string ras_diagnostics(RasNode& node, double timeout_sec) {
  const auto start = std::chrono::steady_clock::now();
  const ras::JobView job = ras_collect(node, timeout_sec);
  std::vector<ProcessFacts> processes(1);
  parse_facts(ras_facts_reply(node), &processes[0]);
  std::vector<std::string> others;
  for (const ras::ProcessReport& r : job.answered)
    if (r.process.addr != node.self().addr) others.push_back(r.process.addr);
  for (const RasAnswer& a : ras_ask_all(others, RasRequest::Facts, ras_deadline(timeout_sec))) {
    ProcessFacts p;
    if (a.status.is_ok() && parse_facts(a.reply, &p)) processes.push_back(std::move(p));
  }
  // Each communicator's ranks, in rank order, with their facts.
  struct Comm {
    int nranks = 0;
    std::map<int, RankFacts> ranks;
  };
  std::map<ras::CommId, Comm> comms;
  for (const ProcessFacts& p : processes)
    for (const RasLocalRank& r : p.ranks) {
      Comm& c = comms[r.id];
      c.nranks = r.nranks;
      RankFacts& f = c.ranks[r.rank] = p.facts;
      f.model = r.model;
    }
  std::string out;
  DiagnosticsReport report(true, &out);
  report.print("=== RAS Diagnostics ===");
  for (const auto& [id, c] : comms) {
    std::vector<int> ranks;
    std::vector<RankFacts> facts;
    for (const auto& [rank, f] : c.ranks) ranks.push_back(rank), facts.push_back(f);
    if (int(ranks.size()) < c.nranks)
      report.info(fmt::format("diagnostics incomplete, gathered {}/{} ranks in comm {:#x}", ranks.size(), c.nranks,
                              id.hash));
    compare_rank_facts(id.hash, c.nranks, ranks, facts, report);
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  report.print(fmt::format("RAS diagnostics completed in {:.1f} ms across {} RAS peers", ms, processes.size()));
  return out;
}

}  // namespace braid

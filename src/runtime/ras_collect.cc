// A status query's gathering (ras_node.h): every process's report, found
// by asking the peers this process knows, then the peers their answers
// name, round by round, each round's processes at once (ras_ask_all) and
// bounded by the query's timeout.  A process that refuses the connection is
// gone (dead); one that does not answer in time is unresponsive, and counts
// a timeout.
// A status query (ras_status) then finds where the ranks nobody reported
// live, from this process or one that reported their communicator; the
// other queries only need the processes.
#include <chrono>
#include <map>
#include <set>

#include "nccl.h"
#include "src/exec/device_backend.h"
#include "src/runtime/ras_node.h"

namespace braid {

ras::JobView ras_collect(RasNode& node, double timeout_sec) {
  const auto start = std::chrono::steady_clock::now();
  ras::JobView v;
  v.answered.push_back(node.report());
  v.dead = node.dead();
  std::set<std::string> asked = {node.self().addr};
  for (const ras::ProcessInfo& p : v.dead) asked.insert(p.addr);
  std::vector<ras::ProcessInfo> round;
  auto plan = [&](const std::vector<ras::ProcessInfo>& peers) {
    for (const ras::ProcessInfo& p : peers)
      if (asked.insert(p.addr).second) round.push_back(p);
  };
  plan(node.peers());
  while (!round.empty()) {
    const std::vector<ras::ProcessInfo> asking = std::move(round);
    round.clear();
    std::vector<std::string> addrs;
    for (const ras::ProcessInfo& p : asking) addrs.push_back(p.addr);
    const std::vector<RasAnswer> answers =
        ras_ask_all(addrs, RasRequest::Report, ras_deadline(timeout_sec));
    for (size_t i = 0; i < asking.size(); ++i) {
      ras::ProcessReport report;
      if (answers[i].status.code() == ncclRemoteError) {
        node.mark_dead(asking[i].addr);
        v.dead.push_back(asking[i]);
      } else if (!answers[i].status.is_ok() || !ras::from_json(answers[i].reply, &report)) {
        v.unresponsive.push_back(asking[i]);
        ++v.timeouts;
      } else {
        node.learn(report.peers);
        plan(report.peers);
        v.answered.push_back(std::move(report));
      }
    }
  }
  v.collection_sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return v;
}

ras::JobView ras_status(RasNode& node, double timeout_sec) {
  const auto start = std::chrono::steady_clock::now();
  ras::JobView v = ras_collect(node, timeout_sec);
  v.nccl_version = std::to_string(NCCL_MAJOR) + "." + std::to_string(NCCL_MINOR) + "." + std::to_string(NCCL_PATCH);
  const DeviceInventory inventory = probe_device_inventory();
  v.cuda_compiled = inventory.compiled_version;
  v.cuda_runtime = inventory.runtime_version;
  v.cuda_driver = inventory.driver_version;
  v.timestamp = ras_local_time();
  // Where the unreported ranks live: this process's record, else the
  // record of one that reported the communicator.
  std::map<ras::CommId, std::pair<int, std::string>> reported;  // ranks reported, by one process
  for (const ras::ProcessReport& r : v.answered)
    for (const ras::CommReport& c : r.comms)
      reported.try_emplace(c.id, 0, r.process.addr).first->second.first += int(c.ranks.size());
  for (const ras::ProcessReport& r : v.answered)
    for (const ras::CommReport& c : r.comms) {
      const auto& [count, by] = reported[c.id];
      if (count >= c.nranks || v.homes.count(c.id)) continue;
      std::vector<ras::RankHome> homes = node.homes(c.id);
      nlohmann::json reply;
      if (homes.empty() &&
          ras_ask(by, RasRequest::Homes, {c.id.hash, c.id.host_hash, c.id.pid_hash}, ras_deadline(timeout_sec),
                  &reply).is_ok())
        ras::from_json(reply, &homes);
      v.homes[c.id] = std::move(homes);
    }
  v.collection_sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return v;
}

}  // namespace braid

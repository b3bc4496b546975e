// This process's RAS node (ras_service.h): what it knows, and the wire
// between nodes.
//
// A node knows its communicators (the ones whose init it joined and that
// still exist) and the processes they span (its peers), and remembers the
// processes found dead.  A peer asks a node over its peer socket with one
// request per connection: a 4-byte magic, a kind byte and a length-prefixed
// JSON body; the node answers with one length-prefixed JSON document.
#pragma once

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/base/deadline.h"
#include "src/base/status.h"
#include "src/runtime/ras_report.h"
#include "src/runtime/ras_service.h"

namespace braid {

enum class RasRequest : char {
  Report = 'R',  // reply: ras::ProcessReport
  Homes = 'H',   // body: a CommId; reply: the RankHome of each of its ranks (empty: not known here)
  Ping = 'P',    // reply: {}
  Facts = 'F',   // reply: what the on-demand diagnostics compare (ras_diagnostics.cc)
  Mask = 'M',    // body: {"mask": n}, the profiler activation mask to set; reply: {}
};

// One of this process's ranks, for the on-demand diagnostics.
struct RasLocalRank {
  ras::CommId id;
  int rank = -1;
  int nranks = 0;
  std::string model;  // the GPU it runs on ("" on the host backend)
};

class RasNode {
 public:
  // The node, started at the first call where NCCL_RAS_ENABLE=1; nullptr
  // where RAS is off or its peer socket could not be made.
  static RasNode* get(const SockAddr& ip);

  const ras::ProcessInfo& self() const { return self_; }
  void add_comm(ncclComm* comm, const std::vector<RasRank>& ranks, const ras::CommId& id, const std::string& model);
  void remove_comm(const ncclComm* comm);

  ras::ProcessReport report();                     // this process's, now
  std::vector<ras::RankHome> homes(const ras::CommId& id);
  std::vector<RasLocalRank> local_ranks();
  std::vector<ras::ProcessInfo> peers();           // known, self and the dead excluded
  std::vector<ras::ProcessInfo> dead();            // known and found dead
  void learn(const std::vector<ras::ProcessInfo>& peers);
  void mark_dead(const std::string& addr);

  // NCCL_RAS_TIMEOUT_FACTOR (a positive number, else 1), read at start.
  double timeout_factor() const { return timeout_factor_; }

 private:
  RasNode() = default;
  Status start(const SockAddr& ip);
  void accept_loop();
  void serve_peer(int fd);
  ras::ProcessInfo& peer_entry(const std::string& addr);  // with mutex_ held

  struct CommEntry {
    ncclComm* comm;
    ras::CommId id;
    std::vector<ras::RankHome> homes;
    std::string model;
  };
  std::mutex mutex_;
  std::vector<CommEntry> comms_;
  std::map<std::string, ras::ProcessInfo> peers_;  // by addr, self excluded
  std::set<std::string> dead_;
  ras::ProcessInfo self_;
  SockAddr peer_addr_;
  int peer_fd_ = -1, client_fd_ = -1;
  double timeout_factor_ = 1;
  friend bool ras_peer_address(const SockAddr& ip, SockAddr* out);
};

// One request to the node at `addr` ("ip:port"); *reply gets its answer.
// ncclRemoteError at once if the process refuses (its listener is gone);
// ncclTimeout when it does not answer (in time, or at all).
Status ras_ask(const std::string& addr, RasRequest kind, const nlohmann::json& body, Deadline deadline,
               nlohmann::json* reply);

// The same request to each of `addrs` at once (at most 64 connections at a
// time); the answers in their order.
struct RasAnswer {
  Status status;
  nlohmann::json reply;
};
std::vector<RasAnswer> ras_ask_all(const std::vector<std::string>& addrs, RasRequest kind, Deadline deadline,
                                   const nlohmann::json& body = nlohmann::json::object());

// A query's deadline, `seconds` from now (<= 0: none, NCCL's TIMEOUT 0).
Deadline ras_deadline(double seconds);

// Local time as RAS prints it, "%F %T".
std::string ras_local_time();

// A client's connection to the client socket, served to its end (ras_client.cc).
void ras_serve_client(RasNode& node, int fd);

// Every process's report, and which processes did not answer
// (ras_collect.cc); timeout_sec <= 0: wait for each as long as it takes.
ras::JobView ras_collect(RasNode& node, double timeout_sec);
// That and, for communicators some ranks of which nobody reported, where
// those ranks live: what a status report needs.
ras::JobView ras_status(RasNode& node, double timeout_sec);

// The on-demand diagnostics (ras_diagnostics.cc): NCCL DIAG lines comparing
// the ranks of every communicator of every process that answers.
std::string ras_diagnostics(RasNode& node, double timeout_sec);
// This process's answer to a Facts request.
nlohmann::json ras_facts_reply(RasNode& node);

}  // namespace braid

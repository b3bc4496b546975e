// What RAS (NCCL's reliability, availability and serviceability queries,
// src/runtime/ras_service.h) gathers and prints.
//
// Each process reports its communicators as its own ranks see them: for
// every rank, its init state, asynchronous error, finalize/destroy/abort
// flags and how many of each of NCCL's five counted collectives it has
// launched.  A query puts the reports of every process that answered into
// a JobView, with the processes that did not (unresponsive, or dead: their
// listener is gone) and, for communicators some ranks of which nobody
// reported, where those ranks live.  The renderers turn a JobView into
// NCCL's text report (`ncclras`, `ncclras -v`) or its JSON (`ncclras -f
// json`): which communicators are healthy, which ranks are missing, which
// disagree on their status or on how many operations they launched (a rank
// stuck behind the others, the usual hang), and which failed.
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/runtime/ras_service.h"  // kCounted, kCountedNames

namespace braid::ras {

// A process, as the RAS network knows it: its peer listener is its name.
struct ProcessInfo {
  std::string addr;  // "ip:port" of its RAS peer listener
  std::string host;  // that ip: what NCCL's report calls the node
  int64_t pid = -1;
  std::vector<int> cuda_devs;  // the CUDA devices its ranks run on (none on the host backend)
  bool operator==(const ProcessInfo&) const = default;
};

// A communicator across processes: its hash and its rank 0's host and
// process (NCCL's rasCommId), so two with one hash are still told apart.
struct CommId {
  uint64_t hash = 0;
  uint64_t host_hash = 0;
  uint64_t pid_hash = 0;
  auto operator<=>(const CommId&) const = default;
};

struct RankState {
  int rank = -1;
  int cuda_dev = -1;     // -1: the host backend
  int init_state = 0;    // ncclResult_t: ncclSuccess once ready, ncclInProgress while initialising
  int async_error = 0;   // ncclResult_t, as ncclCommGetAsyncError's sticky error
  bool finalize_called = false;
  bool destroy_flag = false;
  bool abort_flag = false;
  std::array<uint64_t, kCounted> coll_counts{};  // launched, per counted collective
};

struct CommReport {
  CommId id;
  int nranks = 0;
  std::vector<RankState> ranks;  // this process's ranks of it
};

struct ProcessReport {
  ProcessInfo process;
  std::vector<CommReport> comms;
  std::vector<ProcessInfo> peers;  // every process this one knows of (how a query finds them all)
};

// Where a rank lives, for the ranks no answer reported.
struct RankHome {
  int rank = -1;
  std::string addr;  // ProcessInfo::addr of its process
  int cuda_dev = -1;
};

struct JobView {
  std::string nccl_version;  // "2.28.9"
  int cuda_compiled = 0, cuda_runtime = 0, cuda_driver = 0;  // CUDART_VERSION-style (0: no CUDA)
  std::string timestamp;  // local time, "%F %T"
  std::vector<ProcessReport> answered;
  std::vector<ProcessInfo> unresponsive;  // known, no answer in time
  std::vector<ProcessInfo> dead;          // refused: the process is gone
  std::map<CommId, std::vector<RankHome>> homes;  // of communicators with unreported ranks
  double collection_sec = 0;
  int timeouts = 0;
};

// "Process 12 on node 10.0.0.1 managing GPU 0" ("GPUs 0,1"; "GPU none" on
// the host backend), as NCCL's reports and monitor events name a process.
std::string process_text(const ProcessInfo& p);

// NCCL's text report; verbose lists more of the outlying ranks.
std::string render_text(const JobView& view, bool verbose);
// NCCL's JSON report (always as verbose).
std::string render_json(const JobView& view);

// JSON text of `j`, bytes that are not UTF-8 (in a variable's value, say)
// replaced rather than thrown on.
template <class Json>
std::string dump(const Json& j, int indent = -1) {
  return j.dump(indent, ' ', false, Json::error_handler_t::replace);
}

// The wire form of what processes tell each other (ras_service.cc).
nlohmann::json to_json(const ProcessInfo& p);
nlohmann::json to_json(const ProcessReport& r);
nlohmann::json to_json(const std::vector<RankHome>& homes);
// False if `j` is not such a document (a peer of another version, garbage).
bool from_json(const nlohmann::json& j, ProcessInfo* out);
bool from_json(const nlohmann::json& j, ProcessReport* out);
bool from_json(const nlohmann::json& j, std::vector<RankHome>* out);

}  // namespace braid::ras

// BRAID_CHECK=1, or NCCL 2.29's NCCL_CHECK_MODE=DEBUG_GLOBAL: cross-rank
// agreement on collective arguments.
//
// Mismatched counts, datatypes, ops or roots between ranks make NCCL read or
// write the wrong bytes, or hang; so do different algorithms (a call's
// algSelection, or a tuner plugin's pick, src/runtime/tuner.h, that one rank
// made alone), which braid compares too.  With the check on, before any data moves
// each communicator's ranks allgather a fixed record per queued collective
// over the bootstrap (two small messages per rank per group) and compare.
// Every rank sees every record, so every rank reaches the same verdict: the
// whole group fails with ncclInvalidArgument (as NCCL's check mode) on all of
// them, never wrong data.
// Several communicators driven from one thread (ncclCommInitAll) are checked
// concurrently, since their ranks can only answer together.  The setting is
// read once per communicator at init and OR-ed over its ranks (comm.cc): a
// rank checking alone would wait for records nobody sends, and reading the
// environment on every call cost ~2k instructions.
// Sends and receives are checked pair by pair (check_p2p_pairs): only the
// ranks of a pair take part, so a pair's verdict is theirs alone, and the
// other pairs of the group run.
#include <map>
#include <set>
#include <thread>

#include "src/runtime/comm.h"
#include "src/base/env.h"
#include "src/base/thread_name.h"
#include "src/plan/alg_selection.h"
#include "src/runtime/group.h"

namespace braid {
namespace {

constexpr int32_t kRefused = -1;  // Record::collective of a call the API refused on its rank

struct Record {
  int32_t collective;
  int32_t type;
  int32_t op;    // built-in op, or -1 for any PreMulSum (ids are per rank)
  int32_t root;
  uint32_t algorithms;  // CollectiveCall::algorithms: a selection's, NCCL_ALGO's or a tuner's
  int32_t unused = 0;   // no padding goes over the bootstrap
  uint64_t count;
};

Record record_of(const CollectiveCall& c) {
  return Record{c.refused ? kRefused : int32_t(c.collective), int32_t(c.type),
                int(c.op) >= int(ncclNumOps) ? -1 : int32_t(c.op), c.root, c.algorithms, 0, uint64_t(c.count)};
}

std::string describe(const Record& r) {
  return fmt::format("{} count={} datatype={} op={} root={} algorithms={}", to_string(Collective(r.collective)),
                     r.count, r.type, r.op, r.root, r.algorithms ? admitted_names(r.algorithms) : "any");
}

Status check_one(ncclComm* comm, const std::vector<Record>& mine) {
  const int n = comm->nranks;
  std::vector<uint64_t> sizes(n);
  sizes[comm->rank] = mine.size();
  BRAID_TRY(comm->bootstrap->allgather(sizes.data(), sizeof(uint64_t)));
  for (int r = 0; r < n; ++r)
    if (sizes[r] != mine.size())
      return BRAID_ERROR(ncclInvalidArgument,
                         "argument check: rank {} queued {} collectives in this group, rank {} queued {}",
                         comm->rank, mine.size(), r, sizes[r]);
  if (mine.empty()) return Status::ok();
  std::vector<Record> all(mine.size() * n);
  std::copy(mine.begin(), mine.end(), all.begin() + ptrdiff_t(mine.size()) * comm->rank);
  BRAID_TRY(comm->bootstrap->allgather(all.data(), sizeof(Record) * mine.size()));
  for (size_t i = 0; i < mine.size(); ++i)
    for (int r = 0; r < n; ++r)
      if (all[size_t(r) * mine.size() + i].collective == kRefused)
        return BRAID_ERROR(ncclInvalidArgument, "argument check: rank {} refused collective #{} of the group (its "
                           "error says why)", r, i);
  for (size_t i = 0; i < mine.size(); ++i)
    for (int r = 0; r < n; ++r) {
      const Record& a = all[i];  // rank 0's
      const Record& b = all[size_t(r) * mine.size() + i];
      if (a.collective != b.collective || a.type != b.type || a.op != b.op || a.root != b.root ||
          a.algorithms != b.algorithms || a.count != b.count)
        return BRAID_ERROR(ncclInvalidArgument,
                           "argument check: ranks disagree on collective #{} of the group: rank 0 {}, rank {} {}",
                           i, describe(a), r, describe(b));
    }
  return Status::ok();
}

constexpr int kP2pCheckTag = 0x2c4ec;  // bootstrap tag of the pairwise send/receive check
constexpr uint64_t kMaxP2pRecords = 1u << 24;  // a peer's count beyond any real group: refused

// One send or receive as its peer sees it.
struct P2pRecord {
  int32_t is_send;
  int32_t refused;
  int32_t type;
  int32_t unused = 0;
  uint64_t count;
};

std::string describe(const std::vector<P2pRecord>& calls, bool sends) {
  std::string s;
  for (const P2pRecord& c : calls)
    if (bool(c.is_send) == sends) s += fmt::format("{}{} x type {}", s.empty() ? "" : ", ", c.count, c.type);
  return "[" + s + "]";
}

// Why rank a's calls with rank b (`mine`) and b's with a (`theirs`) do not
// match, or "" when they do: no call refused, and each way the sends are the
// receives, in order (count and datatype).
std::string pair_mismatch(int a, const std::vector<P2pRecord>& mine, int b, const std::vector<P2pRecord>& theirs) {
  for (const auto* calls : {&mine, &theirs})
    for (const P2pRecord& c : *calls)
      if (c.refused)
        return fmt::format("argument check: rank {} refused its {} rank {} (its error says why)",
                           calls == &mine ? a : b, c.is_send ? "send to" : "receive from", calls == &mine ? b : a);
  for (bool a_sends : {true, false}) {
    std::vector<P2pRecord> sent, received;
    for (const P2pRecord& c : mine)
      if (bool(c.is_send) == a_sends) (a_sends ? sent : received).push_back(c);
    for (const P2pRecord& c : theirs)
      if (bool(c.is_send) != a_sends) (a_sends ? received : sent).push_back(c);
    bool same = sent.size() == received.size();
    for (size_t i = 0; same && i < sent.size(); ++i)
      same = sent[i].count == received[i].count && sent[i].type == received[i].type;
    if (!same) {
      const int from = a_sends ? a : b, to = a_sends ? b : a;
      return fmt::format("argument check: rank {} sends rank {} {}, rank {} receives {}", from, to,
                         describe(sent, true), to, describe(received, false));
    }
  }
  return "";
}

}  // namespace

CommFailures check_p2p_pairs(std::vector<CommQueue>& queues) {
  // Each checked communicator's calls, by peer, in call order.
  struct Pairs {
    CommQueue* queue;
    std::map<int, std::vector<P2pRecord>> by_peer;
  };
  std::vector<Pairs> comms;
  for (CommQueue& q : queues) {
    if (!q.comm->check_args || q.work.p2ps.empty()) continue;
    Pairs p{&q, {}};
    for (const P2PCall& c : q.work.p2ps)
      p.by_peer[c.peer].push_back({c.is_send, c.refused, int32_t(c.type), 0, uint64_t(c.count)});
    comms.push_back(std::move(p));
  }
  // Every message out before any is awaited: a rank may take its
  // communicators in another order than its peer does.
  CommFailures failed;
  std::vector<Status> sent(comms.size());
  for (size_t i = 0; i < comms.size(); ++i) {
    Bootstrap& boot = *comms[i].queue->comm->bootstrap;
    for (const auto& [peer, calls] : comms[i].by_peer) {
      if (peer == boot.rank() || !sent[i].is_ok()) continue;
      const uint64_t n = calls.size();
      sent[i] = boot.send(peer, kP2pCheckTag, &n, sizeof n);
      if (sent[i].is_ok()) sent[i] = boot.send(peer, kP2pCheckTag, calls.data(), n * sizeof(P2pRecord));
    }
  }
  for (size_t i = 0; i < comms.size(); ++i) {
    ncclComm* comm = comms[i].queue->comm;
    std::set<int> bad;
    Status exchange = sent[i], verdict;  // the exchange's failure (every pair is then bad); the first mismatch
    for (const auto& [peer, calls] : comms[i].by_peer) {
      std::vector<P2pRecord> theirs = calls;  // a rank's calls with itself are both sides
      if (peer != comm->rank && exchange.is_ok()) {
        uint64_t n = 0;
        exchange = comm->bootstrap->recv(peer, kP2pCheckTag, &n, sizeof n);
        if (exchange.is_ok() && n > kMaxP2pRecords)
          exchange = BRAID_ERROR(ncclInternalError, "argument check: rank {} announced {} calls", peer, n);
        theirs.resize(exchange.is_ok() ? n : 0);
        if (exchange.is_ok())
          exchange = comm->bootstrap->recv(peer, kP2pCheckTag, theirs.data(), n * sizeof(P2pRecord));
      }
      const std::string why = exchange.is_ok() ? pair_mismatch(comm->rank, calls, peer, theirs) : "";
      if (!exchange.is_ok() || !why.empty()) bad.insert(peer);
      if (!why.empty() && verdict.is_ok()) verdict = BRAID_ERROR(ncclInvalidArgument, "{}", why);
    }
    if (bad.empty()) continue;
    std::erase_if(comms[i].queue->work.p2ps, [&](const P2PCall& c) { return bad.count(c.peer) != 0; });
    failed.emplace_back(comm, exchange.is_ok() ? std::move(verdict)
                                               : std::move(exchange).context("argument check of sends and receives"));
  }
  return failed;
}

CommFailures check_agreement(const std::vector<CommQueue>& queues) {
  std::map<ncclComm*, std::vector<Record>> per_comm;
  for (const CommQueue& q : queues)
    if (q.comm->check_args)
      for (const CollectiveCall& c : q.work.collectives) per_comm[q.comm].push_back(record_of(c));
  CommFailures failed;
  if (per_comm.size() == 1) {
    Status s = check_one(per_comm.begin()->first, per_comm.begin()->second);
    if (!s.is_ok()) failed.emplace_back(per_comm.begin()->first, std::move(s));
    return failed;
  }
  std::vector<Status> results(per_comm.size());
  std::vector<std::thread> threads;
  size_t i = 0;
  for (auto& [comm, records] : per_comm) {
    threads.push_back(named_thread("braid check", with_caller_env([&, i, comm = comm] {
      results[i] = check_one(comm, per_comm[comm]);
    })));
    ++i;
  }
  for (auto& t : threads) t.join();
  i = 0;
  for (auto& [comm, records] : per_comm) {
    if (!results[i].is_ok()) failed.emplace_back(comm, std::move(results[i]));
    ++i;
  }
  return failed;
}

}  // namespace braid

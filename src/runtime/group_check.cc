// BRAID_CHECK=1, or NCCL 2.29's NCCL_CHECK_MODE=DEBUG_GLOBAL: cross-rank
// agreement on collective arguments.
//
// Mismatched counts, datatypes, ops or roots between ranks make NCCL read or
// write the wrong bytes, or hang.  With the check on, before any data moves
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
#include <map>
#include <thread>

#include "src/runtime/comm.h"
#include "src/base/env.h"
#include "src/runtime/group.h"

namespace braid {
namespace {

constexpr int32_t kRefused = -1;  // Record::collective of a call the API refused on its rank

struct Record {
  int32_t collective;
  int32_t type;
  int32_t op;    // built-in op, or -1 for any PreMulSum (ids are per rank)
  int32_t root;
  uint64_t count;
};

Record record_of(const CollectiveCall& c) {
  return Record{c.refused ? kRefused : int32_t(c.collective), int32_t(c.type),
                int(c.op) >= int(ncclNumOps) ? -1 : int32_t(c.op), c.root, uint64_t(c.count)};
}

std::string describe(const Record& r) {
  return fmt::format("{} count={} datatype={} op={} root={}", to_string(Collective(r.collective)), r.count, r.type,
                     r.op, r.root);
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
      if (a.collective != b.collective || a.type != b.type || a.op != b.op || a.root != b.root || a.count != b.count)
        return BRAID_ERROR(ncclInvalidArgument,
                           "argument check: ranks disagree on collective #{} of the group: rank 0 {}, rank {} {}",
                           i, describe(a), r, describe(b));
    }
  return Status::ok();
}

}  // namespace

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
    threads.emplace_back(with_caller_env([&, i, comm = comm] { results[i] = check_one(comm, per_comm[comm]); }));
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

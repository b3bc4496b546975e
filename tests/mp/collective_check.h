// Runs one collective on one rank with crafted inputs and checks the result
// exactly (see values.h).  Used by the multi-rank tests.
#pragma once

#include <fmt/format.h>

#include "braid/schedule.h"
#include "harness.h"
#include "values.h"

namespace mp {

enum class Coll { AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, AlltoAll, Gather, Scatter };
inline const char* coll_name(Coll c) {
  static const char* names[] = {"allreduce", "allgather", "reducescatter", "broadcast",
                                "reduce",    "alltoall",  "gather",        "scatter"};
  return names[int(c)];
}
inline constexpr Coll kAllColls[] = {Coll::AllReduce, Coll::AllGather, Coll::ReduceScatter, Coll::Broadcast,
                                     Coll::Reduce,    Coll::AlltoAll,  Coll::Gather,        Coll::Scatter};
// The same collective in braid's schedule terms (the two enums share their order).
inline braid::Collective to_collective(Coll c) { return braid::Collective(int(c)); }
static_assert(int(braid::Collective::AlltoAll) == int(Coll::AlltoAll) &&
              int(braid::Collective::Scatter) == int(Coll::Scatter));
inline bool reduces(Coll c) { return c == Coll::AllReduce || c == Coll::ReduceScatter || c == Coll::Reduce; }

struct CollCase {
  Coll coll = Coll::AllReduce;
  size_t count = 0;
  ncclDataType_t type = ncclFloat;
  ncclRedOp_t op = ncclSum;
  int root = 0;
  bool in_place = false;
  bool null_unused = false;  // non-roots pass NULL for the buffer NCCL says they do not use
};

inline std::string describe(const CollCase& c, int rank, int nranks) {
  return fmt::format("{} count={} type={} op={} root={} {} rank {}/{}", coll_name(c.coll), c.count, int(c.type),
                     int(c.op), c.root, c.in_place ? "in-place" : "out-of-place", rank, nranks);
}

// Memory to run in instead of fresh heap buffers (e.g. ncclMemAlloc memory
// registered in windows): `main` holds the receive buffer (and the send
// buffer in place), `send` the send buffer out of place.
struct Buffers {
  char* main = nullptr;
  char* send = nullptr;
  size_t bytes = 0;  // of each
};

// Runs `c` on this rank and counts wrong elements into `failures`.
inline void run_and_check(const CollCase& c, int rank, int n, ncclComm_t comm, Failures& failures,
                          const Buffers* given = nullptr) {
  const size_t es = type_size(c.type), N = size_t(n);
  size_t send_elems = c.count, recv_elems = c.count;
  switch (c.coll) {
    case Coll::AllGather: case Coll::Gather: recv_elems = N * c.count; break;
    case Coll::ReduceScatter: case Coll::Scatter: send_elems = N * c.count; break;
    case Coll::AlltoAll: send_elems = recv_elems = N * c.count; break;
    default: break;
  }
  bool is_root = rank == c.root;
  // In place, the send buffer lives inside the receive buffer (or vice versa), as in nccl-tests.
  size_t total = std::max(send_elems, recv_elems);
  if (given && given->bytes < total * es) {
    failures.fail(describe(c, rank, n) + ": the given buffers are too small");
    return;
  }
  std::vector<char> main(given ? 0 : total * es + 1), send_copy;
  char* recv = given ? given->main : main.data();
  char* send = recv;
  std::vector<char> separate_send;
  if (c.in_place) {
    if (c.coll == Coll::AllGather || c.coll == Coll::Gather) send = recv + size_t(rank) * c.count * es;
    if (c.coll == Coll::ReduceScatter || c.coll == Coll::Scatter) recv = send + size_t(rank) * c.count * es;
  } else if (given) {
    send = given->send;
  } else {
    separate_send.resize(send_elems * es + 1);
    send = separate_send.data();
  }
  for (size_t i = 0; i < send_elems; ++i)
    store(send, i, c.type,
          reduces(c.coll) ? input_value(c.op, c.type, rank, n, i) : moved_value(c.type, rank, i));
  if (!c.in_place)
    for (size_t i = 0; i < recv_elems; ++i) store(recv, i, c.type, 99);  // poison (representable-ish)
  send_copy.assign(send, send + send_elems * es);

  const void* sendbuff = send;
  void* recvbuff = recv;
  if (c.null_unused && !is_root) {
    if (c.coll == Coll::Broadcast || c.coll == Coll::Scatter) sendbuff = nullptr;
    if (c.coll == Coll::Reduce || c.coll == Coll::Gather) recvbuff = nullptr;
  }
  ncclResult_t r = ncclSuccess;
  switch (c.coll) {
    case Coll::AllReduce: r = ncclAllReduce(sendbuff, recvbuff, c.count, c.type, c.op, comm, nullptr); break;
    case Coll::AllGather: r = ncclAllGather(sendbuff, recvbuff, c.count, c.type, comm, nullptr); break;
    case Coll::ReduceScatter: r = ncclReduceScatter(sendbuff, recvbuff, c.count, c.type, c.op, comm, nullptr); break;
    case Coll::Broadcast: r = ncclBroadcast(sendbuff, recvbuff, c.count, c.type, c.root, comm, nullptr); break;
    case Coll::Reduce: r = ncclReduce(sendbuff, recvbuff, c.count, c.type, c.op, c.root, comm, nullptr); break;
    case Coll::AlltoAll: r = ncclAlltoAll(sendbuff, recvbuff, c.count, c.type, comm, nullptr); break;
    case Coll::Gather: r = ncclGather(sendbuff, recvbuff, c.count, c.type, c.root, comm, nullptr); break;
    case Coll::Scatter: r = ncclScatter(sendbuff, recvbuff, c.count, c.type, c.root, comm, nullptr); break;
  }
  if (r != ncclSuccess) {
    failures.fail(describe(c, rank, n) + ": " + ncclGetErrorString(r) + ": " + ncclGetLastError(comm));
    return;
  }
  bool has_output = !((c.coll == Coll::Reduce || c.coll == Coll::Gather) && !is_root);
  size_t wrong = 0, first_wrong = 0;
  double got_first = 0, want_first = 0;
  if (has_output) {
    for (size_t i = 0; i < recv_elems; ++i) {
      double want = 0;
      size_t b = c.count ? i / c.count : 0, j = c.count ? i % c.count : 0;
      switch (c.coll) {
        case Coll::AllReduce: case Coll::Reduce: want = reduce_expected(c.op, c.type, n, i); break;
        case Coll::ReduceScatter: want = reduce_expected(c.op, c.type, n, size_t(rank) * c.count + i); break;
        case Coll::AllGather: case Coll::Gather: want = moved_value(c.type, int(b), j); break;
        case Coll::Broadcast: want = moved_value(c.type, c.root, i); break;
        case Coll::AlltoAll: want = moved_value(c.type, int(b), size_t(rank) * c.count + j); break;
        case Coll::Scatter: want = moved_value(c.type, c.root, size_t(rank) * c.count + i); break;
      }
      double got = load(recv, i, c.type);
      if (got != want && wrong++ == 0) first_wrong = i, got_first = got, want_first = want;
    }
  }
  if (wrong)
    failures.fail(fmt::format("{}: {} wrong elements, first at {}: got {} want {}", describe(c, rank, n), wrong,
                              first_wrong, got_first, want_first));
  // Out of place, the send buffer is const: it must be untouched.
  if (!c.in_place && !send_copy.empty() && std::memcmp(send_copy.data(), send, send_copy.size()) != 0)
    failures.fail(describe(c, rank, n) + ": send buffer was modified");
}

// Runs every collective for each count and placement inside one communicator.
inline RankBody sweep(std::vector<size_t> counts, ncclDataType_t type = ncclFloat, bool null_unused = false) {
  return [=](int rank, int n, ncclComm_t comm, Failures& f) {
    for (size_t count : counts)
      for (Coll coll : kAllColls)
        for (bool in_place : {false, true}) {
          CollCase c;
          c.coll = coll;
          c.count = count;
          c.type = type;
          c.root = n - 1;
          c.in_place = in_place;
          c.null_unused = null_unused && !in_place;
          run_and_check(c, rank, n, comm, f);
        }
  };
}

}  // namespace mp

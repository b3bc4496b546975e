// What a communicator spanning hosts must get exactly right: every
// collective (in place and not, several sizes), every datatype with every
// reduction op, grouped send/recv between every pair of ranks in every
// datatype, and one-sided puts with signals between every pair.  Shared by
// the net-plugin tests on this machine and the rdma tests across qemu
// guests (tests/rdma).
#pragma once

#include <vector>

#include "collective_check.h"

namespace mp {

inline constexpr ncclDataType_t kAllTypes[] = {ncclInt8,    ncclUint8,   ncclInt32,   ncclUint32,
                                               ncclInt64,   ncclUint64,  ncclFloat16, ncclFloat32,
                                               ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};
inline constexpr ncclRedOp_t kAllOps[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};

inline void every_collective(int rank, int n, ncclComm_t comm, Failures& f, std::initializer_list<size_t> counts) {
  sweep(counts)(rank, n, comm, f);
}

inline void every_datatype(int rank, int n, ncclComm_t comm, Failures& f, size_t count) {
  for (ncclDataType_t t : kAllTypes) {
    for (ncclRedOp_t op : kAllOps)
      for (Coll coll : {Coll::AllReduce, Coll::ReduceScatter, Coll::Reduce}) {
        CollCase c;
        c.coll = coll;
        c.count = count;
        c.type = t;
        c.op = op;
        c.root = 1 % n;
        run_and_check(c, rank, n, comm, f);
      }
    for (Coll coll : {Coll::AllGather, Coll::Broadcast, Coll::AlltoAll, Coll::Gather, Coll::Scatter}) {
      CollCase c;
      c.coll = coll;
      c.count = count;
      c.type = t;
      c.root = 0;
      run_and_check(c, rank, n, comm, f);
    }
  }
}

// Bytes that say who sent them to whom (send/recv moves bytes, whatever the type).
inline void fill_pattern(char* p, size_t bytes, int from, int to, int type) {
  for (size_t i = 0; i < bytes; ++i) p[i] = char((i * 131 + size_t(from) * 17 + size_t(to) * 29 + size_t(type)) & 0xff);
}

// Every rank sends every other (and itself) `count` elements of each type
// in one group; each element says who sent it where, exactly.
inline void every_send_recv(int rank, int n, ncclComm_t comm, Failures& f, size_t count) {
  for (ncclDataType_t t : kAllTypes) {
    const size_t es = type_size(t);
    std::vector<std::vector<char>> out(static_cast<size_t>(n)), in(static_cast<size_t>(n));
    for (int p = 0; p < n; ++p) {
      out[size_t(p)].resize(count * es);
      in[size_t(p)].assign(count * es + 1, 0);
      fill_pattern(out[size_t(p)].data(), count * es, rank, p, int(t));
    }
    MP_NCCL(f, ncclGroupStart());
    for (int p = 0; p < n; ++p) {
      MP_NCCL(f, ncclSend(out[size_t(p)].data(), count, t, p, comm, nullptr));
      MP_NCCL(f, ncclRecv(in[size_t(p)].data(), count, t, p, comm, nullptr));
    }
    MP_NCCL(f, ncclGroupEnd());
    for (int p = 0; p < n; ++p) {
      std::vector<char> expected(count * es);
      fill_pattern(expected.data(), count * es, p, rank, int(t));
      if (std::memcmp(expected.data(), in[size_t(p)].data(), expected.size()) != 0 || in[size_t(p)][count * es] != 0)
        f.fail(fmt::format("send/recv type {} count {}: rank {} got wrong bytes from {}", int(t), count, rank, p));
    }
  }
}

// Every rank puts `count` ints into every rank's window (itself included)
// with a signal (ncclPutSignal), waits for every rank's signal
// (ncclWaitSignal), and checks what landed.
inline void every_put_signal(int rank, int n, ncclComm_t comm, Failures& f, size_t count) {
  const size_t bytes = count * sizeof(int32_t) * size_t(n);
  void* mem = nullptr;
  ncclWindow_t win = nullptr;
  MP_NCCL(f, ncclMemAlloc(&mem, bytes));
  if (mem) MP_NCCL(f, ncclCommWindowRegister(comm, mem, bytes, &win, NCCL_WIN_DEFAULT));
  if (!win) return;
  std::vector<int32_t> mine(count);
  for (size_t i = 0; i < count; ++i) mine[i] = int32_t(rank * 1000003 + int64_t(i));
  for (int p = 0; p < n; ++p)
    MP_NCCL(f, ncclPutSignal(mine.data(), count, ncclInt32, p, win, size_t(rank) * count * sizeof(int32_t), 0, 0, 0,
                             comm, nullptr));
  std::vector<ncclWaitSignalDesc_t> waits;
  for (int p = 0; p < n; ++p) waits.push_back({1, p, 0, 0});
  MP_NCCL(f, ncclWaitSignal(n, waits.data(), comm, nullptr));
  const auto* got = static_cast<const int32_t*>(mem);
  size_t wrong = 0;
  for (int p = 0; p < n; ++p)
    for (size_t i = 0; i < count; ++i) wrong += got[size_t(p) * count + i] != int32_t(p * 1000003 + int64_t(i));
  if (wrong) f.fail(fmt::format("rank {}: put/signal: {} wrong ints", rank, wrong));
  barrier_all(comm, f);  // nobody deregisters while a peer may still put
  MP_NCCL(f, ncclCommWindowDeregister(comm, win));
  MP_NCCL(f, ncclMemFree(mem));
}

}  // namespace mp

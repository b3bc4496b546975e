// What a communicator spanning hosts must get exactly right: every
// collective (in place and not, several sizes), every datatype with every
// reduction op, and grouped send/recv between every pair of ranks in every
// datatype.  Shared by the net-plugin tests on this machine and the rdma
// tests across qemu guests (tests/rdma).
#pragma once

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

}  // namespace mp

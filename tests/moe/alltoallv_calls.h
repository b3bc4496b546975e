// braidAlltoAllv calls on one rank, checked exactly: counts drawn anew
// each call (zeros and full blocks included), every received byte and count
// compared with what every sender must have sent.  Shared by the AlltoAllv
// tests and the rdma tests across qemu guests (tests/rdma).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "braid/alltoallv.h"
#include "harness.h"
#include "host_side.h"
#include "moe_reference.h"

namespace moe_test {

// The byte `b` of element `i` that `src` sends `dst` in call `call`.
inline unsigned char pattern(int src, int dst, int call, int64_t i, size_t b) {
  return static_cast<unsigned char>(
      mix(uint64_t(src) * 1000003 + uint64_t(dst) * 7919 + uint64_t(call) * 104729 + uint64_t(i) * 31 + b) >> 17);
}

// How many elements `src` sends `dst` in call `call`: 0 a quarter of the
// time, the whole block sometimes, anything between otherwise.
inline int64_t count_of(int src, int dst, int call, int64_t max_count, uint64_t seed) {
  const uint64_t r = mix(seed + uint64_t(src) * 131 + uint64_t(dst) * 17 + uint64_t(call) * 7);
  switch (r % 8) {
    case 0:
    case 1:
      return 0;
    case 2:
      return max_count;
    default:
      return int64_t((r >> 8) % uint64_t(max_count + 1));
  }
}

inline size_t any_elem_bytes(ncclDataType_t t) {  // every NCCL type (moe_reference.h: row types)
  switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    default:
      return 8;
  }
}

struct A2aCase {
  ncclDataType_t type = ncclFloat32;
  int64_t max_count = 37;
  int calls = 4;
  uint64_t seed = 1;
};

template <class Side = HostSide>
mp::RankBody calls_body(const A2aCase& c) {
  return [=](int rank, int n, ncclComm_t comm, mp::Failures& f) {
    braidAlltoAllv_t a2a = nullptr;
    MP_NCCL(f, braidAlltoAllvCreate(comm, c.type, size_t(c.max_count), 0, &a2a));
    if (!a2a) return;
    Side side;
    const size_t eb = any_elem_bytes(c.type);
    std::vector<unsigned char> send(size_t(n) * c.max_count * eb), recv(send.size());
    std::vector<int64_t> send_counts(static_cast<size_t>(n)), recv_counts(static_cast<size_t>(n));
    for (int call = 0; call < c.calls && f.count == 0; ++call) {
      size_t at = 0;
      for (int d = 0; d < n; ++d) {
        send_counts[size_t(d)] = count_of(rank, d, call, c.max_count, c.seed);
        for (int64_t i = 0; i < send_counts[size_t(d)]; ++i)
          for (size_t b = 0; b < eb; ++b) send[at++] = pattern(rank, d, call, i, b);
      }
      std::fill(recv.begin(), recv.end(), 0xa5);
      std::fill(recv_counts.begin(), recv_counts.end(), -7);
      MP_NCCL(f, braidAlltoAllv(a2a, side.in(send.data(), send.size()),
                                static_cast<const int64_t*>(side.in(send_counts.data(), send_counts.size() * 8)),
                                side.out(recv.data(), recv.size()),
                                static_cast<int64_t*>(side.out(recv_counts.data(), recv_counts.size() * 8)),
                                side.stream()));
      if (!side.done(f)) break;
      size_t got = 0, wrong = 0;
      for (int s = 0; s < n && f.count == 0; ++s) {
        const int64_t want = count_of(s, rank, call, c.max_count, c.seed);
        if (recv_counts[size_t(s)] != want)
          f.fail(fmt::format("rank {} call {}: recvCounts[{}] = {}, want {}", rank, call, s, recv_counts[size_t(s)],
                             want));
        for (int64_t i = 0; i < want; ++i)
          for (size_t b = 0; b < eb; ++b) wrong += recv[got++] != pattern(s, rank, call, i, b);
      }
      for (size_t i = got; i < recv.size(); ++i) wrong += recv[i] != 0xa5;  // nothing written past the data
      if (wrong) f.fail(fmt::format("rank {} call {}: {} wrong bytes", rank, call, wrong));
    }
    MP_NCCL(f, braidAlltoAllvDestroy(a2a));
  };
}

}  // namespace moe_test

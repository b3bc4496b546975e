// One rank of a two-rank point-to-point bandwidth run between hosts, for
// perf/ib_compare (braid's InfiniBand and TCP paths against ib_write_bw in
// the rdma guests).  Ranks meet through NCCL_COMM_ID.
//
//   p2p_bandwidth RANK SIZE[,SIZE...] ITERS
//
// Rank 0 sends ITERS messages of SIZE bytes to rank 1 (ncclSend/ncclRecv,
// one direction, as ib_write_bw), after one warm-up message and an
// AllReduce that lines the ranks up.  Rank 1 times from the line-up to its
// last receive and prints, per size, "SIZE bytes ITERS iters SECONDS s
// GBITS Gb/s" (10^9 bits per second, ib_write_bw --report_gbits's unit).
// The received bytes are checked; a wrong byte exits non-zero.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "nccl.h"

#define CHECK(call)                                                                                       \
  do {                                                                                                    \
    ncclResult_t r_ = (call);                                                                             \
    if (r_ != ncclSuccess) {                                                                              \
      std::fprintf(stderr, "%s: %s (%s)\n", #call, ncclGetErrorString(r_), ncclGetLastError(nullptr));   \
      return 1;                                                                                           \
    }                                                                                                     \
  } while (0)

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s RANK SIZE[,SIZE...] ITERS\n", argv[0]);
    return 2;
  }
  const int rank = std::atoi(argv[1]);
  const int iters = std::atoi(argv[3]);
  std::vector<size_t> sizes;
  std::stringstream list(argv[2]);
  for (std::string s; std::getline(list, s, ',');) sizes.push_back(std::strtoull(s.c_str(), nullptr, 0));
  ncclUniqueId id;
  CHECK(ncclGetUniqueId(&id));
  ncclComm_t comm;
  CHECK(ncclCommInitRank(&comm, 2, id, rank));
  float one = 1, two = 0;
  for (size_t size : sizes) {
    std::vector<unsigned char> buf(size);
    for (size_t i = 0; i < size; ++i) buf[i] = rank == 0 ? (unsigned char)(i * 7 + 3) : 0;
    auto transfer = [&] { return rank == 0 ? ncclSend(buf.data(), size, ncclUint8, 1, comm, nullptr)
                                           : ncclRecv(buf.data(), size, ncclUint8, 0, comm, nullptr); };
    CHECK(transfer());  // warm-up: connections made, buffers touched
    CHECK(ncclAllReduce(&one, &two, 1, ncclFloat, ncclSum, comm, nullptr));
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) CHECK(transfer());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rank == 1) {
      for (size_t i = 0; i < size; ++i)
        if (buf[i] != (unsigned char)(i * 7 + 3)) {
          std::fprintf(stderr, "byte %zu of %zu is wrong\n", i, size);
          return 1;
        }
      std::printf("%zu bytes %d iters %.3f s %.4f Gb/s\n", size, iters, s, double(size) * iters * 8 / s / 1e9);
      std::fflush(stdout);
    }
  }
  CHECK(ncclCommDestroy(comm));
  return 0;
}

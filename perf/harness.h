// nccl-tests-compatible perf harness: flags, rank launch (threads and/or MPI
// processes), timing, exact data checks and the nccl-tests table.
//
// Each *_perf tool is a Benchmark: how a byte size maps to counts, how much
// of the data each rank sends and receives, which NCCL call to time, and
// what every rank must hold afterwards.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "nccl.h"

namespace perf {

struct Call {
  const void* send;
  void* recv;
  size_t count;  // the NCCL count argument
  ncclDataType_t type;
  ncclRedOp_t op;
  int root;
  int rank, nranks;
  ncclComm_t comm;  // nullptr in the MPI peer tool
};

// Which buffers hold data before/after, in units of `count` elements.
struct Shape {
  size_t send_blocks;  // send buffer = send_blocks * count elements
  size_t recv_blocks;
  // In place: offset (in blocks) of the send buffer inside the receive
  // buffer (AllGather, Gather), or of the receive buffer inside the send
  // buffer (ReduceScatter, Scatter); -1 when send and recv are the same.
  bool recv_inside_send = false;  // ReduceScatter, Scatter
  bool send_inside_recv = false;  // AllGather, Gather
};

struct Benchmark {
  std::string name;  // "AllReduce"
  bool reduces = false;   // has a redop column (-o applies)
  bool rooted = false;    // has a root column (-r applies)
  int size_divisor = 1;   // 1: size = count*esize; 0: size = count*esize*nranks (per-rank count)
  double (*bus_factor)(int nranks);
  Shape (*shape)(int nranks);
  ncclResult_t (*run)(const Call& call);
  // Expected value of recv element `index` on `rank` (elements indexed over
  // the whole receive buffer); nullopt-like: returns false where the
  // element is not defined (e.g. non-root ranks of Reduce).  `input(r, i)`
  // is the value rank r put at send element i.
  bool (*expected)(int rank, int nranks, int root, size_t count, size_t index, ncclRedOp_t op,
                   const std::function<double(int, size_t)>& input, double* value);
};

// Folds input(k, index) over all ranks k with the reduction op (avg: sum / n,
// truncated for integer types; the harness picks inputs that keep it exact).
double reduce_over_ranks(int nranks, ncclRedOp_t op, const std::function<double(int)>& input);

// Runs the tool: parses argv like nccl-tests, prints the table, returns the
// process exit code (non-zero on wrong data or errors).  `mpi_peer`: time
// OpenMPI's collective instead (bench.run gets comm = nullptr).
int perf_main(int argc, char** argv, const Benchmark& bench, bool mpi_peer = false);

}  // namespace perf

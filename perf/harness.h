// nccl-tests-compatible perf harness: flags, rank launch (threads and/or MPI
// processes), timing, exact data checks and the nccl-tests table.
//
// Each *_perf tool is a Benchmark: how a byte size maps to element counts
// (nccl-tests' getCollByteCount), the bus bandwidth factor, which NCCL call
// to time, and what every rank must hold afterwards.  Only nccl.h is used,
// so the tools also run against NVIDIA's libnccl.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "nccl.h"
#include "perf/values.h"

namespace perf {

struct Call {
  const void* send;
  void* recv;
  size_t count;  // the NCCL count argument (nccl-tests' paramcount)
  ncclDataType_t type;
  ncclRedOp_t op;
  int root;
  int rank, nranks;
  ncclComm_t comm;  // nullptr in the MPI peer tool
  cudaStream_t stream = nullptr;  // the rank's stream when buffers are on a device
};

// Element counts for one row, from count = size / sizeof(type) (and the
// element size: per-rank blocks are multiples of 16 bytes, as nccl-tests').
struct Counts {
  size_t send = 0, recv = 0, param = 0;
  // In place, the send / receive buffer starts this many elements times the
  // rank into the receive buffer (AllGather/Gather / ReduceScatter/Scatter).
  size_t send_inplace_offset = 0, recv_inplace_offset = 0;
};

struct Benchmark {
  std::string name;      // "AllReduce"
  bool reduces = false;  // has a redop column (-o applies)
  bool rooted = false;   // has a root column (-r applies)
  double (*bus_factor)(int nranks);
  Counts (*counts)(size_t count, size_t elt_size, int nranks);
  ncclResult_t (*run)(const Call& call);
  // Expected bits of receive element `index` on `rank`, or false where the
  // element is not defined (non-root ranks of Reduce and Gather).
  bool (*expected)(int rank, int nranks, int root, size_t param_count, size_t index, const Data& data,
                   uint64_t* bits);
  // A redop column and -o loop without a reduction (nccl-tests' sendrecv
  // prints the op and runs every -o op, moving the same bytes).
  bool names_ops = false;
  // False where nccl-tests leaves the in-place result unchecked (N/A).
  bool checks_in_place = true;
  // Optional: refuses the run (false, with `error`) once the rank count is known.
  bool (*validate)(size_t min_bytes, size_t max_bytes, int nranks, std::string* error) = nullptr;
  // Optional: lines printed before a row, per placement, given its time.
  std::string (*row_note)(int nranks, size_t elt_size, size_t param_count, double seconds) = nullptr;
};

// Runs the tool: parses argv like nccl-tests, prints the table, returns the
// process exit code (non-zero on wrong data or errors).  `mpi_peer`: the
// tool times an MPI collective instead (bench.run gets comm = nullptr).
int perf_main(int argc, char** argv, const Benchmark& bench, bool mpi_peer = false);

}  // namespace perf

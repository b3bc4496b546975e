// OpenMPI's collectives timed by the same harness, flags and table as
// braid's *_perf tools: the peers perf/compare measures braid against.
//
// One source, one executable per collective (CMake defines
// BRAID_PEER_COLL): mpi_allreduce_perf, mpi_all_gather_perf,
// mpi_reduce_scatter_perf, mpi_broadcast_perf, mpi_alltoall_perf.  Where
// NCCL's buffer convention differs from MPI's, the adaptation is the
// cheapest faithful one and is named below (it is part of what is timed).
#include <mpi.h>

#include <cstring>
#include <vector>

#include "perf/benchmarks.h"

namespace {

MPI_Datatype mpi_type(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return MPI_INT8_T;
    case ncclUint8: return MPI_UINT8_T;
    case ncclInt32: return MPI_INT32_T;
    case ncclUint32: return MPI_UINT32_T;
    case ncclInt64: return MPI_INT64_T;
    case ncclUint64: return MPI_UINT64_T;
    case ncclFloat64: return MPI_DOUBLE;
    default: return MPI_FLOAT;
  }
}

size_t type_bytes(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 4;
  }
}

MPI_Op mpi_op(ncclRedOp_t op) {
  switch (op) {
    case ncclProd: return MPI_PROD;
    case ncclMax: return MPI_MAX;
    case ncclMin: return MPI_MIN;
    default: return MPI_SUM;
  }
}

ncclResult_t result(int rc) { return rc == MPI_SUCCESS ? ncclSuccess : ncclSystemError; }

ncclResult_t run_allreduce(const perf::Call& c) {
  const void* send = c.send == c.recv ? MPI_IN_PLACE : c.send;
  return result(MPI_Allreduce(send, c.recv, int(c.count), mpi_type(c.type), mpi_op(c.op), MPI_COMM_WORLD));
}

// In place, NCCL's send block is recv + rank * count: MPI_IN_PLACE.
ncclResult_t run_all_gather(const perf::Call& c) {
  const bool in_place = c.send == static_cast<char*>(c.recv) + size_t(c.rank) * c.count * type_bytes(c.type);
  const void* send = in_place ? MPI_IN_PLACE : c.send;
  return result(MPI_Allgather(send, int(c.count), mpi_type(c.type), c.recv, int(c.count), mpi_type(c.type),
                              MPI_COMM_WORLD));
}

// In place, NCCL's result lands at send + rank * count, MPI's at the start:
// one extra move of count elements.
ncclResult_t run_reduce_scatter(const perf::Call& c) {
  const size_t block = c.count * type_bytes(c.type);
  char* send = const_cast<char*>(static_cast<const char*>(c.send));
  if (static_cast<char*>(c.recv) != send + size_t(c.rank) * block)
    return result(MPI_Reduce_scatter_block(c.send, c.recv, int(c.count), mpi_type(c.type), mpi_op(c.op),
                                           MPI_COMM_WORLD));
  int rc = MPI_Reduce_scatter_block(MPI_IN_PLACE, send, int(c.count), mpi_type(c.type), mpi_op(c.op), MPI_COMM_WORLD);
  if (c.rank != 0) std::memmove(c.recv, send, block);
  return result(rc);
}

// Out of place, the root copies its send buffer into its receive buffer first.
ncclResult_t run_broadcast(const perf::Call& c) {
  if (c.rank == c.root && c.send != c.recv) std::memcpy(c.recv, c.send, c.count * type_bytes(c.type));
  return result(MPI_Bcast(c.recv, int(c.count), mpi_type(c.type), c.root, MPI_COMM_WORLD));
}

ncclResult_t run_alltoall(const perf::Call& c) {
  const void* send = c.send == c.recv ? MPI_IN_PLACE : c.send;
  return result(MPI_Alltoall(send, int(c.count), mpi_type(c.type), c.recv, int(c.count), mpi_type(c.type),
                             MPI_COMM_WORLD));
}

}  // namespace

#define BRAID_STR2(x) #x
#define BRAID_STR(x) BRAID_STR2(x)

int main(int argc, char** argv) {
  const std::string coll = BRAID_STR(BRAID_PEER_COLL);
  perf::Benchmark bench;
  if (coll == "all_gather") {
    bench = perf::kAllGather;
    bench.name = "MPI_Allgather";
    bench.run = run_all_gather;
  } else if (coll == "reduce_scatter") {
    bench = perf::kReduceScatter;
    bench.name = "MPI_Reduce_scatter_block";
    bench.run = run_reduce_scatter;
  } else if (coll == "broadcast") {
    bench = perf::kBroadcast;
    bench.name = "MPI_Bcast";
    bench.run = run_broadcast;
  } else if (coll == "alltoall") {
    bench = perf::kAlltoAll;
    bench.name = "MPI_Alltoall";
    bench.run = run_alltoall;
  } else {
    bench = perf::kAllReduce;
    bench.name = "MPI_Allreduce";
    bench.run = run_allreduce;
  }
  return perf::perf_main(argc, argv, bench, /*mpi_peer=*/true);
}

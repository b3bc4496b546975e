// OpenMPI's MPI_Allreduce timed by the same harness, flags and table as
// all_reduce_perf: the peer that perf/compare measures braid against.
#include <mpi.h>

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

MPI_Op mpi_op(ncclRedOp_t op) {
  switch (op) {
    case ncclProd: return MPI_PROD;
    case ncclMax: return MPI_MAX;
    case ncclMin: return MPI_MIN;
    default: return MPI_SUM;
  }
}

ncclResult_t run_mpi_allreduce(const perf::Call& c) {
  const void* send = c.send == c.recv ? MPI_IN_PLACE : c.send;
  int rc = MPI_Allreduce(send, c.recv, int(c.count), mpi_type(c.type), mpi_op(c.op), MPI_COMM_WORLD);
  return rc == MPI_SUCCESS ? ncclSuccess : ncclSystemError;
}

}  // namespace

int main(int argc, char** argv) {
  perf::Benchmark bench = perf::kAllReduce;
  bench.name = "MPI_Allreduce";
  bench.run = run_mpi_allreduce;
  return perf::perf_main(argc, argv, bench, /*mpi_peer=*/true);
}

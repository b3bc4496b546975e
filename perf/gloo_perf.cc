// Gloo's collectives (Debian libgloo-dev, TCP transport: the one Gloo has
// for CPU tensors on one host) timed by the same harness, flags and table as
// braid's *_perf tools.  Launched by mpirun like the MPI peers; MPI only
// starts the processes and carries the rendezvous directory, every timed
// byte goes through Gloo.
//
// One source, one executable per collective (CMake defines
// BRAID_PEER_COLL): gloo_all_reduce_perf, gloo_all_gather_perf,
// gloo_broadcast_perf, gloo_alltoall_perf.  This Gloo version has no
// reduce-scatter in its options API, so there is no gloo_reduce_scatter_perf.
// Rendezvous: a FileStore in a fresh /tmp directory (removed at exit).
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>
#include <mpi.h>
#include <stdlib.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "perf/benchmarks.h"

namespace {

std::shared_ptr<gloo::rendezvous::Context> context;
std::string store_dir;
std::vector<char> staging;  // in-place alltoall: Gloo wants distinct buffers

// On the first call (every process makes it at the same point of the run).
std::shared_ptr<gloo::Context> gloo_context() {
  if (context) return context;
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  char dir[256] = {};
  if (rank == 0) {
    std::snprintf(dir, sizeof dir, "/tmp/braid-gloo-XXXXXX");
    if (!mkdtemp(dir)) dir[0] = '\0';
  }
  MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
  store_dir = dir;
  gloo::rendezvous::FileStore store(store_dir);
  gloo::transport::tcp::attr attr("127.0.0.1");
  auto device = gloo::transport::tcp::CreateDevice(attr);
  context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->connectFullMesh(store, device);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) std::atexit([] { std::filesystem::remove_all(store_dir); });
  return context;
}

size_t type_bytes(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 4;
  }
}

template <typename T>
gloo::AllreduceOptions::Func reduce_fn(ncclRedOp_t op) {
  using Fn = void (*)(void*, const void*, const void*, size_t);
  switch (op) {
    case ncclProd: return Fn(&gloo::product<T>);
    case ncclMax: return Fn(&gloo::max<T>);
    case ncclMin: return Fn(&gloo::min<T>);
    default: return Fn(&gloo::sum<T>);
  }
}

template <typename T>
ncclResult_t allreduce_as(const perf::Call& c) {
  gloo::AllreduceOptions opts(gloo_context());
  if (c.send != c.recv) opts.setInput(static_cast<T*>(const_cast<void*>(c.send)), c.count);
  opts.setOutput(static_cast<T*>(c.recv), c.count);
  opts.setReduceFunction(reduce_fn<T>(c.op));
  gloo::allreduce(opts);
  return ncclSuccess;
}

ncclResult_t run_all_reduce(const perf::Call& c) {
  switch (c.type) {
    case ncclInt8: return allreduce_as<int8_t>(c);
    case ncclUint8: return allreduce_as<uint8_t>(c);
    case ncclInt32: return allreduce_as<int32_t>(c);
    case ncclUint32: return allreduce_as<uint32_t>(c);
    case ncclInt64: return allreduce_as<int64_t>(c);
    case ncclUint64: return allreduce_as<uint64_t>(c);
    case ncclFloat64: return allreduce_as<double>(c);
    default: return allreduce_as<float>(c);
  }
}

// Copies move bytes: every datatype travels as char.
ncclResult_t run_all_gather(const perf::Call& c) {
  const size_t block = c.count * type_bytes(c.type);
  gloo::AllgatherOptions opts(gloo_context());
  char* recv = static_cast<char*>(c.recv);
  if (c.send != recv + size_t(c.rank) * block) opts.setInput(static_cast<char*>(const_cast<void*>(c.send)), block);
  opts.setOutput(recv, block * size_t(c.nranks));
  gloo::allgather(opts);
  return ncclSuccess;
}

ncclResult_t run_broadcast(const perf::Call& c) {
  const size_t bytes = c.count * type_bytes(c.type);
  gloo::BroadcastOptions opts(gloo_context());
  if (c.rank == c.root && c.send != c.recv) opts.setInput(static_cast<char*>(const_cast<void*>(c.send)), bytes);
  opts.setOutput(static_cast<char*>(c.recv), bytes);
  opts.setRoot(c.root);
  gloo::broadcast(opts);
  return ncclSuccess;
}

ncclResult_t run_alltoall(const perf::Call& c) {
  const size_t bytes = c.count * type_bytes(c.type) * size_t(c.nranks);
  const char* send = static_cast<const char*>(c.send);
  if (c.send == c.recv) {
    staging.assign(send, send + bytes);
    send = staging.data();
  }
  gloo::AlltoallOptions opts(gloo_context());
  opts.setInput(const_cast<char*>(send), bytes);
  opts.setOutput(static_cast<char*>(c.recv), bytes);
  gloo::alltoall(opts);
  return ncclSuccess;
}

// Gloo reports failures by throwing; the harness wants a code.
ncclResult_t guarded(ncclResult_t (*fn)(const perf::Call&), const perf::Call& c) {
  try {
    return fn(c);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo: %s\n", e.what());
    return ncclSystemError;
  }
}

ncclResult_t (*chosen)(const perf::Call&) = run_all_reduce;
// A zero-element call moves nothing (NCCL: success); Gloo divides by it.
ncclResult_t run_chosen(const perf::Call& c) { return c.count == 0 ? ncclSuccess : guarded(chosen, c); }

}  // namespace

#define BRAID_STR2(x) #x
#define BRAID_STR(x) BRAID_STR2(x)

int main(int argc, char** argv) {
  const std::string coll = BRAID_STR(BRAID_PEER_COLL);
  perf::Benchmark bench;
  if (coll == "all_gather") {
    bench = perf::kAllGather;
    chosen = run_all_gather;
  } else if (coll == "broadcast") {
    bench = perf::kBroadcast;
    chosen = run_broadcast;
  } else if (coll == "alltoall") {
    bench = perf::kAlltoAll;
    chosen = run_alltoall;
  } else {
    bench = perf::kAllReduce;
    chosen = run_all_reduce;
  }
  bench.name = "gloo::" + bench.name;
  bench.run = run_chosen;
  int rc = perf::perf_main(argc, argv, bench, /*mpi_peer=*/true);
  context.reset();  // before static destruction: Gloo's device threads
  return rc;
}

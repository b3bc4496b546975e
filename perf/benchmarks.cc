// What each collective sends, receives, and must produce.  Counts follow
// nccl-tests' getCollByteCount: the size column is the larger of the send
// and receive buffers, the count column the NCCL count argument.
#include "perf/benchmarks.h"

namespace perf {
namespace {

double one(int) { return 1; }
double all_reduce_factor(int n) { return 2.0 * (n - 1) / n; }
double spread_factor(int n) { return double(n - 1) / n; }

Counts same(size_t count, size_t, int) { return {count, count, count, 0, 0}; }
// A rank's block, as nccl-tests' getCollByteCount: count / nranks rounded
// down to a multiple of 16 bytes (so -b 1M on 3 ranks is 87380 floats a
// rank, 1048560 bytes in all).
size_t block(size_t count, size_t elt_size, int n) { return (count / size_t(n)) & ~(16 / elt_size - 1); }
Counts gathered(size_t count, size_t elt_size, int n) {
  const size_t per = block(count, elt_size, n);
  return {per, per * size_t(n), per, per, 0};
}
Counts scattered(size_t count, size_t elt_size, int n) {
  const size_t per = block(count, elt_size, n);
  return {per * size_t(n), per, per, 0, per};
}
Counts all_to_all(size_t count, size_t elt_size, int n) {
  const size_t per = block(count, elt_size, n);
  return {per * size_t(n), per * size_t(n), per, 0, 0};
}

bool all_reduce_expected(int, int, int, size_t, size_t i, const Data& d, uint64_t* v) {
  *v = d.reduced(i);
  return true;
}
bool reduce_expected(int rank, int, int root, size_t, size_t i, const Data& d, uint64_t* v) {
  *v = d.reduced(i);
  return rank == root;
}
bool reduce_scatter_expected(int rank, int, int, size_t count, size_t i, const Data& d, uint64_t* v) {
  *v = d.reduced(size_t(rank) * count + i);
  return true;
}
bool all_gather_expected(int, int, int, size_t count, size_t i, const Data& d, uint64_t* v) {
  *v = d.input(int(i / count), i % count);
  return true;
}
bool gather_expected(int rank, int, int root, size_t count, size_t i, const Data& d, uint64_t* v) {
  *v = d.input(int(i / count), i % count);
  return rank == root;
}
bool broadcast_expected(int, int, int root, size_t, size_t i, const Data& d, uint64_t* v) {
  *v = d.input(root, i);
  return true;
}
bool scatter_expected(int rank, int, int root, size_t count, size_t i, const Data& d, uint64_t* v) {
  *v = d.input(root, size_t(rank) * count + i);
  return true;
}
// Block b of rank r's output is block r of rank b's input.
bool alltoall_expected(int rank, int, int, size_t count, size_t i, const Data& d, uint64_t* v) {
  *v = d.input(int(i / count), size_t(rank) * count + i % count);
  return true;
}
bool sendrecv_expected(int rank, int n, int, size_t, size_t i, const Data& d, uint64_t* v) {
  *v = d.input((rank + n - 1) % n, i);
  return true;
}

ncclResult_t run_all_reduce(const Call& c) {
  return ncclAllReduce(c.send, c.recv, c.count, c.type, c.op, c.comm, c.stream);
}
ncclResult_t run_all_gather(const Call& c) { return ncclAllGather(c.send, c.recv, c.count, c.type, c.comm, c.stream); }
ncclResult_t run_reduce_scatter(const Call& c) {
  return ncclReduceScatter(c.send, c.recv, c.count, c.type, c.op, c.comm, c.stream);
}
ncclResult_t run_broadcast(const Call& c) {
  return ncclBroadcast(c.send, c.recv, c.count, c.type, c.root, c.comm, c.stream);
}
ncclResult_t run_reduce(const Call& c) {
  return ncclReduce(c.send, c.recv, c.count, c.type, c.op, c.root, c.comm, c.stream);
}
ncclResult_t run_alltoall(const Call& c) { return ncclAlltoAll(c.send, c.recv, c.count, c.type, c.comm, c.stream); }
ncclResult_t run_gather(const Call& c) {
  return ncclGather(c.send, c.recv, c.count, c.type, c.root, c.comm, c.stream);
}
ncclResult_t run_scatter(const Call& c) {
  return ncclScatter(c.send, c.recv, c.count, c.type, c.root, c.comm, c.stream);
}
// Each rank sends to the next and receives from the previous, in one group.
ncclResult_t run_sendrecv(const Call& c) {
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) return r;
  ncclResult_t s = ncclSend(c.send, c.count, c.type, (c.rank + 1) % c.nranks, c.comm, c.stream);
  ncclResult_t q = ncclRecv(c.recv, c.count, c.type, (c.rank + c.nranks - 1) % c.nranks, c.comm, c.stream);
  r = ncclGroupEnd();
  return s != ncclSuccess ? s : q != ncclSuccess ? q : r;
}

}  // namespace

const Benchmark kAllReduce{"AllReduce", true, false, all_reduce_factor, same, run_all_reduce, all_reduce_expected};
const Benchmark kAllGather{"AllGather", false, false, spread_factor, gathered, run_all_gather, all_gather_expected};
const Benchmark kReduceScatter{"ReduceScatter", true, false, spread_factor, scattered, run_reduce_scatter,
                               reduce_scatter_expected};
const Benchmark kBroadcast{"Broadcast", false, true, one, same, run_broadcast, broadcast_expected};
const Benchmark kReduce{"Reduce", true, true, one, same, run_reduce, reduce_expected};
const Benchmark kAlltoAll{"AlltoAll", false, false, spread_factor, all_to_all, run_alltoall, alltoall_expected};
const Benchmark kSendRecv{"SendRecv", false, false, one, same, run_sendrecv, sendrecv_expected, /*names_ops=*/true};
const Benchmark kGather{"Gather", false, true, spread_factor, gathered, run_gather, gather_expected};
const Benchmark kScatter{"Scatter", false, true, spread_factor, scattered, run_scatter, scatter_expected};

}  // namespace perf

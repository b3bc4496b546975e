// What each collective sends, receives, and must produce.  Indices: the
// receive buffer is `recv_blocks` blocks of `count` elements; input(r, i)
// is element i of rank r's send buffer.
#include "perf/benchmarks.h"

namespace perf {
namespace {

double one(int) { return 1; }
double all_reduce_factor(int n) { return n > 1 ? 2.0 * (n - 1) / n : 0; }
double spread_factor(int n) { return n > 1 ? double(n - 1) / n : 0; }

Shape same(int) { return {1, 1, false, false}; }
Shape gathered(int n) { return {1, size_t(n), false, true}; }
Shape scattered(int n) { return {size_t(n), 1, true, false}; }
Shape all_blocks(int n) { return {size_t(n), size_t(n), false, false}; }

using Input = std::function<double(int, size_t)>;

bool all_reduce_expected(int, int n, int, size_t, size_t i, ncclRedOp_t op, const Input& in, double* v) {
  *v = reduce_over_ranks(n, op, [&](int k) { return in(k, i); });
  return true;
}
bool reduce_expected(int rank, int n, int root, size_t count, size_t i, ncclRedOp_t op, const Input& in, double* v) {
  return rank == root && all_reduce_expected(rank, n, root, count, i, op, in, v);
}
bool reduce_scatter_expected(int rank, int n, int, size_t count, size_t i, ncclRedOp_t op, const Input& in,
                             double* v) {
  *v = reduce_over_ranks(n, op, [&](int k) { return in(k, size_t(rank) * count + i); });
  return true;
}
bool all_gather_expected(int, int, int, size_t count, size_t i, ncclRedOp_t, const Input& in, double* v) {
  *v = in(int(i / count), i % count);
  return true;
}
bool gather_expected(int rank, int n, int root, size_t count, size_t i, ncclRedOp_t op, const Input& in, double* v) {
  return rank == root && all_gather_expected(rank, n, root, count, i, op, in, v);
}
bool broadcast_expected(int, int, int root, size_t, size_t i, ncclRedOp_t, const Input& in, double* v) {
  *v = in(root, i);
  return true;
}
bool scatter_expected(int rank, int, int root, size_t count, size_t i, ncclRedOp_t, const Input& in, double* v) {
  *v = in(root, size_t(rank) * count + i);
  return true;
}
bool alltoall_expected(int rank, int, int, size_t count, size_t i, ncclRedOp_t, const Input& in, double* v) {
  *v = in(int(i / count), size_t(rank) * count + i % count);  // block b came from rank b
  return true;
}
bool sendrecv_expected(int rank, int n, int, size_t, size_t i, ncclRedOp_t, const Input& in, double* v) {
  *v = in((rank + n - 1) % n, i);
  return true;
}

ncclResult_t run_all_reduce(const Call& c) {
  return ncclAllReduce(c.send, c.recv, c.count, c.type, c.op, c.comm, nullptr);
}
ncclResult_t run_all_gather(const Call& c) { return ncclAllGather(c.send, c.recv, c.count, c.type, c.comm, nullptr); }
ncclResult_t run_reduce_scatter(const Call& c) {
  return ncclReduceScatter(c.send, c.recv, c.count, c.type, c.op, c.comm, nullptr);
}
ncclResult_t run_broadcast(const Call& c) {
  return ncclBroadcast(c.send, c.recv, c.count, c.type, c.root, c.comm, nullptr);
}
ncclResult_t run_reduce(const Call& c) {
  return ncclReduce(c.send, c.recv, c.count, c.type, c.op, c.root, c.comm, nullptr);
}
ncclResult_t run_alltoall(const Call& c) { return ncclAlltoAll(c.send, c.recv, c.count, c.type, c.comm, nullptr); }
ncclResult_t run_gather(const Call& c) {
  return ncclGather(c.send, c.recv, c.count, c.type, c.root, c.comm, nullptr);
}
ncclResult_t run_scatter(const Call& c) {
  return ncclScatter(c.send, c.recv, c.count, c.type, c.root, c.comm, nullptr);
}
// Each rank sends to the next and receives from the previous, in one group.
ncclResult_t run_sendrecv(const Call& c) {
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) return r;
  ncclResult_t s = ncclSend(c.send, c.count, c.type, (c.rank + 1) % c.nranks, c.comm, nullptr);
  ncclResult_t q = ncclRecv(c.recv, c.count, c.type, (c.rank + c.nranks - 1) % c.nranks, c.comm, nullptr);
  r = ncclGroupEnd();
  return s != ncclSuccess ? s : q != ncclSuccess ? q : r;
}

}  // namespace

const Benchmark kAllReduce{"AllReduce", true, false, 1, all_reduce_factor, same, run_all_reduce, all_reduce_expected};
const Benchmark kAllGather{"AllGather", false, false, 0, spread_factor, gathered, run_all_gather, all_gather_expected};
const Benchmark kReduceScatter{"ReduceScatter", true, false, 0, spread_factor, scattered, run_reduce_scatter,
                               reduce_scatter_expected};
const Benchmark kBroadcast{"Broadcast", false, true, 1, one, same, run_broadcast, broadcast_expected};
const Benchmark kReduce{"Reduce", true, true, 1, one, same, run_reduce, reduce_expected};
const Benchmark kAlltoAll{"AlltoAll", false, false, 0, spread_factor, all_blocks, run_alltoall, alltoall_expected};
const Benchmark kSendRecv{"SendRecv", false, false, 1, one, same, run_sendrecv, sendrecv_expected};
const Benchmark kGather{"Gather", false, true, 0, spread_factor, gathered, run_gather, gather_expected};
const Benchmark kScatter{"Scatter", false, true, 0, spread_factor, scattered, run_scatter, scatter_expected};

}  // namespace perf

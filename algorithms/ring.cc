// Ring algorithms: bandwidth-optimal for large messages.
//
// Ranks form the ring r -> r+1.  AllReduce is a reduce-scatter followed by an
// allgather over n chunks: each rank sends (n-1) chunks to reduce and (n-1)
// to distribute, so every link carries 2(n-1)/n of the data.  AllGather and
// ReduceScatter are the two halves on their own.  Each step is one fused op
// (recv, reduce, forward), so a chunk flows around the ring without waiting
// for the whole buffer, and the executor's tiling pipelines large chunks.
//
// Cost for an m-byte buffer: AllReduce 2(n-1)(alpha + beta*m/n); AllGather and
// ReduceScatter (n-1)(alpha + beta*m/n), m the gathered size.  Any n >= 1.
//
// In place, input chunk k aliases output chunk k (AllReduce) or output is
// input block `rank` (ReduceScatter) / input is output block `rank`
// (AllGather); every input chunk is read before its alias is written.
#include "algorithms/builder.h"
#include "braid/algorithms.h"

namespace braid {

Schedule ring_allreduce(int n) {
  ScheduleBuilder b("ring_allreduce", Collective::AllReduce, n, -1, n, n);
  for (int r = 0; r < n; ++r) {
    const int next = mod(r + 1, n), prev = mod(r - 1, n);
    if (n == 1) {
      b.copy(r, in(0), out(0));
      continue;
    }
    // Reduce-scatter: after n-1 steps rank r owns the full sum of chunk r+1.
    b.send(r, next, in(r));
    for (int s = 0; s < n - 2; ++s) b.recv_reduce_send(r, prev, in(mod(r - s - 1, n)), next);
    b.recv_reduce_copy_send(r, prev, in(next), out(next), next);
    // Allgather: pass finished chunks along; the last one just lands.
    for (int t = 0; t < n - 2; ++t) b.recv_copy_send(r, prev, out(mod(r - t, n)), next);
    b.recv(r, prev, out(mod(r + 2, n)));
  }
  return b.take();
}

Schedule ring_allgather(int n) {
  ScheduleBuilder b("ring_allgather", Collective::AllGather, n, -1, 1, n);
  for (int r = 0; r < n; ++r) {
    const int next = mod(r + 1, n), prev = mod(r - 1, n);
    b.copy(r, in(0), out(r));
    if (n == 1) continue;
    // From the input, which the copy just read into cache; the output block
    // may have been written around the cache (large outputs stream).
    b.send(r, next, in(0));
    for (int t = 0; t < n - 2; ++t) b.recv_copy_send(r, prev, out(mod(r - 1 - t, n)), next);
    b.recv(r, prev, out(next));
  }
  return b.take();
}

Schedule ring_reducescatter(int n) {
  ScheduleBuilder b("ring_reducescatter", Collective::ReduceScatter, n, -1, n, 1);
  for (int r = 0; r < n; ++r) {
    const int next = mod(r + 1, n), prev = mod(r - 1, n);
    if (n == 1) {
      b.copy(r, in(0), out(0));
      continue;
    }
    // Chunk r-1 starts here and, n-1 hops later, ends fully reduced at rank r-1.
    b.send(r, next, in(prev));
    for (int s = 0; s < n - 2; ++s) b.recv_reduce_send(r, prev, in(mod(r - s - 2, n)), next);
    b.recv_reduce_copy(r, prev, in(r), out(0));
  }
  return b.take();
}

}  // namespace braid

// The nine nccl-tests collectives as Benchmarks (see harness.h).
#pragma once

#include "perf/harness.h"

namespace perf {

extern const Benchmark kAllReduce, kAllGather, kReduceScatter, kBroadcast, kReduce, kAlltoAll, kSendRecv,
    kGather, kScatter;

}  // namespace perf

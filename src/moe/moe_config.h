// A MoE handle's config (braid/moe.h): checked on every rank, turned into
// the protocol's Shape, and agreed on by all ranks before any memory is
// taken, for the host and the CUDA handle alike.
#pragma once

#include <string>
#include <vector>

#include "braid/moe.h"
#include "braid/moe/layout.h"
#include "nccl.h"
#include "src/base/status.h"

namespace braid::moe {

// The caller's config, whole: one from a client built before zeroCopy
// existed (its size ends before that field) reads as zeroCopy = 0.  Reads
// no more than config.size bytes of it.
braidMoeConfig_t complete_config(const braidMoeConfig_t* config);

// Collective over comm's ranks.  Every rank takes part even with a bad
// config, so that all fail alike instead of some waiting for the others;
// then *shape is the agreed shape.  `device`: comm's CUDA device, or -1.
Status agree_config(ncclComm_t comm, const braidMoeConfig_t& config, int device, Shape* shape);

// braidMoeGetDispatchBuffer / braidMoeGetCombineBuffer: *out = base +
// offset, or an error naming the config flag where the handle has no such
// buffer (offset 0).
Status zero_copy_buffer(char* base, uint64_t offset, const char* function, const char* flag, void** out);

// What is wrong with a dispatch's or a combine's arguments, or "" (both
// backends refuse the same; the call then still takes part, calls.h).
// `tokens`: the last dispatch's, for a combine.
std::string dispatch_problem(const Shape& s, const void* tokens, const int32_t* topk, int32_t ntokens,
                             const void* out, const int32_t* recv_counts);
std::string combine_problem(int32_t tokens, const void* expert_out, const float* weights, const void* out);

// The bound of every wait of a handle (MoE, AlltoAllv): its timeoutMs, or
// BRAID_TIMEOUT where that is 0.
int wait_bound_ms(int timeout_ms);

// An AllGather of `count` int64 words per rank, on the host (the
// communicator's bootstrap, src/shim/host_exchange.h: no device work, on a
// CUDA communicator too).  Collective.
Status all_gather_words(ncclComm_t comm, const int64_t* mine, int64_t* all, size_t count, const std::string& what);
// One word from every rank: (*all)[r] is rank r's.
Status gather_word(ncclComm_t comm, int64_t mine, std::vector<int64_t>* all, const std::string& what);

}  // namespace braid::moe

// The AlltoAllv whose counts live in memory (include/braid/alltoallv.h) on
// braid's host backend, over a window of its own (own_window.h): the same
// routes, memory model and signal words as MoE dispatch (stores into the
// windows a rank maps, one-sided RMA to the others).
//
// Every rank's window holds, per source rank, a count word and a data block
// of maxCountPerPeer elements, and per destination rank an acknowledgement
// word (alltoallv_protocol.h, shared with the CUDA kernel).  One call, with
// epoch e:
//   1. wait until every destination acknowledged call e - 1 (it copied out
//      what this rank sent it, so its block may be written again);
//   2. read sendCounts; put each destination's elements into its block at
//      this rank's index, then the count word (e, count) after them;
//   3. wait for every source's count word of epoch e;
//   4. copy the blocks out back to back, write recvCounts;
//   5. acknowledge e to every source.
// Only counted elements move; each (sender, receiver) pair adds two words.
// A count out of range travels as a marker instead, so that every rank's
// call fails (each saying whose count it was) instead of waiting for data
// that never comes.  Such a call still exchanges every count word and
// acknowledgement, so the handle takes the next call; one that timed out
// (a peer late or gone) refuses further calls.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "nccl.h"
#include "src/base/deadline.h"
#include "src/base/status.h"
#include "src/moe/alltoallv_protocol.h"
#include "src/moe/own_window.h"

namespace braid::moe {

// What a braidAlltoAllv handle runs on: this host backend, or the CUDA
// kernel (cuda/cuda_alltoallv.h), picked by the communicator's device.
class AlltoAllvBackend {
 public:
  virtual ~AlltoAllvBackend() = default;
  virtual Status run(const void* send, const int64_t* send_counts, void* recv, int64_t* recv_counts,
                     cudaStream_t stream) = 0;
  virtual Status destroy() = 0;  // collective
  virtual Status async_error() { return Status::ok(); }
  virtual ncclComm_t comm() const = 0;
};

// Collective: checks the arguments on every rank and agrees on them (all
// ranks fail alike).
Status agree_alltoallv(ncclComm_t comm, ncclDataType_t type, size_t max_count, int timeout_ms);

class HostAlltoAllv : public AlltoAllvBackend {
 public:
  // Collective over comm's ranks.
  static Status create(ncclComm_t comm, ncclDataType_t type, size_t max_count, int timeout_ms,
                       std::unique_ptr<AlltoAllvBackend>* out);
  // Completes before it returns; the stream is not used.
  Status run(const void* send, const int64_t* send_counts, void* recv, int64_t* recv_counts,
             cudaStream_t stream) override;
  Status destroy() override;
  ncclComm_t comm() const override { return comm_; }

 private:
  HostAlltoAllv(ncclComm_t comm, int rank, int nranks, ncclDataType_t type, size_t max_count, int timeout_ms);
  // Waits until every rank's word at `offset` + 8 x rank in this rank's
  // window shows `epoch` (those over RMA first, by their `signal`).
  Status wait_words(uint64_t offset, int signal, uint32_t epoch, const char* what);

  const ncclComm_t comm_;
  const int rank_, nranks_;
  const int timeout_ms_;
  const AlltoAllvLayout window_;
  std::unique_ptr<OwnWindow> own_;
  uint32_t epoch_ = 0;  // the last call's
  bool failed_ = false;
  std::vector<int64_t> offsets_;
};

}  // namespace braid::moe

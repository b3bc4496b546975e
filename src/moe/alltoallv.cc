#include "src/moe/alltoallv.h"

#include <cstring>
#include <string>

#include "braid/moe/signal.h"
#include "src/moe/host_memory.h"
#include "src/moe/moe_config.h"
#include "src/moe/nccl_call.h"
#include "src/ops/datatype.h"
#include "src/shim/library_use.h"

namespace braid::moe {

namespace {

constexpr size_t kMaxCount = size_t(1) << 31;

}  // namespace

HostAlltoAllv::HostAlltoAllv(ncclComm_t comm, int rank, int nranks, ncclDataType_t type, size_t max_count,
                             int timeout_ms)
    : comm_(comm),
      rank_(rank),
      nranks_(nranks),
      timeout_ms_(wait_bound_ms(timeout_ms)),
      window_(AlltoAllvLayout::of(nranks, datatype_size(type), max_count)),
      offsets_(size_t(nranks) + 1) {}

Status agree_alltoallv(ncclComm_t comm, ncclDataType_t type, size_t max_count, int timeout_ms) {
  int nranks = 0, rank = 0;
  BRAID_TRY(nccl_status(comm, ncclCommCount(comm, &nranks), "ncclCommCount"));
  BRAID_TRY(nccl_status(comm, ncclCommUserRank(comm, &rank), "ncclCommUserRank"));
  std::string problem;
  if (datatype_size(type) == 0)
    problem = fmt::format("datatype {} is not an NCCL datatype", int(type));
  else if (max_count == 0 || max_count >= kMaxCount)
    problem = fmt::format("maxCountPerPeer {} is not in [1, 2^31)", max_count);
  else if (timeout_ms < 0)
    problem = fmt::format("timeoutMs {} is negative", timeout_ms);
  else if (double(nranks) * double(max_count) * double(datatype_size(type)) > double(int64_t(1) << 46))
    problem = fmt::format("the window would take {} x {} elements", nranks, max_count);
  // Every rank takes part in the agreement, so that all fail alike.
  int64_t mine[3] = {problem.empty(), int64_t(type), int64_t(max_count)};
  std::vector<int64_t> all(size_t(3) * nranks);
  BRAID_TRY(all_gather_words(comm, mine, all.data(), 3, "the arguments' agreement"));
  if (!problem.empty()) return BRAID_ERROR(ncclInvalidArgument, "braidAlltoAllvCreate: {}", problem);
  for (int r = 0; r < nranks; ++r) {
    const int64_t* theirs = &all[size_t(r) * 3];
    if (!theirs[0])
      return BRAID_ERROR(ncclInvalidArgument,
                         "braidAlltoAllvCreate: rank {}'s arguments are invalid (its error says why)", r);
    if (theirs[1] != mine[1] || theirs[2] != mine[2])
      return BRAID_ERROR(ncclInvalidArgument,
                         "braidAlltoAllvCreate: rank {} has datatype {} and maxCountPerPeer {}, rank {} has {} and {}",
                         r, theirs[1], theirs[2], rank, mine[1], mine[2]);
  }
  return Status::ok();
}

Status HostAlltoAllv::create(ncclComm_t comm, ncclDataType_t type, size_t max_count, int timeout_ms,
                             std::unique_ptr<AlltoAllvBackend>* out) {
  int rank = 0, nranks = 0;
  BRAID_TRY(nccl_status(comm, ncclCommCount(comm, &nranks), "ncclCommCount"));
  BRAID_TRY(nccl_status(comm, ncclCommUserRank(comm, &rank), "ncclCommUserRank"));
  BRAID_TRY(agree_alltoallv(comm, type, max_count, timeout_ms));
  std::unique_ptr<HostAlltoAllv> a(new HostAlltoAllv(comm, rank, nranks, type, max_count, timeout_ms));
  BRAID_TRY(OwnWindow::open(comm, a->window_.bytes, a->window_.data, "AlltoAllv", &a->own_));
  *out = std::move(a);
  return Status::ok();
}

Status HostAlltoAllv::destroy() {
  if (!own_) return Status::ok();
  Status s = own_->close(comm_);
  own_.reset();
  return std::move(s).context("braidAlltoAllvDestroy");
}

Status HostAlltoAllv::wait_words(uint64_t offset, int signal, uint32_t epoch, const char* what) {
  const Deadline deadline = Deadline::after(std::chrono::milliseconds(timeout_ms_));
  Status rma = own_->routes().wait_from_rma_sources(signal, 1, deadline, comm_);
  if (!rma.is_ok() && comm_stopping(comm_)) return stopped_error("braidAlltoAllv");
  if (!rma.is_ok())
    return BRAID_ERROR(rma.code(),
                       "rank {}: call {}: waiting for the {} of the ranks reached over RMA (bound {} ms): {}", rank_,
                       epoch, what, timeout_ms_, rma.message());
  HostMemory mm(rank_, &own_->routes());
  const auto* words = reinterpret_cast<const uint64_t*>(own_->base(rank_) + offset);
  for (int i = 0; i < nranks_; ++i) {
    const int r = (rank_ + i) % nranks_;
    while (!epoch_reached(signal_epoch(mm.load(&words[r])), epoch)) {
      // An abort or revoke ends the wait too (as host_moe.cc's).
      if (comm_stopping(comm_)) return stopped_error("braidAlltoAllv");
      if (deadline.expired())
        return BRAID_ERROR(ncclTimeout,
                           "rank {}: call {}: no {} from rank {} within {} ms (the rank is late, gone, or "
                           "failed its call)",
                           rank_, epoch, what, r, timeout_ms_);
      mm.pause();
    }
    mm.progressed();
  }
  return Status::ok();
}

Status HostAlltoAllv::run(const void* send, const int64_t* send_counts, void* recv, int64_t* recv_counts,
                         cudaStream_t) {
  BRAID_TRY(check_outside_group("braidAlltoAllv"));
  if (failed_)
    return BRAID_ERROR(ncclInvalidUsage, "braidAlltoAllv: an earlier call of this handle did not complete (a peer "
                       "late or gone); destroy it");
  // Checked first: a bad argument fails this rank's call and, through the
  // marker it sends instead of data, every peer's (none waits in vain).
  std::string problem;
  const int32_t bad_dest = send_counts ? send_offsets(send_counts, nranks_, window_.max_count, offsets_.data()) : -1;
  if (bad_dest >= 0)
    problem = fmt::format("sendCounts[{}] = {} is not in [0, maxCountPerPeer = {}]", bad_dest, send_counts[bad_dest],
                          window_.max_count);
  if (!send_counts || !recv_counts)
    problem = "sendCounts or recvCounts is NULL";
  else if (problem.empty() && offsets_[size_t(nranks_)] > 0 && !send)
    problem = fmt::format("sendbuff is NULL with {} elements to send", offsets_[size_t(nranks_)]);
  else if (problem.empty() && !recv)
    problem = "recvbuff is NULL";
  const bool bad = !problem.empty();

  const uint32_t epoch = next_epoch(epoch_);
  failed_ = true;  // until this call has done its part of the protocol
  if (epoch_ != 0) BRAID_TRY(wait_words(window_.acks, WindowRoutes::kAckSignal, epoch_, "acknowledgement"));
  epoch_ = epoch;

  WindowRoutes& routes = own_->routes();
  HostMemory mm(rank_, &routes);
  alltoallv_send(mm, window_, rank_, static_cast<const char*>(send), offsets_.data(), bad, epoch, 0, 1);
  BRAID_TRY(std::move(routes.failure()).context(fmt::format("rank {}: braidAlltoAllv", rank_)));

  // A failed call (this rank's arguments, or a peer's) still waits for
  // every count word and acknowledges every source, so the next call finds
  // the protocol in step: the handle goes on.
  BRAID_TRY(wait_words(window_.counts, WindowRoutes::kWordSignal, epoch, "count"));
  const auto* words = reinterpret_cast<const uint64_t*>(own_->base(rank_) + window_.counts);
  int failed_sender = -1;
  for (int s = 0; s < nranks_ && failed_sender < 0; ++s)
    if (signal_count(mm.load(&words[s])) == kFailedSender) failed_sender = s;
  char* out = static_cast<char*>(recv);
  for (int s = 0; s < nranks_ && !bad && failed_sender < 0; ++s) {
    const uint32_t count = signal_count(mm.load(&words[s]));
    std::memcpy(out, own_->base(rank_) + window_.block(s), size_t(count) * window_.elem_bytes);
    out += size_t(count) * window_.elem_bytes;
    recv_counts[s] = int64_t(count);
  }

  if ((bad || failed_sender >= 0) && recv_counts)  // nothing was received
    for (int s = 0; s < nranks_; ++s) recv_counts[s] = 0;

  HostMemory acks(rank_, &routes, WindowRoutes::kAckSignal);
  alltoallv_ack(acks, window_, rank_, epoch);
  BRAID_TRY(std::move(routes.failure()).context(fmt::format("rank {}: braidAlltoAllv", rank_)));
  failed_ = false;
  if (bad)
    return BRAID_ERROR(ncclInvalidArgument, "braidAlltoAllv: {} (the call fails on every rank; the handle goes on)",
                       problem);
  if (failed_sender >= 0)
    return BRAID_ERROR(ncclRemoteError, "braidAlltoAllv: rank {} passed bad arguments (its error says which); the "
                       "call fails on every rank, and the handle goes on", failed_sender);
  return Status::ok();
}

}  // namespace braid::moe

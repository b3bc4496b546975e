#include "src/exec/host_staged.h"

#include <algorithm>

#include "braid/chunking.h"
#include "src/ops/datatype.h"

namespace braid {

HostStagedBackend::~HostStagedBackend() {
  if (staging_) memory_->host_free(staging_);
}

GroupRunner HostStagedBackend::group_runner() const { return run_host_staged; }

Status HostStagedBackend::reserve(size_t bytes, char** out) {
  if (bytes > capacity_) {
    size_t size = std::max(bytes, 2 * capacity_);
    if (staging_) memory_->host_free(staging_);
    staging_ = static_cast<char*>(memory_->host_alloc(size));
    capacity_ = staging_ ? size : 0;
    if (!staging_) return BRAID_ERROR(ncclSystemError, "cannot allocate {} bytes of host staging memory", size);
  }
  *out = staging_;
  return Status::ok();
}

namespace {

HostStagedBackend& staged(const CommWork& w) { return static_cast<HostStagedBackend&>(*w.backend); }

// One device buffer of the group and where its host copy goes.
struct Piece {
  HostStagedBackend* backend;
  void* device;
  size_t bytes;
  void* stream;
  bool input;  // copied in before the work (else out after it)
  // The call's pointer, redirected to the host copy (one of the two).
  const void** const_field = nullptr;
  void** field = nullptr;
  char* host = nullptr;
};

constexpr size_t align_up(size_t n) { return (n + 63) & ~size_t(63); }

// Checks every buffer, then carves each communicator's staging memory.
Status place(std::vector<Piece>& pieces) {
  std::vector<std::pair<HostStagedBackend*, size_t>> totals;  // bytes per communicator
  for (Piece& p : pieces) {
    DeviceMemory& memory = p.backend->memory();
    BRAID_TRY(memory.check(p.device, p.input ? "sendbuff" : "recvbuff"));
    BRAID_TRY(memory.check_not_capturing(p.stream));
    auto it = std::find_if(totals.begin(), totals.end(), [&](auto& t) { return t.first == p.backend; });
    if (it == totals.end()) it = totals.insert(totals.end(), {p.backend, 0});
    it->second += align_up(p.bytes);
  }
  for (auto& [backend, bytes] : totals) {
    char* base = nullptr;
    BRAID_TRY(backend->reserve(bytes, &base));
    for (Piece& p : pieces)
      if (p.backend == backend) {
        p.host = base;
        if (p.field) *p.field = base;
        else *p.const_field = base;
        base += align_up(p.bytes);
      }
  }
  return Status::ok();
}

// Waits for every stream the group used, once each.
Status wait_streams(const std::vector<Piece>& pieces) {
  std::vector<std::pair<DeviceMemory*, void*>> done;
  for (const Piece& p : pieces) {
    std::pair<DeviceMemory*, void*> key{&p.backend->memory(), p.stream};
    if (std::find(done.begin(), done.end(), key) != done.end()) continue;
    BRAID_TRY(key.first->wait(key.second));
    done.push_back(key);
  }
  return Status::ok();
}

// A PreMulSum scalar in device memory is read with the inputs; the op then
// carries it by value.
Status stage_scalar(DeviceMemory& memory, CollectiveCall& c) {
  PreMulSumOp& op = c.reduction.scalar;
  if (!c.reduction.premul || op.residence != ncclScalarDevice) return Status::ok();
  BRAID_TRY(memory.check(op.pointer, "PreMulSum scalar"));
  BRAID_TRY(memory.to_host(&op.immediate, op.pointer, datatype_size(op.type), c.stream));
  op.residence = ncclScalarHostImmediate;
  op.pointer = nullptr;
  return Status::ok();
}

}  // namespace

Status run_host_staged(std::span<CommWork> work) {
  // The host backends' work: the same calls, on host copies of the buffers.
  std::vector<CommWork> on_host;
  // (No RMA: a staged backend has none, so its calls were refused at the API.)
  for (CommWork& w : work) on_host.push_back(CommWork{&staged(w).host(), w.collectives, w.p2ps, {}});
  std::vector<Piece> pieces;
  for (size_t i = 0; i < work.size(); ++i) {
    HostStagedBackend* backend = &staged(work[i]);
    const TransportContext& comm = backend->host().context().comm;
    for (CollectiveCall& c : on_host[i].collectives) {
      const size_t block = c.count * datatype_size(c.type);
      if (has_input(c, comm.rank))
        pieces.push_back({backend, const_cast<void*>(c.sendbuff), input_blocks(c.collective, comm.nranks) * block,
                          c.stream, true, &c.sendbuff, nullptr});
      if (has_output(c, comm.rank))
        pieces.push_back({backend, c.recvbuff, output_blocks(c.collective, comm.nranks) * block, c.stream, false,
                          nullptr, &c.recvbuff});
    }
    for (P2PCall& p : on_host[i].p2ps)
      pieces.push_back({backend, p.buffer, p.count * datatype_size(p.type), p.stream, p.is_send, nullptr, &p.buffer});
  }
  BRAID_TRY(place(pieces));
  for (const Piece& p : pieces)
    if (p.input) BRAID_TRY(p.backend->memory().to_host(p.host, p.device, p.bytes, p.stream));
  for (size_t i = 0; i < work.size(); ++i)
    for (CollectiveCall& c : on_host[i].collectives) BRAID_TRY(stage_scalar(staged(work[i]).memory(), c));
  // Inputs on the host, and the streams' earlier work done, before any byte moves.
  BRAID_TRY(wait_streams(pieces));
  BRAID_TRY(run_host_group(on_host));
  for (const Piece& p : pieces)
    if (!p.input) BRAID_TRY(p.backend->memory().to_device(p.device, p.host, p.bytes, p.stream));
  // Outputs on the device when the call returns; the staging memory is free again.
  return wait_streams(pieces);
}

}  // namespace braid

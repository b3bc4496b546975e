#include "src/exec/host_staged.h"

#include <algorithm>

#include "braid/chunking.h"
#include "src/runtime/comm.h"
#include "src/ops/datatype.h"

namespace braid {

HostStagedBackend::~HostStagedBackend() {
  if (staging_) memory_->host_free(staging_);
}

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

Status HostStagedBackend::collective(const CollectiveCall& call, const std::shared_ptr<const Schedule>&) {
  return run_host_staged({call}, {});
}

Status HostStagedBackend::p2p(const std::vector<P2PCall>& calls) { return run_host_staged({}, calls); }

namespace {

HostStagedBackend& backend_of(ncclComm* comm) { return *comm->device->host_staged(); }

// One device buffer of the group and where its host copy goes.
struct Piece {
  ncclComm* comm;
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
  std::vector<std::pair<ncclComm*, size_t>> totals;  // bytes per communicator
  for (Piece& p : pieces) {
    DeviceMemory& memory = backend_of(p.comm).memory();
    BRAID_TRY(memory.check(p.device, p.input ? "sendbuff" : "recvbuff"));
    BRAID_TRY(memory.check_not_capturing(p.stream));
    auto it = std::find_if(totals.begin(), totals.end(), [&](auto& t) { return t.first == p.comm; });
    if (it == totals.end()) it = totals.insert(totals.end(), {p.comm, 0});
    it->second += align_up(p.bytes);
  }
  for (auto& [comm, bytes] : totals) {
    char* base = nullptr;
    BRAID_TRY(backend_of(comm).reserve(bytes, &base));
    for (Piece& p : pieces)
      if (p.comm == comm) {
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
    std::pair<DeviceMemory*, void*> key{&backend_of(p.comm).memory(), p.stream};
    if (std::find(done.begin(), done.end(), key) != done.end()) continue;
    BRAID_TRY(key.first->wait(key.second));
    done.push_back(key);
  }
  return Status::ok();
}

// A PreMulSum scalar in device memory is read with the inputs; the op then
// carries it by value.
Status stage_scalar(CollectiveCall& c) {
  if (!c.has_premul || c.premul.residence != ncclScalarDevice) return Status::ok();
  DeviceMemory& memory = backend_of(c.comm).memory();
  BRAID_TRY(memory.check(c.premul.pointer, "PreMulSum scalar"));
  BRAID_TRY(memory.to_host(&c.premul.immediate, c.premul.pointer, datatype_size(c.premul.type), c.stream));
  c.premul.residence = ncclScalarHostImmediate;
  c.premul.pointer = nullptr;
  return Status::ok();
}

}  // namespace

Status run_host_staged(std::vector<CollectiveCall> collectives, std::vector<P2PCall> p2ps) {
  std::vector<Piece> pieces;
  for (CollectiveCall& c : collectives) {
    const size_t esize = datatype_size(c.type);
    const int n = c.comm->nranks;
    if (has_input(c))
      pieces.push_back({c.comm, const_cast<void*>(c.sendbuff), input_blocks(c.collective, n) * c.count * esize,
                        c.stream, true, &c.sendbuff, nullptr});
    if (has_output(c))
      pieces.push_back({c.comm, c.recvbuff, output_blocks(c.collective, n) * c.count * esize, c.stream, false,
                        nullptr, &c.recvbuff});
  }
  for (P2PCall& p : p2ps)
    pieces.push_back({p.comm, p.buffer, p.count * datatype_size(p.type), p.stream, p.is_send,
                      nullptr, &p.buffer});
  BRAID_TRY(place(pieces));
  for (const Piece& p : pieces)
    if (p.input) BRAID_TRY(backend_of(p.comm).memory().to_host(p.host, p.device, p.bytes, p.stream));
  for (CollectiveCall& c : collectives) BRAID_TRY(stage_scalar(c));
  // Inputs on the host, and the streams' earlier work done, before any byte moves.
  BRAID_TRY(wait_streams(pieces));
  BRAID_TRY(run_host_work(std::move(collectives), std::move(p2ps)));
  for (const Piece& p : pieces)
    if (!p.input) BRAID_TRY(backend_of(p.comm).memory().to_device(p.device, p.host, p.bytes, p.stream));
  // Outputs on the device when the call returns; the staging memory is free again.
  return wait_streams(pieces);
}

}  // namespace braid

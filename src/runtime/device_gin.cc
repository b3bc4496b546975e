#include "src/runtime/device_gin.h"

#include <vector>

namespace braid {
namespace {

namespace v = devapi::v22809;

uint64_t align8(uint64_t x) { return (x + 7) / 8 * 8; }

}  // namespace

Status DeviceGin::create(LsaSpace& space, void* signal_memory, uint32_t signals, uint32_t counters,
                         uint32_t queue_size, std::unique_ptr<DeviceGin>* out) {
  const devapi::LsaShape& lsa = space.lsa();
  std::unique_ptr<DeviceGin> gin(new DeviceGin(space.memory()));
  gin->signals_ = signal_memory;
  DeviceApiMemory& memory = gin->memory_;
  BRAID_TRY(space.add_window(gin->signals_, signals * sizeof(uint64_t), gin.get(), false, &gin->signals_window_));
  if (!gin->signals_window_->symmetric())
    return BRAID_ERROR(ncclInvalidUsage, "GIN: the signal array could not be mapped by every LSA peer");

  // The queues of every target of this world (only the LSA team's are used).
  const int nranks = space.world_size();
  devapi::GinQueues q;
  q.nranks = nranks;
  q.queue_size = queue_size;
  q.counter_count = counters;
  q.signal_count = signals;
  const uint64_t gfd_bytes = uint64_t(nranks) * queue_size * devapi::kGfdBytes;
  const uint64_t index_bytes = align8(uint64_t(nranks) * sizeof(uint32_t));
  const uint64_t total = gfd_bytes + 2 * index_bytes + counters * sizeof(uint64_t);
  BRAID_TRY(memory.struct_alloc(total, &gin->queues_));
  char* block = static_cast<char*>(gin->queues_);
  q.gfds = reinterpret_cast<uint64_t*>(block);
  q.pis = reinterpret_cast<uint32_t*>(block + gfd_bytes);
  q.cis = reinterpret_cast<uint32_t*>(block + gfd_bytes + index_bytes);
  q.counters = reinterpret_cast<uint64_t*>(block + gfd_bytes + 2 * index_bytes);

  v::GinProxyGpuCtx ctx{nranks, queue_size, q.gfds, q.pis, q.cis, q.counters, static_cast<uint64_t*>(gin->signals_)};
  BRAID_TRY(memory.struct_alloc(sizeof(ctx), &gin->context_));
  BRAID_TRY(memory.struct_write(gin->context_, &ctx, sizeof(ctx)));

  // A direct link to every rank of the LSA team; none elsewhere (a
  // descriptor for such a target is refused by the proxy).
  std::vector<std::unique_ptr<devapi::GinLink>> links(static_cast<size_t>(nranks));
  const int me = space.world_rank();
  for (int i = 0; i < lsa.size; ++i) {
    devapi::GinSignals peer{reinterpret_cast<uint64_t*>(gin->signals_window_->lsa_pointer(i, 0)), signals};
    links[static_cast<size_t>(me - lsa.rank + i)] = std::make_unique<devapi::DirectGinLink>(space.gin_lsa(i), peer);
  }
  BRAID_TRY(devapi::GinProxy::create(q, std::move(links), space.gin_local().get(), &gin->fault_, {}, &gin->proxy_));
  gin->proxy_->start();
  *out = std::move(gin);
  return Status::ok();
}

DeviceGin::~DeviceGin() {
  if (proxy_) (void)proxy_->stop();
  proxy_.reset();
  signals_window_.reset();
  if (signals_) memory_.free_shareable(signals_);
  if (queues_) memory_.struct_free(queues_);
  if (context_) memory_.struct_free(context_);
}

}  // namespace braid

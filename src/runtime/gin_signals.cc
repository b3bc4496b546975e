#include "src/runtime/gin_signals.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <span>

#include "src/base/env.h"
#include "src/bootstrap/bootstrap.h"
#include "src/transport/fd_passing.h"
#include "src/transport/host_memory.h"

namespace braid {
namespace {

// What each rank says of its array.
struct Offer {
  int64_t ok;
  int32_t fd;  // the rank's own (a thread of this process can map it)
  uint64_t offset, allocation_bytes;
};

}  // namespace

Status GinSignalArray::create(DeviceApiMemory& memory, const TransportContext& ctx, Bootstrap& bootstrap,
                              const devapi::LsaShape& lsa, uint64_t words, std::unique_ptr<GinSignalArray>* out) {
  std::unique_ptr<GinSignalArray> array(new GinSignalArray(memory));
  BRAID_TRY(array->share(ctx, bootstrap, lsa, words * sizeof(uint64_t)));
  *out = std::move(array);
  return Status::ok();
}

Status GinSignalArray::share(const TransportContext& ctx, Bootstrap& bootstrap, const devapi::LsaShape& lsa,
                                 uint64_t bytes) {
  // Local first, then one agreement: no rank is left waiting in a
  // collective another skipped.
  void* mine = nullptr;
  Status local = host_shared_alloc(bytes, &mine);
  mine_ = static_cast<uint64_t*>(mine);
  if (local.is_ok()) {
    void* device = nullptr;
    local = memory_.host_register(mine, bytes, &device);
    device_ = static_cast<uint64_t*>(device);
    registered_ = local.is_ok();
  }
  const SharedHandle h = local.is_ok() ? host_shared_handle(mine, bytes) : SharedHandle{};
  std::vector<Offer> all(size_t(ctx.nranks));
  all[size_t(ctx.rank)] = {local.is_ok() && h.fd >= 0, h.fd, h.offset, h.allocation_bytes};
  BRAID_TRY(std::move(bootstrap.allgather(all.data(), sizeof(Offer))).context("GIN signals"));
  const int me_fd[1] = {h.fd};
  std::vector<std::vector<UniqueFd>> passed;
  // A failure here is carried into the agreement below, which every rank
  // must reach in step (returning now would leave them in it).
  if (Status s = exchange_fds(ctx, bootstrap, std::span<const int>(me_fd, h.fd >= 0 ? 1 : 0), &passed,
                              Deadline::after(std::chrono::seconds(env_int("BRAID_TIMEOUT"))));
      !s.is_ok() && local.is_ok()) {
    local = std::move(s).context("GIN signals");
    passed.clear();
    passed.resize(size_t(ctx.nranks));
  }
  const int first = ctx.rank - lsa.rank;
  for (int i = 0; i < lsa.size && local.is_ok(); ++i) {
    const Offer& o = all[size_t(first + i)];
    if (!o.ok) {
      local = BRAID_ERROR(ncclInvalidUsage, "GIN signals: LSA rank {} could not share its array", i);
      break;
    }
    if (first + i == ctx.rank) {
      peers_.push_back(mine_);
      continue;
    }
    // A thread of this process maps its peer's memfd too, rather than use
    // the peer's own address: a put still on its way when the peer frees
    // its array then lands in pages this mapping keeps.
    const bool thread = same_process(ctx.peers[size_t(first + i)], ctx.peers[size_t(ctx.rank)]);
    if (!thread && passed[size_t(first + i)].size() != 1) {
      local = BRAID_ERROR(ncclInvalidUsage, "GIN signals: LSA rank {}'s descriptor did not arrive", i);
      break;
    }
    const int fd = thread ? o.fd : passed[size_t(first + i)][0].get();
    void* at = mmap(nullptr, o.allocation_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (at == MAP_FAILED) {
      local = BRAID_ERROR(ncclSystemError, "GIN signals: mapping LSA rank {}'s array: {}", i, std::strerror(errno));
      break;
    }
    maps_.emplace_back(at, o.allocation_bytes);
    peers_.push_back(reinterpret_cast<uint64_t*>(static_cast<char*>(at) + o.offset));
  }
  return bootstrap.agree(std::move(local), "GIN signals: mapping the peers' arrays");
}

GinSignalArray::~GinSignalArray() {
  for (auto [at, n] : maps_) munmap(at, n);
  if (registered_) memory_.host_unregister(mine_);
  if (mine_) host_shared_free(mine_);
}

}  // namespace braid

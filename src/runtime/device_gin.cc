#include "src/runtime/device_gin.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "src/base/env.h"
#include "src/base/log.h"
#include "src/base/net.h"
#include "src/bootstrap/bootstrap.h"
#include "src/transport/fd_passing.h"

namespace braid {
namespace {

namespace v = devapi::v22809;
namespace v30 = devapi::v23000;

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// Where one context's arrays sit in its part of the queue block.
struct ContextLayout {
  uint64_t gfds = 0, pis, cis, counters, signal_offsets, issued_gets, visible_gets, bytes;
  ContextLayout(const DeviceGinShape& shape, int nranks) {
    const uint64_t indices = align_up(uint64_t(nranks) * sizeof(uint32_t), 8);
    pis = uint64_t(nranks) * shape.queue_size * devapi::gfd_bytes(shape.format);
    cis = pis + indices;
    counters = cis + indices;
    signal_offsets = counters + shape.counters * sizeof(uint64_t);
    issued_gets = signal_offsets;
    if (shape.format == devapi::GfdFormat::kV2) issued_gets += shape.signals * sizeof(uint64_t);
    visible_gets = issued_gets + indices;
    bytes = shape.format == devapi::GfdFormat::kV2 ? visible_gets + indices : issued_gets;
    bytes = align_up(bytes, 128);  // the next context's descriptors stay 16-byte aligned
  }
};

}  // namespace

Status DeviceGin::create(LsaSpace& space, Bootstrap& bootstrap, const std::vector<PeerInfo>& peers,
                         void* signal_memory, const DeviceGinShape& shape, std::unique_ptr<DeviceGin>* out) {
  const devapi::LsaShape& lsa = space.lsa();
  std::unique_ptr<DeviceGin> gin(new DeviceGin(space.memory()));
  gin->signals_ = signal_memory;
  DeviceApiMemory& memory = gin->memory_;
  const bool v2 = shape.format == devapi::GfdFormat::kV2;
  if (shape.contexts < 1 || (!v2 && shape.contexts != 1))
    return BRAID_ERROR(ncclInternalError, "GIN: {} contexts in format {}", shape.contexts, v2 ? 2 : 1);
  const uint32_t signal_words = shape.contexts * shape.signals;
  BRAID_TRY(space.add_window(gin->signals_, signal_words * sizeof(uint64_t), gin.get(), false, &gin->signals_window_));
  if (!gin->signals_window_->symmetric())
    return BRAID_ERROR(ncclInvalidUsage, "GIN: the signal array could not be mapped by every LSA peer");

  // Every context's queues to every target of this world (only the LSA
  // team's are used), in one block, and the contexts' structs.
  const int nranks = space.world_size();
  const ContextLayout at(shape, nranks);
  BRAID_TRY(memory.struct_alloc(at.bytes * shape.contexts, &gin->queues_));
  const size_t ctx_bytes = v2 ? sizeof(v30::GinProxyGpuCtx) : sizeof(v::GinProxyGpuCtx);
  BRAID_TRY(memory.struct_alloc(ctx_bytes * shape.contexts, &gin->context_));
  std::vector<devapi::GinQueues> contexts;
  for (uint32_t c = 0; c < shape.contexts; ++c) {
    char* block = static_cast<char*>(gin->queues_) + at.bytes * c;
    devapi::GinQueues q;
    q.format = shape.format;
    q.nranks = nranks;
    q.queue_size = shape.queue_size;
    q.gfds = reinterpret_cast<uint64_t*>(block + at.gfds);
    q.pis = reinterpret_cast<uint32_t*>(block + at.pis);
    q.cis = reinterpret_cast<uint32_t*>(block + at.cis);
    q.counters = reinterpret_cast<uint64_t*>(block + at.counters);
    q.counter_count = shape.counters;
    q.signal_count = shape.signals;
    q.signal_base = c * shape.signals;
    uint64_t* signals = static_cast<uint64_t*>(gin->signals_) + q.signal_base;
    char* ctx_at = static_cast<char*>(gin->context_) + ctx_bytes * c;
    if (v2) {
      v30::GinProxyGpuCtx ctx{nranks,
                              shape.queue_size,
                              q.gfds,
                              q.pis,
                              q.cis,
                              q.counters,
                              signals,
                              reinterpret_cast<uint64_t*>(block + at.signal_offsets),
                              reinterpret_cast<uint32_t*>(block + at.issued_gets),
                              reinterpret_cast<uint32_t*>(block + at.visible_gets)};
      BRAID_TRY(memory.struct_write(ctx_at, &ctx, sizeof(ctx)));
    } else {
      v::GinProxyGpuCtx ctx{nranks, shape.queue_size, q.gfds, q.pis, q.cis, q.counters, signals};
      BRAID_TRY(memory.struct_write(ctx_at, &ctx, sizeof(ctx)));
    }
    contexts.push_back(q);
  }

  // A direct link to every rank of the LSA team, TCP to the others.
  std::vector<std::unique_ptr<devapi::GinLink>> links(static_cast<size_t>(nranks));
  const int me = space.world_rank();
  for (int i = 0; i < lsa.size; ++i) {
    devapi::GinSignals peer{reinterpret_cast<uint64_t*>(gin->signals_window_->lsa_pointer(i, 0)), signal_words};
    links[static_cast<size_t>(me - lsa.rank + i)] = std::make_unique<devapi::DirectGinLink>(space.gin_lsa(i), peer);
  }
  if (lsa.size < nranks) BRAID_TRY(gin->connect_other_hosts(space, bootstrap, signal_words, &links));
  gin->watch_lsa_peers(space, peers);
  devapi::GinProxyOptions options;
  if (!gin->watched_.empty()) options.watch = [g = gin.get()] { return g->check_lsa_peers(); };
  // On the host backend the posters are the ranks' threads: where they and
  // the proxies outnumber the cores, an idle proxy yields at once.
  if (2u * unsigned(lsa.size) > std::max(1u, std::thread::hardware_concurrency())) options.idle_spins = 0;
  BRAID_TRY(devapi::GinProxy::create(std::move(contexts), std::move(links), space.gin_local().get(), &gin->fault_,
                                     options, &gin->proxy_));
  gin->proxy_->start();
  *out = std::move(gin);
  return Status::ok();
}

Status DeviceGin::connect_other_hosts(LsaSpace& space, Bootstrap& bootstrap, uint32_t signal_words,
                                      std::vector<std::unique_ptr<devapi::GinLink>>* links) {
  const int me = space.world_rank(), nranks = space.world_size(), first = me - space.lsa().rank;
  const auto timeout = std::chrono::seconds(env_int("BRAID_TIMEOUT"));
  auto outside = [&](int r) { return r < first || r >= first + space.lsa().size; };
  sockaddr_in local{};
  BRAID_TRY(local_endpoint(&local));
  int listener = -1;
  std::vector<sockaddr_in> addresses(static_cast<size_t>(nranks));
  BRAID_TRY(listen_tcp(local, &listener, &addresses[size_t(me)]));
  UniqueFd listening(listener);
  BRAID_TRY(std::move(bootstrap.allgather(addresses.data(), sizeof(sockaddr_in))).context("GIN"));
  // Connecting completes in the listener's backlog, before any accept, so
  // every rank connects first and accepts after: no order can deadlock.
  for (int t = 0; t < nranks; ++t) {
    if (!outside(t)) continue;
    int fd = -1;
    BRAID_TRY(connect_tcp(addresses[size_t(t)], Deadline::after(timeout), nullptr, &fd));
    UniqueFd stream(fd);
    BRAID_TRY(devapi::TcpGinLink::send_hello(fd, me, Deadline::after(timeout)));
    (*links)[size_t(t)] = std::make_unique<devapi::TcpGinLink>(stream.release(), t, timeout);
  }
  std::vector<int> fds, senders;
  std::vector<UniqueFd> accepted;
  for (int r = 0; r < nranks; ++r) {
    if (!outside(r)) continue;
    if (!wait_readable(listener, Deadline::after(timeout), nullptr))
      return BRAID_ERROR(ncclRemoteError, "GIN: only {} of the other hosts' ranks connected within BRAID_TIMEOUT",
                         fds.size());
    const int fd = ::accept(listener, nullptr, nullptr);
    if (fd < 0) return BRAID_ERROR(ncclSystemError, "GIN: accept: {}", std::strerror(errno));
    accepted.emplace_back(fd);
    int sender = -1;
    BRAID_TRY(devapi::GinTcpReceiver::recv_hello(fd, nranks, Deadline::after(timeout), &sender));
    if (!outside(sender)) return BRAID_ERROR(ncclRemoteError, "GIN: rank {} of this host connected over TCP", sender);
    fds.push_back(fd);
    senders.push_back(sender);
  }
  for (UniqueFd& fd : accepted) (void)fd.release();  // the receiver owns them
  const devapi::GinSignals mine{static_cast<uint64_t*>(signals_), signal_words};
  receiver_ = std::make_unique<devapi::GinTcpReceiver>(fds, senders, space.gin_local().get(), mine, &fault_, timeout);
  return Status::ok();
}

void DeviceGin::watch_lsa_peers(const LsaSpace& space, const std::vector<PeerInfo>& peers) {
  const int me = space.world_rank(), first = me - space.lsa().rank;
  for (int r = first; r < first + space.lsa().size; ++r) {
    if (peers[size_t(r)].pid == peers[size_t(me)].pid) continue;  // a thread of this process
    const int fd = int(syscall(SYS_pidfd_open, peers[size_t(r)].pid, 0));
    if (fd < 0) {
      BRAID_INFO(kInit, "GIN: rank {} (process {}) cannot be watched: {}", r, peers[size_t(r)].pid,
                 std::strerror(errno));
      continue;
    }
    watched_.push_back({r, peers[size_t(r)].pid, fd});
  }
}

// A pidfd is readable once its process has exited.
Status DeviceGin::check_lsa_peers() const {
  for (const WatchedPeer& p : watched_) {
    pollfd pfd{p.pidfd, POLLIN, 0};
    if (::poll(&pfd, 1, 0) > 0)
      return BRAID_ERROR(ncclRemoteError, "GIN: rank {} (process {}) exited while its device communicator was live",
                         p.rank, p.pid);
  }
  return Status::ok();
}

DeviceGin::~DeviceGin() {
  if (proxy_) (void)proxy_->stop();
  proxy_.reset();
  if (receiver_) receiver_->stop();
  receiver_.reset();
  signals_window_.reset();
  if (signals_) memory_.free_shareable(signals_);
  if (queues_) memory_.struct_free(queues_);
  if (context_) memory_.struct_free(context_);
  for (const WatchedPeer& p : watched_) ::close(p.pidfd);
}

}  // namespace braid

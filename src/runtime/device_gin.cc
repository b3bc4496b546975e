#include "src/runtime/device_gin.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "src/base/env.h"
#include "src/base/log.h"
#include "src/base/net.h"
#include "src/base/tls_session.h"
#include "src/bootstrap/bootstrap.h"
#include "src/devapi/abi_v23200.h"
#include "src/transport/fd_passing.h"
#include "src/transport/net/net_choice.h"
#include "src/transport/net/net_transport.h"

namespace braid {
namespace {

namespace v = devapi::v22809;
namespace v30 = devapi::v23000;
namespace v32 = devapi::v23200;

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// Where one context's arrays sit in the two blocks: what the proxy
// writes and the device polls, in host memory the device maps (the
// descriptors, consumer indices and counters, as NCCL's proxy places
// them), and what only the device touches, in device memory (producer
// indices, which the device's atomics claim; 2.30's signal offsets and get
// indices).
struct ContextLayout {
  // The host block.
  uint64_t gfds = 0, cis, counters, host_bytes;
  // The device block.
  uint64_t pis = 0, signal_offsets, issued_gets, visible_gets, device_bytes;
  ContextLayout(const DeviceGinShape& shape, int nranks) {
    const uint64_t indices = align_up(uint64_t(nranks) * sizeof(uint32_t), 8);
    cis = uint64_t(nranks) * shape.queue_size * devapi::gfd_bytes(shape.format);
    counters = cis + indices;
    host_bytes = align_up(counters + shape.counters * sizeof(uint64_t), 128);  // descriptors stay 16-byte aligned
    signal_offsets = indices;
    issued_gets = signal_offsets;
    if (shape.format == devapi::GfdFormat::kV2) issued_gets += shape.signals * sizeof(uint64_t);
    visible_gets = issued_gets + indices;
    device_bytes = align_up(shape.format == devapi::GfdFormat::kV2 ? visible_gets + indices : issued_gets, 128);
  }
};

}  // namespace

Status DeviceGin::create(LsaSpace& space, Bootstrap& bootstrap, const TransportContext& transport,
                         const DeviceGinShape& shape, devapi::GinProgress& progress, DeviceLiveness& liveness,
                         std::unique_ptr<DeviceGin>* out) {
  const devapi::LsaShape& lsa = space.lsa();
  std::unique_ptr<DeviceGin> gin(new DeviceGin(space.memory()));
  DeviceApiMemory& memory = gin->memory_;
  const devapi::GinMemoryOps* ops = memory.gin_ops();
  const bool v2 = shape.format == devapi::GfdFormat::kV2;
  if (!ops || shape.contexts < 1 || (!v2 && shape.contexts > uint32_t(v::kMaxGinContexts)))
    return BRAID_ERROR(ncclInternalError, "GIN: {} contexts in format {} on {} memory", shape.contexts, v2 ? 2 : 1,
                       memory.name());
  const uint32_t signal_words = shape.contexts * shape.signals;
  BRAID_TRY(GinSignalArray::create(memory, transport, bootstrap, lsa, signal_words, &gin->signals_));

  // Every context's queues to every target of this world (only the LSA
  // team's are used), in the two blocks, and the contexts' structs.
  const int nranks = space.world_size();
  const ContextLayout at(shape, nranks);
  const size_t host_bytes = at.host_bytes * shape.contexts;
  gin->host_block_ = std::aligned_alloc(4096, align_up(host_bytes, 4096));
  if (!gin->host_block_) return BRAID_ERROR(ncclSystemError, "GIN: out of memory for {} bytes of queues", host_bytes);
  std::memset(gin->host_block_, 0, host_bytes);
  void* host_block_device = nullptr;
  BRAID_TRY(memory.host_register(gin->host_block_, host_bytes, &host_block_device));
  gin->host_block_registered_ = true;
  BRAID_TRY(memory.struct_alloc(at.device_bytes * shape.contexts, &gin->device_block_));
  const size_t ctx_bytes = shape.context_version >= v32::kProxyContextVersion ? sizeof(v32::GinProxyGpuCtx)
                           : shape.context_version == 2                        ? sizeof(v30::GinProxyGpuCtx)
                                                                               : sizeof(v::GinProxyGpuCtx);
  gin->context_bytes_ = ctx_bytes;
  BRAID_TRY(memory.struct_alloc(ctx_bytes * shape.contexts, &gin->context_));
  std::vector<devapi::GinQueues> contexts;
  for (uint32_t c = 0; c < shape.contexts; ++c) {
    char* host = static_cast<char*>(gin->host_block_) + at.host_bytes * c;              // as the proxy sees it
    char* mapped = static_cast<char*>(host_block_device) + at.host_bytes * c;           // as the device does
    char* device = static_cast<char*>(gin->device_block_) + at.device_bytes * c;
    devapi::GinQueues q;
    q.format = shape.format;
    q.nranks = nranks;
    q.queue_size = shape.queue_size;
    q.gfds = reinterpret_cast<uint64_t*>(host + at.gfds);
    q.pis = reinterpret_cast<uint32_t*>(device + at.pis);  // the device's (the proxy never reads it)
    q.cis = reinterpret_cast<uint32_t*>(host + at.cis);
    q.counters = reinterpret_cast<uint64_t*>(host + at.counters);
    q.counter_count = shape.counters;
    q.signal_count = shape.signals;
    q.signal_base = c * shape.signals;
    q.gets_consumed_landed = shape.gets_consumed_landed;
    auto* gfds = reinterpret_cast<uint64_t*>(mapped + at.gfds);
    auto* cis = reinterpret_cast<uint32_t*>(mapped + at.cis);
    auto* counters = reinterpret_cast<uint64_t*>(mapped + at.counters);
    uint64_t* signals = gin->signals_->device() + q.signal_base;
    char* ctx_at = static_cast<char*>(gin->context_) + ctx_bytes * c;
    if (shape.context_version >= 2) {
      // Version 2's fields, then version 3's promise, which braid's proxy
      // does not make: a signal makes visible only the puts before it to
      // its own target (devapi/gin_proxy.h).
      const v32::GinProxyGpuCtx ctx{{nranks, shape.queue_size, gfds, q.pis, cis, counters, signals,
                                     reinterpret_cast<uint64_t*>(device + at.signal_offsets),
                                     reinterpret_cast<uint32_t*>(device + at.issued_gets),
                                     reinterpret_cast<uint32_t*>(device + at.visible_gets)},
                                    /*flushesAllPutsOnAnySignal=*/false};
      BRAID_TRY(memory.struct_write(ctx_at, &ctx, ctx_bytes));
    } else {
      v::GinProxyGpuCtx ctx{nranks, shape.queue_size, gfds, q.pis, cis, counters, signals};
      BRAID_TRY(memory.struct_write(ctx_at, &ctx, sizeof(ctx)));
    }
    contexts.push_back(q);
  }

  // A direct link to every rank of the LSA team, TCP to the others.
  std::vector<std::unique_ptr<devapi::GinLink>> links(static_cast<size_t>(nranks));
  const int me = space.world_rank();
  for (int i = 0; i < lsa.size; ++i) {
    const devapi::GinSignals peer{gin->signals_->lsa_peer(i), signal_words, ops};
    links[static_cast<size_t>(me - lsa.rank + i)] = std::make_unique<devapi::DirectGinLink>(space.gin_lsa(i), peer);
  }
  if (lsa.size < nranks) BRAID_TRY(gin->connect_other_hosts(space, bootstrap, transport, signal_words, &links));
  gin->fault_.notify([l = &liveness](const Status& s) { l->raise(s); });
  devapi::GinProxyOptions options;
  options.watch = [l = &liveness] { return l->reason(); };
  BRAID_TRY(devapi::GinProxy::create(std::move(contexts), std::move(links), space.gin_local().get(), &gin->fault_,
                                     options, &gin->proxy_));
  progress.add(gin->proxy_.get());
  gin->progress_ = &progress;
  *out = std::move(gin);
  return Status::ok();
}

namespace {

// The ranks outside this rank's LSA team: the other hosts'.
bool outside_lsa(const LsaSpace& space, int r) {
  const int first = space.world_rank() - space.lsa().rank;
  return r < first || r >= first + space.lsa().size;
}

std::chrono::milliseconds gin_timeout() { return std::chrono::seconds(env_int("BRAID_TIMEOUT")); }

}  // namespace

Status DeviceGin::connect_other_hosts(LsaSpace& space, Bootstrap& bootstrap, const TransportContext& transport,
                                      uint32_t signal_words, std::vector<std::unique_ptr<devapi::GinLink>>* links) {
  // BRAID_GIN_NET, the same on every rank (or the exchanges below would
  // not pair up).
  int use_sockets = 0;
  BRAID_TRY(std::move(env_choice("BRAID_GIN_NET", {"auto", "socket"}, &use_sockets)).context("GIN"));
  std::vector<uint8_t> choices(size_t(space.world_size()));
  choices[size_t(space.world_rank())] = uint8_t(use_sockets);
  BRAID_TRY(std::move(bootstrap.allgather(choices.data(), 1)).context("GIN"));
  for (size_t r = 0; r < choices.size(); ++r)
    if (choices[r] != use_sockets)
      return BRAID_ERROR(ncclInvalidUsage, "BRAID_GIN_NET is {} on rank {} and {} here: set it alike on every rank",
                         choices[r] ? "socket" : "auto", r, use_sockets ? "socket" : "auto");
  // The net the communicator's transport chose the same way (every rank
  // alike: choose_net agrees through the bootstrap); none: sockets.
  const std::string& mode = transport.policy.mode;
  Net* net = nullptr;
  if (!use_sockets && (mode == "auto" || mode == "ib" || mode == "plugin"))
    BRAID_TRY(std::move(choose_net(transport.policy, &bootstrap, &net)).context("GIN"));
  if (net) return connect_over_net(space, bootstrap, transport, net, signal_words, links);
  return connect_over_tcp(space, bootstrap, signal_words, links);
}

// GIN's own transport over the net, so that its connections and segments
// are apart from the communicator's; channels 0 and 1 to every other
// host's rank (gin_pipes.h), all made before the receiver starts.
Status DeviceGin::connect_over_net(LsaSpace& space, Bootstrap& bootstrap, const TransportContext& transport, Net* net,
                                   uint32_t signal_words, std::vector<std::unique_ptr<devapi::GinLink>>* links) {
  constexpr uint64_t kSalt = 0x67696e5f6e657473ULL;  // "gin_nets"
  const int me = space.world_rank(), nranks = space.world_size();
  TransportContext t = transport;
  t.comm_hash ^= kSalt;
  std::vector<bool> serves(static_cast<size_t>(nranks));
  for (int r = 0; r < nranks; ++r) serves[size_t(r)] = outside_lsa(space, r);
  BRAID_TRY(std::move(make_net_transport(t, &bootstrap, net, serves, &net_transport_)).context("GIN"));
  const auto timeout = gin_timeout();
  std::vector<GinPipeReceiver::Sender> senders;
  for (int r = 0; r < nranks; ++r) {
    if (!serves[size_t(r)]) continue;
    SendPipe *messages = nullptr, *answers = nullptr;
    RecvPipe *their_messages = nullptr, *their_answers = nullptr;
    BRAID_TRY(net_transport_->send_pipe(r, kGinMessageChannel, &messages));
    BRAID_TRY(net_transport_->recv_pipe(r, kGinAnswerChannel, &their_answers));
    BRAID_TRY(net_transport_->recv_pipe(r, kGinMessageChannel, &their_messages));
    BRAID_TRY(net_transport_->send_pipe(r, kGinAnswerChannel, &answers));
    for (SendPipe* pipe : {messages, answers}) {  // connected (a slot to write) within the timeout
      const Deadline deadline = Deadline::after(timeout);
      Waiter waiter;
      for (void* slot = nullptr; !slot; waiter.pause()) {
        BRAID_TRY(std::move(pipe->try_acquire(&slot, 0)).context(fmt::format("GIN: connecting with rank {}", r)));
        if (!slot && deadline.expired())
          return BRAID_ERROR(ncclRemoteError, "GIN: no connection with rank {} within BRAID_TIMEOUT", r);
      }
    }
    (*links)[size_t(r)] = std::make_unique<PipeGinLink>(messages, their_answers, net_transport_->slot_bytes(), r,
                                                        timeout, *memory_.gin_ops());
    senders.push_back({r, their_messages, answers});
  }
  BRAID_INFO(kInit, "GIN: rank {} reaches the {} ranks of other hosts over {}", me, senders.size(), net->name());
  const devapi::GinSignals mine{signals_->host(), signal_words, memory_.gin_ops()};
  pipe_receiver_ = std::make_unique<GinPipeReceiver>(std::move(senders), net_transport_->slot_bytes(),
                                                     space.gin_local().get(), mine, &fault_, timeout,
                                                     net_transport_->doorbell());
  return Status::ok();
}

Status DeviceGin::connect_over_tcp(LsaSpace& space, Bootstrap& bootstrap, uint32_t signal_words,
                                   std::vector<std::unique_ptr<devapi::GinLink>>* links) {
  const int me = space.world_rank(), nranks = space.world_size();
  const auto timeout = gin_timeout();
  int listener = -1;
  std::vector<SockAddr> addresses(static_cast<size_t>(nranks));
  BRAID_TRY(listen_tcp(bootstrap.address(), &listener, &addresses[size_t(me)]));  // the bootstrap's interface
  UniqueFd listening(listener);
  BRAID_TRY(std::move(bootstrap.allgather(addresses.data(), sizeof(SockAddr))).context("GIN"));
  // Connecting completes in the listener's backlog, before any accept, so
  // every rank connects first and accepts after: no order can deadlock.
  // With TLS the handshakes come next, all together (each side's needs the
  // other's answer), and then the hellos, inside the sessions.
  struct Connection {
    UniqueFd fd;
    std::unique_ptr<TlsSession> tls;
    int rank = -1;  // the target; for an accepted one, its hello's sender
  };
  std::vector<Connection> out, in;
  for (int t = 0; t < nranks; ++t) {
    if (!outside_lsa(space, t)) continue;
    int fd = -1;
    BRAID_TRY(connect_tcp_to_listener(addresses[size_t(t)], Deadline::after(timeout), nullptr, &fd));
    out.push_back({UniqueFd(fd), nullptr, t});
  }
  for (int r = 0; r < nranks; ++r) {
    if (!outside_lsa(space, r)) continue;
    if (!wait_readable(listener, Deadline::after(timeout), nullptr))
      return BRAID_ERROR(ncclRemoteError, "GIN: only {} of the other hosts' ranks connected within BRAID_TIMEOUT",
                         in.size());
    int fd = ::accept(listener, nullptr, nullptr);
    if (fd < 0) return BRAID_ERROR(ncclSystemError, "GIN: accept: {}", std::strerror(errno));
    in.push_back({UniqueFd(fd), nullptr, -1});
  }
  if (tls_enabled()) {  // under ncclSetEncryption, as braid's other TCP connections
    std::vector<TlsSession*> sessions;
    for (auto* group : {&out, &in})
      for (Connection& c : *group) {
        BRAID_TRY(TlsSession::open(c.fd.get(), group == &out ? TlsRole::Client : TlsRole::Server, &c.tls));
        sessions.push_back(c.tls.get());
      }
    BRAID_TRY(std::move(tls_handshake_all(sessions, Deadline::after(timeout))).context("GIN"));
  }
  for (Connection& c : out) {
    BRAID_TRY(devapi::TcpGinLink::send_hello(c.fd.get(), me, Deadline::after(timeout), c.tls.get()));
    (*links)[size_t(c.rank)] =
        std::make_unique<devapi::TcpGinLink>(c.fd.release(), c.rank, timeout, *memory_.gin_ops(), std::move(c.tls));
  }
  std::vector<int> fds, senders;
  std::vector<std::unique_ptr<TlsSession>> sessions;
  for (Connection& c : in) {
    BRAID_TRY(devapi::GinTcpReceiver::recv_hello(c.fd.get(), nranks, Deadline::after(timeout), &c.rank, c.tls.get()));
    if (!outside_lsa(space, c.rank))
      return BRAID_ERROR(ncclRemoteError, "GIN: rank {} of this host connected over TCP", c.rank);
  }
  for (Connection& c : in) {  // the receiver owns them
    fds.push_back(c.fd.release());
    senders.push_back(c.rank);
    sessions.push_back(std::move(c.tls));
  }
  BRAID_INFO(kInit, "GIN: rank {} reaches the {} ranks of other hosts over TCP streams{}", me, senders.size(),
             tls_enabled() ? " (TLS)" : "");
  const devapi::GinSignals mine{signals_->host(), signal_words, memory_.gin_ops()};
  receiver_ = std::make_unique<devapi::GinTcpReceiver>(fds, senders, space.gin_local().get(), mine, &fault_, timeout,
                                                       std::move(sessions));
  return Status::ok();
}

DeviceGin::~DeviceGin() {
  if (progress_) progress_->remove(proxy_.get());
  if (proxy_) (void)proxy_->stop();
  proxy_.reset();
  if (receiver_) receiver_->stop();
  receiver_.reset();
  pipe_receiver_.reset();
  net_transport_.reset();
  signals_.reset();
  if (host_block_registered_) memory_.host_unregister(host_block_);
  std::free(host_block_);
  if (device_block_) memory_.struct_free(device_block_);
  if (context_) memory_.struct_free(context_);
}

}  // namespace braid

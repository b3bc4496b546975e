// The routing transport: each peer's pipes come from shared memory when the
// peer shares this host, from the remote transport (sockets, or a net:
// InfiniBand or a plugin) otherwise.
#include "src/transport/router.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "src/transport/doorbell.h"

namespace braid {
namespace {

class RouterTransport final : public Transport {
 public:
  RouterTransport(const TransportContext& ctx, std::unique_ptr<Transport> shm, std::unique_ptr<Transport> socket)
      : ctx_(ctx), shm_(std::move(shm)), socket_(std::move(socket)) {
    name_ = shm_ && socket_ ? fmt::format("{}+{}", shm_->name(), socket_->name())
            : shm_          ? shm_->name()
            : socket_       ? socket_->name()
                            : "none";
  }
  const char* name() const override { return name_.c_str(); }
  const char* peer_path(int peer) const override {
    if (peer < 0 || peer >= ctx_.nranks) return "none";
    const Transport* t = pick(peer);
    return t ? t->peer_path(peer) : "none";
  }
  uint32_t wire_paths(int peer) const override {
    const Transport* t = peer < 0 || peer >= ctx_.nranks ? nullptr : pick(peer);
    return t ? t->wire_paths(peer) : 1;
  }
  uint64_t bytes_held() const override {
    return (shm_ ? shm_->bytes_held() : 0) + (socket_ ? socket_->bytes_held() : 0);
  }
  Status send_pipe(int peer, int channel, SendPipe** out) override {
    BRAID_TRY(check_peer(peer));
    return pick(peer)->send_pipe(peer, channel, out);
  }
  Status recv_pipe(int peer, int channel, RecvPipe** out) override {
    BRAID_TRY(check_peer(peer));
    return pick(peer)->recv_pipe(peer, channel, out);
  }
  size_t slot_bytes() const override {
    size_t b = SIZE_MAX;
    for (auto* t : {shm_.get(), socket_.get()})
      if (t) b = std::min(b, t->slot_bytes());
    return b;
  }
  int slots() const override {
    int s = INT32_MAX;
    for (auto* t : {shm_.get(), socket_.get()})
      if (t) s = std::min(s, t->slots());
    return s;
  }
  void abort() override {
    if (shm_) shm_->abort();
    if (socket_) socket_->abort();
  }
  // Each transport's doorbell hears only its own traffic: with both, sleep
  // on shared memory's and have the sockets ring it.
  Doorbell* doorbell() override {
    if (!shm_ || !socket_) return shm_ ? shm_->doorbell() : socket_->doorbell();
    if (!both_) {
      Doorbell* shm = shm_->doorbell();
      Doorbell* socket = socket_->doorbell();
      if (!shm || !socket || !socket->forward_to(shm)) return nullptr;
      both_.emplace(shm, socket);
    }
    return &*both_;
  }

 private:
  Status check_peer(int peer) const {
    if (peer < 0 || peer >= ctx_.nranks)
      return BRAID_ERROR(ncclInvalidArgument, "peer {} out of range [0, {})", peer, ctx_.nranks);
    return Status::ok();
  }
  Transport* pick(int peer) const {
    bool same_host = ctx_.peers[peer].host_hash == ctx_.peers[ctx_.rank].host_hash;
    return (same_host && shm_) || !socket_ ? shm_.get() : socket_.get();
  }
  TransportContext ctx_;
  std::string name_;
  std::unique_ptr<Transport> shm_, socket_;  // socket_: the remote transport, whichever
  std::optional<ForwardedDoorbell> both_;
};

}  // namespace

Status make_router_transport(const TransportContext& ctx, std::unique_ptr<Transport> shm,
                             std::unique_ptr<Transport> socket, std::unique_ptr<Transport>* out) {
  *out = std::make_unique<RouterTransport>(ctx, std::move(shm), std::move(socket));
  return Status::ok();
}

}  // namespace braid

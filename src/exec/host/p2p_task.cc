// Point-to-point transfers over fragment pipes.
//
// A message is cut into fragments of the pipe's slot size.  The first
// fragment starts with the message's total length (8 bytes) so a receive
// posted with a different count fails loudly instead of misaligning every
// later message on that connection.
#include "src/exec/host/p2p_task.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <vector>
#include <map>

#include <fmt/format.h>

#include "src/plan/host_tuning.h"

namespace braid {
namespace {

constexpr size_t kHeader = sizeof(uint64_t);

struct Stream {  // the ordered sends to, or receives from, one peer
  std::vector<P2POp> ops;
  SendPipe* send = nullptr;
  RecvPipe* recv = nullptr;
  size_t index = 0;   // current op
  size_t offset = 0;  // bytes of it done
  bool started = false;
};

class P2PTask final : public Task {
 public:
  P2PTask(Transport* t, size_t fragment_bytes, std::string label)
      : transport_(t), fragment_(fragment_bytes), label_(std::move(label)) {}

  Status add(const P2POp& op, int channel) {
    Stream& s = (op.is_send ? sends_ : recvs_)[op.peer];
    if (s.ops.empty()) {
      if (op.is_send) BRAID_TRY(transport_->send_pipe(op.peer, channel, &s.send));
      else BRAID_TRY(transport_->recv_pipe(op.peer, channel, &s.recv));
    }
    s.ops.push_back(op);
    return Status::ok();
  }

  // All sends start together: each connection cycles through its share of
  // slots (slots_per_connection).
  void size_slot_rings() {
    const int slots = slots_per_connection(transport_->slots(), int(sends_.size()));
    for (auto& [peer, s] : sends_) s.send->use_slots(slots);
  }

  // "..., waiting on send to 3 (op 1/2), recv from 1 (op 0/1)": what a timeout names.
  // Keeps a private copy of `bytes` at `data` for the task's lifetime.
  char* stage(const char* data, size_t bytes) {
    staged_.emplace_back(data, data + bytes);
    return staged_.back().data();
  }

  Doorbell* doorbell() const override { return transport_->doorbell(); }

  std::string describe() const override {
    std::string out = label_;
    const char* sep = ", waiting on ";
    for (const auto* group : {&sends_, &recvs_})
      for (const auto& [peer, s] : *group)
        if (s.index < s.ops.size()) {
          out += fmt::format("{}{} {} (op {}/{})", sep, group == &sends_ ? "send to" : "recv from", peer, s.index,
                             s.ops.size());
          sep = ", ";
        }
    return out;
  }

  Status poll(bool* progressed, bool* done) override {
    bool all_done = true;
    for (auto& [peer, s] : sends_) {
      while (s.index < s.ops.size()) {
        bool moved = false;
        BRAID_TRY(step_send(s, &moved));
        if (!moved) break;
        *progressed = true;
      }
      all_done &= s.index == s.ops.size();
    }
    for (auto& [peer, s] : recvs_) {
      while (s.index < s.ops.size()) {
        bool moved = false;
        BRAID_TRY(step_recv(peer, s, &moved));
        if (!moved) break;
        *progressed = true;
      }
      all_done &= s.index == s.ops.size();
    }
    *done = all_done;
    return Status::ok();
  }

 private:
  Status step_send(Stream& s, bool* moved) {
    const P2POp& op = s.ops[s.index];
    void* slot = nullptr;
    BRAID_TRY(s.send->try_acquire(&slot));
    if (!slot) return Status::ok();
    char* out = static_cast<char*>(slot);
    size_t room = fragment_;
    if (!s.started) {
      uint64_t total = op.bytes;
      std::memcpy(out, &total, kHeader);
      out += kHeader;
      room -= kHeader;
      s.started = true;
    }
    size_t n = std::min(room, op.bytes - s.offset);
    std::memcpy(out, op.buffer + s.offset, n);
    BRAID_TRY(s.send->commit(size_t(out - static_cast<char*>(slot)) + n));
    s.offset += n;
    *moved = true;
    if (s.offset == op.bytes) next(s);
    return Status::ok();
  }

  Status step_recv(int peer, Stream& s, bool* moved) {
    const P2POp& op = s.ops[s.index];
    const void* data = nullptr;
    size_t bytes = 0;
    BRAID_TRY(s.recv->try_acquire(&data, &bytes));
    if (!data) return Status::ok();
    const char* in = static_cast<const char*>(data);
    if (!s.started) {
      uint64_t total = 0;
      if (bytes < kHeader) return BRAID_ERROR(ncclInternalError, "short first fragment from rank {}", peer);
      std::memcpy(&total, in, kHeader);
      if (total != op.bytes)
        return BRAID_ERROR(ncclInvalidUsage,
                           "rank {} sent {} bytes ({} elements) but the matching ncclRecv expects {} bytes ({} "
                           "elements): count/datatype mismatch",
                           peer, total, total / op.elem_bytes, op.bytes, op.bytes / op.elem_bytes);
      in += kHeader;
      bytes -= kHeader;
      s.started = true;
    }
    if (bytes > op.bytes - s.offset)
      return BRAID_ERROR(ncclInternalError, "fragment from rank {} overruns the receive buffer", peer);
    std::memcpy(op.buffer + s.offset, in, bytes);
    BRAID_TRY(s.recv->release());
    s.offset += bytes;
    *moved = true;
    if (s.offset == op.bytes) next(s);
    return Status::ok();
  }

  static void next(Stream& s) {
    ++s.index;
    s.offset = 0;
    s.started = false;
  }

  Transport* transport_;
  size_t fragment_;
  std::string label_;
  std::map<int, Stream> sends_, recvs_;
  std::deque<std::vector<char>> staged_;
};

}  // namespace

Status make_p2p_task(std::vector<P2POp> ops, Transport* transport, int channel, size_t fragment_bytes,
                     std::string label, std::unique_ptr<Task>* out) {
  if (fragment_bytes <= kHeader) return BRAID_ERROR(ncclInternalError, "fragment size {} too small", fragment_bytes);
  auto task = std::make_unique<P2PTask>(transport, fragment_bytes, std::move(label));
  // A send whose buffer overlaps a receive of the same group (sendrecv in
  // place) must send the data as it was at ncclGroupEnd: stage it first.
  for (P2POp& send : ops) {
    if (!send.is_send || send.bytes == 0) continue;
    for (const P2POp& recv : ops)
      if (!recv.is_send && recv.bytes && send.buffer < recv.buffer + recv.bytes && recv.buffer < send.buffer + send.bytes) {
        send.buffer = task->stage(send.buffer, send.bytes);
        break;
      }
  }
  for (const P2POp& op : ops) BRAID_TRY(task->add(op, channel));
  task->size_slot_rings();
  *out = std::move(task);
  return Status::ok();
}

}  // namespace braid

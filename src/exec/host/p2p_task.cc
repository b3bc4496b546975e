// Point-to-point transfers over fragment pipes.
//
// A message is cut into fragments of the pipe's slot size.  The first
// fragment starts with a header holding the message's total length, so a
// receive posted with a different count fails loudly instead of misaligning
// every later message on that connection.
//
// A message in s slices (to a peer on another host over TCP, where each
// flow may be capped, or over a net on several NICs: HostPaths::p2p_slices)
// is cut into s equal parts, the
// i-th sent on connection channel + i with a header of its own; the parts
// move concurrently, and each connection keeps its messages in issue order.
#include "src/exec/host/p2p_task.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "src/base/log.h"
#include "src/plan/host_tuning.h"

namespace braid {
namespace {

struct Header {
  uint64_t message_bytes;  // the whole message's, in every slice
  uint32_t slices;
  uint32_t slice;
};
constexpr size_t kHeader = sizeof(Header);

struct Part {  // one slice of a message
  char* buffer = nullptr;
  size_t bytes = 0;
  size_t message_bytes = 0;
  size_t elem_bytes = 1;
  uint32_t slices = 1;
  uint32_t slice = 0;
};

struct Stream {  // the ordered sends to, or receives from, one peer on one connection
  std::vector<Part> ops;
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
    const uint32_t slices = std::max<uint32_t>(op.slices, 1);
    for (uint32_t i = 0; i < slices; ++i) {
      Stream& s = (op.is_send ? sends_ : recvs_)[{op.peer, i}];
      if (s.ops.empty()) {
        if (op.is_send) BRAID_TRY(transport_->send_pipe(op.peer, channel + int(i), &s.send));
        else BRAID_TRY(transport_->recv_pipe(op.peer, channel + int(i), &s.recv));
      }
      const size_t lo = op.bytes * i / slices, hi = op.bytes * (i + 1) / slices;
      s.ops.push_back(Part{op.buffer + lo, hi - lo, op.bytes, op.elem_bytes, slices, i});
    }
    return Status::ok();
  }

  // All sends start together: each connection cycles through its share of
  // slots (slots_per_connection).
  void size_slot_rings() {
    const int slots = slots_per_connection(transport_->slots(), int(sends_.size()));
    for (auto& [key, s] : sends_) s.send->use_slots(slots);
  }

  // Keeps a private copy of `bytes` at `data` for the task's lifetime.
  char* stage(const char* data, size_t bytes) {
    staged_.emplace_back(data, data + bytes);
    return staged_.back().data();
  }

  Doorbell* doorbell() const override { return transport_->doorbell(); }

  // "..., waiting on send to 3 (op 1/2), recv from 1 slice 2/4 (op 0/1)": what a timeout names.
  std::string describe() const override {
    std::string out = label_;
    const char* sep = ", waiting on ";
    for (const auto* group : {&sends_, &recvs_})
      for (const auto& [key, s] : *group)
        if (s.index < s.ops.size()) {
          const Part& part = s.ops[s.index];
          const std::string slice = part.slices > 1 ? fmt::format(" slice {}/{}", part.slice + 1, part.slices) : "";
          out += fmt::format("{}{} {}{} (op {}/{})", sep, group == &sends_ ? "send to" : "recv from", key.first,
                             slice, s.index, s.ops.size());
          sep = ", ";
        }
    return out;
  }

  Status poll(bool* progressed, bool* done) override {
    bool all_done = true;
    for (auto& [key, s] : sends_) {
      while (s.index < s.ops.size()) {
        bool moved = false;
        BRAID_TRY(step_send(s, &moved));
        if (!moved) break;
        *progressed = true;
      }
      all_done &= s.index == s.ops.size();
    }
    for (auto& [key, s] : recvs_) {
      while (s.index < s.ops.size()) {
        bool moved = false;
        BRAID_TRY(step_recv(key.first, s, &moved));
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
    const Part& op = s.ops[s.index];
    void* slot = nullptr;
    BRAID_TRY(s.send->try_acquire(&slot, fragment_));
    if (!slot) return Status::ok();
    char* out = static_cast<char*>(slot);
    size_t room = fragment_;
    if (!s.started) {
      const Header header{op.message_bytes, op.slices, op.slice};
      std::memcpy(out, &header, kHeader);
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
    const Part& op = s.ops[s.index];
    const void* data = nullptr;
    size_t bytes = 0;
    BRAID_TRY(s.recv->try_acquire(&data, &bytes));
    if (!data) return Status::ok();
    const char* in = static_cast<const char*>(data);
    if (!s.started) {
      Header header{};
      if (bytes < kHeader) return BRAID_ERROR(ncclInternalError, "short first fragment from rank {}", peer);
      std::memcpy(&header, in, kHeader);
      const uint64_t total = header.message_bytes;
      if (total != op.message_bytes)
        return BRAID_ERROR(ncclInvalidUsage,
                           "rank {} sent {} bytes ({} elements) but the matching ncclRecv expects {} bytes ({} "
                           "elements): count/datatype mismatch",
                           peer, total, total / op.elem_bytes, op.message_bytes, op.message_bytes / op.elem_bytes);
      if (header.slices != op.slices || header.slice != op.slice)
        return BRAID_ERROR(ncclInternalError,
                           "rank {} sent slice {} of {} of a {}-byte message where this rank expects slice {} of {}",
                           peer, header.slice, header.slices, total, op.slice, op.slices);
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
  std::map<std::pair<int, uint32_t>, Stream> sends_, recvs_;  // by (peer, slice)
  std::deque<std::vector<char>> staged_;
};

}  // namespace

Status make_p2p_task(std::vector<P2POp> ops, Transport* transport, int channel, size_t fragment_bytes,
                     std::string label, std::unique_ptr<Task>* out) {
  if (fragment_bytes <= kHeader) return BRAID_ERROR(ncclInternalError, "fragment size {} too small", fragment_bytes);
  const auto sliced = std::count_if(ops.begin(), ops.end(), [](const P2POp& op) { return op.slices > 1; });
  if (sliced) {
    uint32_t most = 0;
    for (const P2POp& op : ops) most = std::max(most, op.slices);
    BRAID_INFO(kP2P, "{}: {} in slices, up to {}", label, sliced, most);
  }
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

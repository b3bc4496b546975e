// GIN messages over pipes (gin_pipes.h).  The receiver serves its senders
// in turns of at most kFragmentsPerTurn fragments each, so a large put
// does not hold the others' signals.  It idles briskly just after traffic
// (yields), then sleeps on the transport's doorbell, which a completed
// receive rings (an InfiniBand completion wakes it at once), or, without
// one, naps as the one-sided RMA receiver does (src/exec/host/rma.cc).
#include "src/runtime/gin_pipes.h"

#include <algorithm>
#include <cstring>
#include <exception>

#include "src/base/deadline.h"
#include "src/base/thread_name.h"
#include "src/transport/doorbell.h"

namespace braid {
namespace {

constexpr int kFragmentsPerTurn = 16;
constexpr uint32_t kBriskPolls = 20000;  // yields after the last fragment (~5 ms)

using Clock = std::chrono::steady_clock;

GinPipeHeader header(GinPipeKind kind, uint64_t handle, uint64_t offset, uint64_t bytes) {
  return GinPipeHeader{kGinPipeMagic, kind, handle, offset, bytes, 0, 0, 0};
}

}  // namespace

Status PipeGinLink::acquire(void** slot) {
  auto last = Clock::now();
  Waiter waiter;
  for (;;) {
    BRAID_TRY(messages_->try_acquire(slot, SendPipe::kWholeSlot));
    if (*slot) return Status::ok();
    if (!gets_.empty()) {  // the target answers nothing more until its answer goes: take it
      const uint64_t landed = gets_landed_, got = answer_got_;
      BRAID_TRY(receive_answers());
      if (gets_landed_ != landed || answer_got_ != got) last = Clock::now();
    }
    if (Clock::now() - last > timeout_)
      return BRAID_ERROR(ncclTimeout, "rank {} took nothing for {} ms (BRAID_TIMEOUT)", target_, timeout_.count());
    waiter.pause();
  }
}

Status PipeGinLink::send(const GinPipeHeader& h, const char* payload, uint64_t payload_bytes, const char* what) {
  if (closed_) return BRAID_ERROR(ncclInvalidUsage, "GIN {} to rank {} after its link was closed", what, target_);
  uint64_t sent = 0;
  for (bool first = true; first || sent < payload_bytes; first = false) {
    void* slot = nullptr;
    Status s = acquire(&slot);
    size_t used = 0;
    if (s.is_ok() && first) {
      std::memcpy(slot, &h, sizeof(h));
      used = sizeof(h);
    }
    const size_t chunk = size_t(std::min<uint64_t>(slot_bytes_ - used, payload_bytes - sent));
    if (s.is_ok() && chunk) s = ops_.copy(static_cast<char*>(slot) + used, payload + sent, chunk);
    if (s.is_ok()) s = messages_->commit(used + chunk);
    if (!s.is_ok()) {
      broken_ = !first;
      return std::move(s).context(fmt::format("GIN {} to rank {}", what, target_));
    }
    sent += chunk;
  }
  return Status::ok();
}

Status PipeGinLink::put(uint64_t dst_handle, uint64_t dst_off, const void* src, uint64_t bytes,
                        const devapi::GinSignalAdd* signal) {
  GinPipeHeader h = header(kGinPut, dst_handle, dst_off, bytes);
  if (signal) h.signal_value = signal->value, h.signal_word = signal->word, h.has_signal = 1;
  return send(h, static_cast<const char*>(src), bytes, "put");
}

Status PipeGinLink::add_at(uint64_t handle, uint64_t off, uint64_t value) {
  GinPipeHeader h = header(kGinVaSignal, handle, off, 0);
  h.signal_value = value;
  return send(h, nullptr, 0, "VA signal");
}

// The answer comes on channel 1, which only the target's receiver writes,
// and only to answer this rank's gets, in their order.
Status PipeGinLink::get(uint64_t src_handle, uint64_t src_off, void* dst, uint64_t bytes) {
  if (gets_.empty()) last_answer_ = Clock::now();  // the wait for an answer starts
  gets_.push_back({static_cast<char*>(dst), bytes, src_handle, src_off});
  ++gets_issued_;
  return send(header(kGinGet, src_handle, src_off, bytes), nullptr, 0, "get");
}

Status PipeGinLink::progress() {
  if (gets_.empty()) return Status::ok();
  Status s = receive_answers();
  if (s.is_ok() && !gets_.empty() && Clock::now() - last_answer_ > timeout_)
    s = BRAID_ERROR(ncclTimeout, "no answer for {} ms (BRAID_TIMEOUT)", timeout_.count());
  if (!s.is_ok()) {
    const PendingGet& g = gets_.front();
    return std::move(s).context(fmt::format("GIN get of [{}, +{}) of window {:#x} from rank {}", g.off, g.bytes,
                                            g.handle, target_));
  }
  return Status::ok();
}

Status PipeGinLink::receive_answers() {
  while (!gets_.empty()) {
    const void* fragment = nullptr;
    size_t bytes = 0;
    BRAID_TRY(answers_->try_acquire(&fragment, &bytes));
    if (!fragment) return Status::ok();
    last_answer_ = Clock::now();
    const PendingGet& g = gets_.front();
    const char* data = static_cast<const char*>(fragment);
    Status s;
    if (!answer_started_) {
      GinPipeHeader h{};
      if (bytes >= sizeof(h)) std::memcpy(&h, data, sizeof(h));
      if (bytes < sizeof(h) || h.magic != kGinPipeMagic || (h.kind != kGinGetReply && h.kind != kGinGetRefused) ||
          (h.kind == kGinGetReply && h.bytes != g.bytes))
        s = BRAID_ERROR(ncclRemoteError, "malformed answer from rank {} ({} bytes, kind {})", target_, bytes, h.kind);
      else if (h.kind == kGinGetRefused)
        s = BRAID_ERROR(ncclInvalidArgument, "outside rank {}'s windows", target_);
      data += sizeof(h);
      bytes -= std::min(bytes, sizeof(h));
      answer_started_ = true;
    }
    if (s.is_ok() && bytes > g.bytes - answer_got_)
      s = BRAID_ERROR(ncclRemoteError, "rank {} answered {} bytes more than asked", target_,
                      bytes - (g.bytes - answer_got_));
    if (s.is_ok() && bytes) s = ops_.copy(g.dst + answer_got_, data, bytes);
    answer_got_ += bytes;
    BRAID_TRY(answers_->release());
    BRAID_TRY(std::move(s));
    if (answer_got_ < g.bytes) continue;
    gets_.pop_front();
    ++gets_landed_;
    answer_started_ = false;
    answer_got_ = 0;
  }
  return Status::ok();
}

Status PipeGinLink::close() {
  if (closed_) return Status::ok();
  if (broken_) {
    closed_ = true;
    return BRAID_ERROR(ncclRemoteError, "GIN link to rank {} ended after a failed message", target_);
  }
  Status s = send(header(kGinClose, 0, 0, 0), nullptr, 0, "close");
  closed_ = true;
  return s;
}

GinPipeReceiver::GinPipeReceiver(std::vector<Sender> senders, size_t slot_bytes, const devapi::GinWindowTable* windows,
                                 devapi::GinSignals signals, devapi::GinFault* fault, std::chrono::milliseconds timeout,
                                 Doorbell* bell)
    : slot_bytes_(slot_bytes), windows_(windows), signals_(signals), fault_(fault), timeout_(timeout), bell_(bell) {
  for (const Sender& s : senders) {
    streams_.emplace_back();
    streams_.back().from = s;
  }
  open_ = streams_.size();
  thread_ = named_thread("braid gin pipes", [this] {
    try {
      run();
    } catch (const std::exception& e) {  // allocation failures in messages: never std::terminate
      fault_->set(BRAID_ERROR(ncclInternalError, "GIN receiver: {}", e.what()));
    }
  });
}

void GinPipeReceiver::stop() {
  stop_.store(true, std::memory_order_release);
  if (thread_.joinable()) thread_.join();
}

bool GinPipeReceiver::serve_all() {
  bool progress = false;
  for (Stream& st : streams_) {
    if (!st.open) continue;
    bool moved = false;
    Status s = advance(st, &moved);
    if (s.is_ok() && !moved) s = check_stalled(st);
    progress |= moved;
    if (!s.is_ok()) {
      fault_->set(std::move(s).context(fmt::format("GIN receiver, from rank {}", st.from.rank)));
      st.open = false;  // nothing more of it is read
    }
    if (!st.open) --open_;
  }
  return progress;
}

void GinPipeReceiver::run() {
  uint32_t idle = 0;
  while (open_ > 0 && !stop_.load(std::memory_order_acquire)) {
    if (serve_all()) {
      idle = 0;
      continue;
    }
    // Brisk just after traffic (a yield costs little when other threads
    // want the core), then asleep until the bell rings (armed, then one
    // more turn, so a fragment that came meanwhile is not slept past; the
    // bell's sleeps are bounded, so stop() is seen), or lazy naps.
    ++idle;
    if (idle < kBriskPolls) {
      std::this_thread::yield();
    } else if (bell_) {
      const uint32_t seen = bell_->arm();
      if (serve_all()) {
        bell_->disarm();
        idle = 0;
      } else {
        bell_->sleep(seen);
      }
    } else if (idle < kBriskPolls + 512) {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
}

// Takes up to kFragmentsPerTurn of the sender's fragments; none while an
// answer to it waits for room.
Status GinPipeReceiver::advance(Stream& st, bool* progress) {
  for (int n = 0; n < kFragmentsPerTurn && st.open; ++n) {
    if (st.answering) BRAID_TRY(continue_answer(st, progress));
    if (st.answering) return Status::ok();
    const void* fragment = nullptr;
    size_t bytes = 0;
    BRAID_TRY(st.from.messages->try_acquire(&fragment, &bytes));
    if (!fragment) return Status::ok();
    *progress = true;
    st.last_progress = Clock::now();
    Status s = take(st, static_cast<const char*>(fragment), bytes);
    BRAID_TRY(st.from.messages->release());
    BRAID_TRY(std::move(s));
  }
  return Status::ok();
}

// One fragment: a message's header (and the start of a put's payload), or
// more of the payload.  A put's signal is applied once all of it is in.
Status GinPipeReceiver::take(Stream& st, const char* data, size_t bytes) {
  if (!st.in_put) {
    GinPipeHeader h{};
    if (bytes >= sizeof(h)) std::memcpy(&h, data, sizeof(h));
    if (bytes < sizeof(h) || h.magic != kGinPipeMagic || h.kind < kGinPut || h.kind > kGinGet ||
        (h.kind != kGinPut && bytes != sizeof(h)))
      return BRAID_ERROR(ncclRemoteError, "malformed GIN message ({} bytes, magic {:#x}, kind {})", bytes, h.magic,
                         h.kind);
    data += sizeof(h);
    bytes -= sizeof(h);
    switch (GinPipeKind(h.kind)) {
      case kGinClose: st.open = false; return Status::ok();
      case kGinVaSignal: {
        char* word = nullptr;
        BRAID_TRY(windows_->resolve(h.handle, h.offset, sizeof(uint64_t), &word));
        return add_to_word(*signals_.ops, word, h.signal_value);
      }
      case kGinGet: start_answer(st, h); return Status::ok();
      default: break;
    }
    st.dst = nullptr;
    if (h.bytes) BRAID_TRY(windows_->resolve(h.handle, h.offset, h.bytes, &st.dst));
    st.put = h;
    st.got = 0;
    st.in_put = true;
  }
  if (bytes > st.put.bytes - st.got)
    return BRAID_ERROR(ncclRemoteError, "a GIN put's fragments hold {} bytes more than its {}",
                       bytes - (st.put.bytes - st.got), st.put.bytes);
  if (bytes) BRAID_TRY(signals_.ops->copy(st.dst + st.got, data, bytes));
  st.got += bytes;
  if (st.got < st.put.bytes) return Status::ok();
  st.in_put = false;
  return st.put.has_signal ? signals_.add(st.put.signal_word, st.put.signal_value) : Status::ok();
}

// Bytes outside this rank's windows are refused to the sender, whose
// descriptor it was; that is no error here.
void GinPipeReceiver::start_answer(Stream& st, const GinPipeHeader& get) {
  char* src = nullptr;
  const bool inside = get.bytes == 0 || windows_->resolve(get.handle, get.offset, get.bytes, &src).is_ok();
  st.answer = header(inside ? kGinGetReply : kGinGetRefused, get.handle, get.offset, get.bytes);
  st.answer_src = src;
  st.answer_header_sent = false;
  st.answer_sent = 0;
  st.answering = true;
}

Status GinPipeReceiver::continue_answer(Stream& st, bool* progress) {
  const uint64_t payload = st.answer.kind == kGinGetReply ? st.answer.bytes : 0;
  while (st.answering) {
    void* slot = nullptr;
    BRAID_TRY(st.from.answers->try_acquire(&slot, SendPipe::kWholeSlot));
    if (!slot) return Status::ok();
    size_t used = 0;
    if (!st.answer_header_sent) {
      std::memcpy(slot, &st.answer, sizeof(st.answer));
      used = sizeof(st.answer);
      st.answer_header_sent = true;
    }
    const size_t chunk = size_t(std::min<uint64_t>(slot_bytes_ - used, payload - st.answer_sent));
    if (chunk) BRAID_TRY(signals_.ops->copy(static_cast<char*>(slot) + used, st.answer_src + st.answer_sent, chunk));
    BRAID_TRY(st.from.answers->commit(used + chunk));
    st.answer_sent += chunk;
    st.answering = st.answer_sent < payload;
    st.last_progress = Clock::now();
    *progress = true;
  }
  return Status::ok();
}

// A message begun and not moving for the timeout: the sender is stuck (or
// gone), and waiters should hear it.  Between messages idle is no error.
Status GinPipeReceiver::check_stalled(const Stream& st) const {
  if (!st.in_put && !st.answering) return Status::ok();
  if (Clock::now() - st.last_progress < timeout_) return Status::ok();
  if (st.answering)
    return BRAID_ERROR(ncclTimeout, "rank {} took nothing of the answer to its GIN get ({} of {} bytes sent) for {} ms",
                       st.from.rank, st.answer_sent, st.answer.bytes, timeout_.count());
  return BRAID_ERROR(ncclTimeout, "rank {}'s GIN put stopped midway ({} of {} bytes) for {} ms", st.from.rank, st.got,
                     st.put.bytes, timeout_.count());
}

}  // namespace braid

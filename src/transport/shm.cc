// Shared-memory transport: one segment per connection (sender, receiver,
// channel), a single-producer single-consumer ring of `slots` slots.
//
// Segment = header (ready flag, geometry; the receiver's `tail` on a line of
// its own) + `slots` slots.  Whichever side arrives first creates it
// (ShmSegment, shm_segment.h: one mapping per process, so ranks that are
// threads share it) and initializes it; the other attaches once it is
// marked ready.
// Setup never blocks: until attached, try_acquire answers "not yet".  The
// second side to attach unlinks the name, so nothing stays in /dev/shm even
// if a process dies later; destructors unlink too (a peer that never came).
//
// Layout, shaped by what small messages cost: on a many-core machine every
// access to a line the other core wrote last is a cross-core miss (~100 ns),
// and a small collective is a chain of fragment hand-overs.  So each slot
// begins with its own 16-byte header (a sequence number and the fragment's
// length) instead of shared counters.  The sender writes data, then length,
// then stores seq = index + 1 (release); the receiver, which knows which
// index comes next, waits for exactly that value (acquire).  index + 1 is
// unique per lap, so a slot still holding the previous lap's fragment never
// looks new, and the zero-filled segment holds no fragment at all.  There is
// no shared head counter.
//
// Where the data goes is the sender's choice, told to the receiver in the
// header: packed, right after the header in the same line, so a receiver
// polling the slot gets flag, length and up to 48 bytes of data in one miss;
// or aligned, from the slot's second line on, 64-byte aligned like the
// caller's buffers (copies between buffers 16 bytes apart split every vector
// load across two lines, measurably slower for large fragments).  The
// sender picks before it knows the length, so it goes by the connection's
// last fragment.  Either way the sender writes in place and the receiver
// reads in place, and slot_bytes() is the data capacity of a slot at
// either offset: kShmSlotFragments fragments of BRAID_SHM_SLOT_BYTES
// (transport.h).
//
// How many of the ring's slots a connection cycles through is the sender's
// choice (use_slots): a call writing to many connections at once uses few
// slots on each, so its fragments pass through memory that stays in cache.
// Each fragment's header says whether the next one is in the following
// slot or back at slot 0 (kWrapsAfter), so the receiver needs no agreement
// on the ring's length and the sender may change it between any two
// fragments.  The sender remembers which fragment it last put in each slot:
// a slot is free once the receiver has released that one.
//
// Flow control: the receiver stores `tail` (fragments released, release
// order) on every release; the sender keeps a private copy and reads the
// shared one only when the next slot looks taken by that copy, i.e. about
// once per lap instead of once per fragment.  The acquire load of `tail`
// orders the receiver's reads of a slot before the sender's next writes to
// it.  Both positions are otherwise private to their side.
//
// A dead peer process (same host, another process) is noticed by asking
// its pidfd (PeerProcesses) while waiting, and reported as ncclRemoteError.
//
// Doorbells (doorbell.h): one more segment per communicator holds a futex
// word per rank; commit rings the receiver's, release the sender's, so an
// idle rank can sleep in the kernel and be woken by exactly the event it
// waits for.  A pipe is usable only once that segment is mapped, so every
// commit and release can ring.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <sched.h>
#include <tuple>
#include <vector>

#include "src/base/deadline.h"

#include "src/base/env.h"
#include "src/base/log.h"
#include "braid/verify.h"
#include "src/transport/doorbell.h"
#include "src/transport/peer_processes.h"
#include "src/transport/shm_segment.h"
#include "src/transport/transport.h"

namespace braid {
namespace {

constexpr uint32_t kReady = 0x5ea1ed;
constexpr uint32_t kLivenessCheckEvery = 1 << 14;  // idle polls between asking whether the peer exited
constexpr uint32_t kClockCheckEvery = 64;          // idle polls between looks at the clock

struct alignas(64) ShmHeader {
  std::atomic<uint32_t> ready;
  std::atomic<uint32_t> attached;
  // The receiving rank's transport is gone: nothing more will be taken, so
  // the sender's close does not wait for its last fragments.
  std::atomic<uint32_t> receiver_gone;
  uint32_t slots;
  uint64_t slot_bytes;
  // Fragments the receiver has released.  Its own line: the receiver writes
  // it on every release, the sender reads it about once per lap.
  alignas(64) std::atomic<uint64_t> tail;
};

// The start of every slot.  The fragment's data follows right after it
// (packed: flag, length and 48 bytes of data share a line), or from the
// slot's second line on (aligned: 64-byte aligned like the caller's buffers).
struct SlotHeader {
  std::atomic<uint64_t> seq;  // index + 1 of the fragment the slot holds; 0: none yet
  uint64_t info;              // its length | kAligned | kWrapsAfter; written before seq, read after it
};
static_assert(sizeof(SlotHeader) == 16 && std::atomic<uint64_t>::is_always_lock_free);
constexpr uint64_t kAligned = uint64_t(1) << 63;
constexpr uint64_t kWrapsAfter = uint64_t(1) << 62;  // the next fragment is in slot 0
constexpr uint64_t kLengthMask = kWrapsAfter - 1;
constexpr size_t kPackedOffset = sizeof(SlotHeader), kAlignedOffset = 64;

// A sender packs the next fragment when the last one was at most this long.
// Measured with 2 processes: a small hand-over is faster packed (one miss
// instead of two), a MiB-sized allreduce faster aligned, and around this
// size the two are nearly level.
constexpr size_t kPackedMaxBytes = 512;

// Distance between slots: room for slot_bytes at either offset, in whole lines.
uint64_t slot_stride(uint64_t slot_bytes) { return kAlignedOffset + (slot_bytes + 63) / 64 * 64; }

// The communicator's doorbells: a header and one DoorbellWord per rank.  Set
// up like a pipe segment (first comer creates, the last local rank to attach
// unlinks the name), without blocking.
class BellSegment {
 public:
  BellSegment(std::string name, int nranks, int local_ranks)
      : name_(std::move(name)), nranks_(nranks), local_ranks_(local_ranks) {}
  ~BellSegment() { ShmSegment::unlink(name_); }  // a rank never attached: ENOENT otherwise
  // Maps the segment; false while it is not there yet.
  Status try_attach(bool* ok) {
    *ok = words_ != nullptr;
    if (*ok) return Status::ok();
    std::shared_ptr<ShmSegment> seg;
    ShmSegment::Opened how;
    BRAID_TRY(ShmSegment::open(name_, bytes(), ShmSegment::Mode::CreateOrAttach, &seg, &how));
    if (!seg) return Status::ok();
    auto* h = static_cast<ShmHeader*>(seg->base());
    if (how == ShmSegment::Opened::Created) {
      h->slots = uint32_t(nranks_);  // a fresh segment is zero-filled: every word starts at 0
      h->attached.store(0);
      h->ready.store(kReady, std::memory_order_release);
    } else if (h->ready.load(std::memory_order_acquire) != kReady) {
      return Status::ok();
    }
    seg_ = std::move(seg);
    words_ = reinterpret_cast<DoorbellWord*>(static_cast<char*>(seg_->base()) + sizeof(ShmHeader));
    if (h->attached.fetch_add(1) + 1 == uint32_t(local_ranks_)) ShmSegment::unlink(name_);
    *ok = true;
    return Status::ok();
  }
  DoorbellWord* word(int rank) const { return words_ + rank; }

 private:
  size_t bytes() const { return sizeof(ShmHeader) + sizeof(DoorbellWord) * size_t(nranks_); }
  const std::string name_;
  const int nranks_, local_ranks_;
  std::shared_ptr<ShmSegment> seg_;
  DoorbellWord* words_ = nullptr;
};

class ShmPipe final : public SendPipe, public RecvPipe {
 public:
  ShmPipe(std::string name, uint32_t slots, uint64_t slot_bytes, int self, int peer, const PeerProcesses* processes,
          const std::atomic<bool>* aborted, BellSegment* bells)
      : name_(std::move(name)), slots_(slots), slot_bytes_(slot_bytes), stride_(slot_stride(slot_bytes)),
        self_(self), peer_(peer), processes_(processes), aborted_(aborted), bells_(bells) {}

  ~ShmPipe() override {
    ShmSegment::unlink(name_);  // the peer never attached, or is gone: ENOENT is fine
  }

  Status try_acquire(void** slot, size_t max_bytes) override {
    *slot = nullptr;
    BRAID_TRY(ready());
    if (!h_) return Status::ok();
    const uint64_t occupant = written_[send_index_];  // seq of the fragment last put there
    if (tail_seen_ < occupant) {
      // Not free by the cached tail: only now look at the receiver's line.
      tail_seen_ = h_->tail.load(std::memory_order_acquire);
      if (tail_seen_ < occupant) return idle();
    }
    const uint64_t offset = data_offset();
    const uint64_t reach = offset + std::min<uint64_t>(max_bytes, slot_bytes_);
    if (reach > populated_[send_index_]) [[unlikely]] {
      BRAID_TRY(seg_->populate(slot_offset(send_index_), reach));
      populated_[send_index_] = reach;
    }
    *slot = reinterpret_cast<char*>(this->slot(send_index_)) + offset;
    return Status::ok();
  }

  Status commit(size_t bytes) override {
    if (data_offset() + bytes > populated_[send_index_]) [[unlikely]]
      return BRAID_ERROR(ncclInternalError, "shm connection with rank {}: a {}-byte fragment in a slot acquired "
                         "for less", peer_, bytes);
    const bool wraps = send_index_ + 1 >= ring_;
    SlotHeader* s = slot(send_index_);
    s->info = bytes | (packed_ ? 0 : kAligned) | (wraps ? kWrapsAfter : 0);
    s->seq.store(++send_, std::memory_order_release);  // index + 1
    written_[send_index_] = send_;
    packed_ = bytes <= kPackedMaxBytes;  // fragments on a connection tend to repeat their size
    send_index_ = wraps ? 0 : send_index_ + 1;
    ring(peer_bell_);
    idle_polls_ = 0;
    return Status::ok();
  }

  void use_slots(int n) override { ring_ = uint32_t(std::clamp<int64_t>(n, kMinSlots, slots_)); }

  Status try_acquire(const void** data, size_t* bytes) override {
    *data = nullptr;
    BRAID_TRY(ready());
    if (!h_) return Status::ok();
    const SlotHeader* s = slot(recv_index_);
    if (s->seq.load(std::memory_order_acquire) != recv_ + 1) {
      Status alive = idle();
      // A peer that committed and then exited left its fragment readable.
      if (!alive.is_ok() && s->seq.load(std::memory_order_acquire) == recv_ + 1) alive = Status::ok();
      return alive;
    }
    const uint64_t info = s->info;
    *data = reinterpret_cast<const char*>(s) + (info & kAligned ? kAlignedOffset : kPackedOffset);
    *bytes = info & kLengthMask;
    return Status::ok();
  }

  // Bytes of the pipe's segment allocated in /dev/shm (0 until attached: a
  // ring holds only the slots' parts its fragments reached); read by any
  // thread (ncclCommMemStats), hence its own flag.
  uint64_t held_bytes() const { return attached_.load(std::memory_order_acquire) ? seg_->resident_bytes() : 0; }

  // Nothing sent is left for the receiver to take: it took everything, or
  // its transport is gone (or nothing was ever sent).
  bool drained() const {
    return !h_ || h_->tail.load(std::memory_order_acquire) == send_ ||
           h_->receiver_gone.load(std::memory_order_acquire);
  }
  // Called by the receiving end's transport as it closes.
  void receiver_leaves() {
    if (h_) h_->receiver_gone.store(1, std::memory_order_release);
  }
  bool peer_alive() const { return !processes_->exited(peer_); }

  Status release() override {
    // The slot is still ours until `tail` moves: its header says where the next fragment is.
    recv_index_ = slot(recv_index_)->info & kWrapsAfter ? 0 : recv_index_ + 1;
    h_->tail.store(++recv_, std::memory_order_release);
    ring(peer_bell_);
    idle_polls_ = 0;
    return Status::ok();
  }

 private:
  size_t map_bytes() const { return sizeof(ShmHeader) + slots_ * stride_; }
  size_t slot_offset(uint32_t index) const { return sizeof(ShmHeader) + index * stride_; }
  // Where in its slot fragment send_'s data goes.
  uint64_t data_offset() const { return packed_ ? kPackedOffset : kAlignedOffset; }
  SlotHeader* slot(uint32_t index) const { return reinterpret_cast<SlotHeader*>(slots_base_ + index * stride_); }

  // Checked on every try_acquire, so kept small enough to inline; attach()
  // does the rest once.
  Status ready() {
    if (aborted_->load(std::memory_order_relaxed))
      return BRAID_ERROR(ncclSystemError, "shm connection with rank {}: communicator aborted", peer_);
    if (h_) [[likely]] return Status::ok();
    return attach();
  }

  // Creates or attaches the segment; leaves h_ null while the peer is not there yet.
  [[gnu::noinline]] Status attach() {
    bool bells_ok = false;
    BRAID_TRY(bells_->try_attach(&bells_ok));
    if (!bells_ok) return idle();
    peer_bell_ = bells_->word(peer_);
    std::shared_ptr<ShmSegment> seg;
    ShmSegment::Opened how;
    BRAID_TRY(ShmSegment::open(name_, map_bytes(), ShmSegment::Mode::CreateOrAttach, &seg, &how, sizeof(ShmHeader)));
    if (!seg) return idle();
    auto* h = static_cast<ShmHeader*>(seg->base());
    char* slots = static_cast<char*>(seg->base()) + sizeof(ShmHeader);
    if (how == ShmSegment::Opened::Created) {
      // Every slot's first line, which the receiver polls; the sender
      // populates the rest of a slot as far as its fragments reach.
      for (uint32_t i = 0; i < slots_; ++i) {
        if (Status s = seg->populate(slot_offset(i), kAlignedOffset); !s.is_ok()) {
          ShmSegment::unlink(name_);  // never ready: the peer makes it anew, or fails as this did
          return s;
        }
      }
      h->slots = slots_;
      h->slot_bytes = slot_bytes_;
      h->tail.store(0);  // and every slot's seq is 0 in a fresh (zero-filled) segment
      h->attached.store(0);
      h->receiver_gone.store(0);
      h->ready.store(kReady, std::memory_order_release);
    } else if (h->ready.load(std::memory_order_acquire) != kReady) {
      return idle();
    }
    if (h->slots != slots_ || h->slot_bytes != slot_bytes_) {
      return BRAID_ERROR(ncclInvalidUsage, "shm geometry differs between ranks ({}x{} vs {}x{}): set "
                         "BRAID_SHM_SLOTS / BRAID_SHM_SLOT_BYTES the same everywhere", h->slots, h->slot_bytes,
                         slots_, slot_bytes_);
    }
    seg_ = std::move(seg);
    h_ = h;
    slots_base_ = slots;
    // The name goes once both ends have mapped it; a pipe to oneself is
    // both ends, mapped once (its name stayed in /dev/shm after a process
    // that ended without ncclCommDestroy).
    if (h_->attached.fetch_add(1) + 1 == (peer_ == self_ ? 1u : 2u)) ShmSegment::unlink(name_);
    attached_.store(true, std::memory_order_release);
    return Status::ok();
  }

  // Nothing to do yet; now and then make sure the peer process still exists.
  // Counted in polls and in time: a rank sleeping on its doorbell polls
  // rarely, and must still notice a dead peer promptly.
  Status idle() {
    if (++idle_polls_ % kClockCheckEvery != 0) return Status::ok();
    auto now = std::chrono::steady_clock::now();
    if (idle_polls_ % kLivenessCheckEvery != 0 && now - last_liveness_ < std::chrono::milliseconds(50))
      return Status::ok();
    last_liveness_ = now;
    if (processes_->exited(peer_))
      return BRAID_ERROR(ncclRemoteError, "rank {} (pid {}) exited while connected by shared memory", peer_,
                         processes_->pid(peer_));
    return Status::ok();
  }

  const std::string name_;
  const uint32_t slots_;
  const uint64_t slot_bytes_;
  const uint64_t stride_;
  const int self_, peer_;
  const PeerProcesses* processes_;
  const std::atomic<bool>* aborted_;
  BellSegment* bells_;
  DoorbellWord* peer_bell_ = nullptr;
  std::shared_ptr<ShmSegment> seg_;
  ShmHeader* h_ = nullptr;
  char* slots_base_ = nullptr;
  // Private positions.  A pipe to oneself is both ends, so they are kept apart.
  uint64_t send_ = 0;                // sender: fragments committed
  uint64_t tail_seen_ = 0;           // sender: the receiver's tail when last read
  uint32_t send_index_ = 0;          // sender: slot of fragment send_
  uint32_t ring_ = slots_;           // sender: slots it cycles through (use_slots)
  std::vector<uint64_t> written_ = std::vector<uint64_t>(slots_);  // sender: per slot, seq last put there
  // sender: per slot, bytes from its start known populated (the first line by the creator)
  std::vector<uint64_t> populated_ = std::vector<uint64_t>(slots_, kAlignedOffset);
  bool packed_ = true;               // sender: where fragment send_'s data goes
  uint64_t recv_ = 0;                // receiver: fragments released
  uint32_t recv_index_ = 0;          // receiver: slot of fragment recv_
  uint32_t idle_polls_ = 0;
  std::chrono::steady_clock::time_point last_liveness_{};
  std::atomic<bool> attached_{false};
};

class ShmTransport final : public Transport {
 public:
  explicit ShmTransport(const TransportContext& ctx)
      : ctx_(ctx),
        processes_(PeerProcesses::of(ctx)),
        slots_(uint32_t(std::max<int64_t>(kMinSlots, env_int("BRAID_SHM_SLOTS")))),
        slot_bytes_(kShmSlotFragments *
                    (uint64_t(std::max<int64_t>(kMinFragmentBytes, env_int("BRAID_SHM_SLOT_BYTES"))) / 64 * 64)),
        bells_(fmt::format("/braid-{:016x}-bells", ctx.comm_hash), ctx.nranks, ranks_on_host(ctx.peers, ctx.rank)),
        polls_(idle_polls_for(ranks_on_machine(ctx.peers, ctx.rank))) {}

  Doorbell* doorbell() override {
    if (!bell_) {
      bool ok = false;
      if (!bells_.try_attach(&ok).is_ok() || !ok) return nullptr;
      bell_.emplace(bells_.word(ctx_.rank), polls_);
    }
    return &*bell_;
  }

  // The last fragments of a collective may still sit in a segment the peer
  // has not even attached yet; unmapping and unlinking now would lose them
  // (the peer would create a fresh segment under the name and wait for
  // ever).  Wait until every live peer has taken what we sent: up to
  // BRAID_TIMEOUT, or 1 s after an abort, which must stay prompt but is
  // also how a job ends right after a collective that finished here first
  // (seen: ncclCommRevoke + ncclCommAbort after a non-blocking AllReduce
  // lost a peer its last fragment about once in four runs).
  ~ShmTransport() override {
    // This rank takes nothing more: its senders need not wait for it (an
    // RMA goodbye to a rank that closed first waited out the second below).
    for (auto& [key, pipe] : pipes_)
      if (std::get<1>(key) == ctx_.rank && std::get<0>(key) != ctx_.rank) pipe->receiver_leaves();
    Deadline deadline = aborted_.load() ? Deadline::after(std::chrono::seconds(1))
                                        : Deadline::after(std::chrono::seconds(env_int("BRAID_TIMEOUT")));
    Waiter waiter;
    for (auto& [key, pipe] : pipes_) {
      if (std::get<0>(key) != ctx_.rank || std::get<1>(key) == ctx_.rank) continue;
      while (!pipe->drained() && pipe->peer_alive() && !deadline.expired()) waiter.pause();
    }
  }

  const char* name() const override { return "shm"; }
  uint64_t bytes_held() const override {
    uint64_t bytes = 0;
    for (const auto& [key, pipe] : pipes_) bytes += pipe->held_bytes();
    return bytes;
  }
  size_t slot_bytes() const override { return slot_bytes_; }
  int slots() const override { return int(slots_); }
  void abort() override { aborted_.store(true); }

  Status send_pipe(int peer, int channel, SendPipe** out) override {
    *out = pipe(ctx_.rank, peer, channel, peer);
    return Status::ok();
  }
  Status recv_pipe(int peer, int channel, RecvPipe** out) override {
    *out = pipe(peer, ctx_.rank, channel, peer);
    return Status::ok();
  }

 private:
  ShmPipe* pipe(int from, int to, int channel, int peer) {
    auto& p = pipes_[{from, to, channel}];
    if (!p) {
      std::string name = fmt::format("/braid-{:016x}-{}-{}-{}", ctx_.comm_hash, from, to, channel);
      p = std::make_unique<ShmPipe>(name, slots_, slot_bytes_, ctx_.rank, peer, processes_.get(), &aborted_,
                                    &bells_);
    }
    return p.get();
  }

  TransportContext ctx_;
  const std::shared_ptr<const PeerProcesses> processes_;  // outlives the pipes, which point to it
  const uint32_t slots_;
  const uint64_t slot_bytes_;
  std::atomic<bool> aborted_{false};
  BellSegment bells_;
  const IdlePolls polls_;
  std::optional<FutexDoorbell> bell_;
  std::map<std::tuple<int, int, int>, std::unique_ptr<ShmPipe>> pipes_;
};

}  // namespace

Status make_shm_transport(const TransportContext& ctx, std::unique_ptr<Transport>* out) {
  *out = std::make_unique<ShmTransport>(ctx);
  return Status::ok();
}

}  // namespace braid

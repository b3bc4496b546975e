// One-sided RMA on the host backend (ncclPutSignal, ncclSignal,
// ncclWaitSignal; NCCL 2.29), between processes on one host and across
// hosts.
//
// Each communicator that uses RMA gets its own connections for it: a
// transport of its own (shared memory to the ranks of this host; to the
// others InfiniBand verbs or a net plugin where the communicator has one,
// else sockets, as the communicator's; its own segments and listener), one
// connection per ordered pair of ranks.  A write is a message on the
// writer's connection to the target: a header (window, offset, length,
// signal) and the data, cut into fragments of the transport's slot size.
// At the target a receiver thread (NCCL's CPU proxy, in its words) takes
// the messages of every peer in arrival order, copies the data into the
// target's own part of the window and only then raises the signal, so a
// rank that saw the signal sees the data.  Nothing of the target's
// application thread takes part: the put is one-sided.
//
// Signals are counters per (context, signal index, source rank).  A wait
// for n signals from a peer returns once n more than were consumed have
// arrived, and consumes them, bounded by BRAID_TIMEOUT (ncclTimeout).
// Writes from one rank to another land in issue order (so every window
// has NCCL_WIN_STRICT_ORDERING's ordering).
//
// Writes to oneself are copied and signalled in place.  A write waits for
// room on its connection (the target's receiver drains it), bounded by
// BRAID_TIMEOUT.  A destroyed (not aborted) communicator says goodbye on
// each connection that has room, so that its peers, which may still run,
// do not report the connections' end as a failure, and a wait for signals
// it never sent fails at once (ncclRemoteError) instead of at the timeout.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "src/base/status.h"
#include "src/exec/backend.h"

namespace braid {

class RmaEngine {
 public:
  // Connects every rank for one-sided traffic.  Collective over the
  // communicator's ranks (a bootstrap allgather of the listeners).
  static Status start(const BackendContext& ctx, std::unique_ptr<RmaEngine>* out);
  ~RmaEngine();

  // A window every rank registered, and one this rank dropped.
  void add_window(const WindowInfo& window);
  void remove_window(uint64_t seq);

  Status write(const RmaCall& call);
  // Bounded by bound_ms, or BRAID_TIMEOUT when 0.
  Status wait(const std::vector<SignalWait>& waits, int64_t bound_ms = 0);
  uint64_t signals_pending() const;
  uint64_t bytes_held() const;

  // The wire format, public for the unit tests.
  struct Header {
    uint32_t magic;
    int32_t ctx;
    int32_t signal;
    uint32_t to_window;  // 0: a signal alone
    uint64_t window_seq;
    uint64_t offset;
    uint64_t bytes;  // data that follows, here and in the next fragments
  };
  static constexpr uint32_t kMagic = 0x726d6131;  // "rma1"
  // A header alone, the last message of a rank whose communicator is being
  // destroyed: the end of its stream that follows is a departure, not a
  // failure (a killed rank sends none, and its end stays an error).
  static constexpr uint32_t kGoodbye = 0x726d6130;  // "rma0"

 private:
  struct Window {
    char* base = nullptr;             // this rank's part
    std::vector<uint64_t> sizes;      // every rank's size, for checking writes
  };
  // A message being received from one peer.
  struct Incoming {
    bool active = false;
    Header header{};
    char* dest = nullptr;  // where the next data byte goes (nullptr: dropped)
    uint64_t left = 0;
  };

  RmaEngine(const BackendContext& ctx, std::unique_ptr<Transport> transport);
  Status connect();
  void say_goodbye();
  void receive_loop();
  Status receive_one(int peer, bool* progress);
  Status land(int peer, Incoming& in, const char* data, size_t bytes);
  void raise(int ctx, int signal, int from);
  std::atomic<uint64_t>& arrived(int ctx, int signal, int from) {
    return arrived_[(size_t(ctx) * rma_signals_ + size_t(signal)) * size_t(nranks_) + size_t(from)];
  }
  Status check_signal(const char* what, int peer, int ctx, int signal) const;
  Status failure() const;

  const BackendContext ctx_;
  const int rank_, nranks_, rma_contexts_, rma_signals_;
  std::unique_ptr<Transport> transport_;
  std::vector<SendPipe*> send_;
  std::vector<RecvPipe*> recv_;
  std::vector<Incoming> incoming_;  // receiver thread only
  // The peer said goodbye (set by the receiver after landing everything it
  // sent before, so a signal not arrived then never will; waiters read it).
  std::unique_ptr<std::atomic<uint8_t>[]> departed_;
  std::unique_ptr<std::atomic<uint64_t>[]> arrived_;
  std::vector<uint64_t> consumed_;  // the waiting (application) thread only

  mutable std::mutex windows_mutex_;  // the application thread adds, the receiver reads
  std::map<uint64_t, Window> windows_;

  std::mutex signal_mutex_;
  std::condition_variable signal_cv_;
  std::atomic<int> waiters_{0};  // the receiver polls briskly while someone waits
  mutable std::mutex error_mutex_;
  Status error_;  // the receiver's first failure, sticky
  std::atomic<bool> failed_{false};
  std::atomic<bool> stop_{false};
  std::thread receiver_;
};

}  // namespace braid

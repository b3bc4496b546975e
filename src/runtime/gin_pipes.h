// GIN between hosts over a transport's pipes (src/transport/transport.h):
// the communicator's network, InfiniBand verbs or an NCCL net plugin,
// through braid's net transport.  (Sockets keep their own link,
// src/devapi/gin_tcp.h, which has TLS.)
//
// Each ordered pair of ranks on different hosts has two connections of a
// transport of GIN's own: channel 0 carries the sender's messages to the
// target, channel 1 the target's answers to the sender's gets.  A message
// is a fixed header (a put, a VA signal, a get, the close) followed by the
// put's payload, cut into fragments of the transport's slot size.  At the
// target one receiver thread takes every sender's fragments in order,
// copies a put's payload into the window and only then applies its signal
// add: a pipe is a FIFO, so a signal is visible only after the payload of
// its put and of every earlier put on the link, the order gin_link.h
// promises.  A get's answer goes back on channel 1 as room comes; the
// receiver reads nothing more of that sender meanwhile (so a later put
// cannot reach the bytes first), and a sender waiting for room reads
// answers, so neither end waits on the other.  Bytes pass through the
// memory's GinMemoryOps between the slots (host memory) and the windows
// (host or device).  Every wait counts time without progress, bounded by
// BRAID_TIMEOUT; a peer that is gone is the transport's error, reported
// through the GinFault.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <thread>
#include <vector>

#include "src/devapi/gin_link.h"
#include "src/devapi/gin_memory.h"
#include "src/transport/transport.h"

namespace braid {

constexpr int kGinMessageChannel = 0;
constexpr int kGinAnswerChannel = 1;

// A message's header, at the start of its first fragment.
struct GinPipeHeader {
  uint32_t magic;
  uint32_t kind;  // GinPipeKind
  uint64_t handle;
  uint64_t offset;
  uint64_t bytes;  // a put's or an answer's payload; what a get asks for
  uint64_t signal_value;
  uint32_t signal_word;
  uint32_t has_signal;
};
enum GinPipeKind : uint32_t { kGinPut = 1, kGinClose, kGinVaSignal, kGinGet, kGinGetReply, kGinGetRefused };
constexpr uint32_t kGinPipeMagic = 0x70676962;  // "bigp"

class PipeGinLink : public devapi::GinLink {
 public:
  // messages: channel 0 to `target`; answers: channel 1 from it.  ops: how
  // to read this rank's windows (put sources) and write them (gets).
  PipeGinLink(SendPipe* messages, RecvPipe* answers, size_t slot_bytes, int target, std::chrono::milliseconds timeout,
              const devapi::GinMemoryOps& ops)
      : messages_(messages), answers_(answers), slot_bytes_(slot_bytes), target_(target), timeout_(timeout),
        ops_(ops) {}
  Status put(uint64_t dst_handle, uint64_t dst_off, const void* src, uint64_t bytes,
             const devapi::GinSignalAdd* signal) override;
  Status add_at(uint64_t handle, uint64_t off, uint64_t value) override;
  Status get(uint64_t src_handle, uint64_t src_off, void* dst, uint64_t bytes) override;
  Status progress() override;
  Status close() override;
  void abort() override { closed_ = true; }

 private:
  Status send(const GinPipeHeader& h, const char* payload, uint64_t payload_bytes, const char* what);
  // The next free slot, waiting for room (landing answers meanwhile).
  Status acquire(void** slot);
  Status receive_answers();

  struct PendingGet {
    char* dst;
    uint64_t bytes, handle, off;
  };
  SendPipe* messages_;
  RecvPipe* answers_;
  size_t slot_bytes_;
  int target_;
  std::chrono::milliseconds timeout_;
  const devapi::GinMemoryOps& ops_;
  bool closed_ = false;
  bool broken_ = false;  // a message went out in part: a close would be read as its payload
  std::deque<PendingGet> gets_;  // in flight, oldest first, as their answers come
  bool answer_started_ = false;  // the oldest's answer header has come
  uint64_t answer_got_ = 0;      // of its payload
  std::chrono::steady_clock::time_point last_answer_{};
};

class GinPipeReceiver {
 public:
  struct Sender {
    int rank;
    RecvPipe* messages;  // channel 0 from it
    SendPipe* answers;   // channel 1 to it
  };
  // Applies every sender's messages to this rank's windows and signals, on
  // its own thread, until each has closed or stop().  `bell` (may be null):
  // the pipes' transport's, which an idle receiver sleeps on until a
  // fragment comes (else it naps).
  GinPipeReceiver(std::vector<Sender> senders, size_t slot_bytes, const devapi::GinWindowTable* windows,
                  devapi::GinSignals signals, devapi::GinFault* fault, std::chrono::milliseconds timeout,
                  Doorbell* bell = nullptr);
  ~GinPipeReceiver() { stop(); }
  void stop();

 private:
  struct Stream {
    Sender from;
    bool open = true;
    bool in_put = false;  // a put's payload is arriving
    GinPipeHeader put{};
    char* dst = nullptr;
    uint64_t got = 0;
    bool answering = false;  // a get's answer is going out
    GinPipeHeader answer{};
    const char* answer_src = nullptr;
    bool answer_header_sent = false;
    uint64_t answer_sent = 0;  // of its payload
    std::chrono::steady_clock::time_point last_progress;
  };
  void run();
  // One turn over every open sender: whether anything moved.
  bool serve_all();
  Status advance(Stream& st, bool* progress);
  Status take(Stream& st, const char* data, size_t bytes);
  void start_answer(Stream& st, const GinPipeHeader& get);
  Status continue_answer(Stream& st, bool* progress);
  Status check_stalled(const Stream& st) const;

  std::vector<Stream> streams_;  // the thread's alone
  size_t open_ = 0;              // of them
  size_t slot_bytes_;
  const devapi::GinWindowTable* windows_;
  devapi::GinSignals signals_;
  devapi::GinFault* fault_;
  std::chrono::milliseconds timeout_;
  Doorbell* bell_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace braid

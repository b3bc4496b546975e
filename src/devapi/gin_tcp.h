// GIN between processes over TCP: for ranks whose memory this process
// cannot map (other hosts; any host when asked).
//
// One stream per (sender, target).  A put is one frame, a fixed header and
// the payload; the target's receiver thread writes the payload into the
// resolved window and only then applies the frame's signal add, frame after
// frame in stream order, so TCP's FIFO gives the put-before-signal order of
// every earlier put on the stream.  A VA signal is a header alone, applied
// in the same order.  A get is a header the receiver answers on the same
// stream, back to the sender, with the bytes (or a refusal, when they are
// outside the target's windows).  Neither end blocks on an answer: the
// sender goes on with its other descriptors and lands answers as they come
// (a flush waits for them), and the receiver sends one as the socket takes
// it, reading nothing more from that stream meanwhile (its other streams go
// on), so the sender's later puts cannot reach the bytes before they left.
// A sender writing while an answer waits for it reads it as it writes.
// Where the host cannot load and store window memory (a GPU's), payloads
// pass through a host staging buffer and the GinMemoryOps' copies.
// A stream that ends without its close frame means the sender died: the
// receiver reports it through the GinFault, which ends every bounded wait
// on this rank with that error.  With TLS on (ncclSetEncryption) each end
// runs the stream's TlsSession in its own thread (the proxy's, the
// receiver's): the same frames, encrypted, with no relay in between.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "src/base/deadline.h"
#include "src/base/tls_session.h"
#include "src/devapi/gin_link.h"

namespace braid::devapi {

// A frame's header on the wire: a put (its payload follows) or the close.
struct GinTcpFrame {
  uint32_t magic;
  uint32_t kind;
  uint64_t dst_handle;
  uint64_t dst_off;
  uint64_t bytes;
  uint64_t signal_value;
  uint32_t signal_word;
  uint32_t has_signal;
};

class TcpGinLink : public GinLink {
 public:
  // fd: a connected stream to the target's receiver (owned from here on);
  // ops: how to read this rank's windows (put sources, get destinations).
  // tls: the stream's session, with TLS on (ncclSetEncryption), handshaken.
  TcpGinLink(int fd, int target, std::chrono::milliseconds timeout, const GinMemoryOps& ops = host_gin_memory(),
             std::unique_ptr<TlsSession> tls = nullptr)
      : fd_(fd), target_(target), timeout_(timeout), ops_(ops), tls_(std::move(tls)) {}
  ~TcpGinLink() override;
  Status put(uint64_t dst_handle, uint64_t dst_off, const void* src, uint64_t bytes,
             const GinSignalAdd* signal) override;
  Status add_at(uint64_t handle, uint64_t off, uint64_t value) override;
  Status get(uint64_t src_handle, uint64_t src_off, void* dst, uint64_t bytes) override;
  Status progress() override;
  // After a put that failed (its frame may be half sent), close() aborts:
  // a close frame would then be read as payload.
  Status close() override;
  void abort() override;

  // The first bytes on a new stream: the sender's world rank.
  static Status send_hello(int fd, int rank, Deadline deadline, TlsSession* tls = nullptr);

 private:
  Status send_frame(const GinTcpFrame& f, const void* payload, const char* what);
  // Sends all of [p, p + bytes), landing answers as they arrive meanwhile.
  Status send_bytes(const char* p, uint64_t bytes);
  // Lands what has arrived of the answers to the gets in flight.
  Status receive_answers();

  struct PendingGet {
    char* dst;
    uint64_t bytes, handle, off;
  };
  int fd_;
  int target_;
  bool broken_ = false;
  std::chrono::milliseconds timeout_;
  const GinMemoryOps& ops_;
  std::unique_ptr<TlsSession> tls_;
  std::deque<PendingGet> gets_;  // in flight, oldest first, as their answers come
  GinTcpFrame answer_{};         // the oldest's answer header, as it arrives
  uint64_t answer_got_ = 0;      // of it: header bytes, then payload bytes
  std::chrono::steady_clock::time_point last_answer_{};
  // Where the host cannot reach window memory: a put's piece going out,
  // an answer's piece coming in.
  std::vector<char> send_stage_, recv_stage_;
};

class GinTcpReceiver {
 public:
  // Applies the frames arriving on `fds` (one per sender, each already past
  // its hello; sender_of[i] is fds[i]'s rank) to this rank's windows and
  // signals, on its own thread, until every sender has closed or stop().
  // The signals' ops are how it writes windows and signals.
  // tls[i]: fds[i]'s session, with TLS on (ncclSetEncryption), handshaken.
  GinTcpReceiver(std::vector<int> fds, std::vector<int> sender_of, const GinWindowTable* windows, GinSignals signals,
                 GinFault* fault, std::chrono::milliseconds timeout, std::vector<std::unique_ptr<TlsSession>> tls = {});
  ~GinTcpReceiver();
  void stop();
  // Reads a hello: which rank (of nranks) a freshly accepted stream comes from.
  static Status recv_hello(int fd, int nranks, Deadline deadline, int* rank, TlsSession* tls = nullptr);

 private:
  // One sender's stream and how far its current frame has come.
  struct Stream {
    int fd = -1;
    std::unique_ptr<TlsSession> tls;
    int sender = -1;
    GinTcpFrame frame{};  // its header, as it arrives
    size_t header_got = 0;
    char* dst = nullptr;  // where the payload goes, once the header is in
    uint64_t payload_got = 0;
    std::chrono::steady_clock::time_point last_progress;
    // A get's answer going out; the stream is not read until it is sent.
    bool answering = false;
    GinTcpFrame answer{};
    const char* answer_src = nullptr;  // the window bytes asked for
    uint64_t answer_sent = 0;          // of the header, then the payload
    std::vector<char> answer_stage;    // where the host cannot reach window memory
    uint64_t staged_from = 0, staged_to = 0;  // the payload bytes in answer_stage
  };
  void run();
  void serve();
  Status advance(size_t i, bool* closed);
  // Resolves the get in st.frame and starts its answer (or refusal).
  void start_answer(Stream& st);
  // Sends what the socket takes of stream i's answer.
  Status continue_answer(size_t i);
  Status check_stalled(size_t i) const;

  std::vector<Stream> streams_;
  const GinWindowTable* windows_;
  GinSignals signals_;
  GinFault* fault_;
  std::chrono::milliseconds timeout_;
  std::atomic<bool> stop_{false};
  std::vector<char> stage_;  // when the host cannot reach window memory
  std::thread thread_;
};

}  // namespace braid::devapi

// One rank's GIN workload for the proxy tests, run the same way by ranks
// that are threads (direct links) and processes (shared memory or TCP).
//
// Every rank puts K chunks to every rank (itself included) of varied sizes
// into the target's receive window, counting each with a counter and
// signalling every fifth put (and the last) with SignalAdd of the puts
// since the previous signal: after sender s's put k, its signal reads k+1.
// While that runs the rank, as a receiver, watches each sender's signal
// and, every time it sees a new value v, checks that sender's first v
// chunks are complete, byte for byte, with nothing past their end: the
// ordering the header promises (a signal visible only after its put's
// payload and every earlier one).  Then an inline putValue with SignalInc
// and a signal-only SignalAdd, counters after a flush, and exact final
// contents.  No Catch2: returns what went wrong, empty when nothing did.
#pragma once

#include <cstring>
#include <string>
#include <thread>

#include "gin_device_producer.h"
#include "src/devapi/gin_memory.h"

namespace devapi_test {

constexpr uint64_t kSendToken = 1, kRecvToken = 2;  // symmetric GIN window tokens
constexpr int kRounds = 40;
constexpr size_t kChunk = 256;
constexpr uint64_t kInlineMagic = 0x0badc0ffee0ddf00ull;

inline size_t send_bytes(int n) { return size_t(kRounds) * n * kChunk; }
// Per sender: kRounds chunks, then 8 bytes for the inline value.
inline size_t recv_bytes(int n) { return size_t(n) * (kRounds * kChunk + 64); }
inline uint32_t signal_count(int n) { return 2 * uint32_t(n); }  // s: puts; n + s: inline + signal-only
inline size_t put_size(int k) { return kChunk - size_t(k % 7) * 24; }
inline uint64_t word(int sender, int target, int k, size_t i) {
  return (uint64_t(sender + 1) << 48) | (uint64_t(target) << 40) | (uint64_t(k) << 20) | i;
}
inline size_t recv_offset(int sender, int k) { return size_t(sender) * (kRounds * kChunk + 64) + size_t(k) * kChunk; }

inline void fill_send(int rank, int n, char* send) {
  for (int k = 0; k < kRounds; ++k)
    for (int t = 0; t < n; ++t) {
      auto* w = reinterpret_cast<uint64_t*>(send + (size_t(k) * n + t) * kChunk);
      for (size_t i = 0; i < kChunk / 8; ++i) w[i] = word(rank, t, k, i);
    }
}

// Is chunk k from `sender` exactly there (and nothing past its size)?
inline std::string check_chunk(int me, int sender, int k, const char* recv) {
  const auto* w = reinterpret_cast<const uint64_t*>(recv + recv_offset(sender, k));
  const size_t words = put_size(k) / 8;
  for (size_t i = 0; i < kChunk / 8; ++i) {
    const uint64_t want = i < words ? word(sender, me, k, i) : 0;
    const uint64_t got = __atomic_load_n(&w[i], __ATOMIC_RELAXED);
    if (got != want)
      return "rank " + std::to_string(me) + ": chunk " + std::to_string(k) + " from " + std::to_string(sender) +
             " word " + std::to_string(i) + " is " + std::to_string(got) + ", want " + std::to_string(want);
  }
  return {};
}

// The device side of this rank: every put, then the inline and signal-only posts, then flush.
inline std::string produce(int rank, int n, DeviceProducer& dev) {
  using namespace braid::devapi;
  for (int k = 0; k < kRounds; ++k)
    for (int t = 0; t < n; ++t) {
      Gfd g = put_gfd(kSendToken, (size_t(k) * n + t) * kChunk, kRecvToken, recv_offset(rank, k), put_size(k));
      g.op |= kGfdWithCounter;
      g.counter_id = uint16_t(t);
      if (k % 5 == 4 || k == kRounds - 1) {
        g.op |= kGfdWithSignalAdd;
        g.signal_id = uint16_t(rank);
        g.signal_value = uint64_t(k + 1 - (k / 5) * 5);  // the puts since the previous signal
      }
      if (!dev.post(t, g)) return "rank " + std::to_string(rank) + ": no credits for put " + std::to_string(k);
    }
  for (int t = 0; t < n; ++t) {
    Gfd v;
    v.op = kGfdPut | kGfdWithInline | kGfdWithSignalInc;
    v.size = 8;
    v.inline_value = kInlineMagic + uint64_t(rank);
    v.dst_handle = kRecvToken;
    v.dst_off = recv_offset(rank, kRounds);
    v.signal_id = uint16_t(n + rank);
    Gfd s;
    s.op = kGfdPut | kGfdWithSignalAdd;
    s.signal_id = uint16_t(n + rank);
    s.signal_value = 10;
    if (!dev.post(t, v) || !dev.post(t, s)) return "rank " + std::to_string(rank) + ": no credits for the tail";
  }
  if (!dev.flush()) return "rank " + std::to_string(rank) + ": flush timed out";
  return {};
}

// Runs the producer on its own thread (the device) while this thread
// checks arrivals; returns the first failure.
inline std::string run_workload(int rank, int n, const GinQueues& q, const braid::devapi::GinSignals& signals,
                                const char* recv, const braid::devapi::GinFault& fault) {
  using namespace braid::devapi;
  DeviceProducer dev(q);
  std::string produced;
  std::thread device([&] { produced = produce(rank, n, dev); });
  std::string bad;
  std::vector<uint64_t> seen(n, 0);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (bool done = false; !done && bad.empty();) {
    done = true;
    for (int s = 0; s < n && bad.empty(); ++s) {
      const uint64_t v = __atomic_load_n(&signals.words[s], __ATOMIC_ACQUIRE);
      if (v > uint64_t(kRounds)) bad = "signal " + std::to_string(s) + " overshot: " + std::to_string(v);
      for (uint64_t k = seen[s]; k < v && bad.empty(); ++k) bad = check_chunk(rank, s, int(k), recv);
      seen[s] = v;
      if (v < uint64_t(kRounds)) done = false;
    }
    if (fault.failed()) bad = "proxy fault: " + fault.get().to_string();
    if (std::chrono::steady_clock::now() > until) bad = "rank " + std::to_string(rank) + ": signals never arrived";
    std::this_thread::yield();
  }
  for (int s = 0; s < n && bad.empty(); ++s) {
    braid::Status st = wait_signal(signals, uint16_t(n + s), 11, braid::Deadline::after(std::chrono::seconds(30)), &fault);
    if (!st.is_ok()) bad = st.to_string();
    const uint64_t inl = __atomic_load_n(reinterpret_cast<const uint64_t*>(recv + recv_offset(s, kRounds)),
                                         __ATOMIC_RELAXED);
    if (bad.empty() && inl != kInlineMagic + uint64_t(s)) bad = "inline value from " + std::to_string(s) + " wrong";
    if (bad.empty() && __atomic_load_n(&signals.words[n + s], __ATOMIC_ACQUIRE) != 11)
      bad = "signal " + std::to_string(n + s) + " is not exactly 11";
  }
  device.join();
  if (!produced.empty()) return produced;
  if (!bad.empty()) return bad;
  // Counters: every put to t counted once, after the flush saw them consumed.
  for (int t = 0; t < n; ++t)
    if (__atomic_load_n(&q.counters[t], __ATOMIC_ACQUIRE) != uint64_t(kRounds))
      return "counter " + std::to_string(t) + " is " + std::to_string(q.counters[t]) + ", want " +
             std::to_string(kRounds);
  for (int s = 0; s < n; ++s) {
    if (__atomic_load_n(&signals.words[s], __ATOMIC_ACQUIRE) != uint64_t(kRounds)) return "final signal wrong";
    for (int k = 0; k < kRounds; ++k)
      if (std::string e = check_chunk(rank, s, k, recv); !e.empty()) return e;
  }
  for (int pe = 0; pe < n; ++pe)
    if (q.cis[pe] != q.pis[pe] || q.pis[pe] != uint32_t(kRounds + 2))
      return "queue " + std::to_string(pe) + ": pi " + std::to_string(q.pis[pe]) + " ci " + std::to_string(q.cis[pe]);
  return {};
}

}  // namespace devapi_test

// GIN over pipes (src/runtime/gin_pipes.h), one sender's link and the
// target's receiver thread, joined by in-memory connections with small
// slots (so every message of a few hundred bytes spans fragments) and two
// of them in flight (so a sender waits for room): puts land before their
// signal, a get's answer comes back whole while the sender keeps putting,
// and a refused get, a put outside the windows, a malformed message, a put
// that stops midway and a closed link are errors with their reasons.
#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "src/base/deadline.h"
#include "src/runtime/gin_pipes.h"
#include "src/transport/doorbell.h"

using namespace braid;
using namespace braid::devapi;

namespace {

constexpr size_t kSlotBytes = 256;
constexpr uint64_t kWindow = 7;

// A doorbell the connections ring at every commit; a sleep lasts until it
// is rung (or 3 s, so that stop() is seen).  It counts the sleeps.
class Bell final : public Doorbell {
 public:
  Bell() : Doorbell(IdlePolls{}) {}
  uint32_t arm() override {
    std::lock_guard<std::mutex> lock(mu_);
    return seq_;
  }
  void sleep(uint32_t seen) override {
    std::unique_lock<std::mutex> lock(mu_);
    ++sleeps_;
    cv_.wait_for(lock, std::chrono::seconds(3), [&] { return seq_ != seen; });
  }
  void disarm() override {}
  void ring() override {
    std::lock_guard<std::mutex> lock(mu_);
    ++seq_;
    cv_.notify_all();
  }
  int sleeps() {
    std::lock_guard<std::mutex> lock(mu_);
    return sleeps_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint32_t seq_ = 0;
  int sleeps_ = 0;
};

// One connection: a FIFO of `slots` fragments, shared by two threads.
class Connection {
 public:
  explicit Connection(int slots)
      : slots_(slots), ring_(size_t(slots), std::vector<char>(kSlotBytes)), lengths_(size_t(slots)) {}
  Status acquire_send(void** slot) {
    std::lock_guard<std::mutex> lock(mu_);
    *slot = committed_ - taken_ < uint64_t(slots_) ? ring_[committed_ % slots_].data() : nullptr;
    return Status::ok();
  }
  Status commit(size_t bytes) {
    if (bytes > kSlotBytes)  // (no Catch assertion: both threads commit, and Catch's are not thread-safe)
      return BRAID_ERROR(ncclInternalError, "a fragment of {} bytes in a slot of {}", bytes, kSlotBytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      lengths_[committed_ % slots_] = bytes;
      ++committed_;
    }
    if (bell) bell->ring();
    return Status::ok();
  }
  Bell* bell = nullptr;  // rung at every commit
  Status acquire_recv(const void** data, size_t* bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    *data = taken_ < committed_ ? ring_[taken_ % slots_].data() : nullptr;
    *bytes = taken_ < committed_ ? lengths_[taken_ % slots_] : 0;
    return Status::ok();
  }
  Status release() {
    std::lock_guard<std::mutex> lock(mu_);
    ++taken_;
    return Status::ok();
  }

 private:
  std::mutex mu_;
  const int slots_;
  std::vector<std::vector<char>> ring_;
  std::vector<size_t> lengths_;
  uint64_t committed_ = 0, taken_ = 0;
};

struct Send final : SendPipe {
  explicit Send(Connection& c) : c(c) {}
  using SendPipe::try_acquire;
  Status try_acquire(void** slot, size_t) override { return c.acquire_send(slot); }
  Status commit(size_t bytes) override { return c.commit(bytes); }
  Connection& c;
};
struct Recv final : RecvPipe {
  explicit Recv(Connection& c) : c(c) {}
  Status try_acquire(const void** data, size_t* bytes) override { return c.acquire_recv(data, bytes); }
  Status release() override { return c.release(); }
  Connection& c;
};

// Rank 0's link to rank 1, and rank 1's receiver of it: rank 1 has one
// window of 8 KiB and 4 signals.
struct Rig {
  explicit Rig(std::chrono::milliseconds timeout = std::chrono::seconds(10), Bell* bell = nullptr)
      : messages(2), answers(2), send_messages(messages), recv_messages(messages), send_answers(answers),
        recv_answers(answers), window(8192), signal_words(4, 0),
        link(&send_messages, &recv_answers, kSlotBytes, 1, timeout, host_gin_memory()) {
    for (size_t i = 0; i < window.size(); ++i) window[i] = char(i * 13 + 1);
    REQUIRE(windows.add(kWindow, window.data(), window.size()).is_ok());
    signals.words = signal_words.data();
    signals.count = 4;
    messages.bell = bell;
    std::vector<GinPipeReceiver::Sender> senders{{0, &recv_messages, &send_answers}};
    receiver = std::make_unique<GinPipeReceiver>(senders, kSlotBytes, &windows, signals, &fault, timeout, bell);
  }
  ~Rig() { receiver->stop(); }
  Status wait(uint32_t id, uint64_t at_least) {
    return wait_signal(signals, id, at_least, Deadline::after(std::chrono::seconds(10)), &fault);
  }
  // Steps the link's gets until `n` have landed (or one failed).
  Status land_gets(uint64_t n) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (link.gets_landed() < n) {
      BRAID_TRY(link.progress());
      if (std::chrono::steady_clock::now() > until) return BRAID_ERROR(ncclTimeout, "gets not landed");
      std::this_thread::yield();
    }
    return Status::ok();
  }
  // Waits for the receiver's fault (or 10 s).
  Status await_fault() {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!fault.failed() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    return fault.failed() ? fault.get() : Status::ok();
  }
  Connection messages, answers;
  Send send_messages;
  Recv recv_messages;
  Send send_answers;
  Recv recv_answers;
  std::vector<char> window;
  std::vector<uint64_t> signal_words;
  GinWindowTable windows;
  GinSignals signals;
  GinFault fault;
  PipeGinLink link;
  std::unique_ptr<GinPipeReceiver> receiver;
};

std::vector<char> pattern(size_t n, int seed) {
  std::vector<char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = char(i * 7 + seed);
  return v;
}

}  // namespace

TEST_CASE("GIN over pipes: puts in fragments land before their signal, in order", "[gin][pipes]") {
  Rig rig;
  // Three puts of 1000 bytes (four fragments each) with a signal add of
  // one, then an empty put whose add is the fourth: when the signal reads
  // 4, every byte of all three is in.
  std::vector<std::vector<char>> sources;
  for (int i = 0; i < 3; ++i) {
    sources.push_back(pattern(1000, i));
    const GinSignalAdd add{2, 1};
    REQUIRE(rig.link.put(kWindow, 16 + 1000 * uint64_t(i), sources.back().data(), 1000, &add).is_ok());
  }
  const GinSignalAdd last{2, 1};
  REQUIRE(rig.link.put(0, 0, nullptr, 0, &last).is_ok());
  REQUIRE(rig.wait(2, 4).is_ok());
  for (int i = 0; i < 3; ++i)
    CHECK(std::memcmp(rig.window.data() + 16 + 1000 * i, sources[size_t(i)].data(), 1000) == 0);
  CHECK(rig.signal_words[2] == 4);
  // A VA signal: a 64-bit add to a word of the window, after the puts.
  uint64_t word = 0;
  std::memcpy(&word, rig.window.data() + 4096, 8);
  REQUIRE(rig.link.add_at(kWindow, 4096, 40).is_ok());
  const GinSignalAdd after{0, 1};
  REQUIRE(rig.link.put(0, 0, nullptr, 0, &after).is_ok());
  REQUIRE(rig.wait(0, 1).is_ok());
  uint64_t now = 0;
  std::memcpy(&now, rig.window.data() + 4096, 8);
  CHECK(now == word + 40);
  CHECK(rig.link.close().is_ok());
  CHECK(rig.link.put(kWindow, 0, sources[0].data(), 8, nullptr).code() == ncclInvalidUsage);  // closed
  CHECK(!rig.fault.failed());
}

// Fragments written by hand: the signal of a put whose last fragment has
// not come is not applied, however long the target waits.
TEST_CASE("GIN over pipes: a put's signal waits for its last fragment", "[gin][pipes]") {
  Rig rig;
  const std::vector<char> bytes = pattern(300, 5);
  auto send = [&](const void* data, size_t n) {
    void* slot = nullptr;
    while (!slot) REQUIRE(rig.send_messages.try_acquire(&slot).is_ok());
    std::memcpy(slot, data, n);
    REQUIRE(rig.send_messages.commit(n).is_ok());
  };
  std::vector<char> first(sizeof(GinPipeHeader) + 200);
  const GinPipeHeader h{kGinPipeMagic, kGinPut, kWindow, 64, bytes.size(), 3, 1, 1};  // signal 1 += 3
  std::memcpy(first.data(), &h, sizeof(h));
  std::memcpy(first.data() + sizeof(h), bytes.data(), 200);
  send(first.data(), first.size());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK(__atomic_load_n(&rig.signal_words[1], __ATOMIC_ACQUIRE) == 0);
  send(bytes.data() + 200, 100);
  REQUIRE(rig.wait(1, 3).is_ok());
  CHECK(std::memcmp(rig.window.data() + 64, bytes.data(), bytes.size()) == 0);
}

TEST_CASE("GIN over pipes: a get comes back whole while the sender keeps putting", "[gin][pipes]") {
  Rig rig;
  const std::vector<char> before(rig.window.begin() + 100, rig.window.begin() + 2100);
  std::vector<char> got(2000, 0);
  REQUIRE(rig.link.get(kWindow, 100, got.data(), got.size()).is_ok());
  // The answer needs nine fragments on a connection of two, and these puts
  // (over the last bytes the get reads) need the receiver, which reads
  // nothing more of this sender until the answer is out: the link takes
  // the answer while it waits for room, and the answer holds none of the
  // puts' bytes.
  const std::vector<char> bytes = pattern(500, 3);
  for (int i = 0; i < 4; ++i) REQUIRE(rig.link.put(kWindow, 1600, bytes.data(), bytes.size(), nullptr).is_ok());
  REQUIRE(rig.land_gets(1).is_ok());
  CHECK(got == before);  // the window as the get found it, before the later puts
  // A get after a put sees the put's bytes.
  std::vector<char> again(500, 0);
  REQUIRE(rig.link.get(kWindow, 1600, again.data(), again.size()).is_ok());
  REQUIRE(rig.land_gets(2).is_ok());
  CHECK(again == bytes);
  CHECK(rig.link.gets_issued() == 2);
  CHECK(!rig.fault.failed());
}

TEST_CASE("GIN over pipes: a get outside the target's windows is refused to the sender", "[gin][pipes]") {
  Rig rig;
  std::vector<char> got(64, 0);
  REQUIRE(rig.link.get(kWindow, 8192 - 32, got.data(), got.size()).is_ok());  // past the end
  const Status s = rig.land_gets(1);
  CHECK(s.code() == ncclInvalidArgument);
  CHECK(s.message().find("outside rank 1's windows") != std::string::npos);
  CHECK(!rig.fault.failed());  // the target was not wrong
}

TEST_CASE("GIN over pipes: a put outside the windows is the target's fault, with the reason", "[gin][pipes]") {
  Rig rig;
  const std::vector<char> bytes = pattern(600, 1);
  REQUIRE(rig.link.put(99, 0, bytes.data(), bytes.size(), nullptr).is_ok());  // no window 99
  const Status s = rig.await_fault();
  CHECK(!s.is_ok());
  CHECK(s.message().find("from rank 0") != std::string::npos);
  const GinSignalAdd bad{9, 1};  // past the 4 signals
  Rig other;
  REQUIRE(other.link.put(kWindow, 0, bytes.data(), 8, &bad).is_ok());
  CHECK(other.await_fault().message().find("signal 9 out of range") != std::string::npos);
}

TEST_CASE("GIN over pipes: a malformed message is the target's fault", "[gin][pipes]") {
  Rig rig;
  void* slot = nullptr;
  REQUIRE(rig.send_messages.try_acquire(&slot).is_ok());
  std::memset(slot, 0x5a, 64);
  REQUIRE(rig.send_messages.commit(64).is_ok());
  const Status s = rig.await_fault();
  CHECK(s.code() == ncclRemoteError);
  CHECK(s.message().find("malformed GIN message") != std::string::npos);
}

TEST_CASE("GIN over pipes: a put that stops midway times out at the target", "[gin][pipes]") {
  Rig rig(std::chrono::milliseconds(300));
  void* slot = nullptr;
  REQUIRE(rig.send_messages.try_acquire(&slot).is_ok());
  const GinPipeHeader h{kGinPipeMagic, kGinPut, kWindow, 0, 1000, 0, 0, 0};  // 1000 bytes said, none sent
  std::memcpy(slot, &h, sizeof(h));
  REQUIRE(rig.send_messages.commit(sizeof(h)).is_ok());
  const Status s = rig.await_fault();
  CHECK(s.code() == ncclTimeout);
  CHECK(s.message().find("stopped midway (0 of 1000 bytes)") != std::string::npos);
}

TEST_CASE("GIN over pipes: a sender whose target takes nothing times out", "[gin][pipes]") {
  Rig rig(std::chrono::milliseconds(300));
  rig.receiver->stop();  // the target is gone
  const std::vector<char> bytes = pattern(2000, 2);
  const Status s = rig.link.put(kWindow, 0, bytes.data(), bytes.size(), nullptr);
  CHECK(s.code() == ncclTimeout);
  CHECK(s.message().find("rank 1 took nothing") != std::string::npos);
  CHECK(rig.link.close().code() == ncclRemoteError);  // the put went out in part: no close after it
}

// An idle receiver sleeps on the transport's doorbell, and a put's commit
// (which rings it) wakes it: the put lands long before the bell's 3 s
// sleep would end by itself.
TEST_CASE("GIN over pipes: an idle receiver sleeps on the doorbell and a put wakes it", "[gin][pipes]") {
  Bell bell;
  Rig rig(std::chrono::seconds(10), &bell);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (bell.sleeps() == 0 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  REQUIRE(bell.sleeps() == 1);  // asleep
  const std::vector<char> bytes = pattern(100, 9);
  const GinSignalAdd add{3, 1};
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(rig.link.put(kWindow, 0, bytes.data(), bytes.size(), &add).is_ok());
  REQUIRE(rig.wait(3, 1).is_ok());
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1));  // rung, not its nap's end
  CHECK(std::memcmp(rig.window.data(), bytes.data(), bytes.size()) == 0);
}

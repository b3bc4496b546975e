// The GIN proxy (src/devapi/gin_proxy.h) in one process: ranks as threads
// with direct links, fed by a CPU producer that posts as the device does;
// then every kind of malformed descriptor, a torn one, and bad arguments.
// Results are collected on the rank threads and checked here.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <thread>

#include "gin_workload.h"
#include "src/devapi/gin_progress.h"

using namespace braid::devapi;
using namespace devapi_test;
using braid::Status;

namespace {

// One rank's memory and signals, in this process.
struct ThreadRank {
  explicit ThreadRank(int n) : send(send_bytes(n)), recv(recv_bytes(n)), signal_words(signal_count(n)) {
    signals.words = signal_words.data();
    signals.count = signal_count(n);
  }
  std::vector<char> send, recv;
  std::vector<uint64_t> signal_words;
  GinSignals signals;
  GinWindowTable sources;
};

std::shared_ptr<GinWindowTable> one_window(uint64_t token, std::vector<char>& mem) {
  auto t = std::make_shared<GinWindowTable>();
  REQUIRE(t->add(token, mem.data(), mem.size()).is_ok());
  return t;
}

// A single rank whose only link is to itself, driven by poll_once.
struct SelfRig {
  SelfRig() : rank(1), queues(1, 4, 2, signal_count(1)) {
    REQUIRE(rank.sources.add(kSendToken, rank.send.data(), rank.send.size()).is_ok());
    std::vector<std::unique_ptr<GinLink>> links;
    links.push_back(std::make_unique<DirectGinLink>(one_window(kRecvToken, rank.recv), rank.signals));
    GinProxyOptions options;
    options.torn_timeout = std::chrono::milliseconds(100);
    REQUIRE(GinProxy::create({queues.q}, std::move(links), &rank.sources, &fault, options, &proxy).is_ok());
  }
  // Posts raw words and lets the proxy look once: its verdict.
  Status feed(const uint64_t words[kGfdQwords], int written = kGfdQwords) {
    DeviceProducer dev(queues.q);
    REQUIRE(dev.post_raw(0, words, written));
    bool progressed = false;
    return proxy->poll_once(&progressed);
  }
  ThreadRank rank;
  QueueMemory queues;
  GinFault fault;
  std::unique_ptr<GinProxy> proxy;
};

// n ranks as threads of this process, every one's proxy made (not
// started) with a direct link to every rank; run() runs the workload on
// every rank and checks it, once the proxies are being stepped.
struct ThreadRanks {
  explicit ThreadRanks(int n) : n(n), faults(size_t(n)), proxies(size_t(n)) {
    for (int r = 0; r < n; ++r) {
      ranks.push_back(std::make_unique<ThreadRank>(n));
      fill_send(r, n, ranks[r]->send.data());
      REQUIRE(ranks[r]->sources.add(kSendToken, ranks[r]->send.data(), ranks[r]->send.size()).is_ok());
    }
    for (int r = 0; r < n; ++r) {
      queues.push_back(std::make_unique<QueueMemory>(n, 8, n, signal_count(n)));  // 8 slots: 42 posts per target
      std::vector<std::unique_ptr<GinLink>> links;
      for (int t = 0; t < n; ++t)
        links.push_back(std::make_unique<DirectGinLink>(one_window(kRecvToken, ranks[t]->recv), ranks[t]->signals));
      REQUIRE(GinProxy::create({queues[r]->q}, std::move(links), &ranks[r]->sources, &faults[r], {}, &proxies[r])
                  .is_ok());
    }
  }
  void run() {
    std::vector<std::string> results(static_cast<size_t>(n));
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        results[r] = run_workload(r, n, queues[r]->q, ranks[r]->signals, ranks[r]->recv.data(), faults[r]);
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < n; ++r) {
      INFO("rank " << r);
      CHECK(results[r] == "");
      CHECK(!faults[r].failed());
      CHECK(proxies[r]->executed() == uint64_t(n) * (kRounds + 2));
    }
  }
  int n;
  std::vector<std::unique_ptr<ThreadRank>> ranks;
  std::vector<std::unique_ptr<QueueMemory>> queues;
  std::vector<GinFault> faults;
  std::vector<std::unique_ptr<GinProxy>> proxies;
};

}  // namespace

TEST_CASE("GIN proxy: ranks as threads, puts, signals and counters in order", "[devapi][gin]") {
  ThreadRanks rig(3);
  for (auto& p : rig.proxies) p->start();
  rig.run();
  for (auto& p : rig.proxies) CHECK(p->stop().is_ok());
}

// One GinProgress thread steps every rank's proxy (as it steps every
// devComm of a communicator), and a fifth proxy that faults on its first
// descriptor keeps draining beside them without holding them up.
TEST_CASE("GIN progress: one thread steps several proxies, a faulted one among them", "[devapi][gin]") {
  ThreadRanks rig(3);
  ThreadRank lone(1);  // the proxy that faults: one rank, linked to itself
  QueueMemory lone_queues(1, 2, 1, signal_count(1));
  std::vector<std::unique_ptr<GinLink>> self;
  self.push_back(std::make_unique<DirectGinLink>(one_window(kRecvToken, lone.recv), lone.signals));
  GinFault lone_fault;
  std::unique_ptr<GinProxy> lone_proxy;
  REQUIRE(GinProxy::create({lone_queues.q}, std::move(self), &lone.sources, &lone_fault, {}, &lone_proxy).is_ok());
  {
    GinProgress progress(0);
    for (auto& p : rig.proxies) progress.add(p.get());
    progress.add(lone_proxy.get());
    CHECK(progress.size() == 4);
    // The lone rank posts from a window it does not have, then keeps
    // posting: the faulted proxy drains, so its producer gets credit.
    DeviceProducer lone_dev(lone_queues.q);
    REQUIRE(lone_dev.post(0, put_gfd(77, 0, kRecvToken, 0, 8)));
    for (int i = 0; i < 6; ++i) CHECK(lone_dev.post(0, put_gfd(kSendToken, 0, kRecvToken, 0, 8)));
    rig.run();
    CHECK(lone_fault.failed());
    CHECK_THAT(lone_fault.get().message(), Catch::Contains("names no window"));
    CHECK(lone_proxy->executed() == 0);
    for (auto& p : rig.proxies) progress.remove(p.get());
    progress.remove(lone_proxy.get());
    CHECK(progress.size() == 0);
  }  // the thread ends with the progress
  for (auto& p : rig.proxies) CHECK(p->stop().is_ok());
}

TEST_CASE("GIN proxy: malformed descriptors stop it unconsumed, with the reason", "[devapi][gin]") {
  Gfd good = put_gfd(kSendToken, 0, kRecvToken, 0, 64);
  struct Case {
    const char* what;
    Gfd g;
    const char* message;
  };
  std::vector<Case> cases;
  auto with = [&](auto change) {
    Gfd g = good;
    change(g);
    return g;
  };
  cases.push_back({"unknown op bit", with([](Gfd& g) { g.op |= 0x20; }), "unknown op bits"});
  cases.push_back({"no Put bit", with([](Gfd& g) { g.op = kGfdWithCounter; }), "lacks the Put bit"});
  cases.push_back({"both signal kinds", with([](Gfd& g) { g.op |= kGfdWithSignalInc | kGfdWithSignalAdd; }),
                   "both increments and adds"});
  cases.push_back({"9-byte inline", with([](Gfd& g) { g.op |= kGfdWithInline; g.size = 9; }), "inline value of 9"});
  cases.push_back({"null destination", with([](Gfd& g) { g.dst_handle = 0; }), "to a null window"});
  cases.push_back({"unknown destination", with([](Gfd& g) { g.dst_handle = 77; }), "names no window"});
  cases.push_back({"unknown source", with([](Gfd& g) { g.src_handle = 78; }), "names no window"});
  cases.push_back({"destination overrun", with([](Gfd& g) { g.dst_off = recv_bytes(1) - 8; }), "outside window"});
  cases.push_back({"source overrun", with([](Gfd& g) { g.src_off = send_bytes(1); }), "outside window"});
  cases.push_back({"signal out of range",
                   with([](Gfd& g) { g.op |= kGfdWithSignalInc; g.signal_id = uint16_t(signal_count(1)); }),
                   "signal 2 out of range"});
  cases.push_back({"counter out of range", with([](Gfd& g) { g.op |= kGfdWithCounter; g.counter_id = 2; }),
                   "counter 2 out of range"});
  for (const Case& c : cases) {
    INFO(c.what);
    SelfRig rig;
    uint64_t words[kGfdQwords];
    encode_gfd(braid::devapi::GfdFormat::kV1, c.g, words);
    Status s = rig.feed(words);
    CHECK(s.code() == ncclInvalidArgument);
    CHECK_THAT(s.message(), Catch::Contains(c.message));
    CHECK(rig.queues.cis[0] == 0);                                    // not consumed
    CHECK(std::memcmp(rig.queues.gfds.data(), words, sizeof(words)) == 0);  // nor cleared
    CHECK(rig.rank.recv[0] == 0);
  }
  // The same rig accepts the good one (the checks above are the cases', not the rig's).
  SelfRig rig;
  fill_send(0, 1, rig.rank.send.data());
  uint64_t words[kGfdQwords];
  encode_gfd(braid::devapi::GfdFormat::kV1, good, words);
  REQUIRE(rig.feed(words).is_ok());
  CHECK(rig.queues.cis[0] == 1);
  CHECK(check_chunk(0, 0, 0, rig.rank.recv.data()).find("word 8 ") != std::string::npos);  // 64 bytes, then zeros
  CHECK(std::memcmp(rig.rank.recv.data(), rig.rank.send.data(), 64) == 0);
}

// ncclGin::put posts a put of 0 bytes for an empty message (an alltoallv
// with a zero count): it moves nothing, and its counter still counts.
TEST_CASE("GIN proxy: a put of 0 bytes is consumed, moves nothing and counts", "[devapi][gin]") {
  SelfRig rig;
  fill_send(0, 1, rig.rank.send.data());
  Gfd empty = put_gfd(kSendToken, 8, kRecvToken, 0, 0);
  empty.op |= braid::devapi::kGfdWithCounter;
  empty.counter_id = 1;
  uint64_t words[kGfdQwords];
  encode_gfd(braid::devapi::GfdFormat::kV1, empty, words);
  REQUIRE(rig.feed(words).is_ok());
  CHECK(rig.queues.cis[0] == 1);
  CHECK(rig.queues.counter_words[1] == 1);
  CHECK(rig.queues.counter_words[0] == 0);
  CHECK(std::count(rig.rank.recv.begin(), rig.rank.recv.end(), 0) == std::ptrdiff_t(rig.rank.recv.size()));
  CHECK(std::count(rig.queues.gfds.begin(), rig.queues.gfds.end(), 0) == std::ptrdiff_t(rig.queues.gfds.size()));
  // Windows that do not exist are not looked at for 0 bytes, and a signal still lands.
  Gfd signal_only = put_gfd(12345, 0, 54321, 0, 0);
  signal_only.op |= braid::devapi::kGfdWithSignalInc;
  signal_only.signal_id = 1;
  encode_gfd(braid::devapi::GfdFormat::kV1, signal_only, words);
  REQUIRE(rig.feed(words).is_ok());
  CHECK(rig.queues.cis[0] == 2);
  CHECK(rig.rank.signal_words[1] == 1);
}

// A descriptor left half-written (a kernel that died mid-post) is an error
// torn_timeout after the proxy first sees it; meanwhile the other targets'
// descriptors go on.
TEST_CASE("GIN proxy: a torn descriptor is an error after a bounded wait, not blocking others", "[devapi][gin]") {
  ThreadRank self(2), other(2);
  REQUIRE(self.sources.add(kSendToken, self.send.data(), self.send.size()).is_ok());
  fill_send(0, 2, self.send.data());
  QueueMemory queues(2, 4, 1, signal_count(2));
  std::vector<std::unique_ptr<GinLink>> links;
  links.push_back(std::make_unique<DirectGinLink>(one_window(kRecvToken, self.recv), self.signals));
  links.push_back(std::make_unique<DirectGinLink>(one_window(kRecvToken, other.recv), other.signals));
  GinFault fault;
  GinProxyOptions options;
  options.torn_timeout = std::chrono::milliseconds(100);
  std::unique_ptr<GinProxy> proxy;
  REQUIRE(GinProxy::create({queues.q}, std::move(links), &self.sources, &fault, options, &proxy).is_ok());
  DeviceProducer dev(queues.q);
  uint64_t words[kGfdQwords];
  encode_gfd(braid::devapi::GfdFormat::kV1, put_gfd(kSendToken, 0, kRecvToken, 0, 8), words);
  REQUIRE(dev.post_raw(0, words, 6));  // to rank 0: q6 and q7 never written
  REQUIRE(dev.post_raw(1, words, kGfdQwords));
  bool progressed = false;
  const auto start = std::chrono::steady_clock::now();
  REQUIRE(proxy->poll_once(&progressed).is_ok());
  CHECK(progressed);
  CHECK(queues.cis[1] == 1);  // the other target's put went through
  CHECK(std::memcmp(other.recv.data(), self.send.data(), 8) == 0);
  Status s;
  while (s.is_ok() && std::chrono::steady_clock::now() - start < std::chrono::seconds(5))
    s = proxy->poll_once(&progressed);
  const auto waited = std::chrono::steady_clock::now() - start;
  CHECK(s.code() == ncclSystemError);
  CHECK_THAT(s.message(), Catch::Contains("half-written"));
  CHECK(waited >= std::chrono::milliseconds(100));
  CHECK(waited < std::chrono::seconds(5));
  CHECK(queues.cis[0] == 0);
}

TEST_CASE("GIN proxy: a running proxy reports a bad descriptor to waiters", "[devapi][gin]") {
  SelfRig rig;
  rig.proxy->start();
  DeviceProducer dev(rig.queues.q);
  Gfd bad = put_gfd(kSendToken, 0, 99, 0, 8);
  REQUIRE(dev.post(0, bad));
  Status s = wait_signal(rig.rank.signals, 0, 1, braid::Deadline::after(std::chrono::seconds(20)), &rig.fault);
  CHECK(s.code() == ncclInvalidArgument);
  CHECK_THAT(s.message(), Catch::Contains("waiting for GIN signal 0") && Catch::Contains("names no window"));
  CHECK(rig.proxy->stop().is_ok());
}

// NCCL 2.28's device code has no abort flag: after a fault the running
// proxy keeps consuming (without executing) so a kernel still posting, or
// flushing, is not stuck.
TEST_CASE("GIN proxy: after a fault it drains the queue without executing", "[devapi][gin]") {
  SelfRig rig;  // 4 slots
  fill_send(0, 1, rig.rank.send.data());
  rig.proxy->start();
  DeviceProducer dev(rig.queues.q, std::chrono::seconds(10));
  REQUIRE(dev.post(0, put_gfd(kSendToken, 0, 99, 0, 8)));  // names no window: the fault
  Status s = wait_signal(rig.rank.signals, 0, 1, braid::Deadline::after(std::chrono::seconds(20)), &rig.fault);
  REQUIRE(s.code() == ncclInvalidArgument);
  Gfd counted = put_gfd(kSendToken, 0, kRecvToken, 0, 64);
  counted.op |= braid::devapi::kGfdWithCounter;
  for (int i = 0; i < 12; ++i) REQUIRE(dev.post(0, counted));  // three times the queue: needs slots freed
  CHECK(dev.flush());
  CHECK(rig.queues.cis[0] == 13);
  CHECK(rig.queues.counter_words[0] == 0);  // nothing executed
  CHECK(std::count(rig.rank.recv.begin(), rig.rank.recv.end(), 0) == std::ptrdiff_t(rig.rank.recv.size()));
  CHECK(rig.proxy->stop().is_ok());
}

namespace {

// A link whose gets land only when the test lets them, as a TCP link's
// answers arrive some time after the get was asked for.
class HeldGetLink final : public GinLink {
 public:
  Status put(uint64_t, uint64_t, const void*, uint64_t, const GinSignalAdd*) override { return Status::ok(); }
  Status add_at(uint64_t, uint64_t, uint64_t) override { return Status::ok(); }
  Status get(uint64_t, uint64_t, void* dst, uint64_t bytes) override {
    held.push_back({static_cast<char*>(dst), bytes});
    ++gets_issued_;
    return Status::ok();
  }
  Status progress() override {
    for (; release > 0 && !held.empty(); --release) {
      std::memset(held.front().first, 0x5a, held.front().second);
      held.erase(held.begin());
      ++gets_landed_;
    }
    return Status::ok();
  }
  std::vector<std::pair<char*, uint64_t>> held;
  int release = 0;  // gets the next progress() may land
};

// One 2.30 context of two ranks (rank 0 is this one), its descriptors
// written whole, as the device's stores land.
struct V2Queues {
  V2Queues() : gfds(2 * kSize * 16), pis(2), cis(2), counters(1) {
    q.format = GfdFormat::kV2;
    q.nranks = 2;
    q.queue_size = kSize;
    q.gfds = gfds.data();
    q.pis = pis.data();
    q.cis = cis.data();
    q.counters = counters.data();
    q.counter_count = 1;
    q.signal_count = 1;
  }
  void post(int pe, const Gfd& g) {
    encode_gfd(GfdFormat::kV2, g, &gfds[(size_t(pe) * kSize + (pis[size_t(pe)] % kSize)) * 16]);
    ++pis[size_t(pe)];
  }
  static constexpr uint32_t kSize = 8;
  std::vector<uint64_t> gfds;
  std::vector<uint32_t> pis, cis;
  std::vector<uint64_t> counters;
  GinQueues q;
};

}  // namespace

// The device's Wait waits for its get to be consumed, posts a flush to its
// own queue and waits for that to be consumed, then reads what its gets
// brought: a flush must wait for every get issued before it, and only for
// those.
TEST_CASE("GIN proxy: a flush is consumed once the gets before it have landed", "[devapi][gin]") {
  std::vector<char> window(256, 0);
  GinWindowTable sources;
  REQUIRE(sources.add(kRecvToken, window.data(), window.size()).is_ok());
  V2Queues v2;
  std::vector<std::unique_ptr<GinLink>> links;
  links.push_back(std::make_unique<HeldGetLink>());
  links.push_back(std::make_unique<HeldGetLink>());
  auto* to_peer = static_cast<HeldGetLink*>(links[1].get());
  GinFault fault;
  std::unique_ptr<GinProxy> proxy;
  REQUIRE(GinProxy::create({v2.q}, std::move(links), &sources, &fault, {}, &proxy).is_ok());
  Gfd get;
  get.op = kGfdGet;
  get.size = 64;
  get.src_handle = kSendToken;
  get.dst_handle = kRecvToken;
  Gfd flush;
  flush.op = kGfdFlush;
  auto turn = [&] {
    bool progressed = false;
    REQUIRE(proxy->poll_once(&progressed).is_ok());
  };

  v2.post(1, get);  // 64 bytes from rank 1 into window[0, 64)
  turn();
  CHECK(v2.cis[1] == 1);  // the get: consumed once asked for
  v2.post(0, flush);
  turn();
  turn();
  CHECK(v2.cis[0] == 0);  // the flush: held while the get is in flight
  get.dst_off = 64;
  v2.post(1, get);  // a get after the flush was first seen does not hold it
  turn();
  CHECK(v2.cis[1] == 2);
  CHECK(v2.cis[0] == 0);
  to_peer->release = 1;  // the first get's answer arrives
  turn();
  CHECK(v2.cis[0] == 1);
  CHECK(window[0] == 0x5a);
  CHECK(window[63] == 0x5a);
  CHECK(window[64] == 0);  // the second is still in flight
  v2.post(0, flush);  // now that one holds the next flush
  turn();
  CHECK(v2.cis[0] == 1);
  to_peer->release = 1;
  turn();
  CHECK(v2.cis[0] == 2);
  CHECK(window[127] == 0x5a);
  v2.post(0, flush);  // nothing in flight: consumed at once
  turn();
  CHECK(v2.cis[0] == 3);
  CHECK(!fault.failed());
}

TEST_CASE("GIN proxy: bad construction and table arguments are refused", "[devapi][gin]") {
  QueueMemory qm(2, 8, 1, 1);
  GinFault fault;
  GinWindowTable sources;
  std::unique_ptr<GinProxy> proxy;
  auto links = [] {
    std::vector<std::unique_ptr<GinLink>> l;
    for (int i = 0; i < 2; ++i)
      l.push_back(std::make_unique<DirectGinLink>(std::make_shared<GinWindowTable>(), GinSignals{}));
    return l;
  };
  GinQueues q = qm.q;
  q.queue_size = 6;
  CHECK(GinProxy::create({q}, links(), &sources, &fault, {}, &proxy).code() == ncclInvalidArgument);
  q = qm.q;
  q.gfds = nullptr;
  CHECK(GinProxy::create({q}, links(), &sources, &fault, {}, &proxy).code() == ncclInvalidArgument);
  auto one = links();
  one.pop_back();
  CHECK(GinProxy::create({qm.q}, std::move(one), &sources, &fault, {}, &proxy).code() == ncclInvalidArgument);
  auto hole = links();
  hole[1].reset();
  CHECK(GinProxy::create({qm.q}, std::move(hole), &sources, &fault, {}, &proxy).code() == ncclInvalidArgument);
  CHECK(GinProxy::create({qm.q}, links(), nullptr, &fault, {}, &proxy).code() == ncclInvalidArgument);
  CHECK(!proxy);
  REQUIRE(GinProxy::create({qm.q}, links(), &sources, &fault, {}, &proxy).is_ok());

  char mem[64];
  GinWindowTable t;
  CHECK(t.add(0, mem, 64).code() == ncclInvalidArgument);
  CHECK(t.add(uint64_t(1) << 63, mem, 64).code() == ncclInvalidArgument);
  CHECK(t.add(1, nullptr, 64).code() == ncclInvalidArgument);
  REQUIRE(t.add(1, mem, 64).is_ok());
  CHECK(t.add(1, mem, 64).code() == ncclInvalidUsage);
  char* p = nullptr;
  CHECK(t.resolve(1, 64, 0, &p).is_ok());  // an empty access at the end
  CHECK(t.resolve(1, 60, 8, &p).code() == ncclInvalidArgument);
  CHECK(t.resolve(1, UINT64_MAX, 2, &p).code() == ncclInvalidArgument);
  REQUIRE(t.remove(1).is_ok());
  CHECK(t.remove(1).code() == ncclInvalidArgument);
  uint64_t word = 0;
  GinSignals sig{&word, 1};
  CHECK(sig.add(1, 1).code() == ncclInvalidArgument);
  CHECK(wait_signal(sig, 1, 1, braid::Deadline::never(), nullptr).code() == ncclInvalidArgument);
  Status timed_out = wait_signal(sig, 0, 1, braid::Deadline::after(std::chrono::milliseconds(20)), nullptr);
  CHECK(timed_out.code() == ncclSystemError);
  CHECK_THAT(timed_out.message(), Catch::Contains("timed out waiting for GIN signal 0"));
}

// Windows are registered on the user's threads while the proxy resolves on
// its own: a window added after the link was made is found, and adding and
// removing others meanwhile races with nothing (TSan runs this).
TEST_CASE("GIN proxy: windows registered while it runs are found, and registering does not race",
          "[devapi][gin]") {
  ThreadRank self(1);
  fill_send(0, 1, self.send.data());
  REQUIRE(self.sources.add(kSendToken, self.send.data(), self.send.size()).is_ok());
  QueueMemory queues(1, 8, 1, signal_count(1));
  auto targets = std::make_shared<GinWindowTable>();  // nothing registered yet
  std::vector<std::unique_ptr<GinLink>> links;
  links.push_back(std::make_unique<DirectGinLink>(targets, self.signals));
  GinFault fault;
  std::unique_ptr<GinProxy> proxy;
  REQUIRE(GinProxy::create({queues.q}, std::move(links), &self.sources, &fault, {}, &proxy).is_ok());
  proxy->start();
  REQUIRE(targets->add(kRecvToken, self.recv.data(), self.recv.size()).is_ok());
  std::atomic<bool> done{false};
  std::atomic<int> registrar_failures{0};
  std::thread registrar([&] {  // other windows come and go on another thread (Catch asserts on this one only)
    // Two at a time, above the used tokens: the trees rebalance, and the
    // proxy's lookups walk nodes that registering rewrites.
    std::vector<char> other(64);
    for (uint64_t round = 0; !done.load(); ++round) {
      const uint64_t token = 100 + 2 * (round % 7);
      bool ok = true;
      for (GinWindowTable* t : {targets.get(), &self.sources})
        ok = ok && t->add(token, other.data(), other.size()).is_ok() &&
             t->add(token + 1, other.data(), other.size()).is_ok();
      for (GinWindowTable* t : {targets.get(), &self.sources})
        ok = ok && t->remove(token).is_ok() && t->remove(token + 1).is_ok();
      registrar_failures += !ok;
    }
  });
  DeviceProducer dev(queues.q);
  constexpr int kPuts = 200;
  for (int k = 0; k < kPuts; ++k)
    REQUIRE(dev.post(0, put_gfd(kSendToken, size_t(k % kRounds) * kChunk, kRecvToken, 0, kChunk)));
  REQUIRE(dev.flush());
  done = true;
  registrar.join();
  CHECK(registrar_failures == 0);
  CHECK(queues.cis[0] == kPuts);
  CHECK(!fault.failed());
  CHECK(std::memcmp(self.recv.data(), self.send.data() + size_t((kPuts - 1) % kRounds) * kChunk, kChunk) == 0);
  CHECK(proxy->stop().is_ok());
}

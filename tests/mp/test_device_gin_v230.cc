// GPU-initiated networking for a client of NCCL 2.30's device headers on
// the host backend: the CPU does what 2.30's inline device code does
// (devapi_v230_client.h) to ginHandles[0]'s array of contexts, with
// 128-byte descriptors, and checks what lands.
//
// Per context, an AlltoAll of puts with a signal increment and a counter;
// a putValue with a signal add naming its sender; a VA signal (an add to a
// word of a window); a get from the next rank's window followed by the
// flush a Wait posts to its own queue.  On one host (threads, processes)
// and on two emulated hosts (TCP between them, where the get is answered
// over the stream); the same through a devComm of 2.31's layout, whose GIN
// contexts and descriptors are 2.30's, and for a kernel of 2.32.3's
// headers (80-byte contexts).  Then a 2.28.9 descriptor in a 2.30
// queue, which the proxy refuses and ncclCommGetAsyncError reports; and a
// kernel built against 2.30.4's headers (version-1 descriptors, no signal
// switches).
#include <sched.h>
#include <sys/mman.h>

#include <catch2/catch.hpp>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "devapi_v230_client.h"
#include "devapi_v231_client.h"
#include "gin_setups.h"
#include "harness.h"
#include "scoped_env.h"

using namespace mp;
using namespace v230;

namespace {

constexpr int kContexts = 2;
constexpr size_t kChunk = 1000 + 24;  // bytes each rank puts to each rank, per context
constexpr uint64_t kWinAlign = 4096;

// What the device reads for a window (connection 0), as 2.30's put does
// for a window of one segment.
uint64_t handle(ncclWindow_t w) { return reinterpret_cast<uint64_t>(view(w).ginWins[0]); }
uint64_t gin_off(ncclWindow_t w, size_t offset) { return 4096ull * view(w).ginOffset4K + offset; }
char fill(int from, int to, int context, size_t i) { return char(from * 31 + to * 7 + context * 3 + i); }
char mine(int rank, int i) { return char(rank * 3 + i); }  // a rank's first 64 bytes, below

// A symmetric window of `bytes` of ncclMemAlloc memory whose first 64
// bytes hold mine(rank, i), written on every rank when this returns
// (nullptr after a failure, which `f` has).
ncclWindow_t pattern_window(ncclComm_t comm, int rank, size_t bytes, char** buf, Failures& f) {
  *buf = nullptr;
  MP_NCCL(f, ncclMemAlloc(reinterpret_cast<void**>(buf), bytes));
  ncclWindow_t win = nullptr;
  MP_NCCL(f, ncclCommWindowRegister(comm, *buf, bytes, &win, NCCL_WIN_COLL_SYMMETRIC));
  if (!*buf || !win) return nullptr;
  for (int i = 0; i < 64; ++i) (*buf)[i] = mine(rank, i);
  barrier_all(comm, f);
  return win;
}

// Each rank puts its 64 bytes to every rank, at `at + 64 * rank` of their
// window, each put adding 1 to signal 0 of `ctx` (a ProxyCtx230 or
// ProxyCtx2304, as the client's headers have it), with `shape` applied to
// each descriptor first; then waits for the n adds to this rank and checks
// every rank's bytes came.  False after a failure, which `f` has.
template <typename Ctx, typename Shape>
bool put_to_all(Ctx* ctx, ncclWindow_t win, const char* buf, size_t at, int rank, int n, Failures& f, Shape shape) {
  for (int peer = 0; peer < n; ++peer) {
    const Gfd2 g = build_gfd2(kPut | kSignalInc, 64, gin_off(win, 0), handle(win), gin_off(win, at + 64 * rank),
                              handle(win), 0, 0, 0);
    if (post2(ctx, peer, shape(g, peer)) < 0) {
      f.fail("post to " + std::to_string(peer));
      return false;
    }
  }
  if (!wait_at_least(&ctx->signals[0], uint64_t(n))) {
    f.fail("the puts' signal");
    return false;
  }
  for (int from = 0; from < n; ++from)
    for (int i = 0; i < 64; ++i)
      if (buf[at + 64 * from + i] != mine(from, i)) {
        f.fail("bytes from " + std::to_string(from));
        return false;
      }
  return true;
}
const auto as_built = [](const Gfd2& g, int) { return g; };

// 2.30's requirements for a FULL GIN connection of `contexts` contexts
// with `signals` signals each.
Reqs230 gin_reqs(int contexts, int signals) {
  Reqs230 reqs = initializer();
  reqs.ginConnectionType = 1;  // FULL
  reqs.ginContextCount = contexts;
  reqs.ginSignalCount = signals;
  return reqs;
}

// The layout of each rank's receive window: per context an AlltoAll area,
// then one 8-byte putValue slot per sender, the VA signal word, and the
// bytes the get brings.
struct Dst {
  int n;
  size_t a2a(int context, int from) const { return (size_t(context) * n + from) * kChunk; }
  size_t put_value(int from) const { return size_t(kContexts) * n * kChunk + 8 * size_t(from); }
  size_t va_word() const { return put_value(n); }
  size_t got() const { return va_word() + 8; }
  size_t bytes() const { return got() + kChunk; }
};

// The traffic above, through a devComm of 2.30's layout, or 2.31's (whose
// contexts, descriptors and windows are 2.30's), or 2.31's for a kernel of
// 2.32.3's headers (80-byte contexts).
template <v231::Abi kAbi>
void gin_traffic(int rank, int n, ncclComm_t comm, Failures& f) {
  constexpr bool kSince231 = kAbi != v231::Abi::kV230;
  const Dst at{n};
  const size_t src_bytes = size_t(kContexts) * n * kChunk;
  char *src = nullptr, *dst = nullptr;
  MP_NCCL(f, ncclMemAlloc(reinterpret_cast<void**>(&src), src_bytes));
  MP_NCCL(f, ncclMemAlloc(reinterpret_cast<void**>(&dst), at.bytes() + kWinAlign));
  if (!src || !dst) return;
  for (int c = 0; c < kContexts; ++c)
    for (int to = 0; to < n; ++to)
      for (size_t i = 0; i < kChunk; ++i) src[(size_t(c) * n + to) * kChunk + i] = fill(rank, to, c, i);
  ncclWindow_t src_win = nullptr, dst_win = nullptr;
  MP_NCCL(f, ncclCommWindowRegister(comm, src, src_bytes, &src_win, NCCL_WIN_COLL_SYMMETRIC));
  MP_NCCL(f, ncclCommWindowRegister(comm, dst + kWinAlign, at.bytes(), &dst_win, NCCL_WIN_COLL_SYMMETRIC));
  Reqs230 reqs = gin_reqs(kContexts, 2);  // signal 0: the AlltoAll's, 1: putValue's
  reqs.ginCounterCount = 1;
  v231::GinDevComm dev(kAbi);
  MP_NCCL(f, dev.create(comm, reqs));
  auto* ctx = static_cast<v231::ProxyCtx<kAbi>*>(dev.contexts());
  if (!src_win || !dst_win || !ctx || dev.context_count() != kContexts) return f.fail("no GIN contexts");
  if (view(src_win).numSegments != 1 || view(dst_win).numSegments != 1) f.fail("windows of one segment");
  const char* depth = std::getenv("NCCL_GIN_PROXY_QUEUE_SIZE");
  if (ctx[0].nranks != n || ctx[0].queueSize != (depth ? uint32_t(std::atoi(depth)) : 256u))
    f.fail("2.30 context: nranks or queueSize");

  // Each context its own AlltoAll, signal 0 and counter 0.
  for (int c = 0; c < kContexts; ++c)
    for (int k = 0; k < n; ++k) {
      const int peer = (rank + k) % n;
      const Gfd2 g = build_gfd2(kPut | kSignalInc | kCounter, kChunk, gin_off(src_win, (size_t(c) * n + peer) * kChunk),
                                handle(src_win), gin_off(dst_win, at.a2a(c, rank)), handle(dst_win), 0, 0, 0);
      if (post2(&ctx[c], peer, g) < 0) return f.fail("post: no credit");
    }
  for (int c = 0; c < kContexts; ++c) {
    if (!wait_at_least(&ctx[c].signals[0], uint64_t(n))) return f.fail("a context's signal never reached");
    if (!wait_at_least(&ctx[c].counters[0], uint64_t(n))) return f.fail("a context's counter never reached");
    for (int from = 0; from < n; ++from)
      for (size_t i = 0; i < kChunk; ++i)
        if (dst[kWinAlign + at.a2a(c, from) + i] != fill(from, rank, c, i)) {
          f.fail("context " + std::to_string(c) + ": bytes from rank " + std::to_string(from));
          break;
        }
  }
  // putValue on context 1: 8 inline bytes, and an add naming the sender to
  // signal 1, so a signal that lands on the wrong rank or context shows.
  for (int peer = 0; peer < n; ++peer)
    if (post2(&ctx[1], peer,
              build_gfd2(kPut | kInline | kSignalAdd, 8, 0, 0, gin_off(dst_win, at.put_value(rank)), handle(dst_win), 0,
                         1, uint64_t(rank + 1) << 20, 0x0102030405060708ull * uint64_t(rank + 1))) < 0)
      return f.fail("post putValue");
  // A VA signal on context 0: add rank + 1 to the word in every rank's window.
  for (int peer = 0; peer < n; ++peer)
    if (post2(&ctx[0], peer,
              build_gfd2(kVaSignal | kSignalAdd, 0, gin_off(dst_win, at.va_word()), handle(dst_win), 0, 0, 0, 0,
                         uint64_t(rank + 1))) < 0)
      return f.fail("post VA signal");
  const uint64_t senders = uint64_t(n) * (n + 1) / 2;
  if (!wait_at_least(&ctx[1].signals[1], senders << 20)) return f.fail("putValue's signal never reached");
  if (__atomic_load_n(&ctx[1].signals[1], __ATOMIC_ACQUIRE) != senders << 20) f.fail("putValue's signal overshot");
  if (__atomic_load_n(&ctx[0].signals[1], __ATOMIC_ACQUIRE) != 0) f.fail("putValue's signal landed on context 0");
  auto* word = reinterpret_cast<uint64_t*>(dst + kWinAlign + at.va_word());
  if (!wait_at_least(word, senders) || __atomic_load_n(word, __ATOMIC_ACQUIRE) != senders) f.fail("the VA signal word");
  for (int from = 0; from < n; ++from) {
    uint64_t v = 0;
    std::memcpy(&v, dst + kWinAlign + at.put_value(from), 8);
    if (v != 0x0102030405060708ull * uint64_t(from + 1)) f.fail("putValue from rank " + std::to_string(from));
  }
  // A get on context 1 of what the next rank sends it in context 0, then
  // the device's Wait: the get consumed, a flush to its own queue consumed.
  const int next = (rank + 1) % n;
  const int64_t got = post2(&ctx[1], next,
                            build_gfd2(kGet, kChunk, gin_off(src_win, size_t(rank) * kChunk), handle(src_win),
                                       gin_off(dst_win, at.got()), handle(dst_win), 0, 0, 0));
  if (got < 0 || !wait_consumed(&ctx[1], next, uint32_t(got))) return f.fail("the get was never consumed");
  // 2.31's flush with a timeout posts no flush descriptor: it waits only
  // for the get's slot, whose bytes must then be there (over TCP too).
  if (kSince231 && dst[kWinAlign + at.got()] != fill(next, rank, 0, 0)) f.fail("a get consumed before its bytes landed");
  const int64_t flushed = post2(&ctx[1], rank, build_gfd2(kFlush, 0, 0, 0, 0, 0, 0, 0, 0));
  if (flushed < 0 || !wait_consumed(&ctx[1], rank, uint32_t(flushed))) return f.fail("the flush was never consumed");
  for (size_t i = 0; i < kChunk; ++i)
    if (dst[kWinAlign + at.got() + i] != fill(next, rank, 0, i)) {
      f.fail("the bytes the get brought from rank " + std::to_string(next));
      break;
    }
  ncclResult_t async = ncclSuccess;
  MP_NCCL(f, ncclCommGetAsyncError(comm, &async));
  if (async != ncclSuccess) f.fail(std::string("async error after good descriptors: ") + ncclGetLastError(comm));
  barrier_all(comm, f);  // no rank's proxy still reads a window about to go
  MP_NCCL(f, dev.destroy(comm));
  MP_NCCL(f, ncclCommWindowDeregister(comm, src_win));
  MP_NCCL(f, ncclCommWindowDeregister(comm, dst_win));
  MP_NCCL(f, ncclMemFree(src));
  MP_NCCL(f, ncclMemFree(dst));
}

}  // namespace

TEST_CASE("device API 2.30 GIN: puts, signals, VA signals and gets posted as 2.30's device does",
          "[device][gin][v230]") {
  // On two emulated hosts, puts, VA signals and gets to the other host go over TCP.
  CHECK(run_gin_setups(gin_traffic<v231::Abi::kV230>, "gin230-host-") == 0);
}

// Gets and VA signals between hosts over a net plugin (gin_pipes.h): a
// get's answer comes back on a connection of its own, in fragments.
TEST_CASE("device API 2.30 GIN: puts, VA signals and gets between hosts over a net plugin", "[device][gin][v230][net]") {
  CHECK(run_ranks_as_processes(4, [](int rank, int n, ncclComm_t comm, Failures& f) {
          gin_traffic<v231::Abi::kV230>(rank, n, comm, f);
          gin_said_over(f);
        }, 120, gin_over_net("gin230-net-host-")) == 0);
}

// A kernel built against 2.31's headers posts as 2.30's does, through the
// contexts at 2.31's ginHandles (and windows whose GIN handles are read
// as backend 0's).
TEST_CASE("device API 2.31 GIN: puts, signals, VA signals and gets through a 2.31 devComm", "[device][gin][v231]") {
  CHECK(run_gin_setups(gin_traffic<v231::Abi::kV231>, "gin231-host-") == 0);
}

// A kernel built against 2.32.3's headers: the same, through contexts of
// 80 bytes, none promising that any signal flushes every put.
TEST_CASE("device API 2.32 GIN: puts, signals, VA signals and gets through 2.32's contexts", "[device][gin][v232]") {
  CHECK(run_gin_setups(gin_traffic<v231::Abi::kV232>, "gin232-host-") == 0);
}

TEST_CASE("device API 2.30 GIN: a 2.28.9 descriptor in a 2.30 queue is an asynchronous error", "[device][gin][v230]") {
  CHECK(run_ranks_as_threads(2, [](int rank, int n, ncclComm_t comm, Failures& f) {
          Reqs230 reqs = gin_reqs(1, 0);
          DevComm230 dev{};
          MP_NCCL(f, dev_comm_create(comm, &reqs, &dev));
          auto* ctx = static_cast<ProxyCtx230*>(dev.ginHandles[0]);
          if (!ctx) return f.fail("no GIN context");
          if (rank == 0) {
            Gfd2 g = build_gfd2(kPut | kSignalInc, 0, 0, 0, 0, 0, 0, 0, 0);
            g.q[0] = (g.q[0] & ~uint64_t(0x1e)) | (uint64_t(kPut | kSignalInc) << 1 & 0x1e);  // 2.28.9's op, no version
            if (post2(ctx, 1, g) < 0) return f.fail("post");
            const ncclResult_t async = await_async_error(comm, f);
            if (async != ncclInvalidArgument) f.fail("async error " + std::to_string(int(async)));
            if (std::string(ncclGetLastError(comm)).find("version") == std::string::npos)
              f.fail(std::string("message: ") + ncclGetLastError(comm));
            // The fault raised the abortFlag its kernels' waits read (device_liveness.h).
            if (!dev.abortFlag || __atomic_load_n(dev.abortFlag, __ATOMIC_ACQUIRE) != 1)
              f.fail("the GIN fault left abortFlag down");
          }
          if (dev_comm_destroy(comm, &dev) != ncclSuccess) f.fail("destroy after a fault");
          (void)n;
        }) == 0);
}

// The paths a GPU takes, run on the CPU (BRAID_TEST_GIN_AS_DEVICE=1: the
// host backend's GIN moves window bytes only through staged copies and
// adds only to signal memory, as on CUDA).  2.30's default requirements
// ask for VA signals, which such a backend refuses with the reason, as
// NCCL refuses a GIN plugin without them; without them, puts, signals and
// gets run, over TCP through the staging buffers (and over a net plugin
// through the pipes' slots); a VA signal descriptor is then an
// asynchronous error.
TEST_CASE("device API 2.30 GIN: served as on a GPU, without VA signals", "[device][gin][v230]") {
  ScopedEnv as_device("BRAID_TEST_GIN_AS_DEVICE", "1");
  // Rank 0 has seen its VA signal's error: until then the others stay (one
  // exiting first would be rank 0's asynchronous error instead).  Shared
  // memory, so that forked ranks see it too.
  auto* checked = static_cast<std::atomic<int>*>(
      mmap(nullptr, sizeof(std::atomic<int>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  REQUIRE(checked != MAP_FAILED);
  auto body = [checked](int rank, int n, ncclComm_t comm, Failures& f) {
    Reqs230 va = initializer();  // ginVaSignalsRequired: true
    va.ginConnectionType = 1;
    DevComm230 none{};
    if (dev_comm_create(comm, &va, &none) != ncclInvalidUsage) f.fail("VA signals were not refused");
    if (std::string(ncclGetLastError(comm)).find("ginVaSignalsRequired") == std::string::npos)
      f.fail(std::string("message: ") + ncclGetLastError(comm));
    // A kernel built against 2.30.4's headers cannot decline VA signals:
    // the byte 2.30.7's switch is in is its padding (0 here), not a no.
    Reqs230 early = initializer();
    early.version = NCCL_VERSION(2, 30, 4);
    early.ginVaSignalsRequired = early.ginStrongSignalsRequired = false;
    early.ginConnectionType = 1;
    if (dev_comm_create(comm, &early, &none) != ncclInvalidUsage) f.fail("2.30.4's VA signals were not refused");
    if (std::string(ncclGetLastError(comm)).find("before 2.30.5") == std::string::npos)
      f.fail(std::string("2.30.4's message: ") + ncclGetLastError(comm));
    char* buf = nullptr;
    const ncclWindow_t win = pattern_window(comm, rank, 2 * kWinAlign, &buf, f);
    if (!win) return;
    Reqs230 reqs = gin_reqs(1, 1);
    reqs.ginVaSignalsRequired = false;
    DevComm230 dev{};
    MP_NCCL(f, dev_comm_create(comm, &reqs, &dev));
    auto* ctx = static_cast<ProxyCtx230*>(dev.ginHandles[0]);
    if (!ctx) return f.fail("no GIN context");
    // Every rank puts its 64 bytes into every rank's slot for it, and gets the next rank's.
    if (!put_to_all(ctx, win, buf, kWinAlign, rank, n, f, as_built)) return;
    const int next = (rank + 1) % n;
    const int64_t got = post2(
        ctx, next,
        build_gfd2(kGet, 64, gin_off(win, 0), handle(win), gin_off(win, kWinAlign + 64 * n), handle(win), 0, 0, 0));
    if (got < 0 || !wait_consumed(ctx, next, uint32_t(got))) return f.fail("the get");
    const int64_t flushed = post2(ctx, rank, build_gfd2(kFlush, 0, 0, 0, 0, 0, 0, 0, 0));  // the device's Wait
    if (flushed < 0 || !wait_consumed(ctx, rank, uint32_t(flushed))) return f.fail("the flush");
    for (int i = 0; i < 64; ++i)
      if (buf[kWinAlign + 64 * n + i] != mine(next, i)) return f.fail("the get's bytes");
    barrier_all(comm, f);  // no rank's proxy reads the window any more
    if (rank == 0) {       // a VA signal, which this backend cannot apply
      if (post2(ctx, 0, build_gfd2(kVaSignal | kSignalAdd, 0, gin_off(win, 8), handle(win), 0, 0, 0, 0, 1)) < 0)
        return f.fail("post VA signal");
      if (await_async_error(comm, f) != ncclInvalidUsage) f.fail("the VA signal was not an error");
      if (std::string(ncclGetLastError(comm)).find("window memory") == std::string::npos)
        f.fail(std::string("VA message: ") + ncclGetLastError(comm));
      checked->fetch_add(1);
    } else {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (checked->load() == 0 && std::chrono::steady_clock::now() < until) sched_yield();
    }
    MP_NCCL(f, dev_comm_destroy(comm, &dev));
    MP_NCCL(f, ncclCommWindowDeregister(comm, win));
    MP_NCCL(f, ncclMemFree(buf));
  };
  CHECK(run_ranks_as_threads(3, body) == 0);
  checked->store(0);
  CHECK(run_ranks_as_processes(4, body, 60, [](int rank) {  // two emulated hosts: TCP through the staging
          setenv("BRAID_HOSTID", ("as-device-host-" + std::to_string(rank / 2)).c_str(), 1);
        }) == 0);
  checked->store(0);
  CHECK(run_ranks_as_processes(4, body, 120, gin_over_net("as-device-net-host-")) == 0);  // the pipes, likewise
  munmap(checked, sizeof(std::atomic<int>));
}

// A kernel built against 2.30.3's or 2.30.4's headers: requirements with
// no signal switches (bytes 92-93 are padding: 0 here), 48-byte GIN
// contexts, and descriptors of GFD version 1, whose q6 bit 1 is reserved
// junk.  braid serves it with every signal strong: on each of 4 contexts
// (NCCL's initializer's count), each rank puts 64 bytes with an increment
// of the context's signal to every rank (the junk bit set on half); then
// gets the next rank's bytes and, as its flush() does, waits only for the
// get's slot to be consumed, which must mean the bytes landed (over TCP
// too, on two emulated hosts).
TEST_CASE("device API 2.30 GIN: a kernel built against 2.30.4's headers is served", "[device][gin][v230]") {
  constexpr int kEarlyContexts = 4;
  auto body = [](int rank, int n, ncclComm_t comm, Failures& f) {
    char* buf = nullptr;
    const ncclWindow_t win = pattern_window(comm, rank, size_t(kEarlyContexts + 2) * kWinAlign, &buf, f);
    if (!win) return;
    Reqs230 reqs = gin_reqs(kEarlyContexts, 1);
    reqs.version = NCCL_VERSION(2, 30, 4);
    reqs.ginStrongSignalsRequired = reqs.ginVaSignalsRequired = false;  // padding in 2.30.4's struct
    DevComm230 dev{};
    MP_NCCL(f, dev_comm_create(comm, &reqs, &dev));
    auto* contexts = static_cast<ProxyCtx2304*>(dev.ginHandles[0]);
    if (!contexts || dev.ginContextCount != kEarlyContexts) return f.fail("no GIN contexts");
    if (!dev.ginStrongLegacySignals) f.fail("2.30.4's signals not served as strong");
    // NCCL_GIN_PROXY_GFD_VERSION 1, and q6 bit 1 reserved: junk on every other peer's.
    auto early = [](Gfd2 g, int peer) {
      g.q[0] = (g.q[0] & ~uint64_t(0x1e)) | (uint64_t(1) << 1);
      g.q[6] = (g.q[6] & ~uint64_t(2)) | (peer % 2 ? 2 : 0);
      return g;
    };
    for (int c = 0; c < kEarlyContexts; ++c)
      if (!put_to_all(&contexts[c], win, buf, size_t(c + 1) * kWinAlign, rank, n, f, early))
        return f.fail("on context " + std::to_string(c));
    const int next = (rank + 1) % n;
    const size_t got = size_t(kEarlyContexts + 1) * kWinAlign;
    const int64_t idx = post2(&contexts[kEarlyContexts - 1], next,
                              early(build_gfd2(kGet, 64, gin_off(win, 0), handle(win), gin_off(win, got), handle(win),
                                               0, 0, 0),
                                    0));
    if (idx < 0 || !wait_consumed(&contexts[kEarlyContexts - 1], next, uint32_t(idx))) return f.fail("the get");
    for (int i = 0; i < 64; ++i)
      if (buf[got + i] != mine(next, i)) return f.fail("the get's bytes, once its slot was consumed");
    barrier_all(comm, f);  // no rank's proxy reads the window any more
    MP_NCCL(f, dev_comm_destroy(comm, &dev));
    MP_NCCL(f, ncclCommWindowDeregister(comm, win));
    MP_NCCL(f, ncclMemFree(buf));
  };
  CHECK(run_gin_setups(body, "gin2304-host-") == 0);
}

// NCCL makes as many GIN contexts as asked, and clients index them all
// (DeepEP V2 asks for 65 or 129): the devComm has 129, and the last one
// puts and signals like the first.
TEST_CASE("device API 2.30 GIN: every context asked for is made, the last one served", "[device][gin][v230]") {
  constexpr int kMany = 129;
  CHECK(run_ranks_as_threads(2, [](int rank, int n, ncclComm_t comm, Failures& f) {
          char* buf = nullptr;
          const ncclWindow_t win = pattern_window(comm, rank, 3 * kWinAlign, &buf, f);
          if (!win) return;
          const Reqs230 reqs = gin_reqs(kMany, 1);
          DevComm230 dev{};
          MP_NCCL(f, dev_comm_create(comm, &reqs, &dev));
          auto* contexts = static_cast<ProxyCtx230*>(dev.ginHandles[0]);
          if (!contexts || dev.ginContextCount != kMany)
            return f.fail("contexts: " + std::to_string(dev.ginContextCount));
          for (int c : {0, kMany - 1})  // each into a page of its own
            if (contexts[c].nranks != n ||
                !put_to_all(&contexts[c], win, buf, (c ? 2 : 1) * kWinAlign, rank, n, f, as_built))
              return f.fail("context " + std::to_string(c));
          barrier_all(comm, f);
          MP_NCCL(f, dev_comm_destroy(comm, &dev));
          MP_NCCL(f, ncclCommWindowDeregister(comm, win));
          MP_NCCL(f, ncclMemFree(buf));
        }) == 0);
}

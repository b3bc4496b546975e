// The MoE protocol core (include/braid/moe/) on its own: layout arithmetic,
// capacity, planning, signal words and epochs, and the arrive/commit
// leader election under real threads.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cstring>
#include <thread>
#include <vector>

#include "braid/moe/calls.h"
#include "braid/moe/layout.h"
#include "braid/moe/plan.h"
#include "braid/moe/protocol.h"
#include "braid/moe/signal.h"

using namespace braid::moe;

namespace {

Shape shape(int nranks, int experts, int top_k, int max_tokens, int tile, int capacity) {
  Shape s;
  s.nranks = nranks;
  s.experts = experts;
  s.local_experts = experts / nranks;
  s.top_k = top_k;
  s.hidden = 3;
  s.elem_bytes = 2;
  s.max_tokens = max_tokens;
  s.tile_rows = tile;
  s.capacity = capacity;
  return s;
}

// A memory model over plain memory, counting what the protocol does.
struct CountingMemory {
  int puts = 0, fences = 0, signals = 0, batches = 0;
  void put(int, void* d, const void* s, size_t n) { std::memcpy(d, s, n), ++puts; }
  void fence() { __atomic_thread_fence(__ATOMIC_SEQ_CST), ++fences; }
  void signal_words(int, uint64_t* w, const uint64_t* v, int32_t n) {
    for (int32_t i = 0; i < n; ++i) __atomic_store_n(w + i, v[i], __ATOMIC_RELEASE), ++signals;
    ++batches;
  }
  uint64_t load(const uint64_t* w) { return __atomic_load_n(w, __ATOMIC_ACQUIRE); }
  uint32_t arrive(uint32_t* c) { return __atomic_fetch_add(c, 1u, __ATOMIC_ACQ_REL); }
  void pause() { std::this_thread::yield(); }
};

// NCCL's cooperative-group interface over host threads: what
// plan_routes_coop needs (thread_rank, size, sync), a std::barrier for sync.
class ThreadCoop {
 public:
  ThreadCoop(int rank, std::barrier<>* barrier, int size) : rank_(rank), size_(size), barrier_(barrier) {}
  int thread_rank() const { return rank_; }
  int size() const { return size_; }
  void sync() { barrier_->arrive_and_wait(); }

 private:
  int rank_, size_;
  std::barrier<>* barrier_;
};

// plan_routes_coop run by `threads` host threads, with a stage of `stage_len`.
PlanResult plan_by_threads(const Shape& s, const std::vector<int32_t>& topk, int tokens, int threads, int stage_len,
                           std::vector<int32_t>* wanted, std::vector<int32_t>* slots) {
  std::barrier<> barrier(threads);
  std::vector<int32_t> stage(size_t(stage_len), 0);
  wanted->assign(size_t(s.experts), -7);
  slots->assign(topk.size(), -7);
  PlanResult r;
  std::vector<std::thread> group;
  for (int t = 0; t < threads; ++t)
    group.emplace_back([&, t] {
      const PlanResult mine = plan_routes_coop(ThreadCoop(t, &barrier, threads), s, topk.data(), tokens,
                                               wanted->data(), slots->data(), stage.data(), stage_len);
      if (t == 0) r = mine;
    });
  for (auto& g : group) g.join();
  return r;
}

}  // namespace

TEST_CASE("moe capacity: worst case is the tokens rounded to the tile, a factor scales the mean load", "[moe]") {
  CHECK(worst_case_capacity(100, 16) == 112);
  CHECK(worst_case_capacity(128, 16) == 128);
  CHECK(worst_case_capacity(5, 1) == 5);
  // 128 tokens, top-8, 256 experts: the mean is 4 rows; f = 2 -> 8, rounded to 16.
  CHECK(factor_capacity(128, 8, 256, 2.0, 16) == 16);
  CHECK(factor_capacity(128, 8, 256, 2.0, 1) == 8);
  CHECK(factor_capacity(128, 8, 256, 1.1, 1) == 5);         // ceil(4.4)
  CHECK(factor_capacity(128, 8, 256, 1000.0, 16) == 128);   // capped at the worst case
  CHECK(factor_capacity(3, 1, 64, 0.01, 1) == 1);           // at least one row
}

TEST_CASE("moe window layout: blocks [peer][local expert][row], signals apart, both halves alike", "[moe]") {
  const Shape s = shape(4, 8, 2, 10, 4, 12);  // 2 local experts, row of 6 bytes
  const WindowLayout w = WindowLayout::of(s);
  CHECK(w.dispatch_signals == 0);
  CHECK(w.combine_signals == 128);  // 8 words = 64 bytes, rounded to 128
  CHECK(w.combine_tiles == 256);
  CHECK(WindowLayout::tiles_per_block(s) == 3);  // capacity 12, tiles of 4 rows
  CHECK(WindowLayout::tile_index(s, 3, 1, 2) == 7 * 3 + 2);
  CHECK(w.dispatch_data == 256 + 256);  // 8 blocks x 3 tiles x 8 bytes = 192, rounded to 256
  CHECK(w.combine_data - w.dispatch_data >= uint64_t(s.max_output_rows() * s.row_bytes()));
  CHECK(w.bytes == w.combine_data + (w.combine_data - w.dispatch_data));
  CHECK(WindowLayout::signal_index(s, 3, 1) == 7);
  CHECK(WindowLayout::row_offset(s, 0, 0, 0) == 0);
  CHECK(WindowLayout::row_offset(s, 0, 1, 0) == 12 * 6);
  CHECK(WindowLayout::row_offset(s, 2, 1, 5) == ((2 * 2 + 1) * 12 + 5) * 6);
  CHECK(s.max_output_rows() == 4 * 2 * 12);
}

TEST_CASE("moe per-tile combine signals: a tile's rows are there once its word shows the epoch", "[moe]") {
  const Shape s = shape(2, 2, 1, 64, 4, 64);  // 1 local expert, 16 tiles of 4 rows, rows of 6 bytes
  const WindowLayout w = WindowLayout::of(s);
  std::vector<char> window(w.bytes, 0);
  auto* tiles = reinterpret_cast<uint64_t*>(window.data() + w.combine_tiles);
  char* data = window.data() + w.combine_data;
  const int rows_bytes = 4 * 6;
  for (uint32_t epoch = 1; epoch <= 50; ++epoch) {
    std::thread sender([&] {  // rank 1 returns its block's tiles in reverse order
      CountingMemory mm;
      for (int32_t tile = 15; tile >= 0; --tile) {
        std::vector<char> rows(static_cast<size_t>(rows_bytes), char(epoch + tile));
        put_rows(mm, 0, data, s, 1, 0, tile * 4, 4, rows.data());
        signal_tile(mm, 0, tiles, s, 1, 0, tile, 4, epoch);
      }
      CHECK(mm.fences == 16);
      CHECK(mm.signals == 16);
    });
    CountingMemory mm;
    std::vector<bool> seen(16, false);
    for (int done = 0; done < 16;)
      for (int32_t tile = 0; tile < 16; ++tile) {
        if (seen[size_t(tile)] || !test_tile(mm, tiles, s, 1, 0, tile, epoch)) continue;
        const char* rows = data + WindowLayout::row_offset(s, 1, 0, tile * 4);
        for (int b = 0; b < rows_bytes; ++b)
          if (rows[b] != char(epoch + tile)) FAIL("epoch " << epoch << " tile " << tile << " byte " << b);
        seen[size_t(tile)] = true;
        ++done;
      }
    sender.join();
    CHECK_FALSE(test_tile(mm, tiles, s, 1, 0, 0, epoch + 1));
  }
}

TEST_CASE("moe output layouts: rank-major pads each block, expert-major each expert", "[moe]") {
  const Shape s = shape(3, 6, 2, 10, 4, 12);  // 2 local experts
  const int32_t counts[6] = {1, 0, 5, 4, 0, 2};  // [src][le]
  int64_t first[6];
  CHECK(output_offsets(s, OutputLayout::RankMajor, counts, first) == 4 + 0 + 8 + 4 + 0 + 4);
  CHECK(std::vector<int64_t>(first, first + 6) == std::vector<int64_t>{0, 4, 4, 12, 16, 16});
  // Expert 0: sources 0, 1, 2 have 1, 5, 0 rows -> 6, padded to 8; expert 1: 0, 4, 2 -> 6 -> 8.
  CHECK(output_offsets(s, OutputLayout::ExpertMajor, counts, first) == 16);
  CHECK(std::vector<int64_t>(first, first + 6) == std::vector<int64_t>{0, 8, 1, 8, 6, 12});
}

TEST_CASE("moe planning: per-expert counts, slots in token order, overflow counted, -1 skipped, bad index found",
          "[moe]") {
  const Shape s = shape(2, 4, 2, 8, 1, 2);  // capacity 2 rows per block
  const int32_t topk[] = {0, 1, 0, 3, 0, -1, 2, 0, -1, -1};
  int32_t wanted[4], slots[10];
  const PlanResult r = plan_routes(s, topk, 5, wanted, slots);
  CHECK(r.bad_token == -1);
  CHECK(r.routed == 7);
  CHECK(r.dropped == 2);  // expert 0 wanted 4 rows, holds 2
  CHECK(std::vector<int32_t>(wanted, wanted + 4) == std::vector<int32_t>{4, 1, 1, 1});
  CHECK(std::vector<int32_t>(slots, slots + 10) ==
        std::vector<int32_t>{0, 0, 1, 0, kNoSlot, kNoSlot, 0, kNoSlot, kNoSlot, kNoSlot});
  CHECK(sent_rows(s, wanted, 0) == 2);
  CHECK(sent_rows(s, wanted, 1) == 1);
  const int32_t bad[] = {0, 1, 2, 4};
  CHECK(plan_routes(s, bad, 2, wanted, slots).bad_token == 1);
  const int32_t negative[] = {0, -2};
  CHECK(plan_routes(s, negative, 1, wanted, slots).bad_token == 0);
}

TEST_CASE("moe planning by a group of threads gives the sequential planner's slots, counts and bad index", "[moe]") {
  uint64_t seed = 7;
  auto next = [&] { return seed = seed * 6364136223846793005ull + 1442695040888963407ull, int32_t(seed >> 33); };
  for (int trial = 0; trial < 40; ++trial) {
    const int experts = 1 + next() % 40, top_k = 1 + next() % std::min(8, experts), tokens = next() % 70;
    const int capacity = 1 + next() % 12, threads = 1 + next() % 9, stage_len = 2 + next() % 50;
    const Shape s = shape(1, experts, top_k, 70, 1, capacity);
    std::vector<int32_t> topk(size_t(tokens) * top_k);
    for (auto& e : topk) e = next() % 10 == 0 ? -1 : next() % experts;
    if (trial % 5 == 4 && !topk.empty()) topk[size_t(next()) % topk.size()] = trial % 2 ? experts + 3 : -5;
    std::vector<int32_t> want_wanted(static_cast<size_t>(experts)), want_slots(topk.size() + 1), wanted, slots;
    const PlanResult want = plan_routes(s, topk.data(), tokens, want_wanted.data(), want_slots.data());
    const PlanResult got = plan_by_threads(s, topk, tokens, threads, stage_len, &wanted, &slots);
    INFO("trial " << trial << ": " << experts << " experts, top-" << top_k << ", " << tokens << " tokens, capacity "
                  << capacity << ", " << threads << " threads, stage " << stage_len);
    CHECK(got.routed == want.routed);
    CHECK(got.dropped == want.dropped);
    CHECK(got.bad_token == want.bad_token);
    CHECK(wanted == want_wanted);
    want_slots.resize(topk.size());
    CHECK(slots == want_slots);
  }
}

TEST_CASE("moe signal words carry count and epoch, epochs skip 0 and compare across the wrap", "[moe]") {
  const uint64_t w = signal_word(7, 12345);
  CHECK(signal_epoch(w) == 7);
  CHECK(signal_count(w) == 12345);
  CHECK(next_epoch(1) == 2);
  CHECK(next_epoch(0xffffffffu) == 1);
  uint32_t e = 0;  // epoch_of_call is next_epoch applied call times, across the wrap too
  for (uint64_t call = 1; call < 5; ++call) CHECK(epoch_of_call(call) == (e = next_epoch(e)));
  CHECK(epoch_of_call(0xffffffffull) == 0xffffffffu);
  CHECK(epoch_of_call(0x100000000ull) == 1);
  CHECK(epoch_of_call(0x100000001ull) == 2);
  CHECK(epoch_reached(5, 5));
  CHECK(epoch_reached(6, 5));
  CHECK_FALSE(epoch_reached(4, 5));
  CHECK_FALSE(epoch_reached(0, 1));  // a fresh window says nothing yet
  CHECK(epoch_reached(1, 0xffffffffu));  // just past the wrap
  CHECK_FALSE(epoch_reached(0xffffffffu, 1));
}

TEST_CASE("moe commit: one fence then one signal per local expert, with counts, then test() and a bounded wait",
          "[moe]") {
  const Shape s = shape(2, 6, 1, 8, 1, 8);  // 3 local experts
  std::vector<uint64_t> signals(size_t(s.blocks()), 0);
  CountingMemory mm;
  const int32_t counts[3] = {4, 0, 2};
  CHECK(commit(mm, 1, signals.data(), s, /*from=*/1, counts, 9) == 3);
  CHECK(mm.fences == 1);
  CHECK(mm.signals == 3);
  CHECK(mm.batches == 1);
  uint32_t count = 99;
  CHECK(test(mm, signals.data(), s, 1, 0, 9, &count));
  CHECK(count == 4);
  CHECK(test(mm, signals.data(), s, 1, 1, 9, &count));
  CHECK(count == 0);  // an expert without rows is still signalled
  CHECK_FALSE(test(mm, signals.data(), s, 1, 0, 10, &count));
  CHECK_FALSE(test(mm, signals.data(), s, 0, 0, 9, &count));
  int polls = 0;
  auto expired = [&] { return ++polls > 5; };
  CHECK(wait(mm, signals.data(), s, 0, 2, 9, &count, expired) == WaitResult::Timeout);
  CHECK(polls == 6);
  polls = 0;
  CHECK(wait(mm, signals.data(), s, 1, 2, 9, &count, expired) == WaitResult::Ok);
  CHECK(count == 2);
}

TEST_CASE("moe failed call: no rows and kFailedSender in every word, and a word of a later call reads as failed too",
          "[moe]") {
  const Shape s = shape(2, 4, 1, 8, 1, 8);  // 2 ranks, 2 local experts each, top-1
  const WindowLayout w = WindowLayout::of(s, 0);
  std::vector<char> windows[2] = {std::vector<char>(size_t(w.bytes)), std::vector<char>(size_t(w.bytes))};
  struct Windows : CountingMemory {
    std::vector<char>* of;
    char* window(int peer) { return of[peer].data(); }
  } mm;
  mm.of = windows;
  const std::vector<int32_t> topk = {0, 3, 2}, slots = {0, 0, 0}, sent = {1, 0, 1, 1};
  const std::vector<char> tokens(3 * size_t(s.row_bytes()), 'x');
  uint32_t arrivals[2] = {0, 0};
  CallState c{0, 1, 1, arrivals, /*failed=*/true};
  dispatch_agent(mm, s, w, c, DispatchRows{tokens.data(), topk.data(), slots.data(), sent.data(), 3}, 0, 1);
  CHECK(mm.puts == 0);
  CHECK(mm.signals == 2 * s.local_experts);  // still every word, to every rank
  for (int dst = 0; dst < 2; ++dst)
    for (int le = 0; le < s.local_experts; ++le) {
      uint32_t count = 0;
      CHECK(test(mm, reinterpret_cast<const uint64_t*>(windows[dst].data() + w.dispatch_signals), s, 0, le, 1,
                 &count));
      CHECK(count == kFailedSender);
    }
  // The next call, good: rows and counts; a reader still in call 1 sees it failed.
  c = CallState{0, 2, 2, arrivals};
  dispatch_agent(mm, s, w, c, DispatchRows{tokens.data(), topk.data(), slots.data(), sent.data(), 3}, 0, 1);
  CHECK(mm.puts == 3);
  const auto* signals = reinterpret_cast<const uint64_t*>(windows[1].data() + w.dispatch_signals);
  uint32_t count = 0;
  CHECK(test(mm, signals, s, 0, 1, 2, &count));
  CHECK(count == 1);  // expert 3 (rank 1's local expert 1): one row
  CHECK(test(mm, signals, s, 0, 1, 1, &count));
  CHECK(count == kFailedSender);
  CHECK(arrivals[0] == 2);
  CHECK(arrivals[1] == 2);
}

TEST_CASE("moe commit: many local experts' words go in batches of consecutive words, each word right", "[moe]") {
  const Shape s = shape(2, 2 * 150, 1, 8, 1, 8);  // 150 local experts: batches of 64, 64, 22
  std::vector<uint64_t> signals(size_t(s.blocks()), 0);
  std::vector<int32_t> counts(150);
  for (int i = 0; i < 150; ++i) counts[size_t(i)] = i % 9;
  CountingMemory mm;
  CHECK(commit(mm, 0, signals.data(), s, /*from=*/1, counts.data(), 3) == 150);
  CHECK(mm.batches == 3);
  CHECK(word_batches(150) == 3);
  CHECK(word_batches(64) == 1);
  CHECK(word_batches(1) == 1);
  for (int le = 0; le < 150; ++le) {
    INFO("local expert " << le);
    uint32_t count = 99;
    CHECK(test(mm, signals.data(), s, 1, le, 3, &count));
    CHECK(count == uint32_t(le % 9));
    CHECK(signals[size_t(le)] == 0);  // source 0's words untouched
  }
}

TEST_CASE("moe arrive: exactly one leader per destination per call, counters never reset, puts visible to it",
          "[moe]") {
  constexpr int kAgents = 4, kCalls = 300;
  uint32_t counter = 0;
  std::vector<int> data(kAgents * kCalls, 0);
  std::atomic<int> leaders{0}, stale{0};
  std::vector<std::thread> agents;
  std::atomic<int> phase{0};
  for (int a = 0; a < kAgents; ++a)
    agents.emplace_back([&, a] {
      CountingMemory mm;
      for (int call = 1; call <= kCalls; ++call) {
        while (phase.load(std::memory_order_acquire) < call) std::this_thread::yield();
        data[size_t((call - 1) * kAgents + a)] = call;  // a plain "put"
        if (arrive(mm, &counter, uint64_t(call), kAgents)) {
          ++leaders;
          for (int b = 0; b < kAgents; ++b)  // the leader sees every agent's put of this call
            if (data[size_t((call - 1) * kAgents + b)] != call) ++stale;
          phase.store(call + 1, std::memory_order_release);
        }
      }
    });
  phase.store(1, std::memory_order_release);
  for (auto& t : agents) t.join();
  CHECK(leaders == kCalls);
  CHECK(stale == 0);
  CHECK(counter == uint32_t(kAgents * kCalls));
}

// The LL one-shot protocol (src/ops/ll_oneshot.h), the code the CUDA kernel
// runs, run here by host threads: each rank is several worker
// threads (a kernel's threads) over plain memory regions, ranks synchronise
// only through the lines, and a rank's workers meet between calls (a
// kernel ends before the next starts).  Results are checked bitwise against
// an element-by-element fold in rank order.
#include <catch2/catch.hpp>

#include <atomic>
#include <barrier>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "src/ops/ll_oneshot.h"

using namespace braid;

namespace {

// Host memory policy: a line is two 8-byte halves, each {data, flag}, so
// two 8-byte atomics give the protocol the atomicity it needs.
struct HostLLMemory {
  std::chrono::steady_clock::time_point deadline;
  uint64_t waits = 0;
  void store(LLLine* at, LLLine v) {
    uint64_t h[2];
    std::memcpy(h, &v, sizeof h);
    auto* w = reinterpret_cast<uint64_t*>(at);
    std::atomic_ref<uint64_t>(w[0]).store(h[0], std::memory_order_release);
    std::atomic_ref<uint64_t>(w[1]).store(h[1], std::memory_order_release);
  }
  LLLine load(const LLLine* at) {
    auto* w = const_cast<uint64_t*>(reinterpret_cast<const uint64_t*>(at));
    uint64_t h[2] = {std::atomic_ref<uint64_t>(w[0]).load(std::memory_order_acquire),
                     std::atomic_ref<uint64_t>(w[1]).load(std::memory_order_acquire)};
    LLLine v;
    std::memcpy(&v, h, sizeof v);
    return v;
  }
  bool keep_waiting(int, uint64_t, uint32_t, uint32_t) {
    ++waits;
    std::this_thread::yield();
    return std::chrono::steady_clock::now() < deadline;
  }
};

struct Call {
  LLCollective collective;
  ncclDataType_t type;
  ReduceKind op;
  uint64_t count;  // per block
  bool in_place;
};

const char* name(LLCollective c) {
  switch (c) {
    case LLCollective::AllReduce: return "AllReduce";
    case LLCollective::ReduceScatter: return "ReduceScatter";
    case LLCollective::AllGather: return "AllGather";
    case LLCollective::AlltoAll: return "AlltoAll";
  }
  return "?";
}

// Small integers in any type, so that no value overflows or rounds away.
void fill(char* p, ncclDataType_t type, uint64_t count, uint32_t seed) {
  with_storage_type(type, [&](auto storage) {
    using S = decltype(storage);
    for (uint64_t i = 0; i < count; ++i) {
      using C = typename Elem<S>::Compute;
      S v = Elem<S>::store(C(int((seed * 2654435761u + i * 40503u) >> 20 & 7) - (std::is_unsigned_v<C> ? 0 : 3)));
      std::memcpy(p + i * sizeof(S), &v, sizeof(S));
    }
  });
}

size_t type_size(ncclDataType_t t) {
  size_t s = 0;
  with_storage_type(t, [&](auto storage) { s = sizeof(storage); });
  return s;
}

// Blocks in a rank's input and output (NCCL's buffer sizes).
uint64_t input_blocks(LLCollective c, int n) { return ll_sends_peer_block(c) ? n : 1; }
uint64_t output_blocks(LLCollective c, int n) {
  return c == LLCollective::AllGather || c == LLCollective::AlltoAll ? n : 1;
}

// Rank `me`'s expected output, from every rank's input: a fold in rank
// order element by element, or blocks copied.
std::vector<char> reference(const std::vector<std::vector<char>>& in, const Call& c, int me) {
  const int n = int(in.size());
  const uint64_t bb = c.count * type_size(c.type);
  std::vector<char> out(output_blocks(c.collective, n) * bb);
  if (!ll_reduces(c.collective)) {
    for (int r = 0; r < n; ++r) {
      const uint64_t from = c.collective == LLCollective::AlltoAll ? uint64_t(me) * bb : 0;
      if (bb) std::memcpy(out.data() + r * bb, in[r].data() + from, bb);
    }
    return out;
  }
  const uint64_t from = c.collective == LLCollective::ReduceScatter ? uint64_t(me) * bb : 0;
  with_storage_type(c.type, [&](auto storage) {
    using S = decltype(storage);
    with_reduce_kind(c.op, [&](auto k) {
      for (uint64_t i = 0; i < c.count; ++i) {
        S acc;
        std::memcpy(&acc, in[0].data() + from + i * sizeof(S), sizeof(S));
        for (int r = 1; r < n; ++r) {
          S v;
          std::memcpy(&v, in[r].data() + from + i * sizeof(S), sizeof(S));
          acc = reduce_elem<decltype(k)::value>(acc, v);
        }
        std::memcpy(out.data() + i * sizeof(S), &acc, sizeof(S));
      }
    });
  });
  return out;
}

// Where a rank's input and output lie in one buffer, in place as NCCL
// defines it (the input is the output's block `rank`, or the output the
// input's), or apart.  `shift` (0 or 1) makes every word unaligned.
struct Placement {
  uint64_t in_at = 0, out_at = 0, size = 0;
};
Placement placement(const Call& c, int n, int rank, uint64_t shift) {
  const uint64_t bb = c.count * type_size(c.type);
  const uint64_t in = input_blocks(c.collective, n) * bb, out = output_blocks(c.collective, n) * bb;
  if (!c.in_place) return {shift, shift + in, shift + in + out};
  if (c.collective == LLCollective::AllGather) return {shift + rank * bb, shift, shift + out};
  if (c.collective == LLCollective::ReduceScatter) return {shift, shift + rank * bb, shift + in};
  return {shift, shift, shift + in};
}

// Runs `calls` back to back on n ranks of `workers` threads each.  Returns
// the number of wrong calls (compared after all ran, so ranks run ahead of
// each other freely).
int run_calls(int n, int workers, uint64_t max_bytes, const std::vector<Call>& calls) {
  std::vector<std::vector<LLLine>> regions(n, std::vector<LLLine>(ll_region_lines(n, max_bytes)));
  std::vector<LLLine*> region_ptrs;
  for (auto& r : regions) region_ptrs.push_back(r.data());
  // Per call and rank: the input as it was, and the buffer the call ran on.
  std::vector<std::vector<std::vector<char>>> inputs(calls.size()), buffers(calls.size());
  for (size_t k = 0; k < calls.size(); ++k)
    for (int r = 0; r < n; ++r) {
      const Call& c = calls[k];
      const Placement p = placement(c, n, r, k & 1);
      std::vector<char> in(input_blocks(c.collective, n) * c.count * type_size(c.type));
      fill(in.data(), c.type, in.size() / type_size(c.type), uint32_t(k * 131 + r));
      std::vector<char> buffer(p.size, char(0x5a));
      if (!in.empty()) std::memcpy(buffer.data() + p.in_at, in.data(), in.size());
      inputs[k].push_back(std::move(in));
      buffers[k].push_back(std::move(buffer));
    }
  std::atomic<int> gave_up{0};
  std::vector<std::thread> threads;
  std::vector<std::unique_ptr<std::barrier<>>> kernel_ends;
  for (int r = 0; r < n; ++r) kernel_ends.push_back(std::make_unique<std::barrier<>>(workers));
  for (int r = 0; r < n; ++r)
    for (int w = 0; w < workers; ++w)
      threads.emplace_back([&, r, w] {
        HostLLMemory mem;
        for (size_t k = 0; k < calls.size(); ++k) {
          const Call& c = calls[k];
          const Placement p = placement(c, n, r, k & 1);
          LLArgs a;
          a.collective = c.collective;
          a.input = buffers[k][r].data() + p.in_at;
          a.output = buffers[k][r].data() + p.out_at;
          a.bytes = c.count * type_size(c.type);
          a.max_bytes = max_bytes;
          a.regions = region_ptrs.data();
          a.rank = r;
          a.nranks = n;
          a.type = c.type;
          a.op = c.op;
          mem.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
          if (!ll_oneshot(a, k + 1, uint64_t(w), uint64_t(workers), mem)) ++gave_up;
          kernel_ends[r]->arrive_and_wait();
        }
      });
  for (auto& t : threads) t.join();
  int wrong = gave_up.load();
  for (size_t k = 0; k < calls.size(); ++k)
    for (int r = 0; r < n; ++r) {
      const std::vector<char> want = reference(inputs[k], calls[k], r);
      const Placement p = placement(calls[k], n, r, k & 1);
      if (!want.empty() && std::memcmp(buffers[k][r].data() + p.out_at, want.data(), want.size()) != 0) {
        UNSCOPED_INFO(name(calls[k].collective) << " call " << k << " rank " << r << " count " << calls[k].count
                                                << " type " << calls[k].type << " in place " << calls[k].in_place);
        ++wrong;
      }
    }
  return wrong;
}

// Calls of one collective: every type and op, sizes that split words.
std::vector<Call> mixed_calls(LLCollective collective, uint64_t max_bytes) {
  const ncclDataType_t types[] = {ncclInt8,    ncclUint8,   ncclInt32,   ncclUint32,   ncclInt64,      ncclUint64,
                                  ncclFloat16, ncclFloat32, ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};
  const ReduceKind ops[] = {ReduceKind::Sum, ReduceKind::Prod, ReduceKind::Max, ReduceKind::Min};
  std::mt19937 rng(7);
  std::vector<Call> calls;
  for (int k = 0; k < 96; ++k) {
    const ncclDataType_t t = types[k % 12];
    const uint64_t max_count = max_bytes / type_size(t);
    // Empty, one element, odd counts (a partial last word) and the capacity.
    const uint64_t counts[] = {0, 1, 3, max_count, rng() % (max_count + 1)};
    calls.push_back({collective, t, ops[(k / 12) % 4], counts[k % 5], k % 3 == 1});
  }
  return calls;
}

}  // namespace

TEST_CASE("LL one-shot: exact for every collective, type and op, in place or not, back to back", "[ll]") {
  for (LLCollective c : {LLCollective::AllReduce, LLCollective::ReduceScatter, LLCollective::AllGather,
                         LLCollective::AlltoAll})
    for (auto [n, workers] : {std::pair{1, 1}, {2, 1}, {2, 3}, {3, 2}, {4, 2}, {8, 1}}) {
      INFO(name(c) << " ranks " << n << " workers " << workers);
      CHECK(run_calls(n, workers, 1024, mixed_calls(c, 1024)) == 0);
    }
}

TEST_CASE("LL one-shot: 500 calls back to back reuse both parities without acknowledgement", "[ll]") {
  // Large calls after small ones: lines beyond a small call keep old flags,
  // which must never pass for a later call's.  Empty calls too: each still
  // exchanges one line, or a rank two empty calls ahead overwrites lines a
  // slower peer still polls (this hung before that rule).  The collectives
  // alternate, as they share the region.
  std::vector<Call> calls;
  for (int k = 0; k < 500; ++k)
    calls.push_back({LLCollective(k % 4), ncclInt32, ReduceKind::Sum, uint64_t(k % 7 == 0 ? 256 : k % 5), false});
  CHECK(run_calls(4, 2, 1024, calls) == 0);
}

TEST_CASE("LL one-shot: a line from two calls ago, or from none, is not taken", "[ll]") {
  // Rank 1 never runs: rank 0 finds lines flagged for call k-2 (same
  // parity) and zeroed lines, must keep waiting, and gives up when told.
  const uint64_t max_bytes = 64;
  std::vector<std::vector<LLLine>> regions(2, std::vector<LLLine>(ll_region_lines(2, max_bytes)));
  const uint64_t seq = 5;
  for (uint64_t i = 0; i < ll_words(max_bytes); ++i)
    regions[0][ll_line_index(1, seq, i, max_bytes)] = ll_line(0x1234, ll_flag(seq - 2));
  LLLine* ptrs[] = {regions[0].data(), regions[1].data()};
  std::vector<char> in(max_bytes, 1), out(max_bytes, 0);
  LLArgs a;
  a.input = in.data();
  a.output = out.data();
  a.bytes = max_bytes;
  a.max_bytes = max_bytes;
  a.regions = ptrs;
  a.rank = 0;
  a.nranks = 2;
  a.type = ncclInt8;
  for (uint64_t s : {seq, seq + 1}) {  // the stale parity, then the zeroed one
    HostLLMemory mem;
    mem.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
    CHECK_FALSE(ll_oneshot(a, s, 0, 1, mem));
    CHECK(mem.waits > 0);
    CHECK(out == std::vector<char>(max_bytes, 0));  // nothing written for a word it did not get
  }
  // Rank 0's line reached rank 1's region, flagged with the call's sequence.
  const LLLine sent = regions[1][ll_line_index(0, seq, 0, max_bytes)];
  CHECK(ll_ready(sent, ll_flag(seq)));
  CHECK(ll_word(sent) == 0x0101010101010101ull);
}

TEST_CASE("LL region layout (sender, parity, word) and flags", "[ll]") {
  // Flags are never 0 (a zeroed line), and calls two apart never share one,
  // also where the 32-bit flag wraps.
  for (uint64_t seq : {1ull, 2ull, 0xFFFFFFFEull, 0xFFFFFFFFull, 0x100000000ull, 0x100000001ull, 0x1FFFFFFFEull}) {
    CHECK(ll_flag(seq) != 0);
    CHECK(ll_flag(seq) != ll_flag(seq + 2));
  }
  CHECK(ll_words(0) == 0);
  CHECK(ll_words(1) == 1);
  CHECK(ll_words(8) == 1);
  CHECK(ll_words(9) == 2);
  CHECK(ll_region_lines(4, 64) == 4 * 2 * 8);
  CHECK(ll_line_index(0, 2, 0, 64) == 0);
  CHECK(ll_line_index(0, 1, 0, 64) == 8);
  CHECK(ll_line_index(3, 1, 7, 64) == (3 * 2 + 1) * 8 + 7);
}

// LL one-shot collectives: the low-latency protocol for small messages,
// written once for CUDA kernels and host threads (BRAID_HD).
//
// A small collective is latency: a FIFO schedule pays a block-wide barrier,
// a counter store and a counter poll per fragment and hop.  Here the flag
// travels with the data (NCCL's LL idea), and every rank exchanges with
// every peer at once.  What a rank sends each peer is a block: its whole
// input (AllReduce, AllGather) or the peer's block of it (ReduceScatter,
// AlltoAll).  A block is cut into 8-byte words; word i goes out as one
// 16-byte line {low 4 bytes, flag, high 4 bytes, flag}, stored into the
// peer's LL region at [sender][parity][i].
// A reader polls its own region until both flags of a line equal the call's
// flag: a line is stored by one 16-byte store and read by one 16-byte load
// (a CUDA st/ld.volatile.v4), and each 8-byte half {4 data bytes, flag}
// checks itself, so 8-byte atomicity is all the protocol needs (the host
// uses two 8-byte atomics).  The reducing collectives fold all n values of a word in rank
// order, so every rank's output is bitwise the same; the others store word
// i of the block from rank r into output block r.  A small call is one store
// per peer and word, and one poll per peer and word: no barrier, no counters.
//
// Workers (threads of a block, or host threads) each take words w, w+W, ...
// and handle each word end to end, reading every input block's word i
// before writing any output block's word i, so every placement NCCL allows
// in place is safe: no other worker touches word i of any block.
//
// Two parities alternate with the call sequence, and that is enough without
// acknowledgements (as the host one-shot board, src/exec/host/oneshot.h): a
// sender writes parity p of call k only after finishing call k-1, which
// needed every peer's call k-1 lines, which a peer writes only after
// finishing call k-2, the last reader of parity p.  That holds only if
// every call reads at least one line of every peer: an empty call still
// exchanges word 0 (without it, a rank ran two empty calls ahead and
// overwrote lines a slower peer was still polling for call k-2, and both
// waited forever: the host test caught it).  It also needs a rank's calls
// to run one after another (one stream, as every braid CUDA schedule does).
// The flag (ll_flag) is the call's sequence number modulo 2^32 - 1, plus 1:
// never 0, so the zeroed region matches no call, and a line left from call
// k-2 carries another flag.  Only a line untouched for 2^32 - 1 calls of its
// parity (a larger call after four billion smaller ones) could match again.
#pragma once

#include <cstdint>
#include <cstring>

#include "braid/hd.h"
#include "braid/schedule.h"
#include "nccl.h"
#include "src/ops/reduce_ops.h"

namespace braid {

struct LLLine {
  uint32_t data0, flag0, data1, flag1;
};
static_assert(sizeof(LLLine) == 16);

constexpr uint64_t kLLWordBytes = 8;  // payload per line

BRAID_HD uint64_t ll_words(uint64_t bytes) { return (bytes + kLLWordBytes - 1) / kLLWordBytes; }

// The LL region a rank owns (peers write into it): [sender][parity][word].
BRAID_HD uint64_t ll_region_lines(int nranks, uint64_t max_bytes) { return uint64_t(nranks) * 2 * ll_words(max_bytes); }
BRAID_HD uint64_t ll_line_index(int sender, uint64_t seq, uint64_t word, uint64_t max_bytes) {
  return (uint64_t(sender) * 2 + (seq & 1)) * ll_words(max_bytes) + word;
}

enum class LLCollective : uint8_t { AllReduce, ReduceScatter, AllGather, AlltoAll };

// The LL collective that serves `c`; false for the collectives LL does not serve.
inline bool ll_collective_of(Collective c, LLCollective* out) {
  switch (c) {
    case Collective::AllReduce: *out = LLCollective::AllReduce; return true;
    case Collective::ReduceScatter: *out = LLCollective::ReduceScatter; return true;
    case Collective::AllGather: *out = LLCollective::AllGather; return true;
    case Collective::AlltoAll: *out = LLCollective::AlltoAll; return true;
    default: return false;
  }
}

// Peer p is sent input block p (else the whole input); outputs are folded
// (else block r of the output comes from rank r).
BRAID_HD bool ll_sends_peer_block(LLCollective c) {
  return c == LLCollective::ReduceScatter || c == LLCollective::AlltoAll;
}
BRAID_HD bool ll_reduces(LLCollective c) { return c == LLCollective::AllReduce || c == LLCollective::ReduceScatter; }

struct LLArgs {
  LLCollective collective = LLCollective::AllReduce;
  const char* input = nullptr;
  char* output = nullptr;
  uint64_t bytes = 0;      // of one block: count x element size, at most max_bytes
  uint64_t max_bytes = 0;  // the regions' capacity (bytes per sender and parity), at least 8
  LLLine* const* regions = nullptr;  // regions[r]: rank r's LL region, as this rank maps it
  int rank = 0, nranks = 1;
  ncclDataType_t type = ncclFloat;
  ReduceKind op = ReduceKind::Sum;
};

// Reads word `i` of a buffer of `bytes` (zero past the end; any alignment).
BRAID_HD uint64_t ll_load_word(const char* buffer, uint64_t bytes, uint64_t i) {
  uint64_t v = 0;
  const uint64_t at = i * kLLWordBytes, n = bytes - at < kLLWordBytes ? bytes - at : kLLWordBytes;
  if (n == 0) return v;  // an empty call's word 0 (a buffer may be NULL)
  if (n == kLLWordBytes && (uintptr_t(buffer + at) & 7) == 0) return *reinterpret_cast<const uint64_t*>(buffer + at);
  memcpy(&v, buffer + at, n);
  return v;
}

BRAID_HD void ll_store_word(char* buffer, uint64_t bytes, uint64_t i, uint64_t v) {
  const uint64_t at = i * kLLWordBytes, n = bytes - at < kLLWordBytes ? bytes - at : kLLWordBytes;
  if (n == 0) return;
  if (n == kLLWordBytes && (uintptr_t(buffer + at) & 7) == 0) *reinterpret_cast<uint64_t*>(buffer + at) = v;
  else memcpy(buffer + at, &v, n);
}

// a (op) b, element by element over one 8-byte word of storage type S.
template <ReduceKind K, typename S>
BRAID_HD uint64_t ll_fold_word(uint64_t a, uint64_t b) {
  constexpr int kPer = kLLWordBytes / sizeof(S);
  S x[kPer], y[kPer];
  memcpy(x, &a, sizeof x);
  memcpy(y, &b, sizeof y);
  for (int k = 0; k < kPer; ++k) x[k] = reduce_elem<K>(x[k], y[k]);
  uint64_t r;
  memcpy(&r, x, sizeof r);
  return r;
}

BRAID_HD uint32_t ll_flag(uint64_t seq) { return uint32_t(seq % 0xFFFFFFFFull) + 1; }
BRAID_HD LLLine ll_line(uint64_t word, uint32_t flag) { return {uint32_t(word), flag, uint32_t(word >> 32), flag}; }
BRAID_HD bool ll_ready(const LLLine& l, uint32_t flag) { return l.flag0 == flag && l.flag1 == flag; }
BRAID_HD uint64_t ll_word(const LLLine& l) { return uint64_t(l.data0) | uint64_t(l.data1) << 32; }

// Worker `w` of `workers` runs its words of call `seq` (1, 2, ... alike on
// every rank).  Mem provides store(LLLine*, LLLine), load(const LLLine*)
// and keep_waiting(peer, word, flag seen, flag wanted), polled while a
// line is not there (false: give up, the call failed: timeout, abort; the
// arguments say which line, for the report).  Returns false when it gave up.
#if defined(__CUDACC__)
#pragma nv_exec_check_disable  // the kernel's Mem is device code only
#endif
template <ReduceKind K, typename S, typename Mem>
BRAID_HD bool ll_worker(const LLArgs& a, uint64_t seq, uint64_t w, uint64_t workers, Mem& mem) {
  const uint32_t flag = ll_flag(seq);
  const uint64_t words = a.bytes ? ll_words(a.bytes) : 1;  // one line at least: see the header
  const bool per_peer = ll_sends_peer_block(a.collective), reduces = ll_reduces(a.collective);
  auto input_block = [&](int r) { return a.input + (per_peer ? uint64_t(r) * a.bytes : 0); };
  // Every word out first, then every word in: a worker waits about one
  // round trip per call, not one per word it carries.
  for (uint64_t i = w; i < words; i += workers) {
    const uint64_t mine = ll_load_word(input_block(a.rank), a.bytes, i);
    const uint64_t at_peer = ll_line_index(a.rank, seq, i, a.max_bytes);
    for (int k = 1; k < a.nranks; ++k) {  // the next ranks first: no peer is everyone's first
      const int peer = (a.rank + k) % a.nranks;
      const uint64_t word = per_peer ? ll_load_word(input_block(peer), a.bytes, i) : mine;
      mem.store(a.regions[peer] + at_peer, ll_line(word, flag));
    }
  }
  // In place, word i of the output is written only after word i of the
  // input was read (above for the peers' blocks, here for this rank's), and
  // only by this worker: no other word is touched.
  for (uint64_t i = w; i < words; i += workers) {
    const uint64_t mine = ll_load_word(input_block(a.rank), a.bytes, i);
    uint64_t acc = 0;
    for (int r = 0; r < a.nranks; ++r) {
      uint64_t v = mine;
      if (r != a.rank) {
        const LLLine* at = a.regions[a.rank] + ll_line_index(r, seq, i, a.max_bytes);
        LLLine got = mem.load(at);
        while (!ll_ready(got, flag)) {
          if (!mem.keep_waiting(r, i, got.flag0, flag)) return false;
          got = mem.load(at);
        }
        v = ll_word(got);
      }
      if (reduces) acc = r == 0 ? v : ll_fold_word<K, S>(acc, v);
      else ll_store_word(a.output + uint64_t(r) * a.bytes, a.bytes, i, v);
    }
    if (reduces) ll_store_word(a.output, a.bytes, i, acc);
  }
  return true;
}

// The same, dispatched on the call's type and reduction.
#if defined(__CUDACC__)
#pragma nv_exec_check_disable
#endif
template <typename Mem>
BRAID_HD bool ll_oneshot(const LLArgs& a, uint64_t seq, uint64_t w, uint64_t workers, Mem& mem) {
  bool ok = false;
  with_storage_type(a.type, [&](auto storage) {
    with_reduce_kind(a.op, [&](auto k) {
      ok = ll_worker<decltype(k)::value, decltype(storage)>(a, seq, w, workers, mem);
    });
  });
  return ok;
}

}  // namespace braid

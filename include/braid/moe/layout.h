// MoE dispatch/combine: the symmetric receive layout (issue 40), written once
// for host C++ and CUDA (BRAID_HD).
//
// Every rank holds one window of the same shape.  Its dispatch half receives
// the rows routed to this rank's experts, laid out [source rank][local
// expert][row], each (source, local expert) block `capacity` rows long; its
// combine half receives the expert outputs of this rank's own tokens back,
// laid out [expert-owning rank][local expert][row] with the same blocks.
// Since every block's place depends only on (source, local expert) and the
// shape, a sender computes the remote offset of every row it writes
// locally: no handshake, no count exchange before the data.  The signal
// words sit before the data, one per (peer, local expert) in each half.
//
// Capacity policy.  Worst case: a source can route each of its tokens to an
// expert at most once (distinct top-k indices), so `max_tokens` rows, rounded
// up to the tile, never overflow.  Capacity factor f: ceil(f * max_tokens *
// top_k / experts) rows (the mean load times f), rounded up to the tile and
// capped at the worst case.  Rows past the capacity of their block are not
// sent: the planner counts them, the host reports them per call and in the
// statistics, and combine leaves them out of the token's weighted sum (a
// capacity drop, as Switch Transformer's).  Nothing is dropped silently.
//
// Rows are padded to a tile of `tile_rows` rows so that a grouped GEMM takes
// whole tiles: the capacity is a multiple of it, and the packed output
// layouts below round every block (rank-major) or every expert
// (expert-major) up to it.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "braid/hd.h"

namespace braid::moe {

BRAID_HD int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// What every rank agrees on at create time.
struct Shape {
  int32_t nranks = 0;
  int32_t experts = 0;        // global; a multiple of nranks
  int32_t local_experts = 0;  // experts / nranks; expert e lives on rank e / local_experts
  int32_t top_k = 0;
  int32_t hidden = 0;      // elements per row
  int32_t elem_bytes = 0;  // bytes per element
  int32_t max_tokens = 0;  // tokens per rank per call, at most
  int32_t tile_rows = 1;   // the padding unit
  int32_t capacity = 0;    // rows per (peer, local expert) block, a multiple of tile_rows

  BRAID_HD int64_t row_bytes() const { return int64_t(hidden) * elem_bytes; }
  BRAID_HD int32_t owner(int32_t expert) const { return expert / local_experts; }
  BRAID_HD int32_t local(int32_t expert) const { return expert % local_experts; }
  BRAID_HD int64_t blocks() const { return int64_t(nranks) * local_experts; }
  // Rows a dispatch output (or combine input) can hold: every block full.
  BRAID_HD int64_t max_output_rows() const { return blocks() * capacity; }
};

BRAID_HD int32_t worst_case_capacity(int32_t max_tokens, int32_t tile_rows) {
  return int32_t(round_up(max_tokens > 0 ? max_tokens : 1, tile_rows));
}

BRAID_HD int32_t factor_capacity(int32_t max_tokens, int32_t top_k, int32_t experts, double factor,
                                 int32_t tile_rows) {
  const double mean = double(max_tokens) * top_k / experts;
  int64_t rows = int64_t(mean * factor);
  if (double(rows) < mean * factor) ++rows;  // ceil without <cmath>
  if (rows < 1) rows = 1;
  const int32_t worst = worst_case_capacity(max_tokens, tile_rows);
  rows = round_up(rows, tile_rows);
  return rows > worst ? worst : int32_t(rows);
}

// Byte offsets inside every rank's window.  Signal words are 8 bytes, kept
// on their own cache lines apart from the data.  The combine half also has
// one tile word per (peer, local expert, tile of tile_rows rows): a sender
// that returns results tile by tile over LSA may raise each tile's word as
// it lands (protocol.h signal_tile), so that the source can start on the
// tokens whose rows are in before the whole block is.
//
// Zero-copy (config.zeroCopy, braid/moe.h), where a peer reads rows in
// place instead of having them put:
//   kCombineBuffer: the window also holds a buffer for this rank's expert
//     results, in the dispatch output's layout, and a pull index: per
//     (source, local expert) block, the buffer row where its results start,
//     or kRowsPut.  A source that maps this window reads its results there.
//   kDispatchBuffer: the window also holds a buffer for this rank's tokens
//     (max_tokens rows), a pull word per destination (1: it reads this
//     call's rows here) and a pull list: per (destination, local expert,
//     slot), the token whose row fills that slot.  An expert's owner that
//     maps this window copies its rows from here into its output.
struct WindowLayout {
  uint64_t dispatch_signals = 0, combine_signals = 0, combine_tiles = 0, dispatch_data = 0, combine_data = 0,
           pull_index = 0, combine_buffer = 0, dispatch_pulls = 0, dispatch_list = 0, dispatch_buffer = 0,
           bytes = 0;

  static constexpr int32_t kCombineBuffer = 1, kDispatchBuffer = 2;  // zero-copy flags
  static constexpr int64_t kRowsPut = -1;  // a pull index entry: this block's results were put, not left here

  BRAID_HD static WindowLayout of(const Shape& s, int32_t zero_copy = 0) {
    const uint64_t signal_bytes = uint64_t(round_up(s.blocks() * 8, 128));
    const uint64_t tile_bytes = uint64_t(round_up(s.blocks() * tiles_per_block(s) * 8, 128));
    const uint64_t data_bytes = uint64_t(round_up(s.max_output_rows() * s.row_bytes(), 128));
    WindowLayout w;
    w.dispatch_signals = 0;
    w.combine_signals = signal_bytes;
    w.combine_tiles = 2 * signal_bytes;
    w.dispatch_data = w.combine_tiles + tile_bytes;
    w.combine_data = w.dispatch_data + data_bytes;
    w.bytes = w.combine_data + data_bytes;
    if (zero_copy & kCombineBuffer) {
      w.pull_index = w.bytes;
      w.combine_buffer = w.pull_index + signal_bytes;
      w.bytes = w.combine_buffer + data_bytes;
    }
    if (zero_copy & kDispatchBuffer) {
      w.dispatch_pulls = w.bytes;
      w.dispatch_list = w.dispatch_pulls + uint64_t(round_up(int64_t(s.nranks) * 8, 128));
      w.dispatch_buffer = w.dispatch_list + uint64_t(round_up(s.max_output_rows() * 4, 128));
      w.bytes = w.dispatch_buffer + uint64_t(round_up(int64_t(s.max_tokens) * s.row_bytes(), 128));
    }
    return w;
  }
  // The pull list's entry of slot `slot` of block (destination, local expert).
  BRAID_HD static int64_t list_index(const Shape& s, int32_t destination, int32_t local_expert, int32_t slot) {
    return (int64_t(destination) * s.local_experts + local_expert) * s.capacity + slot;
  }
  BRAID_HD static int64_t tiles_per_block(const Shape& s) { return (s.capacity + s.tile_rows - 1) / s.tile_rows; }
  // The tile word of rows [tile * tile_rows, (tile + 1) * tile_rows) of
  // block (peer, local expert), as an index of 8-byte words from combine_tiles.
  BRAID_HD static int64_t tile_index(const Shape& s, int32_t peer, int32_t local_expert, int32_t tile) {
    return (int64_t(peer) * s.local_experts + local_expert) * tiles_per_block(s) + tile;
  }
  // The signal word of block (peer, local expert), as an index of 8-byte words from the half's base.
  BRAID_HD static int64_t signal_index(const Shape& s, int32_t peer, int32_t local_expert) {
    return int64_t(peer) * s.local_experts + local_expert;
  }
  // A row of block (peer, local expert), in bytes from the half's data base.
  BRAID_HD static int64_t row_offset(const Shape& s, int32_t peer, int32_t local_expert, int32_t row) {
    return ((int64_t(peer) * s.local_experts + local_expert) * s.capacity + row) * s.row_bytes();
  }
};

// The packed layouts of the dispatch output (and of combine's input, the
// experts' results in the same places).
//   rank-major:   [source][local expert][rows], each block rounded up to the tile;
//   expert-major: [local expert][source][rows], each expert's rows (all
//                 sources, back to back) rounded up to the tile, as a grouped
//                 GEMM over the local experts takes them.
enum class OutputLayout : int32_t { ExpertMajor = 0, RankMajor = 1 };

// first_row[src * L + le]: the output row where block (src, le)'s rows start,
// from the received counts (counts[src * L + le]).  Returns the rows used,
// padding included.
BRAID_HD int64_t output_offsets(const Shape& s, OutputLayout layout, const int32_t* counts, int64_t* first_row) {
  const int32_t L = s.local_experts;
  int64_t row = 0;
  if (layout == OutputLayout::RankMajor) {
    for (int32_t src = 0; src < s.nranks; ++src)
      for (int32_t le = 0; le < L; ++le) {
        first_row[src * L + le] = row;
        row += round_up(counts[src * L + le], s.tile_rows);
      }
  } else {
    for (int32_t le = 0; le < L; ++le) {
      const int64_t expert_first = row;
      for (int32_t src = 0; src < s.nranks; ++src) {
        first_row[src * L + le] = row;
        row += counts[src * L + le];
      }
      row = expert_first + round_up(row - expert_first, s.tile_rows);
    }
  }
  return row;
}

}  // namespace braid::moe

#include "tools/braid/schedule_text.h"

#include <fmt/format.h>

#include <algorithm>

#include "braid/chunking.h"

namespace braid::cli {
namespace {

std::string chunks(const ChunkRef& ref, uint32_t count) {
  if (count == 1) return fmt::format("{}[{}]", to_string(ref.buffer), ref.index);
  return fmt::format("{}[{}..{}]", to_string(ref.buffer), ref.index, ref.index + count - 1);
}

std::string op_text(const Op& op) {
  std::string line = fmt::format("{:<6}", to_string(op.type));
  // One-sided ops name the peer's chunk as "rank P's buffer[i]".
  if (op_gets(op.type)) line += fmt::format(" src {}'s {}", op.recv_peer, chunks(op.src, op.count));
  if (op_receives(op.type)) line += fmt::format(" from {}", op.recv_peer);
  if (op_reads_src(op.type))  // GetReduceCopy: the peer's chunk (+) its own
    line += (op_gets(op.type) ? " (+) " : " src ") + chunks(op.src, op.count);
  if (op_writes_dst(op.type)) line += fmt::format(" dst {}", chunks(op.dst, op.count));
  if (op_puts(op.type)) line += fmt::format(" dst {}'s {}", op.send_peer, chunks(op.dst, op.count));
  if (op_sends(op.type)) line += fmt::format(" to {}", op.send_peer);
  if (!op.deps.empty()) {
    line += "  after";
    for (const Dep& d : op.deps) line += fmt::format(" l{}.{}", d.lane, d.op);
  }
  return line;
}

// How braid runs what an MSCCL file says about protocol and chunking.
std::string run_notes(const Schedule& s) {
  std::string out = fmt::format(
      "messages of {} B to {} (count x type size{}), {} slot(s) per connection\n", s.min_bytes,
      s.max_bytes == UINT64_MAX ? "any size" : fmt::format("{} B", s.max_bytes),
      message_bytes(s.collective, 2, 1, 1) == 2 ? " x nranks" : "", s.slots);
  out += fmt::format(
      "protocol {}: a hint for GPUs; the host backend moves every protocol's data alike (MSCCL's LL and LL128 "
      "buffer 8 messages per connection, Simple 2; braid gives each connection the slots above)\n",
      s.protocol);
  if (!s.ranks.empty() && s.collective != Collective::Custom) {
    const RankProgram& p = s.ranks[0];
    const uint64_t loop = std::max<uint64_t>(uint64_t(p.input_chunks) * message_bytes(s.collective, s.nranks, 1, 1) /
                                                 input_blocks(s.collective, s.nranks),
                                             p.output_chunks * message_bytes(s.collective, s.nranks, 1, 1) /
                                                 output_blocks(s.collective, s.nranks));
    out += fmt::format(
        "chunks: the message is cut into {} equal chunks (MSCCL's nchunksperloop); MSCCL runs a file only when the "
        "count divides evenly, braid runs any count (trailing chunks shorter or empty)\n",
        loop);
  }
  return out;
}

}  // namespace

std::string schedule_to_text(const Schedule& s) {
  std::string out = fmt::format("schedule {}: {} on {} ranks", s.name, to_string(s.collective), s.nranks);
  if (s.root >= 0) out += fmt::format(", root {}", s.root);
  out += fmt::format(" ({}{}{})\n", s.in_place ? "in place" : "", s.in_place && s.out_of_place ? ", " : "",
                     s.out_of_place ? "out of place" : "");
  out += run_notes(s);
  for (size_t r = 0; r < s.ranks.size(); ++r) {
    const RankProgram& p = s.ranks[r];
    out += fmt::format("rank {}: chunks input {} output {} scratch {}\n", r, p.input_chunks, p.output_chunks,
                       p.scratch_chunks);
    for (size_t l = 0; l < p.lanes.size(); ++l) {
      out += fmt::format("  lane {} (channel {})\n", l, p.lanes[l].channel);
      for (size_t i = 0; i < p.lanes[l].ops.size(); ++i)
        out += fmt::format("    {:>3}  {}\n", i, op_text(p.lanes[l].ops[i]));
    }
  }
  return out;
}

}  // namespace braid::cli

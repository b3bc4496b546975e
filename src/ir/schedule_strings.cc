// Names of the IR's enums, as used in JSON, the CLI, logs and BRAID_ALGO.
#include <array>
#include <utility>

#include "braid/schedule.h"

namespace braid {
namespace {

constexpr std::array<std::pair<Collective, const char*>, 9> kCollectives = {{
    {Collective::AllReduce, "allreduce"},
    {Collective::AllGather, "allgather"},
    {Collective::ReduceScatter, "reducescatter"},
    {Collective::Broadcast, "broadcast"},
    {Collective::Reduce, "reduce"},
    {Collective::AlltoAll, "alltoall"},
    {Collective::Gather, "gather"},
    {Collective::Scatter, "scatter"},
    {Collective::Custom, "custom"},
}};

// Short names follow MSCCL's instruction mnemonics (s, r, rcs, rrs, rrc, rrcs).
constexpr std::array<std::pair<OpType, const char*>, 15> kOps = {{
    {OpType::Send, "send"},
    {OpType::Recv, "recv"},
    {OpType::RecvCopySend, "rcs"},
    {OpType::RecvReduceSend, "rrs"},
    {OpType::RecvReduceCopy, "rrc"},
    {OpType::RecvReduceCopySend, "rrcs"},
    {OpType::Copy, "copy"},
    {OpType::Reduce, "reduce"},
    {OpType::Nop, "nop"},
    {OpType::Put, "put"},
    {OpType::Get, "get"},
    {OpType::GetReduce, "get_reduce"},
    {OpType::Signal, "signal"},
    {OpType::Wait, "wait"},
    {OpType::GetReduceCopy, "get_reduce_copy"},
}};

template <typename Table, typename E>
const char* name_of(const Table& table, E value) {
  for (const auto& [v, name] : table)
    if (v == value) return name;
  return "invalid";
}

template <typename Table>
auto value_of(const Table& table, const std::string& s) -> std::optional<decltype(table[0].first)> {
  for (const auto& [v, name] : table)
    if (s == name) return v;
  return std::nullopt;
}

}  // namespace

const char* to_string(Collective c) { return name_of(kCollectives, c); }
const char* to_string(OpType t) { return name_of(kOps, t); }
const char* to_string(BufferKind b) {
  switch (b) {
    case BufferKind::Input: return "input";
    case BufferKind::Output: return "output";
    case BufferKind::Scratch: return "scratch";
  }
  return "invalid";
}

std::optional<Collective> collective_from_string(const std::string& s) { return value_of(kCollectives, s); }
std::optional<OpType> op_type_from_string(const std::string& s) { return value_of(kOps, s); }

}  // namespace braid

// MSCCL XML import and export (see include/braid/msccl_xml.h).
//
// The mapping is one to one: <gpu> = RankProgram, <tb> = Lane (chan =
// channel), <step> = Op, depid/deps = one Dep.  What needs care is
// placement: MSCCL's in-place files read and write the one aliased buffer
// through the letter "i", while braid never writes its input buffer.
#include "braid/msccl_xml.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <map>
#include <pugixml.hpp>
#include <set>
#include <sstream>

#include "braid/chunking.h"
#include "src/ir/msccl_tbs.h"

namespace braid {
namespace {

struct StepType {
  const char* xml;
  OpType op;
};
constexpr StepType kStepTypes[] = {
    {"s", OpType::Send},        {"r", OpType::Recv},          {"rcs", OpType::RecvCopySend},
    {"rrs", OpType::RecvReduceSend}, {"rrc", OpType::RecvReduceCopy}, {"rrcs", OpType::RecvReduceCopySend},
    {"cpy", OpType::Copy},      {"re", OpType::Reduce},       {"nop", OpType::Nop},
};

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool coll_from_xml(const std::string& name, Collective* out) {
  std::string s = lower(name);
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  static const std::map<std::string, Collective> names = {
      {"allreduce", Collective::AllReduce}, {"allgather", Collective::AllGather},
      {"reducescatter", Collective::ReduceScatter}, {"alltoall", Collective::AlltoAll},
      {"broadcast", Collective::Broadcast}, {"reduce", Collective::Reduce},
      {"gather", Collective::Gather},       {"scatter", Collective::Scatter},
      {"custom", Collective::Custom}};
  auto it = names.find(s);
  if (it == names.end()) return false;
  *out = it->second;
  return true;
}

const char* coll_to_xml(Collective c, MscclDialect d) {
  switch (c) {
    case Collective::AllReduce: return "allreduce";
    case Collective::AllGather: return "allgather";
    case Collective::ReduceScatter: return d == MscclDialect::Legacy ? "reduce_scatter" : "reducescatter";
    case Collective::AlltoAll: return "alltoall";
    case Collective::Broadcast: return "broadcast";
    case Collective::Reduce: return "reduce";
    case Collective::Gather: return "gather";
    case Collective::Scatter: return "scatter";
    case Collective::Custom: return "custom";
  }
  return "custom";
}

// Whether two attribute names are the same but for case and '_'
// (minBytes / minbytes / min_bytes).  No allocation: files have millions.
bool same_name(const char* a, const char* b) {
  for (;;) {
    while (*a == '_') ++a;
    while (*b == '_') ++b;
    if (std::tolower(static_cast<unsigned char>(*a)) != std::tolower(static_cast<unsigned char>(*b))) return false;
    if (*a == '\0') return true;
    ++a, ++b;
  }
}

// Attribute lookup tolerant of spelling drift.
pugi::xml_attribute find_attr(const pugi::xml_node& node, std::initializer_list<const char*> names) {
  for (pugi::xml_attribute a = node.first_attribute(); a; a = a.next_attribute())
    for (const char* n : names)
      if (same_name(a.name(), n)) return a;
  return {};
}

bool int_attr(const pugi::xml_node& node, const char* name, long long* out, std::string* error, bool required = true,
              long long fallback = 0) {
  pugi::xml_attribute a = find_attr(node, {name});
  if (!a) {
    if (required) *error = fmt::format("<{}> has no '{}'", node.name(), name);
    *out = fallback;
    return !required;
  }
  std::string v = a.value();
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno) return *error = fmt::format("<{}> {}='{}' is not an integer", node.name(), name, v), false;
  *out = x;
  return true;
}

bool bool_attr(const pugi::xml_node& node, const char* name, bool* out, bool fallback) {
  pugi::xml_attribute a = find_attr(node, {name});
  if (!a) return *out = fallback, true;
  std::string v = lower(a.value());
  if (v == "1" || v == "true") return *out = true, true;
  if (v == "0" || v == "false") return *out = false, true;
  return false;
}

bool buffer_from_xml(const std::string& s, BufferKind* out) {
  if (s == "i") *out = BufferKind::Input;
  else if (s == "o") *out = BufferKind::Output;
  else if (s == "s") *out = BufferKind::Scratch;
  else return false;
  return true;
}

// Where input chunk k of `rank` lives in the output buffer when in place, or
// -1 if it has no alias there.
long long output_alias(Collective c, int nranks, int rank, uint32_t in_chunks, uint32_t out_chunks, uint32_t k) {
  switch (c) {
    case Collective::AllReduce:
    case Collective::AlltoAll:
    case Collective::Broadcast:
    case Collective::Reduce: return k < out_chunks ? (long long)k : -1LL;
    case Collective::AllGather:
    case Collective::Gather: return uint64_t(rank) * in_chunks + k;
    case Collective::ReduceScatter:
    case Collective::Scatter: {
      uint32_t begin = uint32_t(rank) * out_chunks;
      return k >= begin && k < begin + out_chunks ? (long long)(k - begin) : -1LL;
    }
    case Collective::Custom: break;
  }
  return -1;
}

constexpr size_t kMostInPlaceSteps = 16384;

// Happens-before on one rank: reach[a] holds every op reachable from a.
std::vector<std::vector<bool>> rank_reachability(const RankProgram& p, std::vector<size_t>* base) {
  base->assign(p.lanes.size() + 1, 0);
  for (size_t l = 0; l < p.lanes.size(); ++l) (*base)[l + 1] = (*base)[l] + p.lanes[l].ops.size();
  size_t n = base->back();
  std::vector<std::vector<size_t>> succ(n);
  for (size_t l = 0; l < p.lanes.size(); ++l)
    for (size_t i = 0; i < p.lanes[l].ops.size(); ++i) {
      if (i > 0) succ[(*base)[l] + i - 1].push_back((*base)[l] + i);
      for (const Dep& d : p.lanes[l].ops[i].deps)
        if (d.lane < p.lanes.size() && d.op < p.lanes[d.lane].ops.size()) succ[(*base)[d.lane] + d.op].push_back((*base)[l] + i);
    }
  std::vector<std::vector<bool>> reach(n, std::vector<bool>(n, false));
  for (size_t s = 0; s < n; ++s) {
    std::vector<size_t> stack{s};
    while (!stack.empty()) {
      size_t u = stack.back();
      stack.pop_back();
      for (size_t v : succ[u])
        if (!reach[s][v]) reach[s][v] = true, stack.push_back(v);
    }
  }
  return reach;
}

// Rewrites an in-place file's aliased references into braid's form; false if
// it writes input that has no output alias.
bool resolve_in_place(Schedule* s, std::string* error) {
  for (int r = 0; r < s->nranks; ++r) {
    RankProgram& p = s->ranks[r];
    auto alias = [&](uint32_t k) { return output_alias(s->collective, s->nranks, r, p.input_chunks, p.output_chunks, k); };
    // Writes first: every write of input chunk k becomes a write of its alias.
    std::vector<std::pair<size_t, std::pair<uint32_t, uint32_t>>> writes;  // (op node, [begin, end) of output)
    std::vector<size_t> base;
    for (size_t l = 0; l < p.lanes.size(); ++l)
      for (size_t i = 0; i < p.lanes[l].ops.size(); ++i) {
        Op& op = p.lanes[l].ops[i];
        if (!op_writes_dst(op.type)) continue;
        if (op.dst.buffer == BufferKind::Input) {
          long long a = alias(op.dst.index), b = alias(op.dst.index + op.count - 1);
          if (a < 0 || b != a + op.count - 1)
            return *error = fmt::format("rank {} tb {} step {} writes input chunk {}, outside the output it shares "
                                        "in place: NCCL's send buffer is read-only there (MSCCL would overwrite the "
                                        "caller's data)", r, l, i, op.dst.index), false;
          op.dst = {BufferKind::Output, uint32_t(a)};
        }
      }
    // The happens-before table takes steps^2 bits: production files have at
    // most 1438 steps on a rank (msccl-tools' 16-node allpairs).
    size_t steps = 0;
    for (const auto& lane : p.lanes) steps += lane.ops.size();
    if (steps > kMostInPlaceSteps)
      return *error = fmt::format("rank {} has {} steps: braid resolves in-place files of at most {} steps a rank "
                                  "(write it out of place)", r, steps, kMostInPlaceSteps), false;
    auto reach = rank_reachability(p, &base);
    for (size_t l = 0; l < p.lanes.size(); ++l)
      for (size_t i = 0; i < p.lanes[l].ops.size(); ++i) {
        const Op& op = p.lanes[l].ops[i];
        if (op_writes_dst(op.type) && op.dst.buffer == BufferKind::Output)
          writes.push_back({base[l] + i, {op.dst.index, op.dst.index + op.count}});
      }
    // Reads of an input chunk after its alias was written read the alias.
    for (size_t l = 0; l < p.lanes.size(); ++l)
      for (size_t i = 0; i < p.lanes[l].ops.size(); ++i) {
        Op& op = p.lanes[l].ops[i];
        if (!op_reads_src(op.type) || op.src.buffer != BufferKind::Input) continue;
        long long a = alias(op.src.index);
        if (a < 0) continue;
        size_t me = base[l] + i;
        bool written_before = false;
        for (auto& [w, range] : writes)
          if ((reach[w][me] || w == me) && range.first < a + op.count && uint64_t(a) < range.second && w != me)
            written_before = true;
        if (written_before) op.src = {BufferKind::Output, uint32_t(a)};
      }
  }
  return true;
}

// Out of place, the input is the caller's send buffer, which NCCL never
// writes; msccl-tools lets a program reduce into it, and MSCCL would.
bool check_no_input_writes(const Schedule& s, std::string* error) {
  for (int r = 0; r < s.nranks; ++r)
    for (size_t l = 0; l < s.ranks[r].lanes.size(); ++l)
      for (size_t i = 0; i < s.ranks[r].lanes[l].ops.size(); ++i) {
        const Op& op = s.ranks[r].lanes[l].ops[i];
        if (op_writes_dst(op.type) && op.dst.buffer == BufferKind::Input)
          return *error = fmt::format("gpu {} tb {} step {} writes the input buffer out of place: NCCL's send buffer "
                                      "is read-only (MSCCL would overwrite the caller's data)", r, l, i), false;
      }
  return true;
}

// minBytes/maxBytes as the runtime that reads the file's dialect selects
// with them.  msccl-executor (files with outofplace): minBytes <= size <=
// maxBytes, maxBytes="0" (what msccl-tools writes) unbounded.  The older
// runtime: size < maxBytes, 128 MiB without one.  Sizes are whole messages
// (message_bytes in schedule.h).
bool read_byte_range(const pugi::xml_node& algo, bool current_dialect, Schedule* s, std::string* error) {
  long long minb = 0, maxb = -1;
  if (!int_attr(algo, "minBytes", &minb, error, false, 0) || !int_attr(algo, "maxBytes", &maxb, error, false, -1))
    return false;
  if (minb < 0) return *error = fmt::format("<algo> minBytes={} is negative", minb), false;
  s->min_bytes = uint64_t(minb);
  if (maxb == 0 || maxb >= INT64_MAX || (maxb < 0 && current_dialect)) {  // braid wrote INT64_MAX once for unbounded
    s->max_bytes = UINT64_MAX;
  } else if (maxb < 0) {
    s->max_bytes = (uint64_t(1) << 27) - 1;
  } else {
    s->max_bytes = current_dialect ? uint64_t(maxb) : uint64_t(maxb) - 1;
  }
  if (s->min_bytes > s->max_bytes)
    return *error = fmt::format("<algo> minBytes={} is above maxBytes={}: no call could choose it", minb, maxb), false;
  return true;
}

// MSCCL cuts the whole message (count x nranks for AllGather,
// ReduceScatter and AlltoAll) into nchunksperloop equal chunks, whatever
// i_chunks and o_chunks say.  A buffer's share of them, or 0 where they do
// not split into its blocks:
uint32_t chunks_from_loop(Collective c, int nranks, BufferKind b, uint64_t per_loop) {
  const uint64_t blocks = b == BufferKind::Input ? input_blocks(c, nranks) : output_blocks(c, nranks);
  const uint64_t whole = message_bytes(c, nranks, 1, 1);
  return per_loop * blocks % whole ? 0 : uint32_t(per_loop * blocks / whole);
}
// and the other way: the loop a buffer of `chunks` chunks implies.
uint64_t loop_from_chunks(Collective c, int nranks, BufferKind b, uint64_t chunks) {
  const uint64_t blocks = b == BufferKind::Input ? input_blocks(c, nranks) : output_blocks(c, nranks);
  return chunks * message_bytes(c, nranks, 1, 1) / blocks;
}

// The input and output chunk counts: the ones nchunksperloop implies (a
// file may leave the buffer it aliases in place at 0; without
// nchunksperloop, the buffer it sizes says), a declared count that
// disagrees refused.
bool buffer_chunks(const Schedule& s, long long gpu, long long ic, long long oc, uint64_t per_loop, RankProgram* p,
                   std::string* error) {
  if (s.collective == Collective::Custom) {
    p->input_chunks = uint32_t(ic), p->output_chunks = uint32_t(oc);
    return true;
  }
  if (per_loop == 0)
    per_loop = std::max(loop_from_chunks(s.collective, s.nranks, BufferKind::Input, uint64_t(ic)),
                        loop_from_chunks(s.collective, s.nranks, BufferKind::Output, uint64_t(oc)));
  for (auto [b, declared, out] : {std::tuple{BufferKind::Input, ic, &p->input_chunks},
                                  std::tuple{BufferKind::Output, oc, &p->output_chunks}}) {
    const uint32_t implied = chunks_from_loop(s.collective, s.nranks, b, per_loop);
    if (implied == 0)
      return *error = fmt::format("{} chunks per loop do not split into the {} ranks' blocks", per_loop, s.nranks), false;
    if (declared != 0 && declared != implied)
      return *error = fmt::format(
                 "gpu {}: {}={}, but {} chunks per loop (nchunksperloop) make that buffer {} chunks (MSCCL sizes "
                 "every chunk by nchunksperloop, so this file would move other bytes than it names)",
                 gpu, b == BufferKind::Input ? "i_chunks" : "o_chunks", declared, per_loop, implied), false;
    *out = implied;
  }
  return true;
}

// One <step>: nop steps (msccl-tools writes srcoff="-1" dstoff="-1"
// cnt="0") carry only their dependency; the others must name the chunks
// they use.  Errors say what is wrong; the caller says which step.
bool read_step(const pugi::xml_node& step, int send, int recv, Op* op, long long* index, std::string* error) {
  long long srcoff = 0, dstoff = 0, cnt = 1, depid = -1, deps = -1;
  if (!int_attr(step, "s", index, error) || !int_attr(step, "srcoff", &srcoff, error, false, 0) ||
      !int_attr(step, "dstoff", &dstoff, error, false, 0) || !int_attr(step, "cnt", &cnt, error, false, 1) ||
      !int_attr(step, "depid", &depid, error, false, -1) || !int_attr(step, "deps", &deps, error, false, -1))
    return false;
  const std::string type = step.attribute("type").as_string("");
  const StepType* st = nullptr;
  for (const StepType& t : kStepTypes)
    if (type == t.xml) st = &t;
  if (!st) return *error = fmt::format("unknown step type '{}'", type), false;
  op->type = st->op;
  if (depid >= 0) {
    if (deps < 0) return *error = "depid without deps", false;
    if (depid > UINT16_MAX || deps > INT32_MAX) return *error = "depid/deps out of range", false;
    op->deps.push_back(Dep{uint16_t(depid), uint32_t(deps)});
  }
  if (op->type == OpType::Nop) return true;
  if (cnt < 1 || cnt > 1 << 20) return *error = fmt::format("cnt={} out of range (a {} step moves chunks)", cnt, type), false;
  op->count = uint32_t(cnt);
  auto operand = [&](bool used, const char* buf_attr, long long offset, ChunkRef* ref) {
    if (!used) return true;
    if (!buffer_from_xml(step.attribute(buf_attr).as_string(""), &ref->buffer))
      return *error = fmt::format("{} must be i, o or s", buf_attr), false;
    if (offset < 0 || offset > INT_MAX) return *error = fmt::format("offset {} out of range", offset), false;
    ref->index = uint32_t(offset);
    return true;
  };
  if (!operand(op_reads_src(op->type), "srcbuf", srcoff, &op->src) ||
      !operand(op_writes_dst(op->type), "dstbuf", dstoff, &op->dst))
    return false;
  if (op_sends(op->type)) {
    if (send < 0) return *error = "sends but its tb has send=-1", false;
    op->send_peer = send;
  }
  if (op_receives(op->type)) {
    if (recv < 0) return *error = "receives but its tb has recv=-1", false;
    op->recv_peer = recv;
  }
  return true;
}

bool read_gpu(const pugi::xml_node& gpu, long long id, uint64_t per_loop, Schedule* s, std::string* error) {
  long long ic = 0, oc = 0, sc = 0;
  if (!int_attr(gpu, "i_chunks", &ic, error) || !int_attr(gpu, "o_chunks", &oc, error) ||
      !int_attr(gpu, "s_chunks", &sc, error))
    return false;
  if (ic < 0 || oc < 0 || sc < 0 || ic > 1 << 20 || oc > 1 << 20 || sc > 1 << 20)
    return *error = fmt::format("<gpu id={}> chunk counts out of range", id), false;
  RankProgram& p = s->ranks[id];
  if (!buffer_chunks(*s, id, ic, oc, per_loop, &p, error)) return false;
  p.scratch_chunks = uint32_t(sc);
  std::map<long long, pugi::xml_node> tbs;
  for (pugi::xml_node tb : gpu.children("tb")) {
    long long tid = 0;
    if (!int_attr(tb, "id", &tid, error)) return false;
    if (tid < 0 || tbs.count(tid)) return *error = fmt::format("gpu {}: tb id {} negative or repeated", id, tid), false;
    tbs[tid] = tb;
  }
  if (!tbs.empty() && tbs.rbegin()->first != (long long)tbs.size() - 1)
    return *error = fmt::format("gpu {}: tb ids are not contiguous from 0", id), false;
  if (tbs.size() > UINT16_MAX) return *error = fmt::format("gpu {}: too many thread blocks", id), false;
  for (auto& [tid, tb] : tbs) {
    long long send = -1, recv = -1, chan = 0;
    if (!int_attr(tb, "send", &send, error) || !int_attr(tb, "recv", &recv, error) ||
        !int_attr(tb, "chan", &chan, error, false, 0))
      return false;
    // msccl-tools writes chan="-1" on thread blocks that only compute locally.
    if (chan == -1 && send == -1 && recv == -1) chan = 0;
    if (send < -1 || send >= s->nranks || recv < -1 || recv >= s->nranks || chan < 0 || chan > 65535)
      return *error = fmt::format("gpu {} tb {}: send/recv/chan out of range", id, tid), false;
    Lane lane;
    lane.channel = uint16_t(chan);
    for (pugi::xml_node step : tb.children("step")) {
      Op op;
      long long index = 0;
      bool ok = read_step(step, int(send), int(recv), &op, &index, error);
      if (ok && index != (long long)lane.ops.size()) ok = false, *error = "steps are not numbered 0, 1, 2, ...";
      if (!ok) return *error = fmt::format("gpu {} tb {} step {}: {}", id, tid, step.attribute("s").as_string("?"), *error), false;
      lane.ops.push_back(std::move(op));
    }
    p.lanes.push_back(std::move(lane));
  }
  return true;
}

}  // namespace

bool schedule_from_msccl_xml(const std::string& text, Schedule* out, std::string* error) {
  pugi::xml_document doc;
  pugi::xml_parse_result parsed = doc.load_string(text.c_str());
  if (!parsed) return *error = fmt::format("XML parse error at offset {}: {}", parsed.offset, parsed.description()), false;
  pugi::xml_node algo = doc.child("algo");
  if (!algo) return *error = "no <algo> element", false;
  Schedule s;
  s.name = algo.attribute("name").as_string("msccl");
  s.protocol = find_attr(algo, {"proto"}).as_string("Simple");
  if (s.protocol != "Simple" && s.protocol != "LL" && s.protocol != "LL128")
    return *error = fmt::format("<algo> proto='{}': MSCCL knows Simple, LL and LL128", s.protocol), false;
  if (!coll_from_xml(find_attr(algo, {"coll"}).as_string(""), &s.collective))
    return *error = fmt::format("<algo> coll='{}' is not a known collective", find_attr(algo, {"coll"}).as_string("")), false;
  long long ngpus = 0, per_loop = 0;
  if (!int_attr(algo, "ngpus", &ngpus, error)) return false;
  if (ngpus < 1 || ngpus > 65536) return *error = fmt::format("<algo> ngpus={} out of range", ngpus), false;
  s.nranks = int(ngpus);
  if (!int_attr(algo, "nchunksperloop", &per_loop, error, false, 0)) return false;
  if (per_loop < 0 || per_loop > 1 << 20) return *error = fmt::format("<algo> nchunksperloop={} out of range", per_loop), false;
  bool inplace = false, outofplace = false;
  const bool current_dialect = bool(find_attr(algo, {"outofplace"}));
  if (!bool_attr(algo, "inplace", &inplace, false)) return *error = "<algo> inplace is not 0/1", false;
  if (!bool_attr(algo, "outofplace", &outofplace, !inplace)) return *error = "<algo> outofplace is not 0/1", false;
  if (!inplace && !outofplace) return *error = "<algo> is neither in place nor out of place", false;
  if (!read_byte_range(algo, current_dialect, &s, error)) return false;
  s.ranks.resize(s.nranks);
  std::vector<bool> seen(s.nranks, false);
  for (pugi::xml_node gpu : algo.children("gpu")) {
    long long id = 0;
    if (!int_attr(gpu, "id", &id, error)) return false;
    if (id < 0 || id >= s.nranks || seen[id]) return *error = fmt::format("<gpu id={}> out of range or repeated", id), false;
    seen[id] = true;
    if (!read_gpu(gpu, id, uint64_t(per_loop), &s, error)) return false;
  }
  for (int r = 0; r < s.nranks; ++r)
    if (!seen[r]) return *error = fmt::format("no <gpu id={}>", r), false;
  if (inplace && !outofplace) {
    if (!resolve_in_place(&s, error)) return false;
    s.in_place = true;
    s.out_of_place = false;
  } else {
    s.in_place = inplace;
    s.out_of_place = outofplace;
    if (!check_no_input_writes(s, error)) return false;
  }
  *out = std::move(s);
  return true;
}

bool is_msccl_registration(const std::string& text) {
  // The first element, past the declaration and comments, without parsing a
  // possibly large algorithm file.
  size_t at = 0;
  while ((at = text.find('<', at)) != std::string::npos) {
    if (text.compare(at, 2, "<?") == 0 || text.compare(at, 2, "<!") == 0) {
      size_t end = text.compare(at, 4, "<!--") == 0 ? text.find("-->", at) : text.find('>', at);
      if (end == std::string::npos) return false;
      at = end + 1;
      continue;
    }
    return text.compare(at, 12, "<msccl_algos") == 0;
  }
  return false;
}

bool msccl_registrations_from_xml(const std::string& text, std::vector<MscclRegistration>* out, std::string* error) {
  pugi::xml_document doc;
  pugi::xml_parse_result parsed = doc.load_string(text.c_str());
  if (!parsed) return *error = fmt::format("XML parse error at offset {}: {}", parsed.offset, parsed.description()), false;
  pugi::xml_node algos = doc.child("msccl_algos");
  if (!algos) return *error = "no <msccl_algos> element", false;
  out->clear();
  for (pugi::xml_node load : algos.children("load")) {
    MscclRegistration r;
    r.path = find_attr(load, {"path"}).as_string("");
    if (r.path.empty()) return *error = "<load> has no path", false;
    long long minb = 0, maxb = -1;
    if (!int_attr(load, "minbytes", &minb, error, false, 0) || !int_attr(load, "maxbytes", &maxb, error, false, -1))
      return false;
    if (minb < 0 || maxb < -1) return *error = fmt::format("<load path={}> minbytes/maxbytes out of range", r.path), false;
    r.min_bytes = uint64_t(minb);
    r.max_bytes = maxb == -1 ? UINT64_MAX : uint64_t(maxb) - (maxb > 0);  // exclusive there, inclusive here
    if (maxb == 0 || r.min_bytes > r.max_bytes)
      return *error = fmt::format("<load path={}> minbytes={} maxbytes={}: no call could choose it", r.path, minb, maxb),
             false;
    r.protocol = find_attr(load, {"proto"}).as_string("");
    if (!r.protocol.empty() && r.protocol != "Simple" && r.protocol != "LL" && r.protocol != "LL128")
      return *error = fmt::format("<load path={}> proto='{}': MSCCL knows Simple, LL and LL128", r.path, r.protocol), false;
    out->push_back(std::move(r));
  }
  return true;
}

namespace {

// What the XML cannot carry: the file would mean something else, or nothing.
bool check_exportable(const Schedule& s, std::string* error) {
  auto msccl_step = [](const Op& op) { return uint8_t(op.type) <= uint8_t(OpType::Nop); };
  for (const RankProgram& p : s.ranks)
    for (const Lane& lane : p.lanes)
      if (!std::all_of(lane.ops.begin(), lane.ops.end(), msccl_step))
        return *error = fmt::format("schedule {} has one-sided ops (put, get, signal, wait), which MSCCL XML "
                                    "cannot express: its steps are sends and receives",
                                    s.name),
               false;
  if (s.root >= 0 || rooted_input(s.collective) || rooted_output(s.collective))
    return *error = fmt::format("schedule {} is a {} with root {}: MSCCL XML has no root attribute (MSCCL's runtime "
                                "and braid's importer read none), so the file would lose it; keep it as braid JSON",
                                s.name, to_string(s.collective), s.root),
           false;
  if (s.max_bytes == 0 || s.min_bytes > s.max_bytes)  // maxBytes="0" would read back as unbounded
    return *error = fmt::format("schedule {} serves messages of {} B to {} B, which no call could choose; MSCCL XML "
                                "would read maxBytes=\"{}\" otherwise", s.name, s.min_bytes, s.max_bytes, s.max_bytes),
           false;
  return true;
}

// The <algo> element's opening tag.
std::string algo_tag(const Schedule& s, const MscclTbPlan& plan, MscclDialect dialect) {
  uint32_t nchannels = 1, loop = 0;
  for (const auto& tbs : plan.tbs)
    for (const MscclTb& t : tbs) nchannels = std::max<uint32_t>(nchannels, t.channel + 1u);
  if (!s.ranks.empty()) {  // what import reads back (buffer_chunks)
    const RankProgram& p = s.ranks[0];
    loop = s.collective == Collective::Custom
               ? std::max(p.input_chunks, p.output_chunks)
               : uint32_t(std::max(loop_from_chunks(s.collective, s.nranks, BufferKind::Input, p.input_chunks),
                                   loop_from_chunks(s.collective, s.nranks, BufferKind::Output, p.output_chunks)));
  }
  std::string x = fmt::format("<algo name=\"{}\" proto=\"{}\" nchannels=\"{}\" nchunksperloop=\"{}\" ngpus=\"{}\" "
                              "coll=\"{}\" inplace=\"{}\"", s.name, s.protocol, nchannels, loop, s.nranks,
                              coll_to_xml(s.collective, dialect), s.in_place ? 1 : 0);
  if (dialect == MscclDialect::Current)
    x += fmt::format(" outofplace=\"{}\" minBytes=\"{}\" maxBytes=\"{}\"", s.out_of_place ? 1 : 0, s.min_bytes,
                     s.max_bytes == UINT64_MAX ? 0 : s.max_bytes);  // 0: unbounded, as msccl-tools writes
  return x + ">\n";
}

}  // namespace

bool schedule_to_msccl_xml(const Schedule& s, std::string* out, std::string* error, MscclDialect dialect) {
  if (!check_exportable(s, error)) return false;
  MscclTbPlan plan;
  if (!plan_msccl_tbs(s, &plan, error)) return false;
  auto letter = [](BufferKind b) { return b == BufferKind::Input ? "i" : b == BufferKind::Output ? "o" : "s"; };
  auto xml_type = [](OpType t) {
    for (const StepType& st : kStepTypes)
      if (st.op == t) return st.xml;
    return "nop";
  };
  // Ops with several deps get nops in front: each step carries one dep.
  // step_of[r][lane][op] = the step index the op lands on, in its tb.
  std::vector<std::vector<std::vector<uint32_t>>> step_of(s.ranks.size());
  for (size_t r = 0; r < s.ranks.size(); ++r) {
    step_of[r].resize(s.ranks[r].lanes.size());
    for (size_t l = 0; l < s.ranks[r].lanes.size(); ++l) step_of[r][l].resize(s.ranks[r].lanes[l].ops.size());
    for (const MscclTb& tb : plan.tbs[r]) {
      uint32_t step = 0;
      for (uint32_t i : tb.ops) {
        const size_t deps = msccl_step_deps(s, plan, r, tb.lane, i).size();
        step += deps > 1 ? uint32_t(deps - 1) : 0;
        step_of[r][tb.lane][i] = step++;
      }
    }
  }
  auto target = [&](size_t r, const Dep& d) {  // (tb, step) of the op a dep names
    return std::pair<uint32_t, uint32_t>{plan.place[r][d.lane][d.op].tb, step_of[r][d.lane][d.op]};
  };
  std::set<std::tuple<size_t, uint32_t, uint32_t>> has_dep;  // (rank, tb, step)
  for (size_t r = 0; r < s.ranks.size(); ++r)
    for (const MscclTb& tb : plan.tbs[r])
      for (uint32_t i : tb.ops)
        for (const Dep& d : msccl_step_deps(s, plan, r, tb.lane, i))
          if (d.lane < step_of[r].size() && d.op < step_of[r][d.lane].size()) {
            auto [t, st] = target(r, d);
            has_dep.insert({r, t, st});
          }

  std::ostringstream x;
  x << algo_tag(s, plan, dialect);
  for (size_t r = 0; r < s.ranks.size(); ++r) {
    const RankProgram& p = s.ranks[r];
    x << fmt::format("  <gpu id=\"{}\" i_chunks=\"{}\" o_chunks=\"{}\" s_chunks=\"{}\">\n", r, p.input_chunks,
                     p.output_chunks, p.scratch_chunks);
    for (uint32_t t = 0; t < plan.tbs[r].size(); ++t) {
      const MscclTb& tb = plan.tbs[r][t];
      x << fmt::format("    <tb id=\"{}\" send=\"{}\" recv=\"{}\" chan=\"{}\">\n", t, tb.send, tb.recv, tb.channel);
      uint32_t step = 0;
      // Offsets as signed: a nop's are -1, as msccl-tools writes them.
      auto emit = [&](const char* type, ChunkRef src, long long srcoff, ChunkRef dst, long long dstoff, uint32_t cnt,
                      const Dep* dep) {
        long long depid = -1, deps = -1;
        if (dep) std::tie(depid, deps) = target(r, *dep);
        x << fmt::format(
            "      <step s=\"{}\" type=\"{}\" srcbuf=\"{}\" srcoff=\"{}\" dstbuf=\"{}\" dstoff=\"{}\" cnt=\"{}\" depid=\"{}\" "
            "deps=\"{}\" hasdep=\"{}\"/>\n",
            step, type, letter(src.buffer), srcoff, letter(dst.buffer), dstoff, cnt, depid, deps,
            has_dep.count({r, t, step}) ? 1 : 0);
        ++step;
      };
      const ChunkRef in{BufferKind::Input, 0}, out{BufferKind::Output, 0};
      for (uint32_t i : tb.ops) {
        const Op& op = p.lanes[tb.lane].ops[i];
        const std::vector<Dep> deps = msccl_step_deps(s, plan, r, tb.lane, i);
        for (size_t d = 0; d + 1 < deps.size(); ++d) emit("nop", in, -1, out, -1, 0, &deps[d]);
        const Dep* dep = deps.empty() ? nullptr : &deps.back();
        if (op.type == OpType::Nop) {
          emit("nop", in, -1, out, -1, 0, dep);
          continue;
        }
        ChunkRef src = op_reads_src(op.type) ? op.src : op.dst, dst = op_writes_dst(op.type) ? op.dst : op.src;
        emit(xml_type(op.type), src, src.index, dst, dst.index, op.count, dep);
      }
      x << "    </tb>\n";
    }
    x << "  </gpu>\n";
  }
  x << "</algo>\n";
  *out = x.str();
  return true;
}

}  // namespace braid

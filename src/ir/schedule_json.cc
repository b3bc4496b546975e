// braid's JSON form of a Schedule.
//
//   {"version": 1, "name": "ring_allreduce", "collective": "allreduce",
//    "nranks": 2, "root": -1, "in_place": true, "out_of_place": true,
//    "min_bytes": 0, "max_bytes": 18446744073709551615, "protocol": "Simple",
//    (message sizes, both inclusive; max_bytes left out = unbounded; 0 is refused,
//     as MSCCL XML's maxBytes="0" means unbounded and would read otherwise)
//    ["slots": 4,]  (only where a schedule needs more than kMinSlots)
//    "ranks": [{"input_chunks": 2, "output_chunks": 2, "scratch_chunks": 0,
//               "lanes": [{"channel": 0, "ops": [
//                 {"type": "send", "send_peer": 1, "src": {"buffer": "input", "index": 0}},
//                 {"type": "rrc", "recv_peer": 1, "src": {...}, "dst": {...},
//                  "count": 1, "deps": [{"lane": 1, "op": 0}]}, ...]}]}, ...]}
//
// An op lists the fields its type uses, plus any other field that differs
// from its default, so the round trip is lossless and files stay short.
// Parsing is strict: unknown keys, unknown names, wrong types and
// out-of-range peers, chunks or deps are rejected with the field's path.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "braid/schedule_json.h"

namespace braid {
namespace {

using json = nlohmann::ordered_json;  // keeps keys in the order written

constexpr int kFormatVersion = 1;

std::optional<BufferKind> buffer_from_string(const std::string& s) {
  for (BufferKind b : {BufferKind::Input, BufferKind::Output, BufferKind::Scratch})
    if (s == to_string(b)) return b;
  return std::nullopt;
}

json chunk_to_json(const ChunkRef& c) { return {{"buffer", to_string(c.buffer)}, {"index", c.index}}; }

json op_to_json(const Op& op) {
  json j = {{"type", to_string(op.type)}};
  if (op.send_peer != -1 || op_uses_send_peer(op.type)) j["send_peer"] = op.send_peer;
  if (op.recv_peer != -1 || op_uses_recv_peer(op.type)) j["recv_peer"] = op.recv_peer;
  if (op.src != ChunkRef{} || op_reads_src(op.type) || op_gets(op.type)) j["src"] = chunk_to_json(op.src);
  if (op.dst != ChunkRef{} || op_writes_dst(op.type) || op_puts(op.type)) j["dst"] = chunk_to_json(op.dst);
  if (op.count != 1) j["count"] = op.count;
  if (!op.deps.empty()) {
    json deps = json::array();
    for (const Dep& d : op.deps) deps.push_back({{"lane", d.lane}, {"op", d.op}});
    j["deps"] = std::move(deps);
  }
  return j;
}

// Parsing state: the path of the value being read, for error messages.
class Reader {
 public:
  explicit Reader(std::string* error) : error_(error) {}

  bool fail(const std::string& path, const std::string& what) {
    if (error_) *error_ = path.empty() ? what : fmt::format("{}: {}", path, what);
    return false;
  }

  bool check_keys(const json& j, const std::string& path, std::initializer_list<const char*> known) {
    if (!j.is_object()) return fail(path, fmt::format("expected an object, got {}", j.type_name()));
    for (const auto& [key, value] : j.items()) {
      bool ok = false;
      for (const char* k : known) ok = ok || key == k;
      if (!ok) return fail(path, fmt::format("unknown field '{}'", key));
    }
    return true;
  }

  // Integer field in [lo, hi]; missing fields keep *out unless required.
  template <typename T>
  bool integer(const json& j, const std::string& path, const char* key, int64_t lo, uint64_t hi, bool required,
               T* out) {
    auto it = j.find(key);
    std::string where = join(path, key);
    if (it == j.end()) return required ? fail(where, "missing") : true;
    if (it->is_number_unsigned()) {
      uint64_t v = it->get<uint64_t>();
      if (v > hi) return fail(where, fmt::format("{} is out of range [{}, {}]", v, lo, hi));
      *out = T(v);
      return true;
    }
    if (it->is_number_integer()) {
      int64_t v = it->get<int64_t>();
      if (v < lo || (v >= 0 && uint64_t(v) > hi)) return fail(where, fmt::format("{} is out of range [{}, {}]", v, lo, hi));
      *out = T(v);
      return true;
    }
    return fail(where, fmt::format("expected an integer, got {}", it->type_name()));
  }

  bool boolean(const json& j, const std::string& path, const char* key, bool* out) {
    auto it = j.find(key);
    if (it == j.end()) return true;
    if (!it->is_boolean()) return fail(join(path, key), fmt::format("expected true or false, got {}", it->type_name()));
    *out = it->get<bool>();
    return true;
  }

  bool string(const json& j, const std::string& path, const char* key, bool required, std::string* out) {
    auto it = j.find(key);
    if (it == j.end()) return required ? fail(join(path, key), "missing") : true;
    if (!it->is_string()) return fail(join(path, key), fmt::format("expected a string, got {}", it->type_name()));
    *out = it->get<std::string>();
    return true;
  }

  bool array(const json& j, const std::string& path, const char* key, const json** out) {
    static const json empty = json::array();
    auto it = j.find(key);
    *out = &empty;
    if (it == j.end()) return true;
    if (!it->is_array()) return fail(join(path, key), fmt::format("expected an array, got {}", it->type_name()));
    *out = &*it;
    return true;
  }

  bool chunk(const json& j, const std::string& path, const char* key, ChunkRef* out) {
    auto it = j.find(key);
    if (it == j.end()) return true;
    std::string where = join(path, key);
    if (!check_keys(*it, where, {"buffer", "index"})) return false;
    std::string name;
    if (!string(*it, where, "buffer", true, &name)) return false;
    auto b = buffer_from_string(name);
    if (!b) return fail(join(where, "buffer"), fmt::format("unknown buffer '{}' (input, output, scratch)", name));
    out->buffer = *b;
    return integer(*it, where, "index", 0, UINT32_MAX, true, &out->index);
  }

  static std::string join(const std::string& path, const std::string& key) {
    return path.empty() ? key : path + "." + key;
  }

 private:
  std::string* error_;
};

bool parse_op(Reader& rd, const json& j, const std::string& path, int nranks, Op* op) {
  if (!rd.check_keys(j, path, {"type", "send_peer", "recv_peer", "src", "dst", "count", "deps"})) return false;
  std::string type;
  if (!rd.string(j, path, "type", true, &type)) return false;
  auto t = op_type_from_string(type);
  if (!t) return rd.fail(path + ".type", fmt::format("unknown op type '{}'", type));
  op->type = *t;
  if (!rd.integer(j, path, "send_peer", -1, uint64_t(nranks - 1), false, &op->send_peer) ||
      !rd.integer(j, path, "recv_peer", -1, uint64_t(nranks - 1), false, &op->recv_peer) ||
      !rd.chunk(j, path, "src", &op->src) || !rd.chunk(j, path, "dst", &op->dst) ||
      !rd.integer(j, path, "count", 0, UINT32_MAX, false, &op->count))
    return false;
  if (op_uses_send_peer(op->type) && op->send_peer < 0)
    return rd.fail(path, fmt::format("'{}' needs a send_peer", type));
  if (op_uses_recv_peer(op->type) && op->recv_peer < 0)
    return rd.fail(path, fmt::format("'{}' needs a recv_peer", type));
  const json* deps;
  if (!rd.array(j, path, "deps", &deps)) return false;
  for (size_t i = 0; i < deps->size(); ++i) {
    std::string where = fmt::format("{}.deps[{}]", path, i);
    Dep d;
    if (!rd.check_keys((*deps)[i], where, {"lane", "op"}) ||
        !rd.integer((*deps)[i], where, "lane", 0, UINT16_MAX, true, &d.lane) ||
        !rd.integer((*deps)[i], where, "op", 0, UINT32_MAX, true, &d.op))
      return false;
    op->deps.push_back(d);
  }
  return true;
}

// Chunk ranges and deps refer to things inside the rank's own program.
bool check_rank_ranges(Reader& rd, const RankProgram& p, const std::string& path) {
  auto chunks_of = [&](BufferKind b) {
    return b == BufferKind::Input ? p.input_chunks : b == BufferKind::Output ? p.output_chunks : p.scratch_chunks;
  };
  for (size_t l = 0; l < p.lanes.size(); ++l) {
    for (size_t i = 0; i < p.lanes[l].ops.size(); ++i) {
      const Op& op = p.lanes[l].ops[i];
      std::string where = fmt::format("{}.lanes[{}].ops[{}]", path, l, i);
      for (auto [used, ref, key] : {std::tuple{op_reads_src(op.type), op.src, "src"},
                                    std::tuple{op_writes_dst(op.type), op.dst, "dst"}}) {
        uint64_t end = uint64_t(ref.index) + std::max<uint32_t>(op.count, 1);
        if (used && end > chunks_of(ref.buffer))
          return rd.fail(where + "." + key, fmt::format("chunks [{}, {}) of the {} buffer, which has {}", ref.index,
                                                        end, to_string(ref.buffer), chunks_of(ref.buffer)));
      }
      for (size_t k = 0; k < op.deps.size(); ++k) {
        const Dep& d = op.deps[k];
        if (d.lane >= p.lanes.size() || d.op >= p.lanes[d.lane].ops.size())
          return rd.fail(fmt::format("{}.deps[{}]", where, k),
                         fmt::format("lane {} op {} does not exist", d.lane, d.op));
      }
    }
  }
  return true;
}

bool parse_schedule(Reader& rd, const json& j, Schedule* s) {
  if (!rd.check_keys(j, "", {"version", "name", "collective", "nranks", "root", "in_place", "out_of_place",
                             "min_bytes", "max_bytes", "protocol", "slots", "ranks"}))
    return false;
  int version = kFormatVersion;
  if (!rd.integer(j, "", "version", 0, INT32_MAX, false, &version)) return false;
  if (version != kFormatVersion) return rd.fail("version", fmt::format("unsupported format version {}", version));
  std::string collective;
  if (!rd.string(j, "", "name", false, &s->name) || !rd.string(j, "", "collective", true, &collective)) return false;
  auto c = collective_from_string(collective);
  if (!c) return rd.fail("collective", fmt::format("unknown collective '{}'", collective));
  s->collective = *c;
  if (!rd.integer(j, "", "nranks", 1, 1 << 20, true, &s->nranks) ||
      !rd.integer(j, "", "root", -1, uint64_t(s->nranks - 1), false, &s->root) ||
      !rd.boolean(j, "", "in_place", &s->in_place) || !rd.boolean(j, "", "out_of_place", &s->out_of_place) ||
      !rd.integer(j, "", "min_bytes", 0, UINT64_MAX, false, &s->min_bytes) ||
      !rd.integer(j, "", "max_bytes", 0, UINT64_MAX, false, &s->max_bytes) ||
      !rd.string(j, "", "protocol", false, &s->protocol) ||
      !rd.integer(j, "", "slots", kMinSlots, 1024, false, &s->slots))
    return false;
  // As the XML loader: a range no call can choose is a mistake to report, not
  // a file to load and never run.  Both bounds are inclusive message sizes,
  // so max_bytes 0 would serve only count-0 calls, which run nothing.
  if (s->min_bytes > s->max_bytes)
    return rd.fail("min_bytes", fmt::format("min_bytes={} is above max_bytes={}: no call could choose it",
                                            s->min_bytes, s->max_bytes));
  if (s->max_bytes == 0)
    return rd.fail("max_bytes", "max_bytes=0 serves only empty messages: no call could choose it (leave max_bytes "
                                "out for no upper bound)");
  const json* ranks;
  if (!rd.array(j, "", "ranks", &ranks)) return false;
  if (int64_t(ranks->size()) != s->nranks)
    return rd.fail("ranks", fmt::format("{} rank programs for nranks {}", ranks->size(), s->nranks));
  s->ranks.resize(ranks->size());
  for (size_t r = 0; r < ranks->size(); ++r) {
    const json& rj = (*ranks)[r];
    RankProgram& p = s->ranks[r];
    std::string path = fmt::format("ranks[{}]", r);
    if (!rd.check_keys(rj, path, {"input_chunks", "output_chunks", "scratch_chunks", "lanes"}) ||
        !rd.integer(rj, path, "input_chunks", 0, UINT32_MAX, false, &p.input_chunks) ||
        !rd.integer(rj, path, "output_chunks", 0, UINT32_MAX, false, &p.output_chunks) ||
        !rd.integer(rj, path, "scratch_chunks", 0, UINT32_MAX, false, &p.scratch_chunks))
      return false;
    const json* lanes;
    if (!rd.array(rj, path, "lanes", &lanes)) return false;
    if (lanes->size() > UINT16_MAX + 1u) return rd.fail(path + ".lanes", "too many lanes");
    p.lanes.resize(lanes->size());
    for (size_t l = 0; l < lanes->size(); ++l) {
      const json& lj = (*lanes)[l];
      std::string lpath = fmt::format("{}.lanes[{}]", path, l);
      const json* ops;
      if (!rd.check_keys(lj, lpath, {"channel", "ops"}) ||
          !rd.integer(lj, lpath, "channel", 0, UINT16_MAX, false, &p.lanes[l].channel) ||
          !rd.array(lj, lpath, "ops", &ops))
        return false;
      p.lanes[l].ops.resize(ops->size());
      for (size_t i = 0; i < ops->size(); ++i)
        if (!parse_op(rd, (*ops)[i], fmt::format("{}.ops[{}]", lpath, i), s->nranks, &p.lanes[l].ops[i]))
          return false;
    }
    if (!check_rank_ranges(rd, p, path)) return false;
  }
  return true;
}

}  // namespace

std::string schedule_to_json(const Schedule& s) {
  json ranks = json::array();
  for (const RankProgram& p : s.ranks) {
    json lanes = json::array();
    for (const Lane& lane : p.lanes) {
      json ops = json::array();
      for (const Op& op : lane.ops) ops.push_back(op_to_json(op));
      lanes.push_back({{"channel", lane.channel}, {"ops", std::move(ops)}});
    }
    ranks.push_back({{"input_chunks", p.input_chunks},
                     {"output_chunks", p.output_chunks},
                     {"scratch_chunks", p.scratch_chunks},
                     {"lanes", std::move(lanes)}});
  }
  json j = {{"version", kFormatVersion},
            {"name", s.name},
            {"collective", to_string(s.collective)},
            {"nranks", s.nranks},
            {"root", s.root},
            {"in_place", s.in_place},
            {"out_of_place", s.out_of_place},
            {"min_bytes", s.min_bytes},
            {"max_bytes", s.max_bytes},
            {"protocol", s.protocol}};
  if (s.slots != kMinSlots) j["slots"] = s.slots;  // written only where it says more than every schedule needs
  j["ranks"] = std::move(ranks);
  // One op per line: readable in a diff, still compact.
  std::string text = "{\n";
  bool first = true;
  for (const auto& [key, value] : j.items()) {
    if (key == "ranks") continue;
    text += fmt::format("{}  \"{}\": {}", first ? "" : ",\n", key, value.dump());
    first = false;
  }
  text += ",\n  \"ranks\": [";
  for (size_t r = 0; r < j["ranks"].size(); ++r) {
    const json& rj = j["ranks"][r];
    text += fmt::format("{}\n    {{\"input_chunks\": {}, \"output_chunks\": {}, \"scratch_chunks\": {}, \"lanes\": [",
                        r ? "," : "", rj["input_chunks"].dump(), rj["output_chunks"].dump(),
                        rj["scratch_chunks"].dump());
    for (size_t l = 0; l < rj["lanes"].size(); ++l) {
      const json& lj = rj["lanes"][l];
      text += fmt::format("{}\n      {{\"channel\": {}, \"ops\": [", l ? "," : "", lj["channel"].dump());
      for (size_t i = 0; i < lj["ops"].size(); ++i)
        text += fmt::format("{}\n        {}", i ? "," : "", lj["ops"][i].dump());
      text += lj["ops"].empty() ? "]}" : "\n      ]}";
    }
    text += rj["lanes"].empty() ? "]}" : "\n    ]}";
  }
  text += j["ranks"].empty() ? "]\n}" : "\n  ]\n}";
  return text;
}

bool schedule_from_json(const std::string& text, Schedule* out, std::string* error) {
  try {
    json j = json::parse(text);
    if (!j.is_object()) {
      if (error) *error = fmt::format("expected a JSON object, got {}", j.type_name());
      return false;
    }
    Reader rd(error);
    Schedule s;
    if (!parse_schedule(rd, j, &s)) return false;
    if (out) *out = std::move(s);
    return true;
  } catch (const std::exception& e) {
    if (error) *error = fmt::format("not valid JSON: {}", e.what());
    return false;
  }
}

}  // namespace braid

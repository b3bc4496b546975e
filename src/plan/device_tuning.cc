#include "src/plan/device_tuning.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "braid/algorithms.h"
#include "src/base/env.h"
#include "src/base/hash.h"
#include "src/base/log.h"
#include "src/ops/ll_oneshot.h"

namespace braid {

// tuning/cuda.json's text, generated into the build (cmake/builtin_tuning.cc.in).
extern const char* const kBuiltinTuningJson;

namespace {

using json = nlohmann::json;

constexpr std::string_view kFormat = "braid-cuda-tuning-1";

// Whether the LL protocol serves `c`.
bool ll_collective(Collective c) {
  LLCollective which;
  return ll_collective_of(c, &which);
}

// Reads one row's fields, each checked; the first problem ends the row.
class RowReader {
 public:
  RowReader(const json& j, std::string where) : j_(j), where_(std::move(where)) {}

  Status read(TuningTable::Row* row) {
    if (!j_.is_object()) return fail("a row is a JSON object");
    for (const auto& [key, value] : j_.items())
      if (!known(key)) return fail(fmt::format("unknown key '{}'", key));
    BRAID_TRY(text("device", &row->device));
    BRAID_TRY(text("measured", &row->measured));
    if (row->measured.empty()) return fail("'measured' (what measured this row, where the numbers are) is required");
    BRAID_TRY(range("ranks", 1, 1 << 20, &row->ranks));
    BRAID_TRY(range("per_device", 1, 1 << 20, &row->per_device));
    BRAID_TRY(range("bytes", 0, UINT64_MAX, &row->bytes));
    if (j_.contains("collective")) {
      std::string name;
      BRAID_TRY(text("collective", &name));
      row->collective = collective_from_string(name);
      if (!row->collective || *row->collective == Collective::Custom)
        return fail(fmt::format("no collective '{}'", name));
    }
    BRAID_TRY(number("channels", 1, kCudaMaxChannels, &row->channels));
    BRAID_TRY(number("slots", 2, kCudaMaxSlots, &row->slots));
    BRAID_TRY(number("slot_bytes", kCudaMinSlotBytes, uint64_t(1) << 30, &row->slot_bytes));
    if (row->slot_bytes && *row->slot_bytes % 256) return fail("slot_bytes must be a multiple of 256");
    BRAID_TRY(number("ll_max_bytes", 0, kCudaLLMaxBytesLimit, &row->ll_max_bytes));
    BRAID_TRY(number("slice_bytes", 4096, UINT64_MAX, &row->slice_bytes));
    if (j_.contains("path")) {
      std::string path;
      BRAID_TRY(text("path", &path));
      if (path != "ll" && path != "schedule") return fail(fmt::format("path '{}' is not ll or schedule", path));
      row->path = path == "ll" ? TunedPath::LL : TunedPath::Schedule;
      if (row->collective && !ll_collective(*row->collective))
        return fail(fmt::format("a path for {}: only allreduce, reducescatter, allgather and alltoall have an LL "
                                "path", to_string(*row->collective)));
    }
    if (j_.contains("algorithm")) {
      row->algorithm.emplace();
      BRAID_TRY(text("algorithm", &*row->algorithm));
      if (!row->collective) return fail("an algorithm needs the row's collective");
      const auto& reg = algorithm_registry();
      if (std::none_of(reg.begin(), reg.end(), [&](const AlgorithmInfo& a) {
            return a.collective == row->collective && a.name == row->algorithm;
          }))
        return fail(fmt::format("no {} algorithm '{}'", to_string(*row->collective), *row->algorithm));
    }
    const bool sets_comm = row->channels || row->slots || row->slot_bytes || row->ll_max_bytes;
    const bool sets_call = row->path || row->algorithm || row->slice_bytes;
    if (!sets_comm && !sets_call) return fail("the row sets nothing");
    if (sets_comm && (row->collective || j_.contains("bytes")))
      return fail(
          "channels, slots, slot_bytes and ll_max_bytes are the communicator's: a row setting them names "
          "no collective and no bytes");
    return Status::ok();
  }

 private:
  static bool known(const std::string& key) {
    static const char* const keys[] = {"device",   "ranks",     "per_device", "bytes",        "collective",
                                       "channels", "slots",     "slot_bytes", "ll_max_bytes", "slice_bytes",
                                       "path",     "algorithm", "measured"};
    return std::any_of(std::begin(keys), std::end(keys), [&](const char* k) { return key == k; });
  }
  Status fail(const std::string& why) const {
    return BRAID_ERROR(ncclInvalidArgument, "tuning table {}: {}", where_, why);
  }
  Status text(const char* key, std::string* out) const {
    if (!j_.contains(key)) return Status::ok();
    if (!j_[key].is_string()) return fail(fmt::format("'{}' is a string", key));
    *out = j_[key].get<std::string>();
    return Status::ok();
  }
  Status value(const json& v, const char* key, uint64_t lo, uint64_t hi, uint64_t* out) const {
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
      return fail(fmt::format("'{}' takes whole numbers >= 0", key));
    *out = v.get<uint64_t>();
    if (*out < lo || *out > hi) return fail(fmt::format("'{}' = {} is outside {}..{}", key, *out, lo, hi));
    return Status::ok();
  }
  template <typename T>
  Status number(const char* key, uint64_t lo, uint64_t hi, std::optional<T>* out) const {
    if (!j_.contains(key)) return Status::ok();
    uint64_t v = 0;
    BRAID_TRY(value(j_[key], key, lo, hi, &v));
    *out = T(v);
    return Status::ok();
  }
  // A number, or [lo, hi] with null for "no bound".
  Status range(const char* key, uint64_t lo, uint64_t hi, TuningTable::Range* out) const {
    if (!j_.contains(key)) return Status::ok();
    const json& v = j_[key];
    if (!v.is_array()) {
      BRAID_TRY(value(v, key, lo, hi, &out->lo));
      out->hi = out->lo;
      return Status::ok();
    }
    if (v.size() != 2) return fail(fmt::format("'{}' is a number or [low, high]", key));
    if (!v[0].is_null()) BRAID_TRY(value(v[0], key, lo, hi, &out->lo));
    out->hi = hi;
    if (!v[1].is_null()) BRAID_TRY(value(v[1], key, lo, hi, &out->hi));
    if (out->lo > out->hi) return fail(fmt::format("'{}' is an empty range", key));
    return Status::ok();
  }

  const json& j_;
  std::string where_;
};

bool covers(const TuningTable::Row& r, const TuningKey& k) {
  return (r.device.empty() || k.device.find(r.device) != std::string::npos) && r.ranks.covers(uint64_t(k.nranks)) &&
         r.per_device.covers(uint64_t(k.per_device));
}

// The first of `rows[indexes]` that `applies` and sets `field`: its value
// and source.
template <typename Field, typename Value, typename Applies>
void take_first(const std::vector<TuningTable::Row>& rows, const std::vector<size_t>& indexes,
                std::optional<Field> TuningTable::Row::*field, Applies applies, Value* value, TuningSource* from) {
  for (size_t i : indexes) {
    const TuningTable::Row& r = rows[i];
    if ((r.*field).has_value() && applies(r)) {
      *value = Value(*(r.*field));
      *from = TuningSource{int(i), r.measured.c_str()};
      return;
    }
  }
}

}  // namespace

Status TuningTable::parse(std::string_view text, std::string_view origin, TuningTable* out) {
  // Every access below is checked first; the catch is for what that missed,
  // as a table comes from a user's file and no exception may reach the C API.
  try {
    return parse_checked(text, origin, out);
  } catch (const std::exception& e) {
    return BRAID_ERROR(ncclInvalidArgument, "tuning table {}: {}", origin, e.what());
  }
}

Status TuningTable::parse_checked(std::string_view text, std::string_view origin, TuningTable* out) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return BRAID_ERROR(ncclInvalidArgument, "tuning table {}: not valid JSON", origin);
  const bool framed = j.is_object() && j.contains("format") && j["format"].is_string() &&
                      j["format"].get<std::string>() == kFormat && j.contains("rows") && j["rows"].is_array();
  if (!framed)
    return BRAID_ERROR(ncclInvalidArgument, "tuning table {}: expected {{\"format\": \"{}\", \"rows\": [...]}}", origin,
                       kFormat);
  for (const auto& [key, value] : j.items())
    if (key != "format" && key != "rows" && key != "about")
      return BRAID_ERROR(ncclInvalidArgument, "tuning table {}: unknown key '{}'", origin, key);
  TuningTable t;
  for (size_t i = 0; i < j["rows"].size(); ++i) {
    Row row;
    BRAID_TRY(RowReader(j["rows"][i], fmt::format("{} row {}", origin, i)).read(&row));
    t.rows_.push_back(std::move(row));
  }
  t.hash_ = fnv1a(text);
  *out = std::move(t);
  return Status::ok();
}

const TuningTable& TuningTable::builtin() {
  static const TuningTable table = [] {
    TuningTable t;
    Status s = parse(kBuiltinTuningJson, "tuning/cuda.json (built in)", &t);
    if (!s.is_ok()) BRAID_WARN("{}; using braid's defaults", s.message());  // a test catches this first
    return t;
  }();
  return table;
}

TuningTable TuningTable::chain(const TuningTable& first, const TuningTable& then) {
  TuningTable t = first;
  t.rows_.insert(t.rows_.end(), then.rows_.begin(), then.rows_.end());
  t.hash_ = fnv1a(std::string_view(reinterpret_cast<const char*>(&then.hash_), sizeof then.hash_), first.hash_);
  return t;
}

Status TuningTable::current(std::shared_ptr<const TuningTable>* out) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<const TuningTable>> loaded;  // by BRAID_TUNING_FILE
  const std::string path = env_string("BRAID_TUNING_FILE");
  std::lock_guard<std::mutex> lock(mutex);
  auto it = loaded.find(path);
  if (it == loaded.end()) {
    TuningTable table = builtin();
    if (!path.empty()) {
      std::ifstream in(path);
      std::stringstream text;
      text << in.rdbuf();
      if (!in) return BRAID_ERROR(ncclInvalidArgument, "BRAID_TUNING_FILE={}: cannot read it", path);
      TuningTable file;
      BRAID_TRY(parse(text.str(), path, &file));
      table = chain(file, table);
    }
    it = loaded.emplace(path, std::make_shared<const TuningTable>(std::move(table))).first;
  }
  *out = it->second;
  return Status::ok();
}

std::vector<size_t> TuningTable::rows_covering(const TuningKey& key) const {
  std::vector<size_t> out;
  for (size_t i = 0; i < rows_.size(); ++i)
    if (covers(rows_[i], key)) out.push_back(i);
  return out;
}

CommTuning TuningTable::comm(const TuningKey& key) const {
  CommTuning t;
  const std::vector<size_t> rows = rows_covering(key);
  auto any = [](const Row&) { return true; };
  take_first(rows_, rows, &Row::channels, any, &t.channels, &t.channels_from);
  take_first(rows_, rows, &Row::slots, any, &t.slots, &t.slots_from);
  take_first(rows_, rows, &Row::slot_bytes, any, &t.slot_bytes, &t.slot_bytes_from);
  take_first(rows_, rows, &Row::ll_max_bytes, any, &t.ll_max_bytes, &t.ll_max_bytes_from);
  return t;
}

CallTuning TuningTable::call(const TuningKey& key, Collective c, uint64_t bytes) const {
  return call(rows_covering(key), c, bytes);
}

CallTuning TuningTable::call(const std::vector<size_t>& rows, Collective c, uint64_t bytes) const {
  CallTuning t;
  auto applies = [&](const Row& r) { return (!r.collective || *r.collective == c) && r.bytes.covers(bytes); };
  take_first(rows_, rows, &Row::path, applies, &t.path, &t.path_from);
  take_first(rows_, rows, &Row::algorithm, applies, &t.algorithm, &t.algorithm_from);
  take_first(rows_, rows, &Row::slice_bytes, applies, &t.slice_bytes, &t.slice_bytes_from);
  return t;
}

TuningKey tuning_key(const std::vector<uint64_t>& gpus, const std::vector<std::string>& names) {
  TuningKey key;
  key.nranks = int(gpus.size());
  for (uint64_t g : gpus) key.per_device = std::max(key.per_device, int(std::count(gpus.begin(), gpus.end(), g)));
  if (!names.empty() && std::all_of(names.begin(), names.end(), [&](const std::string& n) { return n == names[0]; }))
    key.device = names[0];
  return key;
}

CommTuning resolve_comm_tuning(const TuningTable& table, const TuningKey& key, const CudaRequests& requests) {
  CommTuning t = table.comm(key);
  auto take = [](auto requested, bool set, const char* variable, auto* value, TuningSource* from) {
    if (!set) return;
    *value = requested;
    *from = TuningSource{TuningSource::kVariable, variable};
  };
  take(requests.channels, requests.channels != 0, "BRAID_CUDA_CHANNELS", &t.channels, &t.channels_from);
  take(requests.slots, requests.slots != 0, "BRAID_CUDA_SLOTS", &t.slots, &t.slots_from);
  take(requests.slot_bytes, requests.slot_bytes != 0, "BRAID_CUDA_SLOT_BYTES", &t.slot_bytes, &t.slot_bytes_from);
  take(requests.ll_max_bytes, requests.ll_max_bytes != UINT64_MAX, "BRAID_CUDA_LL_MAX_BYTES", &t.ll_max_bytes,
       &t.ll_max_bytes_from);
  return t;
}

std::string describe(const TuningSource& from) {
  if (from.row == TuningSource::kDefault) return "braid's default";
  if (from.row == TuningSource::kVariable) return from.measured;
  return fmt::format("tuning row {} ({})", from.row, from.measured);
}

const char* tuned_path_name(TunedPath p) {
  return p == TunedPath::LL ? "ll" : p == TunedPath::Schedule ? "schedule" : "auto";
}

bool ll_path(Collective c, int nranks, uint64_t bytes, uint64_t ll_max_bytes, TunedPath path) {
  return ll_collective(c) && nranks > 1 && ll_max_bytes > 0 && path != TunedPath::Schedule &&
         message_bytes(c, nranks, bytes, 1) <= ll_max_bytes;
}

}  // namespace braid

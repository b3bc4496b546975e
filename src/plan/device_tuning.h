// The CUDA backend's tuning table: the settings a communicator and each of
// its calls run with, chosen by device, rank count, ranks sharing a device,
// collective and size, from measurements.
//
// A table is a list of rows.  A row says which cases it covers (any of: a
// substring of the device's name, a range of rank counts, a range of ranks
// sharing one device, a collective, a range of sizes) and sets some
// settings.  For each setting, the first row that covers the case and sets
// it wins; a setting no row sets keeps braid's default (the members' values
// below).  Specific rows go first, so a table reads top down like a routing
// table, and every row says what measured it.
//
// Settings of the communicator, fixed at init (they lay out every rank's
// FIFOs and LL region, so every rank must take the same):
//   channels, slots, slot_bytes, ll_max_bytes
// Settings of a call (collective and size):
//   path          "ll": the LL one-shot protocol when the message fits the
//                 LL region; "schedule": never LL (default: LL when it fits)
//   algorithm     the schedule generator, instead of the planner's size rule
//   slice_bytes   bytes per buffer block that make a slice (one thread block
//                 per lane) worth running
// Sizes are count x type size, the size the planner sees (all_reduce_perf's
// size column; all_gather_perf's size over the rank count).
//
// Where the rows come from: tuning/cuda.json, compiled into the library
// (an LD_PRELOADed libnccl.so.2 has no data directory); BRAID_TUNING_FILE
// names a file whose rows go first.  The BRAID_CUDA_* variables override
// the communicator's settings.  The ranks agree on the inputs (the table's
// hash, the device name, the ranks per device), so every rank resolves
// every case alike.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "braid/schedule.h"
#include "src/base/status.h"

namespace braid {

// The ranges of the communicator's settings (from a table or BRAID_CUDA_*).
constexpr uint32_t kCudaMaxChannels = 64;
constexpr uint32_t kCudaMaxSlots = 8;
constexpr uint64_t kCudaMinSlotBytes = 4096;
// Every rank's LL region holds 2 x 2 x ll_max_bytes per peer (16-byte lines
// of 8 data bytes, two parities).
constexpr uint64_t kCudaLLMaxBytesLimit = 1 << 20;

// What a lookup is for.  `device` is "" when the ranks' devices differ (then
// only rows naming no device apply).
struct TuningKey {
  std::string device;
  int nranks = 1;
  int per_device = 1;  // the most ranks of the communicator on one device
};

// Where a resolved setting came from: a row of the table (its index and
// what measured it; rows count from the first of BRAID_TUNING_FILE's),
// braid's default (kDefault), or a variable (kVariable, `measured` naming
// it).  `measured`, like CallTuning::algorithm, points into the table (or at
// a literal), so that a call's lookup copies no strings: a lookup's result
// lives as long as its table, which communicators hold by shared_ptr and
// never move.
struct TuningSource {
  static constexpr int kDefault = -1, kVariable = -2;
  int row = kDefault;
  const char* measured = "";
};
std::string describe(const TuningSource& from);

struct CommTuning {
  uint32_t channels = 32;
  uint32_t slots = 4;
  uint64_t slot_bytes = 256 << 10;
  uint64_t ll_max_bytes = 64 << 10;
  TuningSource channels_from, slots_from, slot_bytes_from, ll_max_bytes_from;
};

enum class TunedPath : uint8_t { Auto, LL, Schedule };

struct CallTuning {
  TunedPath path = TunedPath::Auto;
  std::string_view algorithm;  // "" : the planner's rule (a view into the table)
  uint64_t slice_bytes = 256 << 10;
  TuningSource path_from, algorithm_from, slice_bytes_from;
};

class TuningTable {
 public:
  struct Range {
    uint64_t lo = 0, hi = UINT64_MAX;  // inclusive
    bool covers(uint64_t v) const { return lo <= v && v <= hi; }
  };
  struct Row {
    std::string device;  // substring of the device's name; "" : any
    Range ranks, per_device, bytes;
    std::optional<Collective> collective;
    std::optional<uint32_t> channels, slots;
    std::optional<uint64_t> slot_bytes, ll_max_bytes, slice_bytes;
    std::optional<TunedPath> path;
    std::optional<std::string> algorithm;
    std::string measured;
  };

  // Parses a table (tuning/cuda.json's format); `origin` names it in errors.
  // Unknown keys, out-of-range values and rows that set nothing are errors.
  static Status parse(std::string_view json, std::string_view origin, TuningTable* out);
  // The compiled-in table (tuning/cuda.json).
  static const TuningTable& builtin();
  // The table communicators use: BRAID_TUNING_FILE's rows, then the
  // built-in ones (read once per process and file name).
  static Status current(std::shared_ptr<const TuningTable>* out);
  // `first`'s rows, then `then`'s.
  static TuningTable chain(const TuningTable& first, const TuningTable& then);

  CommTuning comm(const TuningKey& key) const;
  CallTuning call(const TuningKey& key, Collective c, uint64_t bytes) const;
  // The same over some rows only (`rows`: indexes, in order), for a key
  // whose covering rows were found once (DeviceTuning).
  CallTuning call(const std::vector<size_t>& rows, Collective c, uint64_t bytes) const;
  std::vector<size_t> rows_covering(const TuningKey& key) const;

  const std::vector<Row>& rows() const { return rows_; }
  // FNV-1a of the text(s) the rows came from: equal on ranks that read the same.
  uint64_t hash() const { return hash_; }

 private:
  static Status parse_checked(std::string_view json, std::string_view origin, TuningTable* out);

  std::vector<Row> rows_;
  uint64_t hash_ = 0;
};

// A communicator's view of the table: its key, fixed at init, and the rows
// that cover it (a call then looks at those alone).
class DeviceTuning {
 public:
  DeviceTuning(std::shared_ptr<const TuningTable> table, TuningKey key)
      : table_(std::move(table)), key_(std::move(key)), rows_(table_->rows_covering(key_)) {}
  CallTuning call(Collective c, uint64_t bytes) const { return table_->call(rows_, c, bytes); }
  const TuningKey& key() const { return key_; }

 private:
  std::shared_ptr<const TuningTable> table_;
  TuningKey key_;
  std::vector<size_t> rows_;
};

// BRAID_CUDA_CHANNELS, _SLOTS, _SLOT_BYTES and _LL_MAX_BYTES as the ranks
// agreed on them (0, and UINT64_MAX for ll_max_bytes: not set).
struct CudaRequests {
  uint32_t channels = 0, slots = 0;
  uint64_t slot_bytes = 0, ll_max_bytes = UINT64_MAX;
};
// The communicator's settings: each variable that is set, else the table's.
CommTuning resolve_comm_tuning(const TuningTable& table, const TuningKey& key, const CudaRequests& requests);

// The key every rank computes alike from all ranks' devices (indexed by
// rank): `gpus` identify the physical device (0: none), `names` are their
// names.
TuningKey tuning_key(const std::vector<uint64_t>& gpus, const std::vector<std::string>& names);

const char* tuned_path_name(TunedPath p);

// Whether a call of `c` of `bytes` (count x type size) on `nranks` goes to
// the LL protocol as far as size and table decide: one of the collectives
// it serves, its message (message_bytes) within `ll_max_bytes`, and not
// sent to the schedules by `path`.
bool ll_path(Collective c, int nranks, uint64_t bytes, uint64_t ll_max_bytes, TunedPath path);

}  // namespace braid

// The values the ranks of a communicator agree on at init.
//
// Every rank publishes its own value of each (from its environment and its
// machine) in one bootstrap allgather, and every rank folds all of them by
// the value's rule, so all end up with the same: ranks that took different
// paths for the same call would wait for each other forever.  One line
// here per value: its type, name, rule, and what it is.  Adding a value is
// that line, setting this rank's value, and using the result.
#pragma once

#include <cstdint>
#include <vector>

#include "src/base/status.h"

namespace braid {

enum class Fold : uint8_t {
  Equal,  // every rank must have the same value; a difference fails init on every rank
  Min,
  Max,
  Any,  // non-zero on any rank
  And,  // bits every rank has
};

#define BRAID_AGREED_VALUES(X)                                                                                      \
  X(int32_t, api_version, Fold::Equal, "the NCCL API version braid was built for")                                 \
  X(int32_t, transport_mode, Fold::Equal, "BRAID_TRANSPORT and NCCL_SHM_DISABLE: set them alike on every rank")  \
  X(int64_t, shm_slots, Fold::Equal, "BRAID_SHM_SLOTS (a shared-memory ring's slots): set it alike on every rank") \
  X(int64_t, shm_slot_bytes, Fold::Equal,                                                                          \
    "BRAID_SHM_SLOT_BYTES (a shared-memory fragment's size): set it alike on every rank")                         \
  X(int32_t, tcp_slices, Fold::Equal,                                                                          \
    "NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD (slices between hosts over TCP): set them alike on every rank") \
  X(int32_t, wants_device, Fold::Equal,                                                                            \
    "whether the rank sees a usable CUDA device: set BRAID_BACKEND to the same value (host or cuda) on every rank") \
  X(uint64_t, tile_bytes, Fold::Min, "the fragment size every rank's transports' slots take")                       \
  X(uint64_t, wide_tile_bytes, Fold::Min, "the widest fragment every rank's transports' slots take")                \
  X(int32_t, check_args, Fold::Any, "BRAID_CHECK: one rank checking alone would wait for records nobody sends")    \
  X(uint64_t, direct_min_bytes, Fold::Max, "BRAID_DIRECT_MIN_BYTES (UINT64_MAX: never)")                           \
  X(uint64_t, board_max_bytes, Fold::Min, "BRAID_ONESHOT_MAX_BYTES, 0 where a rank cannot use a board")            \
  X(uint64_t, braid_algo, Fold::Equal,                                                                             \
    "BRAID_ALGO (a hash of what it pins per collective): set it alike on every rank, or on none")                  \
  X(uint64_t, schedule_files, Fold::Equal,                                                                         \
    "the schedule files for this many ranks (a hash of their schedules) that BRAID_SCHEDULES, MSCCL_XML_FILES, "   \
    "MSCCL_CONFIG and MSCCL_ALGO_DIR load: give every rank the same ones, or none")                               \
  X(uint32_t, unpinned_collectives, Fold::Equal,                                                                   \
    "a bit per collective no fixed schedule (BRAID_ALGO, a schedule file) is pinned to")                           \
  X(int32_t, cma_mode, Fold::Min, "BRAID_CMA: 0 off, 1 auto, 2 on")                                                \
  X(uint64_t, cma_min_bytes, Fold::Max, "BRAID_CMA_MIN_BYTES (UINT64_MAX: never)")                              \
  X(int32_t, rma_contexts, Fold::Equal, "config numRmaCtx: the RMA contexts every rank's signals are kept for")   \
  X(int32_t, rma_signals, Fold::Equal, "config numRmaSig: the signal indexes per RMA context")                     \
  X(int32_t, rma_eager, Fold::Equal,                                                                               \
    "config rmaEagerInit or NCCL_RMA_EAGER_INIT: RMA connects at init, which every rank must join")              \
  X(uint64_t, cuda_ll_max_bytes, Fold::Min,                                                                      \
    "BRAID_CUDA_LL_MAX_BYTES (UINT64_MAX: unset): each rank's LL region is sized by it")                          \
  X(int32_t, cuda_max_ctas, Fold::Min,                                                                            \
    "config maxCTAs (NCCL_MAX_CTAS over it) and NCCL_MAX_NCHANNELS: the most blocks of a collective launch")      \
  X(uint32_t, cuda_channels, Fold::Equal, "BRAID_CUDA_CHANNELS: set it to the same value on every rank, or on none") \
  X(uint32_t, cuda_slots, Fold::Equal, "BRAID_CUDA_SLOTS: set it to the same value on every rank, or on none")     \
  X(uint64_t, cuda_slot_bytes, Fold::Equal,                                                                        \
    "BRAID_CUDA_SLOT_BYTES: set it to the same value on every rank, or on none")                                  \
  X(uint64_t, tuning_table, Fold::Equal,                                                                           \
    "the tuning table's hash: give every rank the same BRAID_TUNING_FILE, or none")                               \
  X(int32_t, run_diagnostics, Fold::Any, "NCCL_RUN_DIAGNOSTICS: the init's pattern exchange, which every rank joins") \
  X(int32_t, run_ras_diagnostics, Fold::Any,                                                                       \
    "NCCL_RUN_RAS_DIAGNOSTICS: the init's comparison of what each rank runs, which every rank joins")            \
  X(int32_t, straggler, Fold::Equal,                                                                               \
    "BRAID_STRAGGLER (-1 off, -2 auto, -3 eager, else the late rank): set it to the same value on every rank")      \
  X(int32_t, stragglar_lanes, Fold::Equal,                                                                         \
    "BRAID_STRAGGLAR_LANES (0 auto, 1 connection, 2 compact): set it to the same value on every rank")             \
  X(int32_t, deterministic, Fold::Equal,                                                                           \
    "BRAID_DETERMINISTIC (reductions folded in rank order): set it to the same value on every rank")              \
  X(uint64_t, nccl_algo, Fold::Equal,                                                                              \
    "NCCL_ALGO (a hash of what it admits per collective): set it alike on every rank, or on none")                 \
  X(uint32_t, nccl_proto, Fold::Equal,                                                                             \
    "NCCL_PROTO (the functions whose LL path it excludes): set it alike on every rank, or on none")              \
  X(uint64_t, tuner, Fold::Equal,                                                                                  \
    "NCCL_TUNER_PLUGIN (the tuner plugin loaded, by version and name): load the same one on every rank, or none")  \
  X(int32_t, p2p_disabled, Fold::Any,                                                                              \
    "NCCL_P2P_DISABLE=1 on some rank: device buffers go through host memory, not CUDA IPC, on every rank")

struct AgreedValues {
#define BRAID_AGREED_FIELD(type, name, fold, what) type name{};
  BRAID_AGREED_VALUES(BRAID_AGREED_FIELD)
#undef BRAID_AGREED_FIELD
};

// Folds every rank's values (indexed by rank) into *out.  A Fold::Equal
// value that differs fails with ncclInvalidUsage, naming it and the ranks.
Status fold_agreed(const std::vector<AgreedValues>& ranks, AgreedValues* out);

}  // namespace braid

#include "src/moe/moe_config.h"

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "src/base/env.h"
#include "src/moe/elements.h"
#include "src/moe/nccl_call.h"
#include "src/shim/host_exchange.h"


namespace braid::moe {

static_assert(WindowLayout::kCombineBuffer == braidMoeZeroCopyCombine &&
                  WindowLayout::kDispatchBuffer == braidMoeZeroCopyDispatch,
              "the window layout takes config.zeroCopy's flags as they are");

namespace {

// A CUDA rank's kernel takes at most this many CTAs: they wait for each
// other, so all must be resident beside the other ranks' (ranks may share a GPU).
constexpr int kMaxDeviceBlocks = 16;

// What a rank's config fails, or "" (the rank count, the backend).
std::string check_config(const braidMoeConfig_t& c, int nranks, int device) {
  if (c.size != sizeof(braidMoeConfig_t))
    return fmt::format("config.size is {}, not sizeof(braidMoeConfig_t) = {} (use BRAID_MOE_CONFIG_INITIALIZER)",
                       c.size, sizeof(braidMoeConfig_t));
#if !BRAID_WITH_CUDA
  if (device >= 0) return "the communicator is on a CUDA device, and this braid was built without CUDA";
#endif
  if (c.numExperts <= 0 || c.numExperts % nranks != 0)
    return fmt::format("numExperts {} is not a positive multiple of the {} ranks", c.numExperts, nranks);
  if (c.topK <= 0 || c.topK > c.numExperts)
    return fmt::format("topK {} is not in [1, numExperts = {}]", c.topK, c.numExperts);
  if (c.hidden <= 0) return fmt::format("hidden {} is not positive", c.hidden);
  if (c.maxTokensPerRank <= 0) return fmt::format("maxTokensPerRank {} is not positive", c.maxTokensPerRank);
  if (element_bytes(c.dtype) == 0)
    return fmt::format("dtype {} is not a MoE row type (float32, float16, bfloat16, fp8 e4m3, fp8 e5m2)",
                       int(c.dtype));
  if (c.tileRows < 0 || c.tileRows > 4096) return fmt::format("tileRows {} is not in [0, 4096]", c.tileRows);
  // A block's capacity (maxTokensPerRank rounded up to tileRows) is an int32 on the device.
  if (int64_t(c.maxTokensPerRank) + c.tileRows > INT32_MAX)
    return fmt::format("maxTokensPerRank {} with tileRows {} is over 2^31 rows", c.maxTokensPerRank, c.tileRows);
  if (!(c.capacityFactor >= 0.0f) || c.capacityFactor > 1e6f)
    return fmt::format("capacityFactor {} is not 0 (worst case) or positive", c.capacityFactor);
  if (c.layout != braidMoeExpertMajor && c.layout != braidMoeRankMajor)
    return fmt::format("layout {} is neither braidMoeExpertMajor nor braidMoeRankMajor", int(c.layout));
  if (c.blocks < 0 || c.blocks > 64) return fmt::format("blocks {} is not in [0, 64]", c.blocks);
  if (device >= 0 && c.blocks > kMaxDeviceBlocks)
    return fmt::format("blocks {} is over {}, the most CTAs a CUDA rank's kernel takes", c.blocks, kMaxDeviceBlocks);
  if (c.timeoutMs < 0) return fmt::format("timeoutMs {} is negative", c.timeoutMs);
  if (c.zeroCopy & ~(braidMoeZeroCopyCombine | braidMoeZeroCopyDispatch))
    return fmt::format("zeroCopy {:#x} has flags other than braidMoeZeroCopyCombine and braidMoeZeroCopyDispatch",
                       c.zeroCopy);
  // The window, at most: two halves of every block full, and as much again for the zero-copy buffers.
  const double bytes = (c.zeroCopy ? 4.0 : 2.0) * double(nranks) * (c.numExperts / nranks) *
                       (double(c.maxTokensPerRank) + c.tileRows) * double(c.hidden) * element_bytes(c.dtype);
  if (bytes > double(int64_t(1) << 46)) return fmt::format("the window would take {:.3g} bytes", bytes);
  return "";
}

Shape shape_of(const braidMoeConfig_t& c, int nranks) {
  Shape s;
  s.nranks = nranks;
  s.experts = c.numExperts;
  s.local_experts = c.numExperts / nranks;
  s.top_k = c.topK;
  s.hidden = c.hidden;
  s.elem_bytes = element_bytes(c.dtype);
  s.max_tokens = c.maxTokensPerRank;
  s.tile_rows = c.tileRows > 0 ? c.tileRows : 1;
  s.capacity = c.capacityFactor > 0
                   ? factor_capacity(s.max_tokens, s.top_k, s.experts, double(c.capacityFactor), s.tile_rows)
                   : worst_case_capacity(s.max_tokens, s.tile_rows);
  return s;
}

// What every rank must have alike, then whether this rank's config passed.
constexpr int kAgreed = 10;
void agreement(const Shape& s, const braidMoeConfig_t& c, bool ok, int64_t* v) {
  v[0] = ok;
  v[1] = s.experts;
  v[2] = s.top_k;
  v[3] = s.hidden;
  v[4] = s.max_tokens;
  v[5] = int64_t(c.dtype);
  v[6] = s.tile_rows;
  v[7] = s.capacity;
  v[8] = int64_t(c.layout);
  v[9] = c.zeroCopy;
}
const char* const kAgreedNames[kAgreed] = {"ok",    "numExperts", "topK",     "hidden", "maxTokensPerRank",
                                           "dtype", "tileRows",   "capacity", "layout", "zeroCopy"};

}  // namespace

braidMoeConfig_t complete_config(const braidMoeConfig_t* config) {
  constexpr size_t kBeforeZeroCopy = offsetof(braidMoeConfig_t, zeroCopy);
  braidMoeConfig_t c{};
  size_t size = 0;
  std::memcpy(&size, config, sizeof(size));
  std::memcpy(&c, config, std::clamp(size, sizeof(size), sizeof(c)));
  if (size == kBeforeZeroCopy) c.size = sizeof(c);
  return c;
}

Status zero_copy_buffer(char* base, uint64_t offset, const char* function, const char* flag, void** out) {
  if (!offset)
    return BRAID_ERROR(ncclInvalidUsage, "{}: the handle was created without {} in config.zeroCopy", function, flag);
  *out = base + offset;
  return Status::ok();
}

std::string dispatch_problem(const Shape& s, const void* tokens, const int32_t* topk, int32_t ntokens,
                             const void* out, const int32_t* recv_counts) {
  if (ntokens < 0 || ntokens > s.max_tokens)
    return fmt::format("numTokens {} is not in [0, maxTokensPerRank = {}]", ntokens, s.max_tokens);
  if (ntokens > 0 && (!tokens || !topk)) return "tokens or topkIdx is NULL";
  if (!out || !recv_counts) return "recvTokens or recvCounts is NULL";
  return {};
}

std::string combine_problem(int32_t tokens, const void* expert_out, const float* weights, const void* out) {
  if (!expert_out || (tokens > 0 && (!weights || !out))) return "expertOut, topkWeights or outTokens is NULL";
  return {};
}

int wait_bound_ms(int timeout_ms) {
  return timeout_ms > 0 ? timeout_ms : int(std::min<int64_t>(env_int("BRAID_TIMEOUT") * 1000, INT32_MAX));
}

Status all_gather_words(ncclComm_t comm, const int64_t* mine, int64_t* all, size_t count, const std::string& what) {
  int rank = 0;
  BRAID_TRY(nccl_status(comm, ncclCommUserRank(comm, &rank), "ncclCommUserRank"));
  std::copy(mine, mine + count, all + size_t(rank) * count);
  return std::move(host_allgather(comm, all, count * sizeof(int64_t))).context(what);
}

Status gather_word(ncclComm_t comm, int64_t mine, std::vector<int64_t>* all, const std::string& what) {
  int nranks = 0;
  BRAID_TRY(nccl_status(comm, ncclCommCount(comm, &nranks), "ncclCommCount"));
  all->assign(size_t(nranks), 0);
  return all_gather_words(comm, &mine, all->data(), 1, what);
}

Status agree_config(ncclComm_t comm, const braidMoeConfig_t& config, int device, Shape* shape) {
  int nranks = 0, rank = 0;
  BRAID_TRY(nccl_status(comm, ncclCommCount(comm, &nranks), "ncclCommCount"));
  BRAID_TRY(nccl_status(comm, ncclCommUserRank(comm, &rank), "ncclCommUserRank"));
  const std::string problem = check_config(config, nranks, device);
  *shape = problem.empty() ? shape_of(config, nranks) : Shape{};
  std::vector<int64_t> mine(kAgreed), all(size_t(kAgreed) * nranks);
  agreement(*shape, config, problem.empty(), mine.data());
  BRAID_TRY(all_gather_words(comm, mine.data(), all.data(), kAgreed, "the config agreement"));
  if (!problem.empty()) return BRAID_ERROR(ncclInvalidArgument, "braidMoeCreate: {}", problem);
  for (int r = 0; r < nranks; ++r) {
    const int64_t* theirs = &all[size_t(r) * kAgreed];
    if (!theirs[0])
      return BRAID_ERROR(ncclInvalidArgument, "braidMoeCreate: rank {}'s config is invalid (its error says why)", r);
    for (int i = 1; i < kAgreed; ++i)
      if (theirs[i] != mine[i])
        return BRAID_ERROR(ncclInvalidArgument, "braidMoeCreate: rank {} has {} = {}, rank {} has {}", r,
                           kAgreedNames[i], theirs[i], rank, mine[i]);
  }
  return Status::ok();
}

}  // namespace braid::moe

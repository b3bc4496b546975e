#include "src/runtime/lsa_space.h"

#include <algorithm>
#include <charconv>

#include "src/base/env.h"
#include "src/base/log.h"
#include "src/bootstrap/bootstrap.h"
#include "src/transport/fd_passing.h"

namespace braid {
namespace {

namespace v = devapi::v22809;

// NCCL_WIN_REQUIRED_ALIGNMENT: ginOffset4K holds a window's offset in its
// allocation in 4 KiB units.
constexpr uint64_t kWindowAlignment = 4096;
// NCCL aligns the flat range to its largest page (NCCL_MAX_PAGE_SIZE).
constexpr uint64_t kRangeAlignment = uint64_t(512) << 20;

uint64_t round_up(uint64_t x, uint64_t unit) { return (x + unit - 1) / unit * unit; }

}  // namespace

uint64_t lsa_stride_from_env() {
  const std::string text = env_raw("NCCL_WIN_STRIDE");
  if (text.empty()) return 0;
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v == 0 || v % devapi::k4GiB != 0) return UINT64_MAX;
  return v;
}

LsaWindow::~LsaWindow() { space_->drop(this); }

char* LsaWindow::lsa_pointer(int peer, uint64_t offset) const {
  // NCCL's add4G: the peer's slot is stride4G more in the upper 32 bits.
  const uint64_t base = reinterpret_cast<uint64_t>(image_.lsaFlatBase);
  return reinterpret_cast<char*>(base + (uint64_t(uint32_t(peer) * image_.stride4G) << 32) + offset);
}

Status lsa_shape_of(const std::vector<PeerInfo>& peers, int rank, devapi::LsaShape* out) {
  std::vector<uint64_t> hosts;
  for (const PeerInfo& p : peers) hosts.push_back(p.host_hash);
  return devapi::lsa_shape(hosts, rank, out);
}

LsaSpace::LsaSpace(DeviceApiMemory& memory, const TransportContext& ctx, Bootstrap& bootstrap)
    : memory_(memory), ctx_(ctx), bootstrap_(bootstrap) {
  if (!lsa_shape_of(ctx.peers, ctx.rank, &lsa_).is_ok()) lsa_ = devapi::LsaShape{};  // a live comm always has one
  gin_local_ = std::make_shared<devapi::GinWindowTable>();
  for (int i = 0; i < lsa_.size; ++i) gin_lsa_.push_back(std::make_shared<devapi::GinWindowTable>());
}

LsaSpace::~LsaSpace() {
  for (TableBlock& b : table_) memory_.struct_free(b.device);
  if (base_) memory_.release(base_, uint64_t(lsa_.size) * stride_);
}

// Collective, at the first window: the stride every rank uses, and this
// rank's reservation (a rank that cannot reserve maps nothing, which the
// windows' agreement then sees).
Status LsaSpace::reserve_range() {
  struct Offer {
    uint64_t share;   // this rank's share of its memory
    uint64_t memory;  // which memory
    uint64_t env;     // NCCL_WIN_STRIDE
  };
  std::vector<Offer> all(ctx_.nranks);
  all[ctx_.rank] = {memory_.capacity(), memory_.memory_id(), lsa_stride_from_env()};
  BRAID_TRY(std::move(bootstrap_.allgather(all.data(), sizeof(Offer))).context("symmetric memory"));
  uint64_t share = 0, env = 0;
  const int first = ctx_.rank - lsa_.rank;
  for (int r = 0; r < ctx_.nranks; ++r) {
    if (all[r].env == UINT64_MAX)
      return BRAID_ERROR(ncclInvalidArgument, "NCCL_WIN_STRIDE on rank {} is not a positive multiple of 4 GiB", r);
    env = std::max(env, all[r].env);
    int sharing = 0;  // LSA ranks of r's team on r's memory
    const int team = r - (r - first) % lsa_.size;
    for (int q = team; q < team + lsa_.size && q < ctx_.nranks; ++q) sharing += all[q].memory == all[r].memory;
    share = std::max(share, all[r].share / uint64_t(std::max(sharing, 1)));
  }
  if (env)
    stride_ = env;
  else
    BRAID_TRY(devapi::flat_stride(std::max<uint64_t>(share, 1), &stride_));
  BRAID_TRY(devapi::SymmetricSpace::create(stride_, memory_.granularity(), &space_));
  const uint64_t align = std::max(kRangeAlignment, memory_.granularity());
  if (Status s = memory_.reserve(uint64_t(lsa_.size) * stride_, align, &base_); !s.is_ok())
    BRAID_WARN("symmetric memory: {}: no window of this communicator will be symmetric", s.to_string());
  BRAID_INFO(kInit, "symmetric memory on {}: {} LSA ranks, stride {} GiB, range at {}", memory_.name(), lsa_.size,
             stride_ >> 30, static_cast<void*>(base_));
  return Status::ok();
}

// Collective, with every rank agreeing the window can be symmetric and at
// window->offset_: maps every LSA peer's allocation (`all`: every rank's
// offer) into its slot, and agrees whether all ranks could (if not,
// unmaps again).
Status LsaSpace::map_peers(const std::vector<Offer>& all, LsaWindow* window, bool* symmetric) {
  const int my_fd[1] = {all[ctx_.rank].fd};
  std::vector<std::vector<UniqueFd>> passed;
  int64_t ok = base_ != nullptr;
  if (Status s = exchange_fds(ctx_, bootstrap_, std::span<const int>(my_fd, 1), &passed,
                              Deadline::after(std::chrono::seconds(env_int("BRAID_TIMEOUT"))));
      !s.is_ok()) {
    BRAID_WARN("symmetric memory: passing descriptors failed ({})", s.to_string());
    ok = 0;
  }
  const int first = ctx_.rank - lsa_.rank;
  for (int i = 0; i < lsa_.size && ok; ++i) {
    const int r = first + i;
    // A thread of this process: its descriptor works here.
    const bool here = same_process(ctx_.peers[size_t(r)], ctx_.peers[size_t(ctx_.rank)]);
    if (!here && passed[r].size() != 1) {
      ok = 0;
      break;
    }
    const uint64_t map_bytes = round_up(all[r].allocation_bytes, memory_.granularity());
    char* at = base_ + uint64_t(i) * stride_ + window->offset_;
    if (Status s = memory_.map(here ? all[r].fd : passed[r][0].get(), map_bytes, at); !s.is_ok()) {
      BRAID_INFO(kInit, "symmetric memory: LSA rank {} cannot be mapped: {}", i, s.to_string());
      ok = 0;
      break;
    }
    window->maps_.emplace_back(at, map_bytes);
  }
  std::vector<int64_t> oks(ctx_.nranks);
  oks[ctx_.rank] = ok;
  BRAID_TRY(std::move(bootstrap_.allgather(oks.data(), sizeof(int64_t))).context("symmetric memory"));
  *symmetric = std::all_of(oks.begin(), oks.end(), [](int64_t v) { return v != 0; });
  if (!*symmetric) {
    for (auto [at, n] : window->maps_) memory_.unmap(at, n);
    window->maps_.clear();
  }
  return Status::ok();
}

Status LsaSpace::add_window(const void* buffer, uint64_t bytes, void* host, uint32_t flags, bool in_table,
                            std::unique_ptr<LsaWindow>* out) {
  std::unique_ptr<LsaWindow> window(new LsaWindow(this));
  if (stride_ == 0) BRAID_TRY(reserve_range());
  // Can every rank's buffer be symmetric?  Shareable, at the same aligned
  // offset of its allocation; the slot is the largest allocation's.
  ExportedMemory mine;
  BRAID_TRY(memory_.describe(buffer, bytes, &mine));
  // A descriptor made for this export is closed when the peers are done
  // with it: after map_peers' agreement.
  UniqueFd exported(mine.close_fd ? mine.fd : -1);
  std::vector<Offer> all(ctx_.nranks);
  all[ctx_.rank] = {mine.fd >= 0 && bytes > 0, mine.fd, mine.offset, mine.allocation_bytes};
  BRAID_TRY(std::move(bootstrap_.allgather(all.data(), sizeof(Offer))).context("ncclCommWindowRegister"));
  bool symmetric = true;
  std::vector<devapi::SymmetricRequest> requests;
  for (const Offer& o : all) {
    symmetric &= o.shareable && o.offset == all[0].offset && o.offset % kWindowAlignment == 0;
    requests.push_back({o.allocation_bytes, 0});
  }
  if (symmetric) {
    devapi::SymmetricRequest request;
    BRAID_TRY(devapi::agreed_request(requests, &request));
    // The same space on every rank: it fits everywhere or nowhere.
    if (Status s = space_.alloc(request, &window->offset_); !s.is_ok()) {
      BRAID_INFO(kInit, "window not symmetric: {}", s.to_string());
      symmetric = false;
    }
  }
  if (symmetric) {
    BRAID_TRY(map_peers(all, window.get(), &symmetric));
    if (!symmetric) BRAID_TRY(space_.free(window->offset_));
  }
  v::WindowVidmem& w = window->image_;
  w.winHost = host;
  w.winFlags = flags;
  w.lsaRank = lsa_.rank;
  w.worldRank = ctx_.rank;
  if (symmetric) {
    w.lsaFlatBase = base_ + window->offset_ + all[0].offset;
    w.stride4G = uint32_t(stride_ >> 32);
    w.ginOffset4K = uint32_t(all[0].offset / kWindowAlignment);
  }
  BRAID_TRY(add_gin_token(buffer, bytes, all, window.get()));
  for (void*& token : w.ginWins) token = reinterpret_cast<void*>(window->token_);
  BRAID_TRY(memory_.struct_alloc(LsaWindow::kStructBytes, &window->device_));
  // One segment (2.30), CFT rank 0 (2.31), no CFT endpoint (2.32).
  const devapi::v23200::WindowVidmem image{{w, nullptr, 1, 0}, devapi::v23100::kLeIdInvalid};
  BRAID_TRY(memory_.struct_write(window->device_, &image, sizeof(image)));
  if (symmetric && in_table)
    BRAID_TRY(table_insert(reinterpret_cast<uint64_t>(buffer), bytes, window->device_, &window->table_slot_));
  *out = std::move(window);
  return Status::ok();
}

// Every rank takes the next token for every window, so tokens match across
// ranks.  A symmetric window's token names whole allocations: this rank's,
// and each LSA peer's copy in the flat range.
Status LsaSpace::add_gin_token(const void* buffer, uint64_t bytes, const std::vector<Offer>& all, LsaWindow* window) {
  const uint64_t token = next_token_++;
  if (!buffer || bytes == 0) return Status::ok();
  char* mine = static_cast<char*>(const_cast<void*>(buffer));
  if (window->symmetric()) {
    const Offer& me = all[ctx_.rank];
    BRAID_TRY(gin_local_->add(token, mine - me.offset, me.allocation_bytes));
    for (int i = 0; i < lsa_.size; ++i)
      BRAID_TRY(gin_lsa_[i]->add(token, base_ + uint64_t(i) * stride_ + window->offset_,
                                 all[ctx_.rank - lsa_.rank + i].allocation_bytes));
  } else {
    BRAID_TRY(gin_local_->add(token, mine, bytes));
  }
  window->token_ = token;
  return Status::ok();
}

Status LsaSpace::window_table(void** out) {
  if (table_.empty()) {
    TableBlock block;
    BRAID_TRY(memory_.struct_alloc(sizeof(block.image), &block.device));
    table_.push_back(block);
  }
  *out = table_[0].device;
  return Status::ok();
}

// Slots are numbered across blocks: block slot / 32, entry slot % 32.
Status LsaSpace::table_insert(uint64_t base, uint64_t size, void* window, int* slot) {
  void* first = nullptr;
  BRAID_TRY(window_table(&first));
  constexpr int kPerBlock = v::kWindowTableEntries;
  auto free_entry = [](const v::DevCommWindowTable& t) {
    for (int e = 0; e < kPerBlock; ++e)
      if (!t.entries[e].window) return e;
    return -1;
  };
  size_t b = 0;
  while (b < table_.size() && free_entry(table_[b].image) < 0) ++b;
  if (b == table_.size()) {  // a new block, linked from the last
    TableBlock block;
    BRAID_TRY(memory_.struct_alloc(sizeof(block.image), &block.device));
    table_.push_back(block);
    TableBlock& last = table_[b - 1];
    last.image.next = static_cast<v::DevCommWindowTable*>(block.device);
    BRAID_TRY(memory_.struct_write(static_cast<char*>(last.device) + offsetof(v::DevCommWindowTable, next),
                                   &last.image.next, sizeof(last.image.next)));
  }
  const int e = free_entry(table_[b].image);
  auto& entry = table_[b].image.entries[e];
  entry = {base, size, static_cast<v::WindowVidmem*>(window)};
  BRAID_TRY(
      memory_.struct_write(static_cast<v::DevCommWindowTable*>(table_[b].device)->entries + e, &entry, sizeof(entry)));
  *slot = int(b) * kPerBlock + e;
  return Status::ok();
}

void LsaSpace::table_erase(int slot) {
  TableBlock& block = table_[size_t(slot / v::kWindowTableEntries)];
  auto& entry = block.image.entries[slot % v::kWindowTableEntries];
  entry = {};
  (void)memory_.struct_write(static_cast<v::DevCommWindowTable*>(block.device)->entries + slot % v::kWindowTableEntries,
                             &entry, sizeof(entry));
}

void LsaSpace::drop(LsaWindow* window) {
  if (window->table_slot_ >= 0) table_erase(window->table_slot_);
  if (window->token_) {
    (void)gin_local_->remove(window->token_);
    if (window->symmetric())
      for (auto& table : gin_lsa_) (void)table->remove(window->token_);
  }
  for (auto [at, n] : window->maps_) memory_.unmap(at, n);
  if (window->symmetric()) (void)space_.free(window->offset_);
  if (window->device_) memory_.struct_free(window->device_);
}

}  // namespace braid

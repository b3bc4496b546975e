// A communicator's symmetric memory, as NCCL's device API lays it out: the
// flat LSA range, the window structs and the window table.
//
// A kernel built against nccl_device.h finds LSA peer p's copy of a window
// at lsaFlatBase + p * stride + offset (research doc 1.6), with no call into
// the library.  So, in every process, one range of address space holds
// lsaSize slots, `stride` bytes apart (a multiple of 4 GiB: the device adds
// the stride to a pointer's upper 32 bits), and every symmetric allocation
// sits at the same offset of every slot: LSA rank r's allocation is mapped
// at base + r * stride + offset, this rank's own included.  The offsets come
// from the same first-fit run on every rank in the same collective order
// (src/devapi/symmetric_space.h); the allocations reach the peers as
// descriptors (src/transport/fd_passing.h) and are mapped by the backend's
// memory (src/exec/device_api_memory.h).
//
// A window is symmetric when every rank's buffer is in a shareable
// allocation (ncclMemAlloc) at the same 4 KiB-aligned offset within it, and
// every LSA peer could map it; all ranks agree, so a window is symmetric
// everywhere or nowhere.  Any other window still gets a window struct,
// with no flat base (what NCCL hands out without symmetric support), and
// stays out of the window table, so ncclFindWindow never returns it.
//
// Every window also gets a GIN token, the same number on every rank (the
// windows' collective order), which its struct's ginWins[] hold and a GIN
// descriptor names: gin_local() resolves it to this rank's allocation (the
// device's offsets, 4096 * ginOffset4K + offset, count from there), and
// gin_lsa(i) to LSA rank i's copy in the flat range, for a proxy that
// stores into it (src/devapi/gin_link.h).
//
// The stride is agreed at the first window: the largest NCCL_WIN_STRIDE, or
// else the memory's size split among the ranks that share it, rounded up to
// 4 GiB.  A window that no longer fits is not symmetric, and says so in
// the INFO log; NCCL_WIN_STRIDE gives a rank more room.  Deregistration is
// local (unmapping this process's views): the next offset is still the
// same everywhere, because every rank frees and allocates in the same
// collective order.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "src/base/status.h"
#include "src/devapi/abi_v22809.h"
#include "src/devapi/abi_v23000.h"
#include "src/devapi/abi_v23100.h"
#include "src/devapi/abi_v23200.h"
#include "src/devapi/gin_memory.h"
#include "src/devapi/symmetric_space.h"
#include "src/devapi/teams.h"
#include "src/exec/device_api_memory.h"
#include "src/transport/transport.h"

namespace braid {

class Bootstrap;
class LsaSpace;

// NCCL_WIN_STRIDE as this rank reads it: 0 when unset, UINT64_MAX when it is
// not a positive multiple of 4 GiB.
uint64_t lsa_stride_from_env();

// Rank `rank`'s LSA team as NCCL shapes it (src/devapi/teams.h), from every
// rank's host.
Status lsa_shape_of(const std::vector<PeerInfo>& peers, int rank, devapi::LsaShape* out);

// What ncclWindow_t points at (NCCL 2.32's 96 bytes: 2.28.9's 72, with
// 2.32's winFlags in its padding; 2.30's segment fields saying one segment
// and 2.31's CFT rank, 0; 2.32's CFT endpoint base, invalid: kernels built
// for any of them read it), and where the window sits in the flat range.
// Destroying it unmaps this process's views, frees its offset, clears its
// table entry and frees the struct.
class LsaWindow {
 public:
  static constexpr size_t kStructBytes = sizeof(devapi::v23200::WindowVidmem);
  ~LsaWindow();
  LsaWindow(const LsaWindow&) = delete;
  LsaWindow& operator=(const LsaWindow&) = delete;

  void* device() const { return device_; }  // the ncclWindow_t
  const devapi::v22809::WindowVidmem& image() const { return image_; }
  bool symmetric() const { return image_.lsaFlatBase != nullptr; }
  // LSA rank `peer`'s copy of byte `offset` of the window, in this process.
  char* lsa_pointer(int peer, uint64_t offset) const;

 private:
  friend class LsaSpace;
  explicit LsaWindow(LsaSpace* space) : space_(space) {}
  LsaSpace* space_;
  void* device_ = nullptr;
  devapi::v22809::WindowVidmem image_{};
  uint64_t offset_ = 0;                           // in every slot; meaningful when symmetric
  std::vector<std::pair<char*, uint64_t>> maps_;  // this process's views: address, bytes
  int table_slot_ = -1;                           // its entry in the window table (-1: none)
  uint64_t token_ = 0;                            // its GIN token (0: in no GIN table)
};

class LsaSpace {
 public:
  LsaSpace(DeviceApiMemory& memory, const TransportContext& ctx, Bootstrap& bootstrap);
  ~LsaSpace();
  LsaSpace(const LsaSpace&) = delete;
  LsaSpace& operator=(const LsaSpace&) = delete;

  // Collective over the communicator: the window of this rank's `bytes` at
  // `buffer`, symmetric if every rank's can be.  `host` is what winHost
  // holds, `flags` winFlags (NCCL_WIN_*); `in_table` puts a symmetric
  // window in the window table.
  Status add_window(const void* buffer, uint64_t bytes, void* host, uint32_t flags, bool in_table,
                    std::unique_ptr<LsaWindow>* out);

  DeviceApiMemory& memory() const { return memory_; }
  const devapi::LsaShape& lsa() const { return lsa_; }
  int world_rank() const { return ctx_.rank; }
  int world_size() const { return ctx_.nranks; }
  // The first block of the window table (device-readable).
  Status window_table(void** out);
  uint64_t stride() const { return stride_; }
  std::shared_ptr<const devapi::GinWindowTable> gin_local() const { return gin_local_; }
  std::shared_ptr<const devapi::GinWindowTable> gin_lsa(int lsa_rank) const { return gin_lsa_[size_t(lsa_rank)]; }

 private:
  friend class LsaWindow;
  // What each rank says of its part of a window.
  struct Offer {
    int64_t shareable;
    int32_t fd;  // the rank's own (a thread of this process can use it)
    uint64_t offset, allocation_bytes;
  };
  Status reserve_range();
  Status map_peers(const std::vector<Offer>& all, LsaWindow* window, bool* symmetric);
  Status table_insert(uint64_t base, uint64_t size, void* window, int* slot);
  Status add_gin_token(const void* buffer, uint64_t bytes, const std::vector<Offer>& all, LsaWindow* window);
  void table_erase(int slot);
  void drop(LsaWindow* window);

  DeviceApiMemory& memory_;
  TransportContext ctx_;
  Bootstrap& bootstrap_;
  devapi::LsaShape lsa_;
  uint64_t stride_ = 0;  // 0 until the range is reserved
  char* base_ = nullptr;
  devapi::SymmetricSpace space_;
  struct TableBlock {
    void* device = nullptr;
    devapi::v22809::DevCommWindowTable image{};
  };
  std::vector<TableBlock> table_;
  uint64_t next_token_ = 1;
  std::shared_ptr<devapi::GinWindowTable> gin_local_;
  std::vector<std::shared_ptr<devapi::GinWindowTable>> gin_lsa_;  // by LSA rank
};

}  // namespace braid

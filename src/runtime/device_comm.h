// Device communicators (ncclDevCommCreate/Destroy) of NCCL's device API, for
// kernels built against 2.28.9's headers (src/devapi/abi_v22809.h), 2.29's
// (abi_v22900.h, LSA only), 2.30's (abi_v23000.h), 2.31's (abi_v23100.h) or
// 2.32.0-2.32.3's (abi_v23200.h): the ncclDevComm a client kernel takes by
// value, and the resource buffer behind it.  They are told apart as NCCL
// tells them: NCCL_API_MAGIC at byte 8 of the requirements marks 2.29's and
// later, whose version field then says which, and for 2.30 and later the
// size (a kernel built with braid's <nccl.h> says 2.32.6 over 2.30's or
// 2.31's device headers).  2.30's and 2.31's devComms start with the magic;
// 2.28.9's and 2.29's with a rank.  As NCCL 2.31 does, braid makes the
// newest devComm and translates it for a 2.30 kernel.
//
// A devComm names the communicator's ranks and LSA team, its window table,
// and one symmetric, zero-filled resource buffer holding what the
// requirements asked for: the LSA barrier, the LL AlltoAll lines, the
// user's own resources (laid out as NCCL does: src/devapi/resources.h).
// The buffer is a shareable allocation placed in the flat LSA range like a
// window (src/runtime/lsa_space.h), so every LSA peer's copy is at the
// address the inline device code computes.
//
// GPU-initiated networking (GIN) runs on the proxy backend
// (src/runtime/device_gin.h), with braid's proxy reading the descriptor
// format of the client's headers.
//  - 2.28.9: ginContextCount contexts (1 to 4), made as NCCL makes them,
//    for ranks on several hosts, and also when the requirements use it:
//    GIN signals or counters, ginForceEnable, the rail GIN barrier, or
//    barrierCount (2.28.9's world barrier always runs the rail GIN
//    barrier, even on one node, where NCCL would hand out no GIN context
//    for it).
//  - 2.30: when a connection is asked for (ginConnectionType, or
//    ginForceEnable), ginContextCount contexts (1 to 1024) of one
//    connection, with 2.30's barriers (devapi/resources.h), VA signals,
//    gets and flushes.  Every rank is reachable (FULL); a RAIL request is
//    served by it, as NCCL serves one on a full connection.
//  - 2.31: 2.30's, on backend 0 with a connection stride of 1, and 2.31's
//    custom stride (its GIN barriers span the ranks that far apart); a
//    GIN type other than the proxy is refused.  2.32.0-2.32.3 (2.31's
//    requirements, told apart by version): 80-byte contexts
//    (abi_v23200.h).  120 bytes that say 2.32.4 or later: older headers
//    with a later nccl.h, whose contexts' size is unknown: no GIN.
//
// Every devComm of 2.29.5 and later carries the communicator's abort flag
// (device_liveness.h), raised when a peer dies, a GIN proxy faults or the
// communicator is aborted or revoked, so the inline code's waits end.
//
// What braid cannot serve is refused at create time, never handed back as
// a devComm that would hang or fault in the headers' inline code:
//  - GIN on the CUDA backend unless BRAID_CUDA_GIN=1 (its proxy, with
//    host-mapped queues and signals and copy-engine puts, is built and has
//    not run on a GPU yet), so also several hosts there; and there 2.30's
//    VA signals (the proxy has no SM-free atomic on device memory);
//  - multimem (NVLink SHARP), and 2.31's Compute Fabric Transport (cftCaps),
//    which braid does not have;
//  - GIN for 2.29's clients (NCCL's compatibility layer does not serve it
//    either); they get LSA, in 2.29's devComm;
//  - a communicator whose resource buffer some rank cannot map.
// Creation is collective and agreed: every rank gets a devComm, or every
// rank gets an error.  Destroy is local, as deregistering a window is.
#pragma once

#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "src/base/status.h"
#include "src/devapi/abi_v22809.h"
#include "src/devapi/abi_v22900.h"
#include "src/devapi/abi_v23000.h"
#include "src/devapi/abi_v23100.h"
#include "src/devapi/resources.h"
#include "src/runtime/device_gin.h"
#include "src/runtime/device_liveness.h"
#include "src/runtime/lsa_space.h"

struct ncclComm;

namespace braid {

// The caller's requirements, of either ABI, copied with their resource and
// team lists: ncclDevCommCreate inside a group runs at the group's end,
// when the caller's structs may be gone (NCCL copies them too).  The
// lists' output pointers still point at the caller's memory, written at
// the group's end, as in NCCL.
class RequirementsCopy {
 public:
  explicit RequirementsCopy(const void* reqs);
  const void* data() const { return top_.data(); }

 private:
  std::vector<char> top_;
  std::deque<devapi::v22809::DevResourceRequirements> resources_;  // stable addresses
  std::deque<devapi::v22809::TeamRequirements> teams_;
};

// The communicator's symmetric memory, made at its first use (collective
// then, as every use is).
LsaSpace& symmetric_memory(ncclComm* comm);

class DeviceComms {
 public:
  explicit DeviceComms(ncclComm* comm) : comm_(comm) {}
  ~DeviceComms();

  // `reqs` is the caller's struct, of either ABI: only its first 12 bytes
  // are read before its version is known; `out` is that ABI's devComm.
  Status create(const void* reqs, void* out);
  Status destroy(const void* dev);
  // The first fault of a live devComm's GIN proxy, else why the
  // communicator's devComms were told to abort (ok if neither); any thread.
  Status fault() const;
  // ncclCommAbort, ncclCommRevoke: raises the abortFlag of every devComm
  // (device_liveness.h), so kernels waiting in the headers' code stop.
  void stop();

 private:
  struct Created {
    DeviceApiMemory* memory = nullptr;
    void* resources = nullptr;  // the shareable allocation
    std::unique_ptr<LsaWindow> window;
    std::unique_ptr<DeviceGin> gin;
    size_t gin_handle_at = 0;  // where the devComm handed out has ginHandles[0]
    ~Created();
  };
  // What a devComm of either ABI points at, once made.
  struct Made {
    devapi::v22809::WindowVidmem* resource_window = nullptr;
    devapi::v22809::WindowVidmem resource_image{};
    uint64_t* shadows = nullptr;
    void* window_table = nullptr;
    const DeviceGin* gin = nullptr;  // its contexts are what ginHandles[] hold
  };
  // `refused` (not ok) fails it on every rank, agreed, with that reason;
  // `lsa_only` serves no GIN whatever the requirements (2.29's clients).
  Status create_v22809(const devapi::v22809::DevCommRequirements& reqs, devapi::v22809::DevComm* out,
                       Status refused = Status::ok(), bool lsa_only = false);
  Status create_v22900(const devapi::v23000::DevCommRequirements& reqs, void* out);
  Status create_v23100(const devapi::v23100::DevCommRequirements& reqs, bool v231, devapi::v23100::DevComm* out);
  Status refuse_unservable(bool multimem, bool gin) const;
  Status check_v23000_gin(const devapi::v23000::DevCommRequirements& reqs, bool gin, bool v231) const;
  Status check_v23100(const devapi::v23100::DevCommRequirements& reqs, bool gin) const;
  // Collective: agrees that every rank's `local` is ok, then allocates,
  // zeroes and maps the resource buffer `layout` describes and the GIN
  // contexts `gin` describes (null: none), for a devComm whose ABI has
  // ginHandles[0] at byte `gin_handle_at`.
  Status make(Status local, const devapi::ResourceLayout& layout, const DeviceGinShape* gin, size_t gin_handle_at,
              Made* out);
  Status make_shared(const devapi::ResourceLayout& layout, const DeviceGinShape* gin, Created* created, Made* made,
                     bool* in_step);
  void fill_common(const Made& made, devapi::v22809::DevComm* dev) const;
  // The communicator's GIN progress thread, made at the first GIN devComm
  // (from the collective create, so from one thread at a time).
  devapi::GinProgress& gin_progress();
  // The communicator's DeviceLiveness, made at the first devComm (from
  // the collective create, so from one thread at a time), and ended when
  // the last is destroyed.
  Status make_liveness();
  void retire_idle_liveness();

  ncclComm* comm_;
  // Before live_: outlive the proxies that watch and step them.
  std::unique_ptr<DeviceLiveness> liveness_;
  std::unique_ptr<devapi::GinProgress> progress_;
  mutable std::mutex mutex_;  // live_, liveness_ and retired_fault_, against fault()'s threads
  std::vector<std::unique_ptr<Created>> live_;
  Status retired_fault_;  // a retired liveness's fault, still reported
};

}  // namespace braid

// A device communicator's resource buffer (NCCL 2.28.9's device API): what
// the requirement calls ask for, and where ncclDevCommCreate puts each.
//
// A requirement asks for bytes of the resource buffer (a size and an
// alignment) and for GIN signals and counters.  The buffer is one symmetric
// allocation per devComm, zero-filled, which device code reaches through a
// handle: the byte offset in 128-byte units.  The requirement calls are
// NCCL's formulas (src/nccl_device/{lsa_barrier,gin_barrier,ll_a2a}.cc of
// 2.28.9):
//   LSA barrier   (3 x barriers + barriers x team ranks) u32, u32-aligned
//   GIN barrier   barriers x 4 contexts u32 of saved epochs, and one signal
//                 per barrier
//   LL AlltoAll   blocks x (1 + 2 x slots) 16-byte lines, 16-aligned;
//                 slots = elements x ceil(element bytes / 8)
// The layout (NCCL's ncclDevrCommCreateInternal): the devComm's own rail
// GIN barrier and LSA barrier (max(barrierCount, rail/lsa count) each) go
// before the user's list; each requirement starts at the next multiple of
// max(128, its alignment) and gets that offset / 128 as its handle; signals
// and counters are numbered in list order after the devComm's own
// (ginSignalCount, ginCounterCount); then, at a 128-byte boundary, every
// GIN context's shadow of every signal (8 bytes each); the total is
// rounded up to the allocation granularity.  Unlike 2.28.9, whose deep copy
// of the requirements drops a user requirement's signal and counter counts,
// braid numbers them, as NCCL does from 2.29 on.
//
// Bad input (NULL outputs, negative counts, an alignment that is not a
// power of two, a list that loops, sizes past 2^39, where handles would
// overflow) is refused with the reason; NCCL checks none of it.
//
// 2.30 changed the GIN barrier: barriers x team ranks signals (one per
// barrier and peer) and no buffer, and gave the devComm six barriers of its
// own, laid out before the user's list in this order: world GIN, rail GIN,
// LSA, then the hybrid world GIN, rail GIN and LSA barriers of barrierCount
// (NCCL's ncclDevrCommCreateInternal; 2.31 keeps the order, its hybrid
// world barrier renamed dense and spanning the ranks GIN connects).  The
// public
// ncclGinBarrierCreateRequirement cannot tell which headers its caller was
// built with (the call and its structs did not change), so it asks for
// both: 2.28.9's buffer and 2.30's signals, of which a 2.28.9 kernel uses
// the first `barriers`.
#pragma once

#include <cstdint>
#include <vector>

#include "src/base/status.h"
#include "src/devapi/abi_v22809.h"
#include "src/devapi/abi_v23000.h"

namespace braid::devapi {

Status lsa_barrier_requirement(v22809::Team team, int barriers, v22809::LsaBarrierHandle* handle,
                               v22809::DevResourceRequirements* req);
// 2.28.9's GIN barrier (a buffer of saved epochs, a signal per barrier).
Status gin_barrier_requirement(int barriers, v22809::GinBarrierHandle* handle, v22809::DevResourceRequirements* req);
// 2.30's (a signal per barrier and team rank).
Status gin_barrier_requirement_v23000(v22809::Team team, int barriers, v22809::GinBarrierHandle* handle,
                                      v22809::DevResourceRequirements* req);
// What ncclGinBarrierCreateRequirement gives: enough for either.
Status gin_barrier_requirement_any(v22809::Team team, int barriers, v22809::GinBarrierHandle* handle,
                                   v22809::DevResourceRequirements* req);
Status ll_a2a_requirement(int blocks, int slots, v22809::LLA2AHandle* handle, v22809::DevResourceRequirements* req);
Status ll_a2a_slots(int max_elements, int max_element_bytes, int* slots);

struct ResourceLayout {
  uint64_t bytes = 0;           // the buffer, rounded up to the granularity (0: none)
  uint64_t shadows_offset = 0;  // where the GIN signal shadows start
  uint32_t signals = 0;         // GIN signals of the devComm, its own and the requirements'
  uint32_t counters = 0;
};

// Lays `reqs` out for a devComm whose LSA team is `lsa`, with
// `gin_contexts` GIN contexts (0..4) and memory allocated in
// `granularity` bytes (a power of two): writes the devComm's own barrier
// handles, and every requirement's handle, signal start and counter start
// where it asks for them.  Nothing is written unless the whole list is valid.
Status layout_resources(const v22809::DevCommRequirements& reqs, v22809::Team lsa, int gin_contexts,
                        uint64_t granularity, v22809::LsaBarrierHandle* lsa_barrier,
                        v22809::GinBarrierHandle* rail_barrier, ResourceLayout* out);

// The barriers a devComm of 2.30 or later has of its own, and the teams
// they span: the world, the LSA team, the rail team, and the dense GIN
// team of the hybrid barrier (2.30: the world, its "hybrid world"
// barrier; 2.31: the ranks a NCCL_GIN_CONNECTION_CUSTOM_STRIDE connects,
// else the world).
struct DevCommBarriers {
  v22809::GinBarrierHandle world, rail;
  v22809::LsaBarrierHandle lsa;
  v22809::GinBarrierHandle hybrid_dense, hybrid_rail;
  v22809::LsaBarrierHandle hybrid_lsa;
};
struct DevCommTeams {
  v22809::Team world, lsa, rail, dense;
};

// The same for 2.30's and 2.31's requirements (2.31 laid them out as 2.30
// does where there is no Compute Fabric Transport), with up to
// kMaxGinContextsV23000 contexts, writing the devComm's six barrier
// handles into `barriers`.  NCCL makes as many contexts as asked, and
// clients index all of them (DeepEP V2 asks for 65 or 129, one per queue
// pair): the bound only keeps a typo from pinning gigabytes of queues.
constexpr int kMaxGinContextsV23000 = 1024;
Status layout_resources_v23000(const v23000::DevCommRequirements& reqs, const DevCommTeams& teams, int gin_contexts,
                               uint64_t granularity, DevCommBarriers* barriers, ResourceLayout* out);

}  // namespace braid::devapi

// NCCL's tuner plugins on braid (NCCL_TUNER_PLUGIN; the v2-v6 ABI in
// src/plan/tuner_abi.h).
//
// Found as NCCL finds one: NCCL_TUNER_PLUGIN=none loads none; a value NAME
// loads NAME, else libnccl-tuner-NAME.so; unset, libnccl-tuner.so
// (src/base/plugin_library.h); where that finds no table (v6 down to v2),
// the net plugin's library (NCCL_NET_PLUGIN, else libnccl-net.so) is
// tried, as NCCL does for net plugins that bring a tuner (AWS's).  The
// library stays loaded while a communicator holds it.
//
// Every rank must load the same plugin (or none): that is agreed at init,
// which fails on every rank otherwise, since ranks whose calls the tuner
// steers differently would run different schedules.  The plugin's init runs
// at each communicator's init (its failure fails the init, as in NCCL),
// with the communicator's hash, ranks, hosts (nNodes, and NVLink domains:
// braid counts a host as one), braid's logger and a zeroed constants struct
// (braid has no NCCL model constants; what the plugin writes there is not
// read).  Its finalize runs when the communicator is freed.
//
// Each collective NCCL tunes (AllReduce, AllGather, ReduceScatter,
// Broadcast, Reduce) that makes no selection of its own (ncclCollConfig_t
// algSelection) is shown to getCollInfo with the table of
// src/plan/tuner_choice.h, numPipeOps 1 (braid plans each call alone: its
// path must not depend on how a rank grouped its calls) and regBuff 1 where
// both buffers lie in ncclCommRegister'ed memory.  braid runs the pick
// described there.  nChannels is not applied (braid sets its channels
// itself), said once per communicator; v6's getChunkSize is not called
// (braid's fragments are its transports').  A getCollInfo that fails leaves
// braid's own choice, as NCCL falls back to its default tuning.
#pragma once

#include <cstdint>
#include <memory>

#include "src/base/status.h"
#include "src/plan/call.h"

struct ncclComm;

namespace braid {

class TunerPlugin;  // a loaded library and its table (tuner.cc)

// A communicator's view of the plugin (held by ncclComm).
struct CommTuner {
  std::shared_ptr<TunerPlugin> plugin;
  void* context = nullptr;
  bool live = false;  // init succeeded: finalize when the communicator goes
  bool between_hosts = false;  // the cost model's link (src/plan/cost_model.h)
  bool said_channels = false;
  CommTuner() = default;
  CommTuner(const CommTuner&) = delete;
  CommTuner& operator=(const CommTuner&) = delete;
  ~CommTuner();
};

// NCCL_TUNER_PLUGIN's plugin, for a communicator being created (null: none).
std::shared_ptr<TunerPlugin> tuner_plugin();
// What the ranks agree on: the plugin's name and version (0: none).
uint64_t tuner_identity(const TunerPlugin* plugin);

// The plugin's init for `comm` (its peers are known); none where `plugin` is null.
Status tuner_comm_init(ncclComm* comm, std::shared_ptr<TunerPlugin> plugin);

// Consults the communicator's plugin, if any, for a call with no selection
// of its own whose arguments passed: where it picks braid's ring,
// call->algorithms becomes the ring's bit.  `call->algorithms` holds what
// NCCL_ALGO admits (0: anything).
void tuner_choose(ncclComm* comm, CollectiveCall* call);

}  // namespace braid

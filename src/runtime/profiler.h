// NCCL's profiler plugins on braid (NCCL_PROFILER_PLUGIN; the v5-v7 ABI in
// profiler_abi.h).
//
// The plugin is loaded at a communicator's init when none is loaded, and
// unloaded when the last communicator holding it is destroyed, as NCCL
// does: NCCL_PROFILER_PLUGIN=none loads none; a value NAME loads NAME, else
// libnccl-profiler-NAME.so where NAME is a bare name; unset,
// libnccl-profiler.so (src/base/plugin_library.h).
// (NCCL never tries again in a process where loading failed once; braid
// tries again at the next init, which reads the variable anew.)
// Each communicator gets the plugin's context (its init) and the events it
// asks for in its activation mask, with NCCL's hierarchy:
//   GroupApi   the calling thread's group (its first call to ncclGroupEnd;
//              a call outside a group is a group of depth 1)
//     CollApi / P2pApi   each call, while it is queued
//   Group      a communicator's part of the group as it runs
//     Coll / P2p         each call, parent its API event
//       KernelCh         host backend: the call's execution on channel 0,
//                        host clock in ns as its timer (CUDA: none yet)
//     KernelLaunch       the backend's launch (CUDA: the kernels' enqueue;
//                        host: an instant as the run starts)
// Calls of one group on one communicator run together, so each is timed as
// the whole part.  No proxy or network events: braid has no proxy thread.
// AlltoAll, Gather and Scatter are collective events (NCCL gives them as
// the sends and receives they are made of).  A plugin whose init fails is
// not used for that communicator.  The activation mask is one process-wide
// int, as NCCL's: a plugin may set it at its first init only, or change it
// while running.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "src/plan/call.h"
#include "src/runtime/profiler_abi.h"

struct ncclComm;

namespace braid {

// A communicator's view of the plugin (held by ncclComm).
struct CommProfiler {
  // Set once the plugin's init succeeded: the communicator holds the plugin
  // loaded until its finalize.
  const braidNcclProfiler_t* table = nullptr;
  void* context = nullptr;  // the plugin's (it may give none)
  std::array<uint64_t, 9> seq{};  // collectives run, per Collective (the Coll event's seqNumber)
};

// After init's last exchange, before the communicator is ready: calls read it.
void profiler_comm_init(ncclComm* comm);
// At destroy or abort; first stops the calling thread's group API event if
// this communicator's context holds it.
void profiler_comm_finalize(ncclComm* comm);
// RAS's CONTROL PROFILER_MASK (NCCL 2.31): the process's activation mask,
// set now and kept over what later plugin inits write into it.
void profiler_override_mask(int mask);
// Whether a plugin takes this communicator's events.
bool profiler_active(const ncclComm* comm);

// The calling thread's group API event, in the context of the group's first
// profiled call's communicator: started at that call (depth: the group's
// nesting, 1 for a call outside a group), its state when ncclGroupEnd starts
// running the group, stopped before ncclGroupEnd lets the group's
// communicators go.
void profiler_group_api_start(ncclComm* comm, int depth);
void profiler_group_api_end_starts();
void profiler_group_api_stop();

// A call's API event, started and stopped as it is queued; the call keeps
// it (and its group's) as the parents of its run's events.
void profiler_call_api(ncclComm* comm, CollectiveCall* call);
void profiler_call_api(ncclComm* comm, P2PCall* call);

// A communicator's part of a group while its backend runs it: the task
// events start on construction and stop on destruction.
class ProfiledRun {
 public:
  ProfiledRun(ncclComm* comm, std::span<const CollectiveCall> collectives, std::span<const P2PCall> p2ps);
  ~ProfiledRun();
  ProfiledRun(const ProfiledRun&) = delete;
  ProfiledRun& operator=(const ProfiledRun&) = delete;

 private:
  const braidNcclProfiler_t* table_ = nullptr;  // null: nothing to stop
  void* group_ = nullptr;
  void* launch_ = nullptr;  // the CUDA backend's: its enqueue is the launch
  std::vector<void*> tasks_, channels_;  // channels_[i]: tasks_[i]'s KernelCh (or null)
};

}  // namespace braid

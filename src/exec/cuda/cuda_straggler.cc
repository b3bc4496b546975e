#include "src/exec/cuda/cuda_straggler.h"

#include <utility>

#include "src/exec/cuda/cuda_try.h"
#include "src/exec/cuda/host_registration.h"
#include "src/exec/cuda/launch.h"
#include "src/ops/datatype.h"
#include "src/plan/duration_board.h"
#include "src/plan/planner.h"

namespace braid {

Status CudaStraggler::init(const BackendContext& ctx) {
  ctx_ = &ctx;
  StragglerTracker& st = ctx.plans->straggler(ctx.comm.nranks, ctx.comm.rank);
  BRAID_TRY(st.open_duration_board(ctx.comm, ctx.stop));
  const DurationBoard* board = st.duration_board();
  if (!board) return Status::ok();
  void* device = nullptr;
  BRAID_TRY(cuda::register_host(board->base(), board->bytes(), &device));
  registered_ = board->base();
  device_base_ = static_cast<char*>(device);
  return Status::ok();
}

void CudaStraggler::release() {
  if (registered_) cuda::unregister_host(registered_);
  registered_ = nullptr;
}

Status CudaStraggler::begin(const CollectiveCall& call, bool capturing, int* straggler) {
  *straggler = -1;
  stamping_ = nullptr;
  if (call.collective != Collective::AllReduce) return Status::ok();
  const TransportContext& comm = ctx_->comm;
  StragglerTracker& st = ctx_->plans->straggler(comm.nranks, comm.rank);
  const uint64_t bytes = call.count * datatype_size(call.type);
  if (!st.tracks(bytes) || capturing) return st.plan_call(comm, ctx_->stop, bytes, straggler);
  BRAID_TRY(st.plan_device_call(bytes, straggler, &stamping_call_));
  const DurationBoard* board = st.duration_board();
  const char* host_entry = reinterpret_cast<const char*>(board->entry(stamping_call_));
  stamping_ = reinterpret_cast<DurationEntry*>(device_base_ + (host_entry - static_cast<const char*>(registered_)));
  CUDA_TRY(cuda::launch_stamp_arrival(stamping_, call.stream));
  return Status::ok();
}

Status CudaStraggler::arrive_ahead(const CollectiveCall& call) {
  if (call.collective != Collective::AllReduce) return Status::ok();
  const TransportContext& comm = ctx_->comm;
  StragglerTracker& st = ctx_->plans->straggler(comm.nranks, comm.rank);
  return st.arrive_ahead(comm, ctx_->stop, call.count * datatype_size(call.type));
}

Status CudaStraggler::end(cudaStream_t stream) {
  if (!stamping_) return Status::ok();
  DurationEntry* entry = std::exchange(stamping_, nullptr);
  CUDA_TRY(cuda::launch_stamp_completion(entry, stamping_call_, stream));
  return Status::ok();
}

}  // namespace braid

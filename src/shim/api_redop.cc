// Entry points for user reduction ops: ncclRedOpCreatePreMulSum and
// ncclRedOpDestroy.
//
// Op ids are per communicator, handed out from ncclNumOps upward and never
// reused while the communicator lives, so a destroyed op stays invalid
// (ncclInvalidArgument) instead of silently naming a newer one.  The scalar:
// ncclScalarHostImmediate is copied now; ncclScalarDevice is a pointer read
// when each collective runs (host memory on the host backend), as NCCL's
// kernels read it.
#include <cstring>

#include "src/ops/datatype.h"
#include "src/shim/api.h"

using namespace braid;

BRAID_API ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                                ncclScalarResidence_t residence, ncclComm_t comm) {
  return guarded(comm, "ncclRedOpCreatePreMulSum", [&] {
    if (!op) return BRAID_ERROR(ncclInvalidArgument, "op pointer is NULL");
    CommUse use(comm);  // an Abort from another thread waits for this call
    BRAID_TRY(check_comm(use, comm));
    BRAID_TRY(check_type(datatype));
    if (!scalar) return BRAID_ERROR(ncclInvalidArgument, "scalar is NULL");
    // Read as an int: a value outside the enum is what we are checking for.
    int residence_value;
    std::memcpy(&residence_value, &residence, sizeof(residence_value));
    if (residence_value != ncclScalarDevice && residence_value != ncclScalarHostImmediate)
      return BRAID_ERROR(ncclInvalidArgument, "residence {} (expected ncclScalarDevice or ncclScalarHostImmediate)",
                         residence_value);
    if (comm->next_user_op == int(ncclMaxRedOp))
      return BRAID_ERROR(ncclInvalidUsage, "no reduction op ids left on this communicator");
    PreMulSumOp created;
    created.type = datatype;
    created.residence = residence;
    if (residence == ncclScalarHostImmediate) std::memcpy(&created.immediate, scalar, datatype_size(datatype));
    else created.pointer = scalar;
    int id = comm->next_user_op++;
    comm->user_ops.emplace(id, created);
    *op = ncclRedOp_t(id);
    return Status::ok();
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclRedOpCreatePreMulSum,
                      (ncclRedOp_t*, void*, ncclDataType_t, ncclScalarResidence_t, ncclComm_t))

BRAID_API ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  return guarded(comm, "ncclRedOpDestroy", [&] {
    CommUse use(comm);  // an Abort from another thread waits for this call
    BRAID_TRY(check_comm(use, comm));
    if (int(op) >= 0 && op < ncclNumOps)
      return BRAID_ERROR(ncclInvalidArgument, "op {} is a built-in reduction and cannot be destroyed", int(op));
    // Calls already made with the op keep their copy of it (NCCL allows
    // destroying an op as soon as the last call using it has returned).
    if (comm->user_ops.erase(int(op)) == 0)
      return BRAID_ERROR(ncclInvalidArgument, "op {} was not created on this communicator (or was destroyed)", int(op));
    return Status::ok();
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclRedOpDestroy, (ncclRedOp_t, ncclComm_t))

#include "src/transport/ibverbs/ib_verbs_loader.h"

#include <errno.h>
#include <infiniband/verbs.h>

#include <string>

#include "src/base/dl_forward.h"

namespace braid {
namespace {

constexpr const char* kLibrary = "libibverbs.so.1";

// Every libibverbs function braid's verbs code leaves undefined (nm -u on
// its objects; the ctest no_hard_library_deps fails when one is missing
// here): X(name, parameters, required).  ibv_is_fork_initialized
// (rdma-core 35) only feeds a trace line, so an older library still serves;
// ibv_reg_mr_iova2 (IBVERBS_1.8, rdma-core 29) registers with relaxed
// ordering, which braid goes without where it is missing
// (ibverbs_has_reg_mr_iova2).
#define BRAID_IBVERBS_ENTRIES(X)                                         \
  X(ibv_fork_init, 0, true)                                              \
  X(ibv_is_fork_initialized, 0, false)                                   \
  X(ibv_get_device_list, 1, true)                                        \
  X(ibv_free_device_list, 1, true)                                       \
  X(ibv_get_device_name, 1, true)                                        \
  X(ibv_open_device, 1, true)                                            \
  X(ibv_close_device, 1, true)                                           \
  X(ibv_query_device, 2, true)                                           \
  X(ibv_query_port, 3, true)                                             \
  X(ibv_query_pkey, 4, true)                                             \
  X(_ibv_query_gid_ex, 6, true)                                          \
  X(ibv_alloc_pd, 1, true)                                               \
  X(ibv_dealloc_pd, 1, true)                                             \
  X(ibv_reg_mr, 4, true)                                                 \
  X(ibv_reg_mr_iova2, 5, false)                                          \
  X(ibv_dereg_mr, 1, true)                                               \
  X(ibv_create_comp_channel, 1, true)                                    \
  X(ibv_create_cq, 5, true)                                              \
  X(ibv_destroy_cq, 1, true)                                             \
  X(ibv_get_cq_event, 3, true)                                           \
  X(ibv_ack_cq_events, 2, true)                                          \
  X(ibv_create_qp, 2, true)                                              \
  X(ibv_modify_qp, 3, true)                                              \
  X(ibv_destroy_qp, 1, true)                                             \
  X(ibv_wc_status_str, 1, true)                                          \
  X(ibv_get_async_event, 2, true)                                        \
  X(ibv_ack_async_event, 1, true)                                        \
  X(ibv_event_type_str, 1, true)

BRAID_DL_TABLE(BRAID_IBVERBS_ENTRIES, kLibrary, "rdma-core's libibverbs; install it for InfiniBand/RoCE")

}  // namespace

Status load_ibverbs() {
  const Table& t = table();
  if (!t.error.empty()) return BRAID_ERROR(ncclSystemError, "{}", t.error);
  return Status::ok();
}

bool ibverbs_has_reg_mr_iova2() { return table().ibv_reg_mr_iova2 != nullptr; }

// The forwarders: verbs' int results are 0 or an errno value.
#define BRAID_IBVERBS_FORWARD(name, n, required) BRAID_DL_FORWARD(table, ENOSYS, name, n)
BRAID_IBVERBS_ENTRIES(BRAID_IBVERBS_FORWARD)
#undef BRAID_IBVERBS_FORWARD

}  // namespace braid

#include "src/transport/ibverbs/ib_verbs_loader.h"

#include <dlfcn.h>
#include <errno.h>
#include <infiniband/verbs.h>

#include <string>
#include <type_traits>

namespace braid {
namespace {

constexpr const char* kLibrary = "libibverbs.so.1";

// Every libibverbs function braid's verbs code leaves undefined (nm -u on
// its objects; the ctest no_hard_library_deps fails when one is missing
// here): X(return type, name, (parameters),
// (arguments), required).  ibv_is_fork_initialized (rdma-core 35) only
// feeds a trace line, so an older library still serves.
#define BRAID_IBVERBS_ENTRIES(X)                                                                                   \
  X(int, ibv_fork_init, (void), (), true)                                                                          \
  X(ibv_fork_status, ibv_is_fork_initialized, (void), (), false)                                                   \
  X(ibv_device**, ibv_get_device_list, (int* num_devices), (num_devices), true)                                    \
  X(void, ibv_free_device_list, (ibv_device** list), (list), true)                                                 \
  X(const char*, ibv_get_device_name, (ibv_device* device), (device), true)                                        \
  X(ibv_context*, ibv_open_device, (ibv_device* device), (device), true)                                           \
  X(int, ibv_close_device, (ibv_context* context), (context), true)                                                \
  X(int, ibv_query_device, (ibv_context* context, ibv_device_attr* attr), (context, attr), true)                   \
  X(int, ibv_query_port, (ibv_context* context, uint8_t port, _compat_ibv_port_attr* attr), (context, port, attr), \
    true)                                                                                                          \
  X(int, _ibv_query_gid_ex,                                                                                        \
    (ibv_context* context, uint32_t port, uint32_t index, ibv_gid_entry* entry, uint32_t flags, size_t size),      \
    (context, port, index, entry, flags, size), true)                                                              \
  X(ibv_pd*, ibv_alloc_pd, (ibv_context* context), (context), true)                                                \
  X(int, ibv_dealloc_pd, (ibv_pd* pd), (pd), true)                                                                 \
  X(ibv_mr*, ibv_reg_mr, (ibv_pd* pd, void* addr, size_t length, int access), (pd, addr, length, access), true)    \
  X(int, ibv_dereg_mr, (ibv_mr* mr), (mr), true)                                                                   \
  X(ibv_comp_channel*, ibv_create_comp_channel, (ibv_context* context), (context), true)                           \
  X(ibv_cq*, ibv_create_cq, (ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel, int vector), \
    (context, cqe, cq_context, channel, vector), true)                                                             \
  X(int, ibv_destroy_cq, (ibv_cq* cq), (cq), true)                                                                 \
  X(int, ibv_get_cq_event, (ibv_comp_channel* channel, ibv_cq** cq, void** cq_context), (channel, cq, cq_context), \
    true)                                                                                                          \
  X(void, ibv_ack_cq_events, (ibv_cq* cq, unsigned int nevents), (cq, nevents), true)                              \
  X(ibv_qp*, ibv_create_qp, (ibv_pd* pd, ibv_qp_init_attr* attr), (pd, attr), true)                                \
  X(int, ibv_modify_qp, (ibv_qp* qp, ibv_qp_attr* attr, int mask), (qp, attr, mask), true)                         \
  X(int, ibv_destroy_qp, (ibv_qp* qp), (qp), true)                                                                 \
  X(const char*, ibv_wc_status_str, (ibv_wc_status status), (status), true)

// The entry points found, each typed as verbs.h declares it (so a
// signature written wrong above does not compile).
struct Entries {
#define BRAID_IBVERBS_POINTER(ret, name, params, args, required) decltype(&::name) name = nullptr;
  BRAID_IBVERBS_ENTRIES(BRAID_IBVERBS_POINTER)
#undef BRAID_IBVERBS_POINTER
  std::string error;  // empty once loaded
};

const Entries& entries() {
  static const Entries loaded = [] {
    Entries e;
    void* lib = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* why = dlerror();
      e.error = fmt::format("cannot load {} (rdma-core's libibverbs; install it for InfiniBand/RoCE): {}", kLibrary,
                            why ? why : "unknown error");
      return e;
    }
#define BRAID_IBVERBS_FIND(ret, name, params, args, required)                                             \
  e.name = reinterpret_cast<decltype(&::name)>(dlsym(lib, #name));                                        \
  if (!e.name && required && e.error.empty())                                                             \
    e.error = fmt::format("{} has no {} (rdma-core too old for braid's verbs net)", kLibrary, #name);
    BRAID_IBVERBS_ENTRIES(BRAID_IBVERBS_FIND)
#undef BRAID_IBVERBS_FIND
    return e;  // the library stays open for the process
  }();
  return loaded;
}

// What a forwarder returns when its entry point is missing.
template <class R>
R missing() {
  errno = ENOSYS;
  if constexpr (std::is_void_v<R>) return;
  else if constexpr (std::is_same_v<R, int>) return ENOSYS;
  else return R{};  // null pointers; IBV_FORK_DISABLED
}

}  // namespace

Status load_ibverbs() {
  const Entries& e = entries();
  if (!e.error.empty()) return BRAID_ERROR(ncclSystemError, "{}", e.error);
  return Status::ok();
}

}  // namespace braid

// The forwarders, under verbs.h's own names (in parentheses, past its
// function-like macros of the same names).
#define BRAID_IBVERBS_FORWARD(ret, name, params, args, required)  \
  extern "C" ret(name) params {                                    \
    const braid::Entries& e = braid::entries();                    \
    if (!e.name) return braid::missing<ret>();                     \
    return (e.name)args;                                           \
  }
BRAID_IBVERBS_ENTRIES(BRAID_IBVERBS_FORWARD)
#undef BRAID_IBVERBS_FORWARD

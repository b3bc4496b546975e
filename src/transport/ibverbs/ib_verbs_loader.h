// libibverbs, opened at run time (dlopen) instead of linked.
//
// A libnccl.so.2 that named libibverbs.so.1 among its needed libraries
// could not be loaded at all where rdma-core is not installed (most GPU
// containers without InfiniBand): preloading braid would then break a job
// that NCCL, which opens libibverbs at run time too, runs.  So braid's
// verbs code calls the ordinary ibv_* functions, and ib_verbs_loader.cc
// defines the ones it calls (those verbs.h's inline wrappers leave
// undefined), each forwarding to the same symbol in libibverbs.so.1.  The
// definitions are hidden (the library's visibility preset and export map),
// so nothing else in the process binds to them.
#pragma once

#include "src/base/status.h"

namespace braid {

// Opens libibverbs.so.1 once and finds every entry point braid calls.
// ncclSystemError saying why not (not installed, or too old).  Call it
// before any verbs function; until it succeeded they fail (null, ENOSYS).
Status load_ibverbs();
// Whether the library has ibv_reg_mr_iova2, the entry point of optional
// access flags such as relaxed ordering (false until loaded).
bool ibverbs_has_reg_mr_iova2();

}  // namespace braid

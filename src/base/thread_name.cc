#include "src/base/thread_name.h"

#include <pthread.h>

#include <string>

#include "src/base/env.h"

namespace braid {

void name_thread(std::thread& thread, const char* name) {
  static const bool enabled = env_nccl_int("NCCL_SET_THREAD_NAME").value_or(0) == 1;
  if (!enabled || !thread.joinable()) return;
  const std::string cut = std::string(name).substr(0, 15);
  pthread_setname_np(thread.native_handle(), cut.c_str());
}

}  // namespace braid

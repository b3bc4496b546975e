#include "src/exec/cuda_thread_ranks.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "src/base/log.h"

namespace braid::cuda {

void warn_unless_thread_ranks_settled(int device, int threads_on_device) {
  if (threads_on_device < 2) return;
  const char* connections = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  const char* loading = std::getenv("CUDA_MODULE_LOADING");
  const bool queues = connections && std::atoi(connections) >= 32;
  const bool eager = loading && std::string(loading) == "EAGER";
  if (queues && eager) return;
  static std::atomic<bool> warned{false};
  if (warned.exchange(true)) return;
  BRAID_WARN("{} ranks of this process share device {}, and their kernels wait for each other: start the program "
             "with CUDA_DEVICE_MAX_CONNECTIONS=32 (now {}) and CUDA_MODULE_LOADING=EAGER (now {}), or a rank's "
             "kernel may queue behind a peer's waiting one and hang until BRAID_TIMEOUT",
             threads_on_device, device, connections ? connections : "unset (8 queues)", loading ? loading : "unset");
}

}  // namespace braid::cuda

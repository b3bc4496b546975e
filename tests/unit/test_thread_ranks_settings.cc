// The warning for ranks that are threads sharing a GPU without the two
// settings their kernels need (src/exec/cuda_thread_ranks.h): none for one
// rank per device, none with both set, once per process otherwise, naming
// what is missing.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <string>

#include "read_file.h"
#include "scoped_env.h"
#include "src/base/log.h"
#include "src/exec/cuda_thread_ranks.h"

using namespace braid;

TEST_CASE("thread ranks sharing a GPU without 32 queues and eager loading are warned about, once",
          "[thread_ranks]") {
  char path[] = "/tmp/braid_thread_ranks_log_XXXXXX";  // mkstemp's template
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  {
    ScopedEnv level("NCCL_DEBUG", "WARN"), file("NCCL_DEBUG_FILE", path);
    ScopedEnv eager("CUDA_MODULE_LOADING", "EAGER");
    log_reset();
    {
      ScopedEnv queues("CUDA_DEVICE_MAX_CONNECTIONS", "32");
      cuda::warn_unless_thread_ranks_settled(0, 1);  // one rank on the device
      cuda::warn_unless_thread_ranks_settled(0, 4);  // both set
      CHECK(read_file(path).empty());
    }
    cuda::warn_unless_thread_ranks_settled(1, 1);  // one rank: nothing to say
    CHECK(read_file(path).empty());
    cuda::warn_unless_thread_ranks_settled(1, 4);
    const std::string warned = read_file(path);
    CHECK(warned.find("4 ranks of this process share device 1") != std::string::npos);
    CHECK(warned.find("CUDA_DEVICE_MAX_CONNECTIONS=32 (now unset (8 queues))") != std::string::npos);
    CHECK(warned.find("CUDA_MODULE_LOADING=EAGER (now EAGER)") != std::string::npos);
    ScopedEnv few("CUDA_DEVICE_MAX_CONNECTIONS", "8");
    cuda::warn_unless_thread_ranks_settled(1, 4);  // said once per process
    CHECK(read_file(path) == warned);
  }
  log_reset();
  std::remove(path);
}

// The warning for ranks that are threads sharing a GPU without the two
// settings their kernels need (src/exec/cuda_thread_ranks.h): none for one
// rank per device, none with both set, once per process otherwise, naming
// what is missing.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "src/base/log.h"
#include "src/exec/cuda_thread_ranks.h"

using namespace braid;

namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("thread ranks sharing a GPU without 32 queues and eager loading are warned about, once",
          "[thread_ranks]") {
  char path[] = "/tmp/braid_thread_ranks_XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  setenv("NCCL_DEBUG", "WARN", 1);
  setenv("NCCL_DEBUG_FILE", path, 1);
  log_reset();

  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 1);
  setenv("CUDA_MODULE_LOADING", "EAGER", 1);
  cuda::warn_unless_thread_ranks_settled(0, 1);  // one rank on the device
  cuda::warn_unless_thread_ranks_settled(0, 4);  // both set
  CHECK(read_all(path).empty());

  unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
  cuda::warn_unless_thread_ranks_settled(1, 1);  // one rank: nothing to say
  CHECK(read_all(path).empty());
  cuda::warn_unless_thread_ranks_settled(1, 4);
  const std::string warned = read_all(path);
  CHECK(warned.find("4 ranks of this process share device 1") != std::string::npos);
  CHECK(warned.find("CUDA_DEVICE_MAX_CONNECTIONS=32 (now unset (8 queues))") != std::string::npos);
  CHECK(warned.find("CUDA_MODULE_LOADING=EAGER (now EAGER)") != std::string::npos);
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "8", 1);
  cuda::warn_unless_thread_ranks_settled(1, 4);  // said once per process
  CHECK(read_all(path) == warned);

  unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
  unsetenv("CUDA_MODULE_LOADING");
  unsetenv("NCCL_DEBUG");
  unsetenv("NCCL_DEBUG_FILE");
  log_reset();
  std::remove(path);
}

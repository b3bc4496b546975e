// The CUDA backend's verdict on a call's buffers (src/exec/device_buffer_check.h):
// device or managed memory always, and under NCCL_CHECK_MODE's local check
// device memory of the communicator's device only, as NCCL's CudaPtrCheck.
#include <catch2/catch.hpp>

#include <string>

#include "src/exec/device_buffer_check.h"

using namespace braid;

TEST_CASE("device buffers: host memory is refused, naming the argument", "[device_buffer_check]") {
  int x = 0;
  const Status s = device_buffer_verdict(BufferMemory::NotDevice, 0, -1, &x, "sendbuff");
  CHECK(s.code() == ncclInvalidArgument);
  CHECK(s.message().find("sendbuff") != std::string::npos);
  CHECK(s.message().find("BRAID_BACKEND=host") != std::string::npos);
  CHECK(device_buffer_verdict(BufferMemory::NotDevice, 0, 0, &x, "recvbuff").code() == ncclInvalidArgument);
}

TEST_CASE("device buffers: another device's memory only under the local check", "[device_buffer_check]") {
  int x = 0;
  CHECK(device_buffer_verdict(BufferMemory::Device, 1, -1, &x, "sendbuff").is_ok());  // peer access, as NCCL
  CHECK(device_buffer_verdict(BufferMemory::Device, 1, 1, &x, "sendbuff").is_ok());
  const Status s = device_buffer_verdict(BufferMemory::Device, 3, 1, &x, "recvbuff");
  CHECK(s.code() == ncclInvalidArgument);
  CHECK(s.message().find("recvbuff") != std::string::npos);
  CHECK(s.message().find("memory of device 3, and this communicator runs on device 1") != std::string::npos);
  // Managed memory belongs to no one device.
  CHECK(device_buffer_verdict(BufferMemory::Managed, 3, 1, &x, "sendbuff").is_ok());
}

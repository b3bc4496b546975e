// Forwarding to a real NCCL: loading (RTLD_DEEPBIND), refusals, and which
// collectives BRAID_FORWARD selects.  Running a forwarded collective needs a
// GPU (the real NCCL's communicators need one); that runs on the device.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>

#include "src/exec/forward.h"

using namespace braid;

namespace {
constexpr const char* kRealNccl = "/usr/local/cuda/lib64/libnccl.so.2";
}

TEST_CASE("the real NCCL loads with every forwarded entry point") {
  if (!std::filesystem::exists(kRealNccl)) {
    WARN("no real NCCL at " << kRealNccl << ": nothing to load");
    return;
  }
  setenv("BRAID_NCCL_LIB", kRealNccl, 1);
  const RealNccl* lib = nullptr;
  Status s = real_nccl(&lib);
  REQUIRE(s.is_ok());
  int version = 0;
  REQUIRE(lib->GetVersion(&version) == ncclSuccess);
  CHECK(version == 22809);
  CHECK(lib->AllReduce != nullptr);
  CHECK(std::string(lib->GetErrorString(ncclInvalidArgument)).find("invalid") != std::string::npos);
}

TEST_CASE("a missing forwarding library is a clear error") {
  setenv("BRAID_NCCL_LIB", "/nonexistent/libnccl.so.2", 1);
  const RealNccl* lib = nullptr;
  Status s = real_nccl(&lib);
  CHECK(s.code() == ncclSystemError);
  CHECK(s.message().find("/nonexistent/libnccl.so.2") != std::string::npos);
}

TEST_CASE("forwarding without a library is refused") {
  unsetenv("BRAID_NCCL_LIB");
  const RealNccl* lib = nullptr;
  CHECK(real_nccl(&lib).code() == ncclInvalidUsage);
}

TEST_CASE("BRAID_FORWARD selects collectives by name or all") {
  unsetenv("BRAID_FORWARD");
  CHECK_FALSE(forward_wanted(Collective::AllReduce));
  setenv("BRAID_FORWARD", "allgather,alltoall", 1);
  CHECK(forward_wanted(Collective::AllGather));
  CHECK(forward_wanted(Collective::AlltoAll));
  CHECK_FALSE(forward_wanted(Collective::AllReduce));
  setenv("BRAID_FORWARD", "all", 1);
  CHECK(forward_wanted(Collective::Broadcast));
  unsetenv("BRAID_FORWARD");
}

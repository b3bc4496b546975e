// The program side of libbraid-devmap.so's test: calls the CUDA runtime
// as NCCL's examples do and checks what it sees against the mode it is run
// in (tests/devmap/CMakeLists.txt runs it both ways).
//   devmap_probe mapped        BRAID_DEVICES=8, libbraid-devmap.so preloaded
//   devmap_probe passthrough   preloaded without BRAID_DEVICES
// Exit 0 when every check holds; otherwise 1, naming each that failed.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

extern "C" int fake_cudart_current();

namespace {

int failures = 0;
void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "FAIL: %s\n", what);
    ++failures;
  }
}

bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v && std::string(v) == value;
}

void mapped() {
  // Set for thread ranks sharing a GPU before the program ran (the test
  // leaves both unset; CUDA_MODULE_LOADING set by the caller would stay).
  check(env_is("CUDA_DEVICE_MAX_CONNECTIONS", "32"), "32 hardware queues asked for");
  check(env_is("CUDA_MODULE_LOADING", "EAGER"), "kernels loaded at start");
  int n = 0;
  check(cudaGetDeviceCount(&n) == cudaSuccess && n == 8, "8 devices seen");
  // Each rank thread picks device `rank`, as the examples do.
  for (int rank = 0; rank < 8; ++rank) {
    std::thread([rank] {
      check(cudaSetDevice(rank) == cudaSuccess, "cudaSetDevice(rank)");
      check(fake_cudart_current() == rank % 2, "rank runs on real device rank % 2");
      int d = -1;
      check(cudaGetDevice(&d) == cudaSuccess && d == rank, "cudaGetDevice returns the index set");
      cudaDeviceProp p;
      check(
          cudaGetDeviceProperties(&p, rank) == cudaSuccess && std::string(p.name) == "fake-" + std::to_string(rank % 2),
          "properties of the real device");
      int v = 0;
      check(cudaDeviceGetAttribute(&v, cudaDevAttrWarpSize, rank) == cudaSuccess &&
                v == (rank % 2) * 1000 + int(cudaDevAttrWarpSize),
            "attribute of the real device");
      char bus[32] = {};
      check(cudaDeviceGetPCIBusId(bus, sizeof bus, rank) == cudaSuccess &&
                std::string(bus) == "0000:0" + std::to_string(rank % 2) + ":00.0",
            "bus id of the real device");
      // Indices of one real device reach each other: its own memory.
      const int same = (rank + 2) % 8, other = (rank + 1) % 8;
      int can = 0;
      check(cudaDeviceCanAccessPeer(&can, rank, same) == cudaSuccess && can == 1, "peer on the same real device");
      check(cudaDeviceCanAccessPeer(&can, rank, other) == cudaSuccess && can == 1, "peer on the other real device");
      check(cudaDeviceEnablePeerAccess(same, 0) == cudaSuccess, "enabling access to the same real device");
      check(cudaDeviceEnablePeerAccess(other, 0) == cudaSuccess, "enabling access to the other real device");
    }).join();
  }
  check(cudaSetDevice(8) == cudaErrorInvalidDevice, "index 8 of 8 refused");
  check(cudaSetDevice(-1) == cudaErrorInvalidDevice, "index -1 refused");
  int v = 0;
  check(cudaDeviceGetAttribute(&v, cudaDevAttrWarpSize, 9) == cudaErrorInvalidDevice, "attribute of index 9 refused");
  check(cudaInitDevice(7, 0, 0) == cudaSuccess, "cudaInitDevice(7)");
}

void passthrough() {
  check(!std::getenv("CUDA_DEVICE_MAX_CONNECTIONS") && !std::getenv("CUDA_MODULE_LOADING"),
        "the environment left alone");
  int n = 0;
  check(cudaGetDeviceCount(&n) == cudaSuccess && n == 2, "the real count");
  check(cudaSetDevice(1) == cudaSuccess && fake_cudart_current() == 1, "cudaSetDevice(1) unchanged");
  check(cudaSetDevice(3) == cudaErrorInvalidDevice, "cudaSetDevice(3) refused by the runtime");
  int can = 1;
  check(cudaDeviceCanAccessPeer(&can, 0, 0) == cudaSuccess && can == 0, "the runtime's own peer answer");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "mapped")
    mapped();
  else if (mode == "passthrough")
    passthrough();
  else
    return 2;
  std::printf("%s: %d failed checks\n", mode.c_str(), failures);
  return failures ? 1 : 0;
}

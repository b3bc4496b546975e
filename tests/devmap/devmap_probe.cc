// The program side of libbraid-devmap.so's test: calls the CUDA runtime
// as NCCL's examples do and checks what it sees against the mode it is run
// in (tests/devmap/CMakeLists.txt runs it both ways).
//   devmap_probe mapped        BRAID_DEVICES=8, libbraid-devmap.so preloaded
//   devmap_probe passthrough   preloaded without BRAID_DEVICES
//   devmap_probe one_per_device  BRAID_DEVICES=2 (the fake's count), preloaded
// Exit 0 when every check holds; otherwise 1, naming each that failed.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

extern "C" int fake_cudart_current();
extern "C" const char* fake_cudart_take_log();

namespace {

int failures = 0;
void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "FAIL: %s\n", what);
    ++failures;
  }
}

std::string handle(const void* p) {
  char text[32];
  std::snprintf(text, sizeof text, "%p", p);
  return text;
}

// The calls that reached the runtime since the last look, on this thread.
std::string calls() { return fake_cudart_take_log(); }
void check_calls(const std::string& want, const char* what) {
  const std::string got = calls();
  if (got != want) std::fprintf(stderr, "  calls: %s\n  want:  %s\n", got.c_str(), want.c_str());
  check(got == want, what);
}

// cudaMemset, cudaMemcpy and cudaDeviceSynchronize as the examples call
// them, with devices shared (tools/devmap/legacy_stream.cc): on the
// per-thread stream, after this thread's blocking streams on the current
// device, waited for; never the legacy stream, another thread's streams, or
// this thread's streams on another device.
void legacy_calls_stay_on_this_thread() {
  const std::string per_thread = handle(cudaStreamPerThread);
  cudaStream_t theirs = nullptr;
  std::thread([&] { check(cudaStreamCreate(&theirs) == cudaSuccess, "another thread's stream"); }).join();
  // A blocking stream of this thread on the other real device: that
  // device's legacy stream, not this one's, would wait for it.
  cudaStream_t elsewhere = nullptr;
  check(cudaSetDevice(1) == cudaSuccess && cudaStreamCreate(&elsewhere) == cudaSuccess, "a stream on device 1");
  check(cudaSetDevice(0) == cudaSuccess, "back on device 0");
  cudaStream_t blocking = nullptr, non_blocking = nullptr;
  check(cudaStreamCreate(&blocking) == cudaSuccess, "cudaStreamCreate");
  check(cudaStreamCreateWithFlags(&non_blocking, cudaStreamNonBlocking) == cudaSuccess, "a non-blocking stream");
  calls();
  char buffer[16] = {}, copy[16] = {};
  check(cudaMemset(buffer, 7, sizeof buffer) == cudaSuccess && buffer[0] == 7 && buffer[15] == 7, "cudaMemset done");
  const std::string ordered = "eventRecord " + handle(blocking) + ";streamWaitEvent " + per_thread + ";";
  check_calls(ordered + "memsetAsync " + per_thread + ";streamSynchronize " + per_thread + ";",
              "cudaMemset: after this thread's blocking stream, on the per-thread stream, waited for");
  check(cudaMemcpy(copy, buffer, sizeof copy, cudaMemcpyDeviceToHost) == cudaSuccess && copy[15] == 7,
        "cudaMemcpy done");
  check_calls(ordered + "memcpyAsync " + per_thread + ";streamSynchronize " + per_thread + ";",
              "cudaMemcpy: after this thread's blocking stream, on the per-thread stream, waited for");
  check(cudaDeviceSynchronize() == cudaSuccess, "cudaDeviceSynchronize");
  check_calls("streamSynchronize " + handle(blocking) + ";streamSynchronize " + handle(non_blocking) +
                  ";streamSynchronize " + per_thread + ";",
              "cudaDeviceSynchronize: this thread's streams only");
  check(cudaStreamDestroy(blocking) == cudaSuccess, "cudaStreamDestroy");
  check(cudaMemset(buffer, 1, sizeof buffer) == cudaSuccess, "cudaMemset");
  check_calls("memsetAsync " + per_thread + ";streamSynchronize " + per_thread + ";",
              "a destroyed stream is no longer waited for");
  check(cudaStreamDestroy(non_blocking) == cudaSuccess && cudaStreamDestroy(theirs) == cudaSuccess &&
            cudaStreamDestroy(elsewhere) == cudaSuccess,
        "streams gone");
}

// With a device per index (nothing shared), or without BRAID_DEVICES:
// the runtime's own calls.
void legacy_calls_pass_through() {
  char buffer[4] = {};
  calls();
  check(cudaMemset(buffer, 3, sizeof buffer) == cudaSuccess && buffer[3] == 3, "cudaMemset");
  check_calls("memset;", "cudaMemset passes through");
  check(cudaDeviceSynchronize() == cudaSuccess, "cudaDeviceSynchronize");
  check_calls("deviceSynchronize;", "cudaDeviceSynchronize passes through");
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
  legacy_calls_stay_on_this_thread();
}

// BRAID_DEVICES=2 on two devices: mapped, but no device shared.
void one_per_device() {
  int n = 0;
  check(cudaGetDeviceCount(&n) == cudaSuccess && n == 2, "2 devices seen");
  legacy_calls_pass_through();
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
  legacy_calls_pass_through();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "mapped")
    mapped();
  else if (mode == "passthrough")
    passthrough();
  else if (mode == "one_per_device")
    one_per_device();
  else
    return 2;
  std::printf("%s: %d failed checks\n", mode.c_str(), failures);
  return failures ? 1 : 0;
}

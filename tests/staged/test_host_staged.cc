// Host-staged device communicators (src/exec/host_staged.h), tested up to the
// CUDA boundary: real ranks (threads) and real transports (shared memory, and
// TCP as between hosts), with a DeviceMemory stand-in that behaves like a GPU
// where it matters to the staging logic:
//  - "device" buffers are pages the host cannot touch (PROT_NONE) except
//    inside the stand-in's own copies, so any host access by the executor
//    to a device pointer crashes the test;
//  - copies are asynchronous: they run, in order, only when the stream is
//    waited for, so a missing wait leaves stale host data and wrong results.
#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>

#include "harness.h"
#include "src/runtime/comm.h"
#include "src/exec/host_staged.h"
#include "scoped_env.h"

using namespace mp;

namespace {

// Every fake device allocation of the process: base -> bytes.
std::mutex device_mutex;
std::map<char*, size_t> device_ranges;

size_t page_round(size_t n) {
  size_t page = size_t(sysconf(_SC_PAGESIZE));
  return (std::max<size_t>(n, 1) + page - 1) / page * page;
}

// The allocation holding [p, p + bytes), or nullptr.
char* device_base(const void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(device_mutex);
  auto it = device_ranges.upper_bound(static_cast<char*>(const_cast<void*>(p)));
  if (it == device_ranges.begin()) return nullptr;
  --it;
  const char* c = static_cast<const char*>(p);
  return c >= it->first && c + bytes <= it->first + it->second ? it->first : nullptr;
}

// Opens a device allocation to the host for the length of one copy.
void device_copy(void* dst, const void* src, size_t bytes, const void* device_side) {
  char* base = device_base(device_side, bytes);
  REQUIRE(base);
  size_t len;
  {
    std::lock_guard<std::mutex> lock(device_mutex);
    len = page_round(device_ranges[base]);
  }
  REQUIRE(mprotect(base, len, PROT_READ | PROT_WRITE) == 0);
  std::memcpy(dst, src, bytes);
  REQUIRE(mprotect(base, len, PROT_NONE) == 0);
}

// A device buffer of `count` T, filled and read through device_copy.
template <class T>
struct DeviceBuffer {
  explicit DeviceBuffer(size_t count) : count(count) {
    void* p = mmap(nullptr, page_round(count * sizeof(T)), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED);
    data = static_cast<T*>(p);
    std::lock_guard<std::mutex> lock(device_mutex);
    device_ranges[reinterpret_cast<char*>(data)] = count * sizeof(T);
  }
  ~DeviceBuffer() {
    {
      std::lock_guard<std::mutex> lock(device_mutex);
      device_ranges.erase(reinterpret_cast<char*>(data));
    }
    munmap(data, page_round(count * sizeof(T)));
  }
  void write(const std::vector<T>& v) { device_copy(data, v.data(), v.size() * sizeof(T), data); }
  std::vector<T> read() const {
    std::vector<T> v(count);
    device_copy(v.data(), data, count * sizeof(T), data);
    return v;
  }
  T* data;
  size_t count;
};

void* const kCapturingStream = reinterpret_cast<void*>(0xCA97);

class FakeDeviceMemory final : public braid::DeviceMemory {
 public:
  braid::Status check(const void* p, const char* what) override {
    if (device_base(p, 1)) return braid::Status::ok();
    return braid::Status::error(ncclInvalidArgument, std::string(what) + " is not device memory");
  }
  braid::Status check_not_capturing(void* stream) override {
    if (stream == kCapturingStream) return braid::Status::error(ncclInvalidUsage, "stream is capturing");
    return braid::Status::ok();
  }
  braid::Status to_host(void* host, const void* device, size_t bytes, void* stream) override {
    if (!device_base(device, bytes)) return braid::Status::error(ncclInvalidArgument, "copy from non-device memory");
    pending_[stream].push_back([=] { device_copy(host, device, bytes, device); });
    return braid::Status::ok();
  }
  braid::Status to_device(void* device, const void* host, size_t bytes, void* stream) override {
    if (!device_base(device, bytes)) return braid::Status::error(ncclInvalidArgument, "copy to non-device memory");
    pending_[stream].push_back([=] { device_copy(device, host, bytes, device); });
    return braid::Status::ok();
  }
  braid::Status wait(void* stream) override {
    for (auto& copy : pending_[stream]) copy();
    pending_[stream].clear();
    ++waits;
    return braid::Status::ok();
  }
  void* host_alloc(size_t bytes) override {
    ++live_host_blocks;
    return std::malloc(bytes);
  }
  void host_free(void* p) override {
    --live_host_blocks;
    std::free(p);
  }
  static inline std::atomic<int> live_host_blocks{0};
  int waits = 0;

 private:
  std::map<void*, std::deque<std::function<void()>>> pending_;
};

// Makes a host-backend communicator host-staged, as a CUDA communicator
// spanning hosts is (src/runtime/init.cc picks it there).
FakeDeviceMemory* stage(ncclComm_t comm) {
  auto memory = std::make_unique<FakeDeviceMemory>();
  FakeDeviceMemory* raw = memory.get();
  std::unique_ptr<braid::HostBackend> host(static_cast<braid::HostBackend*>(comm->backend.release()));
  comm->backend = std::make_unique<braid::HostStagedBackend>(std::move(memory), std::move(host));
  return raw;
}

// Small integers: every sum/max/average below is exact in float.
float value(int rank, size_t i) { return float(rank * 100 + int(i % 97)); }

void check_equal(Failures& f, const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  for (size_t i = 0; i < want.size(); ++i)
    if (got[i] != want[i]) {
      f.fail(std::string(what) + ": element " + std::to_string(i) + " is " + std::to_string(got[i]) +
             ", expected " + std::to_string(want[i]));
      return;
    }
}

void run_every_collective(int rank, int n, ncclComm_t comm, Failures& f) {
  stage(comm);
  void* stream = reinterpret_cast<void*>(0x5000 + rank);  // any value: the fake keys its queue on it
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const size_t count = 1000;
  auto mine = [&](size_t elems) {
    std::vector<float> v(elems);
    for (size_t i = 0; i < elems; ++i) v[i] = value(rank, i);
    return v;
  };
  auto sum_over_ranks = [&](size_t i) {
    float t = 0;
    for (int r = 0; r < n; ++r) t += value(r, i);
    return t;
  };
  {  // AllReduce, out of place and in place; Avg.
    DeviceBuffer<float> in(count), out(count);
    in.write(mine(count));
    MP_NCCL(f, ncclAllReduce(in.data, out.data, count, ncclFloat, ncclSum, comm, s));
    std::vector<float> want(count);
    for (size_t i = 0; i < count; ++i) want[i] = sum_over_ranks(i);
    check_equal(f, out.read(), want, "allreduce");
    check_equal(f, in.read(), mine(count), "allreduce input untouched");
    MP_NCCL(f, ncclAllReduce(in.data, in.data, count, ncclFloat, ncclSum, comm, s));
    check_equal(f, in.read(), want, "allreduce in place");
    in.write(mine(count));
    MP_NCCL(f, ncclAllReduce(in.data, out.data, count, ncclFloat, ncclMax, comm, s));
    for (size_t i = 0; i < count; ++i) want[i] = value(n - 1, i);
    check_equal(f, out.read(), want, "allreduce max");
  }
  {  // AllGather in place: the input is this rank's block of the output.
    DeviceBuffer<float> out(count * n);
    std::vector<float> init(count * n, -1.f);
    for (size_t i = 0; i < count; ++i) init[rank * count + i] = value(rank, i);
    out.write(init);
    MP_NCCL(f, ncclAllGather(out.data + rank * count, out.data, count, ncclFloat, comm, s));
    std::vector<float> want(count * n);
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i) want[r * count + i] = value(r, i);
    check_equal(f, out.read(), want, "allgather in place");
  }
  {  // ReduceScatter.
    DeviceBuffer<float> in(count * n), out(count);
    in.write(mine(count * n));
    MP_NCCL(f, ncclReduceScatter(in.data, out.data, count, ncclFloat, ncclSum, comm, s));
    std::vector<float> want(count);
    for (size_t i = 0; i < count; ++i) want[i] = sum_over_ranks(rank * count + i);
    check_equal(f, out.read(), want, "reducescatter");
  }
  {  // Broadcast from the last rank; Reduce to rank 0 (others pass NULL output).
    DeviceBuffer<float> buf(count);
    buf.write(mine(count));
    int root = n - 1;
    MP_NCCL(f, ncclBroadcast(buf.data, buf.data, count, ncclFloat, root, comm, s));
    std::vector<float> want(count);
    for (size_t i = 0; i < count; ++i) want[i] = value(root, i);
    check_equal(f, buf.read(), want, "broadcast");
    DeviceBuffer<float> in(count), out(count);
    in.write(mine(count));
    MP_NCCL(f, ncclReduce(in.data, rank == 0 ? out.data : nullptr, count, ncclFloat, ncclSum, 0, comm, s));
    if (rank == 0) {
      for (size_t i = 0; i < count; ++i) want[i] = sum_over_ranks(i);
      check_equal(f, out.read(), want, "reduce");
    }
  }
  {  // AlltoAll.
    DeviceBuffer<float> in(count * n), out(count * n);
    in.write(mine(count * n));
    MP_NCCL(f, ncclAlltoAll(in.data, out.data, count, ncclFloat, comm, s));
    std::vector<float> want(count * n);
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i) want[r * count + i] = value(r, rank * count + i);
    check_equal(f, out.read(), want, "alltoall");
  }
  {  // PreMulSum with the scalar in device memory, in a group with send/recv
     // around a ring: both ride one staged batch.
    DeviceBuffer<float> scalar(1), in(count), out(count), to_next(count), from_prev(count);
    scalar.write({2.f});
    in.write(mine(count));
    to_next.write(mine(count));
    ncclRedOp_t premul;
    MP_NCCL(f, ncclRedOpCreatePreMulSum(&premul, scalar.data, ncclFloat, ncclScalarDevice, comm));
    MP_NCCL(f, ncclGroupStart());
    MP_NCCL(f, ncclAllReduce(in.data, out.data, count, ncclFloat, premul, comm, s));
    MP_NCCL(f, ncclSend(to_next.data, count, ncclFloat, (rank + 1) % n, comm, s));
    MP_NCCL(f, ncclRecv(from_prev.data, count, ncclFloat, (rank + n - 1) % n, comm, s));
    MP_NCCL(f, ncclGroupEnd());
    MP_NCCL(f, ncclRedOpDestroy(premul, comm));
    std::vector<float> want(count);
    for (size_t i = 0; i < count; ++i) want[i] = 2 * sum_over_ranks(i);
    check_equal(f, out.read(), want, "premulsum (device scalar)");
    for (size_t i = 0; i < count; ++i) want[i] = value((rank + n - 1) % n, i);
    check_equal(f, from_prev.read(), want, "send/recv");
  }
}

}  // namespace

TEST_CASE("host-staged communicators: every collective on device buffers, over shared memory", "[staged]") {
  CHECK(run_ranks_as_threads(3, run_every_collective) == 0);
  CHECK(FakeDeviceMemory::live_host_blocks == 0);  // staging memory freed with the communicator
}

TEST_CASE("host-staged communicators over TCP (the cross-host case)", "[staged]") {
  ScopedEnv env("BRAID_TRANSPORT", "socket");
  CHECK(run_ranks_as_threads(2, run_every_collective) == 0);
}

TEST_CASE("host-staged communicators refuse host pointers and graph capture, then keep working", "[staged]") {
  CHECK(run_ranks_as_threads(2, [](int rank, int n, ncclComm_t comm, Failures& f) {
          stage(comm);
          cudaStream_t s = static_cast<cudaStream_t>(reinterpret_cast<void*>(0x77));
          std::vector<float> host(16, 1.f);
          DeviceBuffer<float> dev(16);
          if (ncclAllReduce(host.data(), dev.data, 16, ncclFloat, ncclSum, comm, s) != ncclInvalidArgument)
            f.fail("a host sendbuff was accepted");
          if (std::string(ncclGetLastError(comm)).find("not device memory") == std::string::npos)
            f.fail(std::string("message: ") + ncclGetLastError(comm));
          if (ncclAllReduce(dev.data, dev.data, 16, ncclFloat, ncclSum, comm,
                            static_cast<cudaStream_t>(kCapturingStream)) != ncclInvalidUsage)
            f.fail("a capturing stream was accepted");
          dev.write(std::vector<float>(16, float(rank + 1)));
          MP_NCCL(f, ncclAllReduce(dev.data, dev.data, 16, ncclFloat, ncclSum, comm, s));
          check_equal(f, dev.read(), std::vector<float>(16, 3.f), "allreduce after refusals");
        }) == 0);
}

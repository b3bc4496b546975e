// Ranks as forked processes on emulated hosts, for the perf tools that time
// braid across hosts on one machine (moe_perf --hosts, rma_perf,
// alltoallv_perf): rank r runs in a child with BRAID_HOSTID naming host
// r * hosts / nranks, and hands its results back through shared memory.
#pragma once

#include <sys/mman.h>

#include <cstdio>
#include <functional>
#include <new>
#include <type_traits>
#include <vector>

#include "nccl.h"

namespace perf {

// Runs body(rank) in nranks forked children on `hosts` emulated hosts
// (BRAID_HOSTID = host_prefix + host).  Returns nonzero if a child failed
// (a nonzero return, a signal).
int run_forked_ranks(int nranks, int hosts, const char* host_prefix, const std::function<int(int rank)>& body);
// Runs body(rank) in `local` forked children, ranks first.., of a job whose
// other ranks run on other machines (nothing emulated).  The same result.
int run_local_ranks(int first, int local, const std::function<int(int rank)>& body);

// `count` objects of a trivially destructible type T in memory the children share with the
// parent, value-initialised; freed with the object.
template <class T>
class SharedArray {
  static_assert(std::is_trivially_destructible_v<T>, "nothing runs a shared object's destructor");

 public:
  explicit SharedArray(size_t count) : count_(count) {
    void* p = mmap(nullptr, bytes(), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return;
    data_ = static_cast<T*>(p);
    for (size_t i = 0; i < count; ++i) new (data_ + i) T();  // one by one: no array cookie
  }
  ~SharedArray() {
    if (data_) munmap(data_, bytes());
  }
  SharedArray(const SharedArray&) = delete;
  SharedArray& operator=(const SharedArray&) = delete;
  T* data() const { return data_; }  // nullptr if the mapping failed
  T& operator[](size_t i) const { return data_[i]; }

 private:
  size_t bytes() const { return sizeof(T) * count_; }
  size_t count_;
  T* data_ = nullptr;
};

// A rank's first failure, in shared memory.
struct RankError {
  int failed = 0;
  char text[512] = {};
  void set(int rank, const char* call, ncclResult_t r) {
    if (failed++) return;
    std::snprintf(text, sizeof(text), "rank %d: %s: %s: %s", rank, call, ncclGetErrorString(r),
                  ncclGetLastError(nullptr));
  }
};

// The median of rounds (0 for none).
double median(std::vector<double> v);

}  // namespace perf

// In a rank body returning int: records the failed call in `error` (a
// RankError) and returns 1.
#define PERF_RANK_TRY(error, rank, call)   \
  do {                                     \
    const ncclResult_t perf_r_ = (call);   \
    if (perf_r_ != ncclSuccess) {          \
      (error).set((rank), #call, perf_r_); \
      return 1;                            \
    }                                      \
  } while (0)

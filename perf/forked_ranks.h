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

// What the forked ranks of a table-printing tool hand back: the first
// failure, and rank 0's row per size (a row of 0 bytes ends them).
template <class Row>
struct SharedRows {
  RankError error;
  Row rows[64];
};

// The start every such tool shares: a unique id, the rows in memory the
// children share, and body(id, rank, rows) run in the ranks (`local` ranks
// from `first` of a job across machines where first >= 0, else all on
// `hosts` emulated hosts); prints the first failure.  *rows stays readable
// while `memory` lives.  Nonzero if a rank failed, or nothing could start.
template <class Row, class Body>
int run_ranks_for_rows(int nranks, int hosts, const char* host_prefix, int first, int local,
                       const SharedArray<SharedRows<Row>>& memory, const Body& body) {
  SharedRows<Row>* rows = memory.data();
  ncclUniqueId id;
  if (!rows || ncclGetUniqueId(&id) != ncclSuccess) return 1;
  auto rank = [&](int r) { return body(id, r, rows); };
  const int rc = first >= 0 ? run_local_ranks(first, local, rank) : run_forked_ranks(nranks, hosts, host_prefix, rank);
  if (rows->error.failed) std::fprintf(stderr, "%s\n", rows->error.text);
  return rc;
}

// Prints each row up to the first of 0 bytes with print(row), then the
// "# #wrong" line; returns the rows' wrong total.
template <class Row, class Print>
int64_t print_rows(const SharedRows<Row>& shared, const Print& print) {
  int64_t wrong = 0;
  for (const Row& row : shared.rows) {
    if (row.bytes == 0) break;
    print(row);
    wrong += row.wrong;
  }
  std::printf("# #wrong: %lld\n", (long long)wrong);
  return wrong;
}

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

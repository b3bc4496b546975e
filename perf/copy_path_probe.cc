// The measurement behind src/plan/copy_path.h: a 2-process AllGather done
// two ways, alternately, with the core-to-core round trip measured before
// each round, so each number can be tied to where the two cores were.
//
//   slots: each process copies its own block into its output, and its block
//          to the peer through a ring of 8 x 64 KiB slots in shared memory
//          (the sender copies in, the receiver copies out, as braid's shm
//          transport does);
//   pull:  each process copies its own block, and reads the peer's block
//          straight into its output with process_vm_readv (one kernel copy).
//
//   copy_path_probe [-s total_bytes] [-r rounds] [-f] [-H]
// -s: the AllGather's output size (default 4 MiB; each process has half);
// -r: rounds (default 200); -f: each process rewrites its input before every
// call (fresh data, as in training), instead of reusing it (as nccl-tests);
// -H: the inputs and outputs are on transparent huge pages (madvise before
// the first touch), as every large allocation is where the kernel's THP
// setting is "always".  The kernel copy pins and maps the peer's buffer a
// page at a time, so the page size decides its speed.  On the project's VM
// (THP "madvise": plain buffers are 4 KiB pages), cores near, -s 64 MiB:
// pull 8.8-9.1 ms on 4 KiB pages, 6.0-6.3 ms on huge pages, slots 6.1-6.6
// ms either way (perf/results/compare_20261125i.txt).
// Each round: the round trip (ns), then the best of 20 calls each way (us):
// prints "round <i> round_trip_ns <ns> slots_us <us> pull_us <us>", and at
// the end the means over rounds with the cores near (< 150 ns) and far.
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

namespace {

constexpr size_t kSlotBytes = 64 << 10, kSlotStride = kSlotBytes + 64, kSlots = 8;
constexpr int kCallsPerRound = 20;

struct SlotHeader {
  std::atomic<uint64_t> seq;  // fragment index + 1
  uint64_t bytes;
};

// Shared by the two processes (an anonymous shared mapping made before fork).
struct Shared {
  alignas(64) std::atomic<long> arrived[2];
  alignas(64) std::atomic<uint64_t> ball;
  alignas(64) std::atomic<uint64_t> released[2];  // fragments process p has taken out of its ring
  void* input[2];
  pid_t pid[2];
};

Shared* shared;
char* rings[2];  // rings[p]: the slots process p receives from
int me;
long epoch = 0;

inline void relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

void barrier() {
  shared->arrived[me].store(++epoch);
  while (shared->arrived[1 - me].load() < epoch) relax();
}

double round_trip_ns() {
  barrier();
  constexpr int kTrips = 20000;
  auto start = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < kTrips; ++i) {
    const uint64_t mine = 2 * i + uint64_t(me);
    while (shared->ball.load(std::memory_order_acquire) != mine) relax();
    shared->ball.store(mine + 1, std::memory_order_release);
  }
  double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() / kTrips;
  barrier();
  if (me == 0) shared->ball.store(0);
  barrier();
  return ns;
}

struct RingState {
  uint64_t sent = 0, received = 0, released_seen = 0;
};

// Sends `bytes` of `in` to the peer through its ring and receives as many
// into `out` from ours, interleaved so neither side waits on a full ring.
void through_slots(const char* in, char* out, size_t bytes, RingState& st) {
  char* send_ring = rings[1 - me];
  char* recv_ring = rings[me];
  size_t sent = 0, received = 0;
  while (sent < bytes || received < bytes) {
    if (sent < bytes) {
      if (st.sent - st.released_seen >= kSlots) st.released_seen = shared->released[1 - me].load(std::memory_order_acquire);
      if (st.sent - st.released_seen < kSlots) {
        char* slot = send_ring + (st.sent % kSlots) * kSlotStride;
        auto* h = reinterpret_cast<SlotHeader*>(slot);
        const size_t n = std::min(kSlotBytes, bytes - sent);
        std::memcpy(slot + 64, in + sent, n);
        h->bytes = n;
        h->seq.store(++st.sent, std::memory_order_release);
        sent += n;
      }
    }
    if (received < bytes) {
      char* slot = recv_ring + (st.received % kSlots) * kSlotStride;
      auto* h = reinterpret_cast<SlotHeader*>(slot);
      if (h->seq.load(std::memory_order_acquire) == st.received + 1) {
        std::memcpy(out + received, slot + 64, h->bytes);
        received += h->bytes;
        shared->released[me].store(++st.received, std::memory_order_release);
      }
    }
  }
}

bool pull(char* to, const void* from, size_t bytes) {
  iovec here{to, bytes}, there{const_cast<void*>(from), bytes};
  return process_vm_readv(shared->pid[1 - me], &here, 1, &there, 1, 0) == ssize_t(bytes);
}

}  // namespace

int main(int argc, char** argv) {
  size_t total = size_t(4) << 20;
  int rounds = 200;
  bool fresh = false, huge = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "-s") && i + 1 < argc) total = std::strtoull(argv[++i], nullptr, 0);
    else if (!std::strcmp(argv[i], "-r") && i + 1 < argc) rounds = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "-f")) fresh = true;
    else if (!std::strcmp(argv[i], "-H")) huge = true;
  }
  const size_t ring_bytes = kSlotStride * kSlots + 4096;
  char* seg = static_cast<char*>(
      mmap(nullptr, 4096 + 2 * ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (seg == MAP_FAILED) return 1;
  shared = new (seg) Shared{};
  rings[0] = seg + 4096;
  rings[1] = seg + 4096 + ring_bytes;
  const pid_t child = fork();
  if (child < 0) return 1;
  me = child == 0 ? 1 : 0;
  if (me == 1) prctl(PR_SET_PDEATHSIG, SIGKILL);
  const size_t block = total / 2;
  const size_t align = huge ? size_t(2) << 20 : 4096;
  const size_t in_bytes = (block + align - 1) / align * align, out_bytes = (total + align - 1) / align * align;
  char* in = static_cast<char*>(std::aligned_alloc(align, in_bytes));
  char* out = static_cast<char*>(std::aligned_alloc(align, out_bytes));
  if (huge && (madvise(in, in_bytes, MADV_HUGEPAGE) != 0 || madvise(out, out_bytes, MADV_HUGEPAGE) != 0) && me == 0)
    std::printf("madvise(MADV_HUGEPAGE): %s; the buffers may be on 4 KiB pages\n", std::strerror(errno));
  std::memset(in, me + 1, block);
  std::memset(out, 0, total);
  shared->input[me] = in;
  shared->pid[me] = getpid();
  barrier();
  char* peer_block = out + (1 - me) * block;
  // Yama's ptrace_scope or a container's seccomp may forbid reading the
  // peer: then only the slots are timed.
  const bool can_pull = pull(peer_block, shared->input[1 - me], std::min<size_t>(block, 64));
  if (!can_pull && me == 0) std::printf("process_vm_readv is not permitted here: %s; timing the slots only\n", std::strerror(errno));
  RingState ring;
  double sum[2][2] = {}, count[2] = {};  // [near/far][slots/pull]
  for (int r = 0; r < rounds; ++r) {
    const double rt = round_trip_ns();
    double best[2] = {1e30, 1e30};
    for (int way = 0; way < (can_pull ? 2 : 1); ++way)
      for (int call = 0; call < kCallsPerRound; ++call) {
        if (fresh) std::memset(in, call + r, block);
        barrier();
        auto start = std::chrono::steady_clock::now();
        std::memcpy(out + me * block, in, block);
        if (way == 0) through_slots(in, peer_block, block, ring);
        else if (!pull(peer_block, shared->input[1 - me], block)) {
          std::perror("process_vm_readv");  // it worked at the start: the peer is gone
          return 1;
        }
        barrier();
        best[way] = std::min(best[way], std::chrono::duration<double, std::micro>(
                                            std::chrono::steady_clock::now() - start).count());
      }
    if (!can_pull) best[1] = 0;
    if (me == 0) std::printf("round %d round_trip_ns %.0f slots_us %.1f pull_us %.1f\n", r, rt, best[0], best[1]);
    const int far = rt >= 150;
    sum[far][0] += best[0];
    sum[far][1] += best[1];
    count[far] += 1;
  }
  if (me == 0) {
    for (int far = 0; far < 2; ++far)
      if (count[far] > 0)
        std::printf("%s: %d rounds, slots %.1f us, pull %.1f us (%zu bytes, %s inputs, %s pages)\n",
                    far ? "far" : "near", int(count[far]), sum[far][0] / count[far], sum[far][1] / count[far], total,
                    fresh ? "fresh" : "reused", huge ? "huge" : "default");
    waitpid(child, nullptr, 0);
  }
  return 0;
}

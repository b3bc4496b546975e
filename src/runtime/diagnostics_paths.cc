// The active check of the init diagnostics (NCCL_RUN_DIAGNOSTICS=1,
// diagnostics.h): does every directed pair of ranks carry data intact?
//
// Every rank sends every other two messages in one group, through the
// communicator's own backend exactly as ncclSend/ncclRecv go (host pipes
// over shared memory, sockets or a net; CUDA kernels over IPC; staging):
// a small one (one fragment, with a tail no word size divides) and a large
// one (many fragments, so slot rings wrap).  Each byte is a function of
// (source, destination, message, offset), and receive buffers start as its
// complement, so a message that never arrived, arrived from the wrong
// rank, or arrived shifted is seen.  Each receiver reports per source the
// first differing byte; rank 0 prints the failed edges and a summary.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "src/base/env.h"
#include "src/exec/device_backend.h"
#include "src/runtime/comm.h"
#include "src/runtime/diagnostics.h"

namespace braid {
namespace {

constexpr size_t kSmallBytes = 4099;
constexpr size_t kLargeMaxBytes = (size_t(1) << 20) + 4099;
constexpr size_t kSendBudgetBytes = size_t(32) << 20;  // per rank, all peers' large messages together
constexpr int kMessages = 2;

// The large message: 1 MiB and a tail, less where many peers would make the
// exchange big, never less than a few fragments.
size_t large_bytes(int nranks) {
  const size_t share = kSendBudgetBytes / size_t(std::max(nranks - 1, 1));
  return std::max(std::min(kLargeMaxBytes, share), 16 * kSmallBytes);
}

uint8_t pattern_byte(int src, int dst, int message, size_t offset) {
  uint64_t x = (uint64_t(uint32_t(src)) << 40) ^ (uint64_t(uint32_t(dst)) << 16) ^ uint64_t(message) ^
               (uint64_t(offset / 8) * 0x9E3779B97F4A7C15ULL);
  x ^= x >> 30, x *= 0xBF58476D1CE4E5B9ULL, x ^= x >> 27, x *= 0x94D049BB133111EBULL, x ^= x >> 31;  // splitmix64
  return uint8_t(x >> (8 * (offset % 8)));
}

void fill(uint8_t* p, size_t bytes, int src, int dst, int message, bool complement) {
  for (size_t i = 0; i < bytes; ++i) p[i] = uint8_t(pattern_byte(src, dst, message, i) ^ (complement ? 0xFF : 0));
}

// What rank `dst` found in what one source sent it (fixed size: gathered).
struct EdgeResult {
  uint8_t tested = 0;
  uint8_t intact = 0;
  uint8_t message = 0;  // the first message that differed
  uint8_t expected = 0, got = 0;
  uint64_t offset = 0;     // its first differing byte
  uint64_t differing = 0;  // bytes that differ in it
  char path[32] = {};      // what carried it
};

// A rank's part of the report: why its exchange failed ("" if it did not),
// then one EdgeResult per source rank.
struct RankHeader {
  char error[256] = {};
};

// The two messages to or from every peer, in one block per direction.
struct Layout {
  size_t small = kSmallBytes, large = 0;
  size_t per_peer() const { return small + large; }
  size_t offset(int peer, int message) const { return size_t(peer) * per_peer() + (message ? small : 0); }
  size_t bytes(int message) const { return message ? large : small; }
};

const char* path_to(const ncclComm* comm, int peer) {
  const std::string backend = comm->backend->name();
  if (backend == "cuda") return "cuda-ipc";
  return comm->transport->peer_path(peer);
}

// BRAID_TEST_DIAG_CORRUPT=SRC:DST: the source whose large message to DST
// has one byte changed, as a faulty link would deliver it.
bool corrupts(int src, int dst) {
  const std::string spec = env_string("BRAID_TEST_DIAG_CORRUPT");
  int s = -1, d = -1;
  return std::sscanf(spec.c_str(), "%d:%d", &s, &d) == 2 && s == src && d == dst;
}

// Sends and receives every message through the backend; `send` and `recv`
// are host copies, moved to and from device memory where the backend's
// buffers live there.
Status exchange(ncclComm* comm, const Layout& layout, const std::vector<uint8_t>& send, std::vector<uint8_t>& recv) {
  const bool device = comm->cuda_device >= 0;
  void* send_buf = const_cast<uint8_t*>(send.data());
  void* recv_buf = recv.data();
  struct Scratch {
    int device;
    void* p = nullptr;
    ~Scratch() { device_scratch_free(device, p); }
  } device_send{comm->cuda_device}, device_recv{comm->cuda_device};
  if (device) {
    BRAID_TRY(device_scratch_alloc(comm->cuda_device, send.size(), &device_send.p));
    BRAID_TRY(device_scratch_alloc(comm->cuda_device, recv.size(), &device_recv.p));
    BRAID_TRY(device_copy_blocking(comm->cuda_device, device_send.p, send.data(), send.size()));
    BRAID_TRY(device_copy_blocking(comm->cuda_device, device_recv.p, recv.data(), recv.size()));
    send_buf = device_send.p, recv_buf = device_recv.p;
  }
  CommWork work;
  work.backend = comm->backend.get();
  for (int peer = 0; peer < comm->nranks; ++peer) {
    if (peer == comm->rank) continue;
    for (int m = 0; m < kMessages; ++m)
      for (bool is_send : {true, false}) {
        P2PCall call;
        call.is_send = is_send;
        call.buffer = static_cast<char*>(is_send ? send_buf : recv_buf) + layout.offset(peer, m);
        call.count = layout.bytes(m);
        call.type = ncclUint8;
        call.peer = peer;
        work.p2ps.push_back(call);
      }
  }
  auto run = [&](cudaStream_t stream) {
    for (P2PCall& c : work.p2ps) c.stream = stream;
    std::vector<CommWork> one{work};
    return comm->backend->group_runner()(one);
  };
  if (!device) return run(nullptr);
  BRAID_TRY(device_run_on_own_stream(comm->cuda_device, run));
  BRAID_TRY(comm->backend->poll_error());
  return device_copy_blocking(comm->cuda_device, recv.data(), device_recv.p, recv.size());
}

EdgeResult inspect(const ncclComm* comm, const Layout& layout, const std::vector<uint8_t>& recv, int src) {
  EdgeResult r;
  r.tested = 1;
  std::snprintf(r.path, sizeof r.path, "%s", path_to(comm, src));
  bool first = true;
  for (int m = 0; m < kMessages; ++m) {
    const uint8_t* got = recv.data() + layout.offset(src, m);
    for (size_t i = 0; i < layout.bytes(m); ++i) {
      const uint8_t want = pattern_byte(src, comm->rank, m, i);
      if (got[i] == want) continue;
      if (first) r.message = uint8_t(m), r.offset = i, r.expected = want, r.got = got[i], first = false;
      r.differing += m == r.message;
    }
  }
  r.intact = first;
  return r;
}

void report_results(const ncclComm* comm, const std::vector<uint8_t>& all, size_t stride, const Layout& layout,
                    DiagnosticsReport& report) {
  const int n = comm->nranks;
  uint64_t tested = 0, intact = 0;
  std::vector<std::pair<std::string, uint64_t>> paths;  // edges per path, in order of first use
  for (int dst = 0; dst < n; ++dst) {
    const uint8_t* row = all.data() + size_t(dst) * stride;
    RankHeader header;
    std::memcpy(&header, row, sizeof header);
    if (header.error[0]) report.info(fmt::format("p2p: exchange failed on rank {}: {}", dst, header.error));
    for (int src = 0; src < n; ++src) {
      EdgeResult e;
      std::memcpy(&e, row + sizeof header + size_t(src) * sizeof e, sizeof e);
      if (!e.tested) continue;
      ++tested;
      intact += e.intact;
      const std::string path(e.path, strnlen(e.path, sizeof e.path));
      auto it = std::find_if(paths.begin(), paths.end(), [&](const auto& p) { return p.first == path; });
      if (it == paths.end()) paths.emplace_back(path, 1);
      else ++it->second;
      if (e.intact) continue;
      report.info(fmt::format("p2p: data mismatch srcRank={} dstRank={} path={} message={} bytes offset={} "
                              "expected=0x{:02x} got=0x{:02x} ({} byte(s) differ); check this link or device",
                              src, dst, path, layout.bytes(e.message), e.offset, e.expected, e.got, e.differing));
    }
  }
  std::string by_path;
  for (const auto& [path, edges] : paths) by_path += fmt::format("{}{} {}", by_path.empty() ? "" : ", ", path, edges);
  if (tested == 0) return;  // one rank, or none could check (said above)
  if (intact == tested) {
    report.ok(fmt::format("p2p: all {} directed edges verified ({})", tested, by_path));
  } else {
    report.info(fmt::format("p2p: {}/{} directed edges verified ({})", intact, tested, by_path));
  }
}

}  // namespace

Status check_paths(ncclComm* comm, DiagnosticsReport& report) {
  const int n = comm->nranks, me = comm->rank;
  Layout layout;
  layout.large = large_bytes(n);
  std::vector<uint8_t> send(size_t(n) * layout.per_peer()), recv(send.size());
  for (int peer = 0; peer < n; ++peer) {
    if (peer == me) continue;
    for (int m = 0; m < kMessages; ++m) {
      fill(send.data() + layout.offset(peer, m), layout.bytes(m), me, peer, m, false);
      fill(recv.data() + layout.offset(peer, m), layout.bytes(m), peer, me, m, true);
    }
    if (corrupts(me, peer)) send[layout.offset(peer, 1) + layout.large / 2] ^= 0x5A;
  }
  if (env_int("BRAID_TEST_DIAG_EXIT_RANK") == me) _exit(9);
  const Status exchanged = exchange(comm, layout, send, recv);

  const size_t stride = sizeof(RankHeader) + size_t(n) * sizeof(EdgeResult);
  std::vector<uint8_t> all(size_t(n) * stride);
  uint8_t* mine = all.data() + size_t(me) * stride;
  RankHeader header;
  if (!exchanged.is_ok()) std::snprintf(header.error, sizeof header.error, "%s", exchanged.to_string().c_str());
  std::memcpy(mine, &header, sizeof header);
  for (int src = 0; src < n && exchanged.is_ok(); ++src) {
    if (src == me) continue;
    const EdgeResult e = inspect(comm, layout, recv, src);
    std::memcpy(mine + sizeof header + size_t(src) * sizeof e, &e, sizeof e);
  }
  // Reported where every rank's findings arrived; this rank's own failure
  // (a peer that died, say) says more than the gather's that follows it.
  Status gathered = comm->bootstrap->allgather(all.data(), stride);
  if (gathered.is_ok()) report_results(comm, all, stride, layout, report);
  if (!exchanged.is_ok()) return exchanged;
  BRAID_TRY(std::move(gathered));
  for (int r = 0; r < n; ++r)
    if (all[size_t(r) * stride] != 0)
      return BRAID_ERROR(ncclRemoteError, "rank {}'s exchange failed (its error says why)", r);
  return Status::ok();
}

}  // namespace braid

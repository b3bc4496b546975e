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
// rank, or arrived shifted is seen.  The ranks first agree that every one
// could prepare its buffers (a rank that could not makes the check
// informational: nothing is sent); the exchange then starts on every rank
// at once.  Each receiver sums up what it found in a fixed-size report
// (its first few differing edges, counts per path); rank 0 prints them.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
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
constexpr int kShownEdges = 8;  // differing edges a receiver reports one by one
constexpr int kPaths = 4;       // kinds of path a receiver counts edges of

// The large message: 1 MiB and a tail, less where many peers would make the
// exchange big, never less than two small ones.
size_t large_bytes(int nranks) {
  const size_t share = kSendBudgetBytes / size_t(std::max(nranks - 1, 1));
  return std::max(std::min(kLargeMaxBytes, share), 2 * kSmallBytes);
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

// One edge whose data differed: its first differing byte.
struct EdgeFinding {
  int32_t src = 0;
  uint8_t message = 0, expected = 0, got = 0;
  uint64_t offset = 0;
  uint64_t differing = 0;  // bytes of that message that differ
};

struct PathCount {
  char name[24] = {};
  uint32_t edges = 0;
};

// What a rank found in what it received (fixed size: every rank gathers
// every rank's, whatever the communicator's size).
struct RankReport {
  uint32_t tested = 0, intact = 0, shown = 0;
  PathCount paths[kPaths];
  EdgeFinding differing[kShownEdges];
};

// Why a rank could not prepare ("" if it could).
struct Readiness {
  char error[256] = {};
};

// The two messages to or from every peer, in one block per direction.
struct Layout {
  size_t small = kSmallBytes, large = 0;
  size_t per_peer() const { return small + large; }
  size_t offset(int peer, int message) const { return size_t(peer) * per_peer() + (message ? small : 0); }
  size_t bytes(int message) const { return message ? large : small; }
};

// What carried `peer`'s data: the transport's kind, not its long name.
std::string path_to(const ncclComm* comm, int peer) {
  if (std::string(comm->backend->name()) == "cuda") return "cuda-ipc";
  const std::string name = comm->transport->peer_path(peer);
  return name.substr(0, std::min(name.find(' '), sizeof(PathCount::name) - 1));
}

// BRAID_TEST_DIAG_CORRUPT=SRC:DST: the source whose large message to DST
// has one byte changed, as a faulty link would deliver it.
bool corrupts(int src, int dst) {
  const std::string spec = env_string("BRAID_TEST_DIAG_CORRUPT");
  int s = -1, d = -1;
  return std::sscanf(spec.c_str(), "%d:%d", &s, &d) == 2 && s == src && d == dst;
}

// The patterns where the backend's buffers live: the host vectors
// themselves, or copies in device memory on a stream of braid's own.
struct Buffers {
  std::vector<uint8_t> send, recv;
  std::unique_ptr<DeviceScratch> device;
  void* send_at = nullptr;
  void* recv_at = nullptr;

  Status prepare(const ncclComm* comm) {
    send_at = send.data(), recv_at = recv.data();
    if (comm->cuda_device < 0) return Status::ok();
    BRAID_TRY(DeviceScratch::create(comm->cuda_device, &device));
    BRAID_TRY(device->alloc(send.size(), &send_at));
    BRAID_TRY(device->alloc(recv.size(), &recv_at));
    BRAID_TRY(device->copy(send_at, send.data(), send.size()));
    BRAID_TRY(device->copy(recv_at, recv.data(), recv.size()));
    return device->synchronize();
  }
};

// Every message through the backend's send/receive path, then what arrived
// back in `b.recv`.
Status exchange(ncclComm* comm, const Layout& layout, Buffers& b) {
  std::vector<CommWork> work(1);
  work[0].backend = comm->backend.get();
  for (int peer = 0; peer < comm->nranks; ++peer) {
    if (peer == comm->rank) continue;
    for (int m = 0; m < kMessages; ++m)
      for (bool is_send : {true, false}) {
        P2PCall call;
        call.is_send = is_send;
        call.buffer = static_cast<char*>(is_send ? b.send_at : b.recv_at) + layout.offset(peer, m);
        call.count = layout.bytes(m);
        call.type = ncclUint8;
        call.peer = peer;
        call.stream = b.device ? b.device->stream() : nullptr;
        work[0].p2ps.push_back(call);
      }
  }
  BRAID_TRY(comm->backend->group_runner()(work));
  if (!b.device) return Status::ok();
  BRAID_TRY(b.device->synchronize());
  BRAID_TRY(comm->backend->poll_error());
  BRAID_TRY(b.device->copy(b.recv.data(), b.recv_at, b.recv.size()));
  return b.device->synchronize();
}

RankReport inspect(const ncclComm* comm, const Layout& layout, const std::vector<uint8_t>& recv) {
  RankReport r;
  for (int src = 0; src < comm->nranks; ++src) {
    if (src == comm->rank) continue;
    ++r.tested;
    const std::string path = path_to(comm, src);
    for (PathCount& p : r.paths)
      if (p.edges == 0 || path == p.name) {
        std::snprintf(p.name, sizeof p.name, "%s", path.c_str());
        ++p.edges;
        break;
      }
    EdgeFinding e;
    e.src = src;
    bool intact = true;
    for (int m = 0; m < kMessages; ++m) {
      const uint8_t* got = recv.data() + layout.offset(src, m);
      for (size_t i = 0; i < layout.bytes(m); ++i) {
        const uint8_t want = pattern_byte(src, comm->rank, m, i);
        if (got[i] == want) continue;
        if (intact) e.message = uint8_t(m), e.offset = i, e.expected = want, e.got = got[i], intact = false;
        e.differing += m == e.message;
      }
    }
    r.intact += intact;
    if (!intact && r.shown < kShownEdges) r.differing[r.shown++] = e;
  }
  return r;
}

void report_results(const ncclComm* comm, const std::vector<RankReport>& reports, const Layout& layout,
                    DiagnosticsReport& report) {
  const uint64_t total = uint64_t(comm->nranks) * uint64_t(comm->nranks - 1);
  if (total == 0) return;  // one rank: no edge
  uint64_t intact = 0;
  std::vector<std::pair<std::string, uint64_t>> paths;  // edges per path, in order of first use
  for (int dst = 0; dst < comm->nranks; ++dst) {
    const RankReport& r = reports[size_t(dst)];
    intact += r.intact;
    for (const PathCount& p : r.paths) {
      if (p.edges == 0) continue;
      const std::string name(p.name, strnlen(p.name, sizeof p.name));
      auto it = std::find_if(paths.begin(), paths.end(), [&](const auto& q) { return q.first == name; });
      if (it == paths.end()) paths.emplace_back(name, p.edges);
      else it->second += p.edges;
    }
    for (uint32_t i = 0; i < r.shown; ++i) {
      const EdgeFinding& e = r.differing[i];
      report.info(fmt::format("p2p: data mismatch srcRank={} dstRank={} path={} message={} bytes offset={} "
                              "expected=0x{:02x} got=0x{:02x} ({} byte(s) differ); check this link or device",
                              e.src, dst, path_to(comm, e.src), layout.bytes(e.message), e.offset, e.expected, e.got,
                              e.differing));
    }
    if (r.tested - r.intact > r.shown)
      report.info(fmt::format("p2p: {} more edges into rank {} differ", r.tested - r.intact - r.shown, dst));
  }
  std::string by_path;
  for (const auto& [path, edges] : paths) by_path += fmt::format("{}{} {}", by_path.empty() ? "" : ", ", path, edges);
  if (intact == total) report.ok(fmt::format("p2p: all {} directed edges verified ({})", total, by_path));
  else report.info(fmt::format("p2p: {}/{} directed edges verified ({})", intact, total, by_path));
}

}  // namespace

Status check_paths(ncclComm* comm, DiagnosticsReport& report) {
  const int n = comm->nranks, me = comm->rank;
  Layout layout;
  layout.large = large_bytes(n);
  Buffers b;
  b.send.resize(size_t(n) * layout.per_peer());
  b.recv.resize(b.send.size());
  for (int peer = 0; peer < n; ++peer) {
    if (peer == me) continue;
    for (int m = 0; m < kMessages; ++m) {
      fill(b.send.data() + layout.offset(peer, m), layout.bytes(m), me, peer, m, false);
      fill(b.recv.data() + layout.offset(peer, m), layout.bytes(m), peer, me, m, true);
    }
    if (corrupts(me, peer)) b.send[layout.offset(peer, 1) + layout.large / 2] ^= 0x5A;
  }
  // Every rank ready before any sends: a rank that could not prepare (no
  // device memory) makes the check a finding, not a failure; and no kernel
  // starts while a peer is still setting up its device.
  std::vector<Readiness> ready(static_cast<size_t>(n));
  if (Status s = b.prepare(comm); !s.is_ok())
    std::snprintf(ready[size_t(me)].error, sizeof ready[0].error, "%s", s.to_string().c_str());
  BRAID_TRY(comm->bootstrap->allgather(ready.data(), sizeof(Readiness)));
  bool all_ready = true;
  for (int r = 0; r < n; ++r)
    if (ready[size_t(r)].error[0]) {
      all_ready = false;
      report.info(fmt::format("p2p: rank {} could not prepare the check, nothing was sent: {}", r,
                              ready[size_t(r)].error));
    }
  if (!all_ready) return Status::ok();

  if (env_int("BRAID_TEST_DIAG_EXIT_RANK") == me) _exit(9);
  // A failed exchange fails this init at once (its bootstrap is broken,
  // which ends the peers' gather): this communicator could not carry a call.
  BRAID_TRY(exchange(comm, layout, b));
  std::vector<RankReport> reports(static_cast<size_t>(n));
  reports[size_t(me)] = inspect(comm, layout, b.recv);
  BRAID_TRY(comm->bootstrap->allgather(reports.data(), sizeof(RankReport)));
  report_results(comm, reports, layout, report);
  return Status::ok();
}

}  // namespace braid

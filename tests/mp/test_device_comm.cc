// NCCL's device API on the host backend, as a client built against
// NVIDIA's installed nccl_device headers sees it: symmetric windows and
// device communicators (src/runtime/lsa_space.h, device_comm.h).
//
// The CPU stands in for the kernel: it reads the structs braid hands out
// (ncclWindow_t, ncclDevComm) with NVIDIA's types and the headers' own
// host-callable inline code (add4G, the team functions,
// ncclGetResourceBufferOffset), and loads and stores where that arithmetic
// points.  A rank writes into its LSA peers' memory through the flat range
// and each rank then finds the writes in its own buffer, so the range
// really maps the peers' memory, at the offsets every rank agrees on.
// Ranks run as threads and as processes; with two emulated hosts the LSA
// teams are halves of the world.
#include <nccl_device/core.h>
#include <nccl_device/impl/comm__types.h>
#include <nccl_device/impl/core__funcs.h>
#include <nccl_device/ll_a2a.h>
#include <nccl_device/lsa_barrier.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "harness.h"

using namespace mp;

// A 2.30 host query (NVIDIA's 2.28.9 headers here do not declare it).
extern "C" ncclResult_t ncclGetPeerDevicePointer(ncclWindow_t window, size_t offset, int peer, void** outPtr);

namespace {

// NCCL's ncclGetLsaPointer, which is device-only: the same arithmetic,
// with the headers' host-callable add4G.
char* lsa_pointer(const ncclWindow_vidmem& w, size_t offset, int peer) {
  return nccl::utility::add4G(w.lsaFlatBase, peer * int(w.stride4G)) + offset;
}

// ncclFindWindow's scan of the window table (device-only in the headers).
ncclWindow_t find_window(const ncclDevCommWindowTable* table, const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  for (; table; table = table->next)
    for (const auto& e : table->entries)
      if (e.base && e.size && e.window && e.base <= a && a < e.base + e.size) return e.window;
  return nullptr;
}

constexpr size_t kBytes = 3 * 4096;

void check_symmetric_windows(int rank, int n, ncclComm_t comm, Failures& f) {
  const ncclTeam lsa = ncclTeamLsa(comm);
  // A buffer at the start of its allocation, and one 4 KiB into another.
  char *a = nullptr, *b = nullptr;
  MP_NCCL(f, ncclMemAlloc(reinterpret_cast<void**>(&a), kBytes));
  MP_NCCL(f, ncclMemAlloc(reinterpret_cast<void**>(&b), kBytes + 4096));
  if (!a || !b) return;
  std::memset(a, 0, kBytes);
  a[kBytes - 1] = char(100 + rank);  // read by the peers once the window exists (registering is collective)
  ncclWindow_t wa = nullptr, wb = nullptr;
  MP_NCCL(f, ncclCommWindowRegister(comm, a, kBytes, &wa, NCCL_WIN_COLL_SYMMETRIC));
  MP_NCCL(f, ncclCommWindowRegister(comm, b + 4096, kBytes, &wb, NCCL_WIN_COLL_SYMMETRIC));
  if (!wa || !wb) return;
  // On the host backend the struct is host memory: read it as the device would.
  const ncclWindow_vidmem& va = *wa;
  if (va.lsaRank != lsa.rank || va.worldRank != rank) f.fail("window: lsaRank or worldRank");
  if (!va.lsaFlatBase || va.stride4G == 0 || va.ginOffset4K != 0) f.fail("window a: not symmetric");
  if (wb->ginOffset4K != 1) f.fail("window b: ginOffset4K " + std::to_string(wb->ginOffset4K));
  if (lsa_pointer(va, 0, lsa.rank) == a) f.fail("own copy is the user buffer, not the flat range's");
  const int first = rank - lsa.rank;
  for (int p = 0; p < lsa.nRanks; ++p) {
    if (lsa_pointer(va, kBytes - 1, p)[0] != char(100 + first + p)) f.fail("window a: LSA rank " + std::to_string(p));
    // The host query answers with the same flat-range address.
    void* queried = nullptr;
    MP_NCCL(f, ncclGetPeerDevicePointer(wa, 64, first + p, &queried));
    if (queried != lsa_pointer(va, 64, p)) f.fail("ncclGetPeerDevicePointer is not the flat range's address");
  }
  // Each rank stores a mark naming itself and the target in every LSA
  // peer's window, at its own index.
  auto mark = [](int from, int to) { return char(1 + from * 8 + to); };
  for (int p = 0; p < lsa.nRanks; ++p) lsa_pointer(va, 0, p)[rank] = mark(rank, p);
  for (int p = 0; p < lsa.nRanks; ++p) lsa_pointer(*wb, 100, p)[rank] = mark(rank, p);
  barrier_all(comm, f);
  for (int i = 0; i < n; ++i) {  // only the LSA team's marks arrived
    const char want = i >= first && i < first + lsa.nRanks ? mark(i, lsa.rank) : 0;
    if (a[i] != want) f.fail("window a: rank " + std::to_string(i) + "'s store");
    if (b[4096 + 100 + i] != want) f.fail("window b: rank " + std::to_string(i) + "'s store");
  }
  // A heap buffer cannot be mapped into the range: a window without a flat base.
  char* heap = static_cast<char*>(std::aligned_alloc(4096, kBytes));
  ncclWindow_t wh = nullptr;
  MP_NCCL(f, ncclCommWindowRegister(comm, heap, kBytes, &wh, 0));
  if (wh && (wh->lsaFlatBase || wh->worldRank != rank)) f.fail("heap window has a flat base");

  // The device communicator's window table finds the symmetric windows by
  // user pointer, and not the heap one.
  ncclDevCommRequirements reqs = {};
  ncclDevComm dev = {};
  MP_NCCL(f, ncclDevCommCreate(comm, &reqs, &dev));
  if (find_window(dev.windowTable, a + 5) != wa || find_window(dev.windowTable, b + 4096 + kBytes - 1) != wb ||
      find_window(dev.windowTable, b) != nullptr || find_window(dev.windowTable, heap) != nullptr)
    f.fail("window table lookups");
  // With one host, nothing needs GIN; several hosts do (NCCL's rule).
  if ((dev.ginContextCount != 0) != (lsa.nRanks < n))
    f.fail("GIN context for " + std::to_string(n / lsa.nRanks) + " hosts");
  MP_NCCL(f, ncclCommWindowDeregister(comm, wa));
  if (find_window(dev.windowTable, a) != nullptr) f.fail("deregistered window still in the table");
  // A new window after a deregistration: every rank still agrees on its offset.
  ncclWindow_t wc = nullptr;
  MP_NCCL(f, ncclCommWindowRegister(comm, a, kBytes, &wc, NCCL_WIN_COLL_SYMMETRIC));
  barrier_all(comm, f);
  if (wc) {
    for (int p = 0; p < lsa.nRanks; ++p) lsa_pointer(*wc, 8, p)[rank] = char('0' + rank);
    barrier_all(comm, f);
    for (int i = first; i < first + lsa.nRanks; ++i)
      if (a[8 + i] != char('0' + i)) f.fail("window after a deregistration: rank " + std::to_string(i));
  }
  MP_NCCL(f, ncclDevCommDestroy(comm, &dev));
  for (ncclWindow_t w : {wb, wh, wc})
    if (w) MP_NCCL(f, ncclCommWindowDeregister(comm, w));
  MP_NCCL(f, ncclMemFree(a));
  MP_NCCL(f, ncclMemFree(b));
  std::free(heap);
}

void check_device_comm(int rank, int n, ncclComm_t comm, Failures& f) {
  // What NCCL's examples ask for: LSA barriers, an LL AlltoAll, and a
  // resource of the user's own.
  ncclLLA2AHandle a2a{};
  ncclDevResourceRequirements a2a_req{}, mine{};
  MP_NCCL(f, ncclLLA2ACreateRequirement(2, 8, &a2a, &a2a_req));
  ncclDevResourceHandle mine_handle = 0;
  mine.bufferSize = 1000;
  mine.bufferAlign = 256;
  mine.outBufferHandle = &mine_handle;
  a2a_req.next = &mine;
  ncclDevCommRequirements reqs = {};
  reqs.lsaBarrierCount = 4;
  reqs.resourceRequirementsList = &a2a_req;
  ncclDevComm dev = {};
  MP_NCCL(f, ncclDevCommCreate(comm, &reqs, &dev));
  const ncclTeam lsa = ncclTeamLsa(comm);
  // The headers' own team functions on braid's devComm.
  const ncclTeam dev_lsa = ncclTeamLsa(dev), rail = ncclTeamRail(dev);
  if (dev.rank != rank || dev.nRanks != n || dev_lsa.nRanks != lsa.nRanks || dev_lsa.rank != lsa.rank)
    f.fail("devComm ranks or LSA team");
  if (rail.nRanks != n / lsa.nRanks || rail.stride != lsa.nRanks || ncclTeamRankToWorld(dev, rail, 0) != lsa.rank)
    f.fail("devComm rail team");
  if (dev.ginContextCount != 0 || dev.lsaBarrier.nBarriers != 4 || !dev.windowTable || !dev.resourceWindow)
    f.fail("devComm: GIN contexts, LSA barriers, window table or resource window");
  const ncclWindow_vidmem& res = dev.resourceWindow_inlined;
  if (std::memcmp(&res, dev.resourceWindow, sizeof res) != 0) f.fail("resourceWindow_inlined is not *resourceWindow");
  if (ncclGetResourceBufferOffset(mine_handle) % 256 != 0 || a2a.bufHandle == mine_handle) f.fail("resource handles");
  // Zero-filled in every LSA peer's copy: the barrier, the LL lines, the user's bytes.
  const size_t user = ncclGetResourceBufferOffset(mine_handle);
  for (int p = 0; p < lsa.nRanks; ++p) {
    const char* r = lsa_pointer(res, 0, p);
    for (size_t i = 0; i < user + 1000; ++i)
      if (r[i] != 0) {
        f.fail("resource buffer of LSA rank " + std::to_string(p) + " not zero at byte " + std::to_string(i));
        break;
      }
  }
  barrier_all(comm, f);
  for (int p = 0; p < lsa.nRanks; ++p) lsa_pointer(res, user, p)[lsa.rank] = char(1 + rank);
  barrier_all(comm, f);
  const char* own = lsa_pointer(res, user, lsa.rank);
  for (int i = 0; i < lsa.nRanks; ++i)
    if (own[i] != char(1 + rank - lsa.rank + i)) f.fail("user resource: LSA rank " + std::to_string(i) + "'s store");
  MP_NCCL(f, ncclDevCommDestroy(comm, &dev));
  if (ncclDevCommDestroy(comm, &dev) != ncclInvalidArgument) f.fail("destroying a devComm twice");
}

// What braid cannot serve is refused on every rank, and the communicator
// still works.  (GIN on the CUDA backend is refused too; that needs a GPU.)
void check_refusals(int rank, int n, ncclComm_t comm, Failures& f) {
  auto refused = [&](const char* what, const ncclDevCommRequirements& reqs, const char* says) {
    ncclDevComm dev = {};
    if (ncclDevCommCreate(comm, &reqs, &dev) != ncclInvalidUsage) f.fail(std::string(what) + ": not refused");
    if (std::string(ncclGetLastError(comm)).find(says) == std::string::npos)
      f.fail(std::string(what) + ": message " + ncclGetLastError(comm));
  };
  // Served, not refused: the world barrier runs the rail GIN barrier, so
  // it comes with a GIN context (tests/mp/test_device_gin.cc).
  ncclDevCommRequirements world = {};
  world.barrierCount = 2;
  ncclDevComm with_gin = {};
  MP_NCCL(f, ncclDevCommCreate(comm, &world, &with_gin));
  if (with_gin.ginContextCount != 1 || with_gin.lsaBarrier.nBarriers != 2 || with_gin.ginSignalCount != 2)
    f.fail("barrierCount: GIN context, LSA barriers or the rail barrier's signals");
  MP_NCCL(f, ncclDevCommDestroy(comm, &with_gin));
  ncclDevCommRequirements multimem = {};
  multimem.lsaMultimem = true;
  refused("multimem", multimem, "multimem");
  // A 2.29+ header's requirements: size, then NCCL_API_MAGIC.
  struct {
    size_t size;
    uint32_t magic, version;
    char rest[96];
  } versioned = {112, 0xcafebeef, 23007, {}};
  refused("2.30 requirements", *reinterpret_cast<const ncclDevCommRequirements*>(&versioned), "2.28.9");
  ncclDevComm dev = {};
  if (ncclDevCommCreate(comm, nullptr, &dev) != ncclInvalidArgument) f.fail("NULL requirements");
  ncclDevCommRequirements none = {};
  if (ncclDevCommCreate(comm, &none, nullptr) != ncclInvalidArgument) f.fail("NULL devComm");
  if (ncclDevCommDestroy(comm, nullptr) != ncclInvalidArgument) f.fail("destroying NULL");
  dev.rank = rank;
  dev.nRanks = n + 1;
  if (ncclDevCommDestroy(comm, &dev) != ncclInvalidArgument) f.fail("destroying another communicator's devComm");
  float in = float(rank + 1), out = 0;
  MP_NCCL(f, ncclAllReduce(&in, &out, 1, ncclFloat, ncclSum, comm, nullptr));
  if (out != float(n * (n + 1) / 2)) f.fail("allreduce after the refusals");
}

void two_hosts(int rank) { setenv("BRAID_HOSTID", ("devcomm-host-" + std::to_string(rank / 2)).c_str(), 1); }

}  // namespace

TEST_CASE("device API: symmetric windows put LSA peers' memory where NCCL's arithmetic finds it", "[device][windows]") {
  CHECK(run_ranks_as_threads(4, check_symmetric_windows) == 0);
  CHECK(run_ranks_as_processes(3, check_symmetric_windows) == 0);
  CHECK(run_ranks_as_processes(4, check_symmetric_windows, 60, two_hosts) == 0);  // LSA teams of 2
  if (can_make_pid_namespaces())  // every rank pid 2 (containers): none is a thread of another's process
    CHECK(run_ranks_as_processes(3, check_symmetric_windows, 60, {}, {}, true) == 0);
}

TEST_CASE("device API: ncclDevCommCreate lays out a zeroed resource buffer every LSA peer reaches",
          "[device][devcomm]") {
  CHECK(run_ranks_as_threads(3, check_device_comm) == 0);
  CHECK(run_ranks_as_processes(4, check_device_comm) == 0);
  if (can_make_pid_namespaces()) CHECK(run_ranks_as_processes(3, check_device_comm, 60, {}, {}, true) == 0);
}

TEST_CASE("device API: device communicators braid cannot serve are refused on every rank", "[device][devcomm]") {
  CHECK(run_ranks_as_threads(2, check_refusals) == 0);
}

// One thread sets up several communicators, as a single-process multi-GPU
// program does: inside a group, registration and devComm creation are
// deferred to ncclGroupEnd (NCCL's semantics), where the communicators'
// collective calls meet.  The requirements live in a scope that ends
// before ncclGroupEnd: they are copied at the call, as NCCL copies them.
TEST_CASE("device API: one thread registers windows and creates devComms of several communicators in a group",
          "[device][group]") {
  constexpr int n = 3;
  std::vector<ncclComm_t> comms(n);
  REQUIRE(ncclCommInitAll(comms.data(), n, nullptr) == ncclSuccess);
  std::vector<char*> bufs(n);
  std::vector<ncclWindow_t> wins(n);
  std::vector<ncclDevComm> devs(n);
  std::vector<ncclDevResourceHandle> handles(n, 12345);
  for (int r = 0; r < n; ++r) {
    REQUIRE(ncclMemAlloc(reinterpret_cast<void**>(&bufs[r]), kBytes) == ncclSuccess);
    std::memset(bufs[r], 0, kBytes);
    bufs[r][0] = char('a' + r);
  }
  REQUIRE(ncclGroupStart() == ncclSuccess);
  for (int r = 0; r < n; ++r) {
    ncclDevResourceRequirements mine = {};
    mine.bufferSize = 300;
    mine.outBufferHandle = &handles[r];
    ncclDevCommRequirements reqs = {};
    reqs.lsaBarrierCount = 2;
    reqs.resourceRequirementsList = &mine;
    CHECK(ncclCommWindowRegister(comms[r], bufs[r], kBytes, &wins[r], NCCL_WIN_COLL_SYMMETRIC) == ncclSuccess);
    CHECK(wins[r] == nullptr);  // set at ncclGroupEnd
    CHECK(ncclDevCommCreate(comms[r], &reqs, &devs[r]) == ncclSuccess);
    std::memset(&mine, 0x5a, sizeof mine);  // gone, as far as the group is concerned
  }
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  for (int r = 0; r < n; ++r) {
    REQUIRE(wins[r] != nullptr);
    for (int p = 0; p < n; ++p) CHECK(lsa_pointer(*wins[r], 0, p)[0] == char('a' + p));
    CHECK(devs[r].rank == r);
    CHECK(devs[r].lsaBarrier.nBarriers == 2);
    CHECK(handles[r] != 12345u);  // the copied requirement wrote the caller's handle
    CHECK(handles[r] == handles[0]);
  }
  for (int r = 0; r < n; ++r) {
    CHECK(ncclDevCommDestroy(comms[r], &devs[r]) == ncclSuccess);
    CHECK(ncclCommWindowDeregister(comms[r], wins[r]) == ncclSuccess);
    CHECK(ncclMemFree(bufs[r]) == ncclSuccess);
  }
  for (ncclComm_t c : comms) CHECK(ncclCommDestroy(c) == ncclSuccess);
}

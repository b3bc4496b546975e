// braid's mirrors of NCCL 2.28.9's device structs (src/devapi/abi_v22809.h)
// against NVIDIA's installed headers (nccl_device/**, found by CMake; this
// file is only built where they are), compiled host-only by the C++
// compiler.  Every member's offset and size, and every struct's size and
// alignment, must be NVIDIA's: a client kernel reads these bytes with
// inline code braid never sees.  The headers include <nccl.h>, and get
// braid's, as a client built against braid does.
#include <catch2/catch.hpp>

#include <cstring>

#include <nccl_device/core.h>
#include <nccl_device/gin/proxy/gin_proxy_device_host_common.h>
#include <nccl_device/impl/comm__types.h>
#include <nccl_device/impl/core__funcs.h>

#include "src/devapi/abi_v22809.h"

namespace v = braid::devapi::v22809;

#define SAME_MEMBER(Real, Mine, member)                                                  \
  static_assert(offsetof(Real, member) == offsetof(Mine, member), #Real "::" #member);    \
  static_assert(sizeof(Real::member) == sizeof(Mine::member), #Real "::" #member " size")
#define SAME_STRUCT(Real, Mine)                                              \
  static_assert(sizeof(Real) == sizeof(Mine), #Real " size");                \
  static_assert(alignof(Real) == alignof(Mine), #Real " alignment")

SAME_STRUCT(ncclTeam, v::Team);
SAME_MEMBER(ncclTeam, v::Team, nRanks);
SAME_MEMBER(ncclTeam, v::Team, rank);
SAME_MEMBER(ncclTeam, v::Team, stride);

SAME_STRUCT(ncclWindow_vidmem, v::WindowVidmem);
SAME_MEMBER(ncclWindow_vidmem, v::WindowVidmem, winHost);
SAME_MEMBER(ncclWindow_vidmem, v::WindowVidmem, lsaFlatBase);
SAME_MEMBER(ncclWindow_vidmem, v::WindowVidmem, lsaRank);
SAME_MEMBER(ncclWindow_vidmem, v::WindowVidmem, worldRank);
SAME_MEMBER(ncclWindow_vidmem, v::WindowVidmem, stride4G);
SAME_MEMBER(ncclWindow_vidmem, v::WindowVidmem, mcOffset4K);
SAME_MEMBER(ncclWindow_vidmem, v::WindowVidmem, ginOffset4K);
SAME_MEMBER(ncclWindow_vidmem, v::WindowVidmem, ginWins);
static_assert(NCCL_GIN_MAX_CONTEXTS == v::kMaxGinContexts);

SAME_STRUCT(ncclDevCommWindowTable, v::DevCommWindowTable);
SAME_STRUCT(ncclDevCommWindowTable::Entry, v::DevCommWindowTable::Entry);
SAME_MEMBER(ncclDevCommWindowTable, v::DevCommWindowTable, entries);
SAME_MEMBER(ncclDevCommWindowTable, v::DevCommWindowTable, next);
SAME_MEMBER(ncclDevCommWindowTable::Entry, v::DevCommWindowTable::Entry, base);
SAME_MEMBER(ncclDevCommWindowTable::Entry, v::DevCommWindowTable::Entry, size);
SAME_MEMBER(ncclDevCommWindowTable::Entry, v::DevCommWindowTable::Entry, window);

SAME_STRUCT(ncclMultimemHandle, v::MultimemHandle);
SAME_STRUCT(ncclLsaBarrierHandle, v::LsaBarrierHandle);
SAME_MEMBER(ncclLsaBarrierHandle, v::LsaBarrierHandle, bufHandle);
SAME_MEMBER(ncclLsaBarrierHandle, v::LsaBarrierHandle, nBarriers);
SAME_STRUCT(ncclGinBarrierHandle, v::GinBarrierHandle);
SAME_MEMBER(ncclGinBarrierHandle, v::GinBarrierHandle, signal0);
SAME_MEMBER(ncclGinBarrierHandle, v::GinBarrierHandle, bufHandle);
SAME_STRUCT(ncclLLA2AHandle, v::LLA2AHandle);
SAME_MEMBER(ncclLLA2AHandle, v::LLA2AHandle, bufHandle);
SAME_MEMBER(ncclLLA2AHandle, v::LLA2AHandle, nSlots);

SAME_STRUCT(ncclDevComm, v::DevComm);
SAME_MEMBER(ncclDevComm, v::DevComm, rank);
SAME_MEMBER(ncclDevComm, v::DevComm, nRanks);
SAME_MEMBER(ncclDevComm, v::DevComm, nRanks_rcp32);
SAME_MEMBER(ncclDevComm, v::DevComm, lsaRank);
SAME_MEMBER(ncclDevComm, v::DevComm, lsaSize);
SAME_MEMBER(ncclDevComm, v::DevComm, lsaSize_rcp32);
SAME_MEMBER(ncclDevComm, v::DevComm, windowTable);
SAME_MEMBER(ncclDevComm, v::DevComm, resourceWindow);
SAME_MEMBER(ncclDevComm, v::DevComm, resourceWindow_inlined);
SAME_MEMBER(ncclDevComm, v::DevComm, lsaMultimem);
SAME_MEMBER(ncclDevComm, v::DevComm, lsaBarrier);
SAME_MEMBER(ncclDevComm, v::DevComm, railGinBarrier);
SAME_MEMBER(ncclDevComm, v::DevComm, ginContextCount);
SAME_MEMBER(ncclDevComm, v::DevComm, ginTypes);
SAME_MEMBER(ncclDevComm, v::DevComm, ginHandles);
SAME_MEMBER(ncclDevComm, v::DevComm, ginSignalBase);
SAME_MEMBER(ncclDevComm, v::DevComm, ginSignalCount);
SAME_MEMBER(ncclDevComm, v::DevComm, ginCounterBase);
SAME_MEMBER(ncclDevComm, v::DevComm, ginCounterCount);
SAME_MEMBER(ncclDevComm, v::DevComm, ginSignalShadows);

SAME_STRUCT(ncclDevCommRequirements, v::DevCommRequirements);
SAME_MEMBER(ncclDevCommRequirements, v::DevCommRequirements, resourceRequirementsList);
SAME_MEMBER(ncclDevCommRequirements, v::DevCommRequirements, teamRequirementsList);
SAME_MEMBER(ncclDevCommRequirements, v::DevCommRequirements, lsaMultimem);
SAME_MEMBER(ncclDevCommRequirements, v::DevCommRequirements, barrierCount);
SAME_MEMBER(ncclDevCommRequirements, v::DevCommRequirements, lsaBarrierCount);
SAME_MEMBER(ncclDevCommRequirements, v::DevCommRequirements, railGinBarrierCount);
SAME_MEMBER(ncclDevCommRequirements, v::DevCommRequirements, lsaLLA2ABlockCount);
SAME_MEMBER(ncclDevCommRequirements, v::DevCommRequirements, lsaLLA2ASlotCount);
SAME_MEMBER(ncclDevCommRequirements, v::DevCommRequirements, ginForceEnable);
SAME_MEMBER(ncclDevCommRequirements, v::DevCommRequirements, ginContextCount);
SAME_MEMBER(ncclDevCommRequirements, v::DevCommRequirements, ginSignalCount);
SAME_MEMBER(ncclDevCommRequirements, v::DevCommRequirements, ginCounterCount);

SAME_STRUCT(ncclDevResourceRequirements, v::DevResourceRequirements);
SAME_MEMBER(ncclDevResourceRequirements, v::DevResourceRequirements, next);
SAME_MEMBER(ncclDevResourceRequirements, v::DevResourceRequirements, bufferSize);
SAME_MEMBER(ncclDevResourceRequirements, v::DevResourceRequirements, bufferAlign);
SAME_MEMBER(ncclDevResourceRequirements, v::DevResourceRequirements, outBufferHandle);
SAME_MEMBER(ncclDevResourceRequirements, v::DevResourceRequirements, ginSignalCount);
SAME_MEMBER(ncclDevResourceRequirements, v::DevResourceRequirements, ginCounterCount);
SAME_MEMBER(ncclDevResourceRequirements, v::DevResourceRequirements, outGinSignalStart);
SAME_MEMBER(ncclDevResourceRequirements, v::DevResourceRequirements, outGinCounterStart);

SAME_STRUCT(ncclTeamRequirements, v::TeamRequirements);
SAME_MEMBER(ncclTeamRequirements, v::TeamRequirements, next);
SAME_MEMBER(ncclTeamRequirements, v::TeamRequirements, team);
SAME_MEMBER(ncclTeamRequirements, v::TeamRequirements, multimem);
SAME_MEMBER(ncclTeamRequirements, v::TeamRequirements, outMultimemHandle);

SAME_STRUCT(ncclGinProxyGpuCtx_t, v::GinProxyGpuCtx);
SAME_MEMBER(ncclGinProxyGpuCtx_t, v::GinProxyGpuCtx, nranks);
SAME_MEMBER(ncclGinProxyGpuCtx_t, v::GinProxyGpuCtx, queueSize);
SAME_MEMBER(ncclGinProxyGpuCtx_t, v::GinProxyGpuCtx, queues);
SAME_MEMBER(ncclGinProxyGpuCtx_t, v::GinProxyGpuCtx, pis);
SAME_MEMBER(ncclGinProxyGpuCtx_t, v::GinProxyGpuCtx, cis);
SAME_MEMBER(ncclGinProxyGpuCtx_t, v::GinProxyGpuCtx, counters);
SAME_MEMBER(ncclGinProxyGpuCtx_t, v::GinProxyGpuCtx, signals);
static_assert(sizeof(ncclGinProxyGfd_t) == 8 * sizeof(uint64_t));
static_assert(NCCL_GIN_PROXY_VERSION == v::kGinProxyVersion);
static_assert(NCCL_NET_DEVICE_GIN_PROXY == v::kGinTypeProxy);

TEST_CASE("a devComm braid fills reads back through NVIDIA's struct", "[devapi][layout]") {
  // The offsets agree (above); this checks the values land where the
  // header's inline code looks, with the helpers a kernel calls.
  v::DevComm mine{};
  mine.rank = 5;
  mine.nRanks = 8;
  mine.nRanks_rcp32 = v::div_rcp32(8);
  mine.lsaRank = 1;
  mine.lsaSize = 4;
  mine.lsaSize_rcp32 = v::div_rcp32(4);
  mine.resourceWindow_inlined.stride4G = 3;
  mine.resourceWindow_inlined.ginOffset4K = 7;
  mine.lsaBarrier = {2, 16};
  mine.railGinBarrier = {9, 3};
  mine.ginContextCount = 2;
  mine.ginTypes[1] = v::kGinTypeProxy;
  mine.ginHandles[1] = &mine;
  mine.ginSignalBase = 40;
  mine.ginCounterCount = 6;
  ncclDevComm real;
  std::memcpy(&real, &mine, sizeof(real));
  CHECK(real.resourceWindow_inlined.stride4G == 3);
  CHECK(real.resourceWindow_inlined.ginOffset4K == 7);
  CHECK(real.lsaBarrier.nBarriers == 16);
  CHECK(real.railGinBarrier.signal0 == 9);
  CHECK(real.ginTypes[1] == NCCL_NET_DEVICE_GIN_PROXY);
  CHECK(real.ginHandles[1] == &mine);
  CHECK(real.ginSignalBase == 40);
  CHECK(real.ginCounterCount == 6);
  // The header's own team helpers over braid's bytes: rail divides by lsaSize_rcp32.
  ncclTeam rail = ncclTeamRail(real);
  CHECK(rail.nRanks == 2);
  CHECK(rail.rank == 1);
  CHECK(rail.stride == 4);
  ncclTeam lsa = ncclTeamLsa(real);
  CHECK(lsa.nRanks == 4);
  CHECK(lsa.rank == 1);
  CHECK(ncclTeamRankToWorld(real, rail, 0) == 1);
  CHECK(ncclTeamRankToLsa(real, ncclTeamWorld(real), 7) == 3);
  // The reciprocal braid computes is the header's, for every size a team can have here.
  for (uint32_t n = 1; n <= 4096; ++n) REQUIRE(v::div_rcp32(n) == nccl::utility::idivRcp32(n));
}

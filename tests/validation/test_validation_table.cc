// The bad-input table: every public NCCL function fed the bad arguments NCCL
// names (NULL pointers, bad root/peer/datatype/op, rank out of range,
// destroyed communicator or op, group misuse, revoked communicator...).
// For every row the test checks
//   - the exact ncclResult_t,
//   - ncclGetLastError(NULL) names the function and says what was wrong,
//   - the same text was printed as an NCCL_DEBUG=WARN line,
//   - and both ranks' communicators still run an exact allreduce afterwards.
// The two ranks are two communicators of one thread (ncclCommInitAll), so a
// row runs on rank 0 alone and the check drives both ranks in one group.
#include <catch2/catch.hpp>

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "nccl.h"

namespace {

struct Ctx {
  ncclComm_t comm[2] = {nullptr, nullptr};
  ncclComm_t destroyed = nullptr;  // a handle whose communicator is gone
  ncclUniqueId id{};
  ncclUniqueId corrupt{};
  float a[64] = {}, b[256] = {};
  void* mem = nullptr;  // from ncclMemAlloc, page aligned
  int n = 2;
};

struct Row {
  const char* function;
  const char* case_name;
  std::function<ncclResult_t(Ctx&)> call;
  ncclResult_t want;
  const char* message;  // substring of the error text ("" for success rows)
};

#define ROW(fn, name, want, msg, ...) Row{fn, name, [](Ctx& c) { return __VA_ARGS__; }, want, msg}
constexpr ncclResult_t IA = ncclInvalidArgument, IU = ncclInvalidUsage, OK = ncclSuccess;

std::vector<Row> table() {
  return {
      ROW("ncclGetVersion", "NULL version", IA, "version pointer is NULL", ncclGetVersion(nullptr)),
      ROW("ncclGetUniqueId", "NULL id", IA, "uniqueId pointer is NULL", ncclGetUniqueId(nullptr)),
      ROW("ncclCommInitRank", "NULL comm pointer", IA, "comm pointer is NULL", ncclCommInitRank(nullptr, 2, c.id, 0)),
      ROW("ncclCommInitRank", "nranks 0", IA, "nranks 0", [&] { ncclComm_t x; return ncclCommInitRank(&x, 0, c.id, 0); }()),
      ROW("ncclCommInitRank", "rank -1", IA, "rank -1 out of range", [&] { ncclComm_t x; return ncclCommInitRank(&x, 2, c.id, -1); }()),
      ROW("ncclCommInitRank", "rank == nranks", IA, "rank 2 out of range", [&] { ncclComm_t x; return ncclCommInitRank(&x, 2, c.id, 2); }()),
      ROW("ncclCommInitRank", "corrupted id", IA, "corrupted ncclUniqueId", [&] { ncclComm_t x; return ncclCommInitRank(&x, 2, c.corrupt, 0); }()),
      ROW("ncclCommInitRankConfig", "config without initializer", IA, "NCCL_CONFIG_INITIALIZER", [&] {
        ncclComm_t x; ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER; cfg.magic = 1;
        return ncclCommInitRankConfig(&x, 2, c.id, 0, &cfg); }()),
      ROW("ncclCommInitRankConfig", "blocking = 5", IA, "blocking = 5", [&] {
        ncclComm_t x; ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER; cfg.blocking = 5;
        return ncclCommInitRankConfig(&x, 2, c.id, 0, &cfg); }()),
      ROW("ncclCommInitRankConfig", "NULL comm pointer", IA, "comm pointer is NULL", ncclCommInitRankConfig(nullptr, 2, c.id, 0, nullptr)),
      ROW("ncclCommInitRankScalable", "NULL commIds", IA, "commIds is NULL", [&] { ncclComm_t x; return ncclCommInitRankScalable(&x, 2, 0, 1, nullptr, nullptr); }()),
      ROW("ncclCommInitRankScalable", "nId 0", IA, "nId 0", [&] { ncclComm_t x; return ncclCommInitRankScalable(&x, 2, 0, 0, &c.id, nullptr); }()),
      ROW("ncclCommInitRankScalable", "nId > nranks", IA, "nId 3", [&] { ncclComm_t x; ncclUniqueId ids[3] = {c.id, c.id, c.id}; return ncclCommInitRankScalable(&x, 2, 0, 3, ids, nullptr); }()),
      ROW("ncclCommInitRankScalable", "corrupted id", IA, "commIds[0]", [&] { ncclComm_t x; return ncclCommInitRankScalable(&x, 2, 0, 1, &c.corrupt, nullptr); }()),
      ROW("ncclCommInitRankScalable", "NULL newcomm", IA, "newcomm pointer is NULL", ncclCommInitRankScalable(nullptr, 2, 0, 1, &c.id, nullptr)),
      ROW("ncclCommInitAll", "NULL comms", IA, "comms pointer is NULL", ncclCommInitAll(nullptr, 2, nullptr)),
      ROW("ncclCommInitAll", "ndev 0", IA, "ndev 0", [&] { ncclComm_t x[1]; return ncclCommInitAll(x, 0, nullptr); }()),
      ROW("ncclCommInitAll", "negative device", IA, "devlist[1] = -3", [&] { ncclComm_t x[2]; int dev[2] = {0, -3}; return ncclCommInitAll(x, 2, dev); }()),
      ROW("ncclCommFinalize", "NULL comm is a no-op", OK, "", ncclCommFinalize(nullptr)),
      ROW("ncclCommFinalize", "destroyed comm", IA, "not a live communicator", ncclCommFinalize(c.destroyed)),
      ROW("ncclCommDestroy", "NULL comm is a no-op", OK, "", ncclCommDestroy(nullptr)),
      ROW("ncclCommDestroy", "destroyed twice", IA, "destroyed twice", ncclCommDestroy(c.destroyed)),
      ROW("ncclCommAbort", "NULL comm is a no-op", OK, "", ncclCommAbort(nullptr)),
      ROW("ncclCommAbort", "destroyed comm", IA, "not a live communicator", ncclCommAbort(c.destroyed)),
      ROW("ncclCommRevoke", "NULL comm is a no-op", OK, "", ncclCommRevoke(nullptr, 0)),
      ROW("ncclCommRevoke", "flags 1", IA, "revokeFlags 1", ncclCommRevoke(c.comm[0], 1)),
      ROW("ncclCommSplit", "NULL comm", IA, "comm argument is NULL", [&] { ncclComm_t x; return ncclCommSplit(nullptr, 0, 0, &x, nullptr); }()),
      ROW("ncclCommSplit", "NULL newcomm", IA, "newcomm pointer is NULL", ncclCommSplit(c.comm[0], 0, 0, nullptr, nullptr)),
      ROW("ncclCommSplit", "color -5", IA, "color -5", [&] { ncclComm_t x; return ncclCommSplit(c.comm[0], -5, 0, &x, nullptr); }()),
      ROW("ncclCommSplit", "bad config", IA, "NCCL_CONFIG_INITIALIZER", [&] { ncclComm_t x; ncclConfig_t cfg{}; return ncclCommSplit(c.comm[0], 0, 0, &x, &cfg); }()),
      ROW("ncclCommSplit", "destroyed comm", IA, "not a live communicator", [&] { ncclComm_t x; return ncclCommSplit(c.destroyed, 0, 0, &x, nullptr); }()),
      ROW("ncclCommShrink", "NULL comm", IA, "comm argument is NULL", [&] { ncclComm_t x; int e = 1; return ncclCommShrink(nullptr, &e, 1, &x, nullptr, 0); }()),
      ROW("ncclCommShrink", "NULL newcomm", IA, "newcomm pointer is NULL", [&] { int e = 1; return ncclCommShrink(c.comm[0], &e, 1, nullptr, nullptr, 0); }()),
      ROW("ncclCommShrink", "flags 7", IA, "shrinkFlags 7", [&] { ncclComm_t x; int e = 1; return ncclCommShrink(c.comm[0], &e, 1, &x, nullptr, 7); }()),
      ROW("ncclCommShrink", "NULL list with count", IA, "excludeRanksList is NULL", [&] { ncclComm_t x; return ncclCommShrink(c.comm[0], nullptr, 1, &x, nullptr, 0); }()),
      ROW("ncclCommShrink", "nothing excluded", IA, "excludeRanksCount 0 is not positive", [&] { ncclComm_t x; int e = 1; return ncclCommShrink(c.comm[0], &e, 0, &x, nullptr, 0); }()),
      ROW("ncclCommShrink", "rank out of range", IA, "excludeRanksList[0] = 9", [&] { ncclComm_t x; int e = 9; return ncclCommShrink(c.comm[0], &e, 1, &x, nullptr, 0); }()),
      ROW("ncclCommShrink", "duplicate rank", IA, "appears twice", [&] { ncclComm_t x; int e[2] = {1, 1}; return ncclCommShrink(c.comm[0], e, 2, &x, nullptr, 0); }()),
      ROW("ncclCommShrink", "caller excluded", IA, "excluded ranks do not call", [&] { ncclComm_t x; int e = 0; return ncclCommShrink(c.comm[0], &e, 1, &x, nullptr, 0); }()),
      ROW("ncclCommGetAsyncError", "NULL comm", IA, "comm argument is NULL", [&] { ncclResult_t e; return ncclCommGetAsyncError(nullptr, &e); }()),
      ROW("ncclCommGetAsyncError", "NULL result pointer", IA, "asyncError pointer is NULL", ncclCommGetAsyncError(c.comm[0], nullptr)),
      ROW("ncclCommGetAsyncError", "destroyed comm", IA, "not a live communicator", [&] { ncclResult_t e; return ncclCommGetAsyncError(c.destroyed, &e); }()),
      ROW("ncclCommCount", "NULL comm", IA, "comm argument is NULL", [&] { int x; return ncclCommCount(nullptr, &x); }()),
      ROW("ncclCommCount", "NULL count", IA, "count pointer is NULL", ncclCommCount(c.comm[0], nullptr)),
      ROW("ncclCommCuDevice", "NULL comm", IA, "comm argument is NULL", [&] { int x; return ncclCommCuDevice(nullptr, &x); }()),
      ROW("ncclCommCuDevice", "NULL device", IA, "device pointer is NULL", ncclCommCuDevice(c.comm[0], nullptr)),
      ROW("ncclCommUserRank", "NULL comm", IA, "comm argument is NULL", [&] { int x; return ncclCommUserRank(nullptr, &x); }()),
      ROW("ncclCommUserRank", "NULL rank", IA, "rank pointer is NULL", ncclCommUserRank(c.comm[0], nullptr)),
      ROW("ncclCommUserRank", "destroyed comm", IA, "not a live communicator", [&] { int x; return ncclCommUserRank(c.destroyed, &x); }()),
      ROW("ncclCommRegister", "NULL comm", IA, "comm argument is NULL", [&] { void* h; return ncclCommRegister(nullptr, c.a, 4, &h); }()),
      ROW("ncclCommRegister", "NULL handle", IA, "handle pointer is NULL", ncclCommRegister(c.comm[0], c.a, 4, nullptr)),
      ROW("ncclCommRegister", "NULL buffer", IA, "buff is NULL", [&] { void* h; return ncclCommRegister(c.comm[0], nullptr, 4, &h); }()),
      ROW("ncclCommRegister", "size 0", IA, "size is 0", [&] { void* h; return ncclCommRegister(c.comm[0], c.a, 0, &h); }()),
      ROW("ncclCommDeregister", "NULL handle", IA, "handle is NULL", ncclCommDeregister(c.comm[0], nullptr)),
      ROW("ncclCommDeregister", "unknown handle", IA, "was not registered", ncclCommDeregister(c.comm[0], c.a)),
      ROW("ncclCommDeregister", "NULL comm", IA, "comm argument is NULL", ncclCommDeregister(nullptr, c.a)),
      ROW("ncclCommWindowRegister", "NULL win", IA, "win pointer is NULL", ncclCommWindowRegister(c.comm[0], c.mem, 4096, nullptr, 0)),
      ROW("ncclCommWindowRegister", "bad flags", IA, "winFlags 0x40", [&] { ncclWindow_t w; return ncclCommWindowRegister(c.comm[0], c.mem, 4096, &w, 0x40); }()),
      ROW("ncclCommWindowRegister", "CFT counted", IU, "no Compute Fabric Transport", [&] { ncclWindow_t w; return ncclCommWindowRegister(c.comm[0], c.mem, 4096, &w, NCCL_WIN_CFT_COUNTED); }()),
      ROW("ncclCommWindowRegister", "misaligned symmetric", IA, "not 4096-byte aligned", [&] { ncclWindow_t w; return ncclCommWindowRegister(c.comm[0], static_cast<char*>(c.mem) + 4, 64, &w, NCCL_WIN_COLL_SYMMETRIC); }()),
      ROW("ncclCommWindowRegister", "NULL buffer", IA, "invalid buffer", [&] { ncclWindow_t w; return ncclCommWindowRegister(c.comm[0], nullptr, 64, &w, 0); }()),
      ROW("ncclCommWindowRegister", "size 0", IA, "size 0", [&] { ncclWindow_t w; return ncclCommWindowRegister(c.comm[0], c.mem, 0, &w, 0); }()),
      ROW("ncclCommWindowRegister", "NULL buffer, size 0", IA, "invalid buffer", [&] { ncclWindow_t w; return ncclCommWindowRegister(c.comm[0], nullptr, 0, &w, 0); }()),
      ROW("ncclCommWindowDeregister", "NULL win is a no-op", OK, "", ncclCommWindowDeregister(c.comm[0], nullptr)),
      ROW("ncclCommWindowDeregister", "unknown win", IA, "was not registered", ncclCommWindowDeregister(c.comm[0], reinterpret_cast<ncclWindow_t>(c.a))),
      ROW("ncclMemAlloc", "NULL ptr", IA, "ptr is NULL", ncclMemAlloc(nullptr, 16)),
      ROW("ncclMemAlloc", "size 0", IA, "size is 0", [&] { void* p; return ncclMemAlloc(&p, 0); }()),
      ROW("ncclMemFree", "foreign pointer", IA, "not allocated by ncclMemAlloc", ncclMemFree(c.a)),
      ROW("ncclMemFree", "NULL is a no-op", OK, "", ncclMemFree(nullptr)),
      ROW("ncclRedOpCreatePreMulSum", "NULL op", IA, "op pointer is NULL", [&] { float s = 1; return ncclRedOpCreatePreMulSum(nullptr, &s, ncclFloat, ncclScalarHostImmediate, c.comm[0]); }()),
      ROW("ncclRedOpCreatePreMulSum", "NULL scalar", IA, "scalar is NULL", [&] { ncclRedOp_t o; return ncclRedOpCreatePreMulSum(&o, nullptr, ncclFloat, ncclScalarHostImmediate, c.comm[0]); }()),
      ROW("ncclRedOpCreatePreMulSum", "bad datatype", IA, "invalid datatype 12", [&] { ncclRedOp_t o; float s; return ncclRedOpCreatePreMulSum(&o, &s, ncclNumTypes, ncclScalarHostImmediate, c.comm[0]); }()),
      ROW("ncclRedOpCreatePreMulSum", "bad residence", IA, "residence 7", [&] { ncclRedOp_t o; float s; return ncclRedOpCreatePreMulSum(&o, &s, ncclFloat, ncclScalarResidence_t(7), c.comm[0]); }()),
      ROW("ncclRedOpCreatePreMulSum", "NULL comm", IA, "comm argument is NULL", [&] { ncclRedOp_t o; float s; return ncclRedOpCreatePreMulSum(&o, &s, ncclFloat, ncclScalarHostImmediate, nullptr); }()),
      ROW("ncclRedOpDestroy", "built-in op", IA, "built-in reduction", ncclRedOpDestroy(ncclMax, c.comm[0])),
      ROW("ncclRedOpDestroy", "unknown op", IA, "was not created on this communicator", ncclRedOpDestroy(ncclRedOp_t(77), c.comm[0])),
      ROW("ncclRedOpDestroy", "NULL comm", IA, "comm argument is NULL", ncclRedOpDestroy(ncclRedOp_t(5), nullptr)),
      ROW("ncclAllReduce", "NULL comm", IA, "comm argument is NULL", ncclAllReduce(c.a, c.b, 4, ncclFloat, ncclSum, nullptr, nullptr)),
      ROW("ncclAllReduce", "destroyed comm", IA, "not a live communicator", ncclAllReduce(c.a, c.b, 4, ncclFloat, ncclSum, c.destroyed, nullptr)),
      ROW("ncclAllReduce", "datatype 12", IA, "invalid datatype 12", ncclAllReduce(c.a, c.b, 4, ncclNumTypes, ncclSum, c.comm[0], nullptr)),
      ROW("ncclAllReduce", "count past 2^62 bytes", IA, "more than 2^62 bytes", ncclAllReduce(c.a, c.b, (size_t(1) << 62) + 1, ncclFloat, ncclSum, c.comm[0], nullptr)),
      ROW("ncclSend", "count past 2^62 bytes", IA, "more than 2^62 bytes", ncclSend(c.a, size_t(1) << 61, ncclDouble, 1, c.comm[0], nullptr)),
      ROW("ncclAllReduce", "datatype -1", IA, "invalid datatype -1", ncclAllReduce(c.a, c.b, 4, ncclDataType_t(-1), ncclSum, c.comm[0], nullptr)),
      ROW("ncclAllReduce", "op 5 never created", IA, "invalid reduction op 5", ncclAllReduce(c.a, c.b, 4, ncclFloat, ncclNumOps, c.comm[0], nullptr)),
      ROW("ncclAllReduce", "op -1", IA, "invalid reduction op -1", ncclAllReduce(c.a, c.b, 4, ncclFloat, ncclRedOp_t(-1), c.comm[0], nullptr)),
      ROW("ncclAllReduce", "NULL sendbuff", IA, "sendbuff is NULL", ncclAllReduce(nullptr, c.b, 4, ncclFloat, ncclSum, c.comm[0], nullptr)),
      ROW("ncclAllReduce", "NULL recvbuff", IA, "recvbuff is NULL", ncclAllReduce(c.a, nullptr, 4, ncclFloat, ncclSum, c.comm[0], nullptr)),
      ROW("ncclAllReduce", "count 0 with NULLs", OK, "", ncclAllReduce(nullptr, nullptr, 0, ncclFloat, ncclSum, c.comm[0], nullptr)),
      ROW("ncclAllReduce", "destroyed PreMulSum op", IA, "invalid reduction op", [&] {
        float s = 2; ncclRedOp_t o;
        if (ncclRedOpCreatePreMulSum(&o, &s, ncclFloat, ncclScalarHostImmediate, c.comm[0]) != ncclSuccess) return ncclInternalError;
        if (ncclRedOpDestroy(o, c.comm[0]) != ncclSuccess) return ncclInternalError;
        return ncclAllReduce(c.a, c.b, 4, ncclFloat, o, c.comm[0], nullptr); }()),
      ROW("ncclBroadcast", "root == nranks", IA, "root 2 out of range", ncclBroadcast(c.a, c.b, 4, ncclFloat, 2, c.comm[0], nullptr)),
      ROW("ncclBroadcast", "root -1", IA, "root -1 out of range", ncclBroadcast(c.a, c.b, 4, ncclFloat, -1, c.comm[0], nullptr)),
      ROW("ncclBroadcast", "NULL sendbuff at root", IA, "sendbuff is NULL", ncclBroadcast(nullptr, c.b, 4, ncclFloat, 0, c.comm[0], nullptr)),
      ROW("ncclBroadcast", "bad datatype", IA, "invalid datatype 40", ncclBroadcast(c.a, c.b, 4, ncclDataType_t(40), 0, c.comm[0], nullptr)),
      ROW("ncclBcast", "NULL buffer", IA, "is NULL", ncclBcast(nullptr, 4, ncclFloat, 0, c.comm[0], nullptr)),
      ROW("ncclBcast", "root 5", IA, "root 5 out of range", ncclBcast(c.a, 4, ncclFloat, 5, c.comm[0], nullptr)),
      ROW("ncclReduce", "root 2", IA, "root 2 out of range", ncclReduce(c.a, c.b, 4, ncclFloat, ncclSum, 2, c.comm[0], nullptr)),
      ROW("ncclReduce", "bad op", IA, "invalid reduction op 9", ncclReduce(c.a, c.b, 4, ncclFloat, ncclRedOp_t(9), 0, c.comm[0], nullptr)),
      ROW("ncclReduce", "NULL recvbuff at root", IA, "recvbuff is NULL", ncclReduce(c.a, nullptr, 4, ncclFloat, ncclSum, 0, c.comm[0], nullptr)),
      ROW("ncclAllGather", "NULL recvbuff", IA, "recvbuff is NULL", ncclAllGather(c.a, nullptr, 4, ncclFloat, c.comm[0], nullptr)),
      ROW("ncclAllGather", "bad datatype", IA, "invalid datatype 12", ncclAllGather(c.a, c.b, 4, ncclNumTypes, c.comm[0], nullptr)),
      ROW("ncclAllGather", "NULL comm", IA, "comm argument is NULL", ncclAllGather(c.a, c.b, 4, ncclFloat, nullptr, nullptr)),
      ROW("ncclReduceScatter", "NULL sendbuff", IA, "sendbuff is NULL", ncclReduceScatter(nullptr, c.b, 4, ncclFloat, ncclSum, c.comm[0], nullptr)),
      ROW("ncclReduceScatter", "bad op", IA, "invalid reduction op 6", ncclReduceScatter(c.a, c.b, 4, ncclFloat, ncclRedOp_t(6), c.comm[0], nullptr)),
      ROW("ncclAlltoAll", "NULL sendbuff", IA, "sendbuff is NULL", ncclAlltoAll(nullptr, c.b, 4, ncclFloat, c.comm[0], nullptr)),
      ROW("ncclAlltoAll", "bad datatype", IA, "invalid datatype 13", ncclAlltoAll(c.a, c.b, 4, ncclDataType_t(13), c.comm[0], nullptr)),
      ROW("ncclGather", "root 2", IA, "root 2 out of range", ncclGather(c.a, c.b, 4, ncclFloat, 2, c.comm[0], nullptr)),
      ROW("ncclGather", "NULL sendbuff", IA, "sendbuff is NULL", ncclGather(nullptr, c.b, 4, ncclFloat, 0, c.comm[0], nullptr)),
      ROW("ncclScatter", "root -2", IA, "root -2 out of range", ncclScatter(c.a, c.b, 4, ncclFloat, -2, c.comm[0], nullptr)),
      ROW("ncclScatter", "NULL recvbuff", IA, "recvbuff is NULL", ncclScatter(c.a, nullptr, 4, ncclFloat, 0, c.comm[0], nullptr)),
      ROW("ncclSend", "peer == nranks", IA, "peer 2 out of range", ncclSend(c.a, 4, ncclFloat, 2, c.comm[0], nullptr)),
      ROW("ncclSend", "peer -1", IA, "peer -1 out of range", ncclSend(c.a, 4, ncclFloat, -1, c.comm[0], nullptr)),
      ROW("ncclSend", "NULL buffer", IA, "sendbuff is NULL", ncclSend(nullptr, 4, ncclFloat, 1, c.comm[0], nullptr)),
      ROW("ncclSend", "bad datatype", IA, "invalid datatype 12", ncclSend(c.a, 4, ncclNumTypes, 1, c.comm[0], nullptr)),
      ROW("ncclRecv", "peer 3", IA, "peer 3 out of range", ncclRecv(c.b, 4, ncclFloat, 3, c.comm[0], nullptr)),
      ROW("ncclRecv", "NULL buffer", IA, "recvbuff is NULL", ncclRecv(nullptr, 4, ncclFloat, 1, c.comm[0], nullptr)),
      ROW("ncclRecv", "destroyed comm", IA, "not a live communicator", ncclRecv(c.b, 4, ncclFloat, 1, c.destroyed, nullptr)),
      ROW("ncclGroupEnd", "without GroupStart", IU, "without ncclGroupStart", ncclGroupEnd()),
      ROW("ncclGroupSimulateEnd", "without GroupStart", IU, "without ncclGroupStart", [&] { ncclSimInfo_t s = NCCL_SIM_INFO_INITIALIZER; return ncclGroupSimulateEnd(&s); }()),
      ROW("ncclGroupSimulateEnd", "NULL simInfo: ncclGroupEnd, without GroupStart", IU, "without ncclGroupStart", ncclGroupSimulateEnd(nullptr)),
      ROW("ncclGroupSimulateEnd", "bad magic: ends the group", IA, "NCCL_SIM_INFO_INITIALIZER", [&] { ncclSimInfo_t s = NCCL_SIM_INFO_INITIALIZER; s.magic = 3; ncclGroupStart(); return ncclGroupSimulateEnd(&s); }()),
      // The functions NCCL 2.29-2.32 added (each fails before any rank waits for another).
      ROW("ncclCommGetUniqueId", "NULL comm", IA, "comm argument is NULL", ncclCommGetUniqueId(nullptr, &c.id)),
      ROW("ncclCommGetUniqueId", "NULL id", IA, "uniqueId pointer is NULL", ncclCommGetUniqueId(c.comm[0], nullptr)),
      ROW("ncclCommGrow", "NULL newcomm", IA, "newcomm pointer is NULL", ncclCommGrow(c.comm[0], 3, nullptr, -1, nullptr, nullptr)),
      ROW("ncclCommGrow", "joiner without id", IA, "needs the uniqueId", [&] { ncclComm_t x; return ncclCommGrow(nullptr, 3, nullptr, 2, &x, nullptr); }()),
      ROW("ncclCommGrow", "joiner with a plain id", IA, "was not made by ncclCommGetUniqueId", [&] { ncclComm_t x; return ncclCommGrow(nullptr, 3, &c.id, 2, &x, nullptr); }()),
      ROW("ncclCommGrow", "joiner with a corrupted id", IA, "corrupted ncclUniqueId", [&] { ncclComm_t x; return ncclCommGrow(nullptr, 3, &c.corrupt, 2, &x, nullptr); }()),
      ROW("ncclCommGrow", "existing rank passes a rank", IA, "an existing rank passes -1", [&] { ncclComm_t x; return ncclCommGrow(c.comm[0], 3, nullptr, 0, &x, nullptr); }()),
      ROW("ncclCommGrow", "no growth", IA, "does not grow the communicator of 2 ranks", [&] { ncclComm_t x; return ncclCommGrow(c.comm[0], 2, nullptr, -1, &x, nullptr); }()),
      ROW("ncclCommGrow", "someone else's id", IA, "is not the one this rank's ncclCommGetUniqueId made", [&] { ncclComm_t x; return ncclCommGrow(c.comm[0], 3, &c.id, -1, &x, nullptr); }()),
      ROW("ncclCommGrow", "bad config", IA, "NCCL_CONFIG_INITIALIZER", [&] { ncclComm_t x; ncclConfig_t cfg{}; return ncclCommGrow(c.comm[0], 3, nullptr, -1, &x, &cfg); }()),
      ROW("ncclCommGrow", "destroyed comm", IA, "not a live communicator", [&] { ncclComm_t x; return ncclCommGrow(c.destroyed, 3, nullptr, -1, &x, nullptr); }()),
      ROW("ncclCommSuspend", "NULL comm", IA, "comm argument is NULL", ncclCommSuspend(nullptr, NCCL_SUSPEND_MEM)),
      ROW("ncclCommSuspend", "unknown flags", IA, "flags 0x10", ncclCommSuspend(c.comm[0], 0x10)),
      ROW("ncclCommResume", "NULL comm", IA, "comm argument is NULL", ncclCommResume(nullptr)),
      ROW("ncclCommResume", "destroyed comm", IA, "not a live communicator", ncclCommResume(c.destroyed)),
      ROW("ncclCommMemStats", "NULL comm", IA, "comm argument is NULL", [&] { uint64_t v; return ncclCommMemStats(nullptr, ncclStatGpuMemTotal, &v); }()),
      ROW("ncclCommMemStats", "NULL value", IA, "value pointer is NULL", ncclCommMemStats(c.comm[0], ncclStatGpuMemTotal, nullptr)),
      ROW("ncclCommMemStats", "unknown stat", IA, "stat 9", [&] { uint64_t v; return ncclCommMemStats(c.comm[0], ncclCommMemStat_t(9), &v); }()),
      ROW("ncclWinGetUserPtr", "NULL out", IA, "outUserPtr is NULL", ncclWinGetUserPtr(c.comm[0], reinterpret_cast<ncclWindow_t>(c.a), nullptr)),
      ROW("ncclWinGetUserPtr", "NULL win", IA, "win is NULL", [&] { void* p; return ncclWinGetUserPtr(c.comm[0], nullptr, &p); }()),
      ROW("ncclWinGetUserPtr", "unknown win", IA, "was not registered", [&] { void* p; return ncclWinGetUserPtr(c.comm[0], reinterpret_cast<ncclWindow_t>(c.a), &p); }()),
      ROW("ncclWinGetUserPtr", "NULL comm", IA, "comm argument is NULL", [&] { void* p; return ncclWinGetUserPtr(nullptr, nullptr, &p); }()),
      ROW("ncclPutSignal", "NULL comm", IA, "comm argument is NULL", ncclPutSignal(c.a, 4, ncclFloat, 1, nullptr, 0, 0, 0, 0, nullptr, nullptr)),
      ROW("ncclPutSignal", "peer == nranks", IA, "peer 2 out of range", ncclPutSignal(c.a, 4, ncclFloat, 2, nullptr, 0, 0, 0, 0, c.comm[0], nullptr)),
      ROW("ncclPutSignal", "sigIdx 1 of 1", IA, "sigIdx 1 out of range", ncclPutSignal(c.a, 4, ncclFloat, 1, nullptr, 0, 1, 0, 0, c.comm[0], nullptr)),
      ROW("ncclPutSignal", "ctx -1", IA, "ctx -1 out of range", ncclPutSignal(c.a, 4, ncclFloat, 1, nullptr, 0, 0, -1, 0, c.comm[0], nullptr)),
      ROW("ncclPutSignal", "flags 1", IA, "flags 0x1 must be 0", ncclPutSignal(c.a, 4, ncclFloat, 1, nullptr, 0, 0, 0, 1, c.comm[0], nullptr)),
      ROW("ncclPutSignal", "bad datatype", IA, "invalid datatype 12", ncclPutSignal(c.a, 4, ncclNumTypes, 1, nullptr, 0, 0, 0, 0, c.comm[0], nullptr)),
      ROW("ncclPutSignal", "NULL localbuff", IA, "localbuff is NULL", ncclPutSignal(nullptr, 4, ncclFloat, 1, nullptr, 0, 0, 0, 0, c.comm[0], nullptr)),
      ROW("ncclPutSignal", "NULL window", IA, "peerWin is NULL", ncclPutSignal(c.a, 4, ncclFloat, 1, nullptr, 0, 0, 0, 0, c.comm[0], nullptr)),
      ROW("ncclPutSignal", "unknown window", IA, "was not registered", ncclPutSignal(c.a, 4, ncclFloat, 1, reinterpret_cast<ncclWindow_t>(c.a), 0, 0, 0, 0, c.comm[0], nullptr)),
      ROW("ncclSignal", "NULL comm", IA, "comm argument is NULL", ncclSignal(1, 0, 0, 0, nullptr, nullptr)),
      ROW("ncclSignal", "peer -1", IA, "peer -1 out of range", ncclSignal(-1, 0, 0, 0, c.comm[0], nullptr)),
      ROW("ncclSignal", "sigIdx 3 of 1", IA, "sigIdx 3 out of range", ncclSignal(1, 3, 0, 0, c.comm[0], nullptr)),
      ROW("ncclSignal", "before any window", IU, "before any window", ncclSignal(1, 0, 0, 0, c.comm[0], nullptr)),
      ROW("ncclWaitSignal", "NULL comm", IA, "comm argument is NULL", [&] { ncclWaitSignalDesc_t d{1, 1, 0, 0}; return ncclWaitSignal(1, &d, nullptr, nullptr); }()),
      ROW("ncclWaitSignal", "NULL descriptors", IA, "signalDescs is NULL", ncclWaitSignal(1, nullptr, c.comm[0], nullptr)),
      ROW("ncclWaitSignal", "nDesc -1", IA, "nDesc -1 is negative", [&] { ncclWaitSignalDesc_t d{1, 1, 0, 0}; return ncclWaitSignal(-1, &d, c.comm[0], nullptr); }()),
      ROW("ncclWaitSignal", "peer out of range", IA, "signalDescs[0]", [&] { ncclWaitSignalDesc_t d{1, 5, 0, 0}; return ncclWaitSignal(1, &d, c.comm[0], nullptr); }()),
      ROW("ncclWaitSignal", "negative opCnt", IA, "opCnt -2 is negative", [&] { ncclWaitSignalDesc_t d{-2, 1, 0, 0}; return ncclWaitSignal(1, &d, c.comm[0], nullptr); }()),
      ROW("ncclParamBind", "NULL out", IA, "handle pointer is NULL", ncclParamBind(nullptr, "BRAID_TIMEOUT")),
      ROW("ncclParamBind", "NULL key", IA, "key is NULL", [&] { ncclParamHandle_t h; return ncclParamBind(&h, nullptr); }()),
      ROW("ncclParamBind", "unknown key", IA, "no parameter named \"NCCL_NOPE\"", [&] { ncclParamHandle_t h; return ncclParamBind(&h, "NCCL_NOPE"); }()),
      ROW("ncclParamGetI8", "NULL handle", IA, "parameter handle is NULL", [&] { int8_t v; return ncclParamGetI8(nullptr, &v); }()),
      ROW("ncclParamGetI16", "forged handle", IA, "did not come from ncclParamBind", [&] { int16_t v; return ncclParamGetI16(reinterpret_cast<ncclParamHandle_t>(c.a), &v); }()),
      ROW("ncclParamGetI32", "NULL out", IA, "output pointer is NULL", [&] { ncclParamHandle_t h; ncclParamBind(&h, "BRAID_TIMEOUT"); return ncclParamGetI32(h, nullptr); }()),
      ROW("ncclParamGetI64", "a string parameter", IA, "is a string", [&] { ncclParamHandle_t h; int64_t v; ncclParamBind(&h, "BRAID_TRANSPORT"); return ncclParamGetI64(h, &v); }()),
      ROW("ncclParamGetU8", "NULL handle", IA, "parameter handle is NULL", [&] { uint8_t v; return ncclParamGetU8(nullptr, &v); }()),
      ROW("ncclParamGetU16", "forged handle", IA, "did not come from ncclParamBind", [&] { uint16_t v; return ncclParamGetU16(reinterpret_cast<ncclParamHandle_t>(c.b), &v); }()),
      ROW("ncclParamGetU32", "NULL out", IA, "output pointer is NULL", [&] { ncclParamHandle_t h; ncclParamBind(&h, "BRAID_TIMEOUT"); return ncclParamGetU32(h, nullptr); }()),
      ROW("ncclParamGetU64", "a string parameter", IA, "is a string", [&] { ncclParamHandle_t h; uint64_t v; ncclParamBind(&h, "BRAID_TRANSPORT"); return ncclParamGetU64(h, &v); }()),
      ROW("ncclParamGetStr", "NULL handle", IA, "parameter handle is NULL", [&] { const char* s; return ncclParamGetStr(nullptr, &s); }()),
      ROW("ncclParamGet", "buffer too small", IA, "needs 8 bytes, maxLen is 2", [&] { ncclParamHandle_t h; char buf[2]; int n; ncclParamBind(&h, "BRAID_TIMEOUT"); return ncclParamGet(h, buf, 2, &n); }()),
      ROW("ncclParamGet", "NULL len", IA, "len pointer is NULL", [&] { ncclParamHandle_t h; char buf[8]; ncclParamBind(&h, "BRAID_TIMEOUT"); return ncclParamGet(h, buf, 8, nullptr); }()),
      ROW("ncclParamGetParameter", "NULL key", IA, "key, value or valueLen is NULL", [&] { const char* v; int n; return ncclParamGetParameter(nullptr, &v, &n); }()),
      ROW("ncclParamGetParameter", "unknown key", IA, "no parameter named", [&] { const char* v; int n; return ncclParamGetParameter("NCCL_NOPE", &v, &n); }()),
      ROW("ncclParamGetAllParameterKeys", "NULL table", IA, "table or tableLen is NULL", [&] { int n; return ncclParamGetAllParameterKeys(nullptr, &n); }()),
      ROW("ncclAllReduceConfig", "config without initializer", IA, "NCCL_COLLCONFIG_INITIALIZER", [&] { ncclCollConfig_t k{}; return ncclAllReduceConfig(c.a, c.b, 4, ncclFloat, ncclSum, c.comm[0], nullptr, &k); }()),
      ROW("ncclAllReduceConfig", "NULL comm", IA, "comm argument is NULL", ncclAllReduceConfig(c.a, c.b, 4, ncclFloat, ncclSum, nullptr, nullptr, nullptr)),
      ROW("ncclBroadcastConfig", "unknown algorithm", IA, "no algorithm is named \"nosuch\"", [&] { ncclCollConfig_t k = NCCL_COLLCONFIG_INITIALIZER; k.algSelection = "nosuch"; return ncclBroadcastConfig(c.a, c.b, 4, ncclFloat, 0, c.comm[0], nullptr, &k); }()),
      ROW("ncclReduceConfig", "forced, none of braid's", IA, "admits none of braid's", [&] { ncclCollConfig_t k = NCCL_COLLCONFIG_INITIALIZER; k.algSelection = "TREE_LL"; return ncclReduceConfig(c.a, c.b, 4, ncclFloat, ncclSum, 0, c.comm[0], nullptr, &k); }()),
      ROW("ncclAllGatherConfig", "forceAlgSelection 2", IA, "forceAlgSelection = 2", [&] { ncclCollConfig_t k = NCCL_COLLCONFIG_INITIALIZER; k.forceAlgSelection = 2; return ncclAllGatherConfig(c.a, c.b, 4, ncclFloat, c.comm[0], nullptr, &k); }()),
      ROW("ncclReduceScatterConfig", "CTAPolicy 0x80", IA, "CTAPolicy = 128", [&] { ncclCollConfig_t k = NCCL_COLLCONFIG_INITIALIZER; k.CTAPolicy = 0x80; return ncclReduceScatterConfig(c.a, c.b, 4, ncclFloat, ncclSum, c.comm[0], nullptr, &k); }()),
      ROW("ncclAlltoAllConfig", "short struct", IA, "is not an ncclCollConfig_t", [&] { ncclCollConfig_t k = NCCL_COLLCONFIG_INITIALIZER; k.size = 40; return ncclAlltoAllConfig(c.a, c.b, 4, ncclFloat, c.comm[0], nullptr, &k); }()),
      ROW("ncclGatherConfig", "root 2", IA, "root 2 out of range", ncclGatherConfig(c.a, c.b, 4, ncclFloat, 2, c.comm[0], nullptr, nullptr)),
      ROW("ncclScatterConfig", "empty name", IA, "an empty name", [&] { ncclCollConfig_t k = NCCL_COLLCONFIG_INITIALIZER; k.algSelection = "direct,"; return ncclScatterConfig(c.a, c.b, 4, ncclFloat, 0, c.comm[0], nullptr, &k); }()),
      ROW("ncclSetEncryption", "NULL config", IA, "config is NULL", ncclSetEncryption(nullptr)),
      ROW("ncclSetEncryption", "config without initializer", IA, "NCCL_ENCRYPTION_CONFIG_INITIALIZER", [&] { ncclEncryptionConfig_t e{}; return ncclSetEncryption(&e); }()),
      ROW("ncclSetEncryption", "mode 7", IA, "mode 7", [&] { ncclEncryptionConfig_t e = NCCL_ENCRYPTION_CONFIG_INITIALIZER; e.mode = 7; return ncclSetEncryption(&e); }()),
      ROW("ncclSetEncryption", "PSK NULL", IA, "psk NULL", [&] { ncclEncryptionConfig_t e = NCCL_ENCRYPTION_CONFIG_INITIALIZER; e.mode = NCCL_ENCRYPTION_MODE_PSK; return ncclSetEncryption(&e); }()),
      ROW("ncclSetEncryption", "PSK under 32 bytes", IA, "at least 32 are required", [&] { ncclEncryptionConfig_t e = NCCL_ENCRYPTION_CONFIG_INITIALIZER; e.mode = NCCL_ENCRYPTION_MODE_PSK; e.psk = "short"; return ncclSetEncryption(&e); }()),
      ROW("ncclGroupEnd", "after a call refused in the group: runs none of it", IA, "invalid datatype", [&] {
        ncclGroupStart();
        if (ncclAllReduce(c.a, c.b, 4, ncclNumTypes, ncclSum, c.comm[0], nullptr) != ncclInvalidArgument)
          return ncclSuccess;  // the call itself fails at once: else the row fails
        return ncclGroupEnd(); }()),
  };
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Both ranks' allreduce, driven together from this thread.
bool still_works(Ctx& c) {
  float in[2][100], out[2][100];
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < 100; ++i) in[r][i] = float(r + 1) * float(i), out[r][i] = -1;
  if (ncclGroupStart() != ncclSuccess) return false;
  for (int r = 0; r < 2; ++r) ncclAllReduce(in[r], out[r], 100, ncclFloat, ncclSum, c.comm[r], nullptr);
  if (ncclGroupEnd() != ncclSuccess) return false;
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < 100; ++i)
      if (out[r][i] != 3.f * float(i)) return false;
  return true;
}

}  // namespace

TEST_CASE("bad-input table: every public function, exact codes, messages, comm still works", "[validation]") {
  std::string log_path = fmt::format("/tmp/braid-validation-{}.log", getpid());
  setenv("NCCL_DEBUG", "WARN", 1);
  setenv("NCCL_DEBUG_FILE", log_path.c_str(), 1);
  ncclResetDebugInit();

  Ctx c;
  REQUIRE(ncclCommInitAll(c.comm, 2, nullptr) == ncclSuccess);
  ncclComm_t gone[1];
  REQUIRE(ncclCommInitAll(gone, 1, nullptr) == ncclSuccess);
  REQUIRE(ncclCommDestroy(gone[0]) == ncclSuccess);
  c.destroyed = gone[0];
  REQUIRE(ncclGetUniqueId(&c.id) == ncclSuccess);
  c.corrupt = c.id;
  std::memset(c.corrupt.internal, 0x33, 24);
  REQUIRE(ncclMemAlloc(&c.mem, 8192) == ncclSuccess);

  std::vector<Row> rows = table();
  size_t checked = 0;
  for (const Row& row : rows) {
    INFO(row.function << ": " << row.case_name);
    size_t log_before = read_file(log_path).size();
    ncclResult_t got = row.call(c);
    CHECK(int(got) == int(row.want));
    if (row.want != ncclSuccess) {
      std::string last = ncclGetLastError(nullptr);
      INFO("ncclGetLastError: " << last);
      CHECK(last.find(row.function) != std::string::npos);
      CHECK(last.find(row.message) != std::string::npos);
      std::string logged = read_file(log_path).substr(log_before);
      INFO("NCCL_DEBUG=WARN output: " << logged);
      CHECK(logged.find(" WARN ") != std::string::npos);
      CHECK(logged.find(row.message) != std::string::npos);
    }
    CHECK(still_works(c));
    ++checked;
  }
  std::printf("bad-input table: %zu rows checked over %zu functions\n", checked, [&] {
    std::vector<std::string> names;
    for (const Row& r : rows)
      if (std::find(names.begin(), names.end(), r.function) == names.end()) names.push_back(r.function);
    return names.size();
  }());

  // Ops on a revoked communicator: ncclInvalidUsage with a clear message.
  ncclComm_t pair[2];
  REQUIRE(ncclCommInitAll(pair, 2, nullptr) == ncclSuccess);
  REQUIRE(ncclCommRevoke(pair[0], NCCL_REVOKE_DEFAULT) == ncclSuccess);
  CHECK(ncclAllReduce(c.a, c.b, 4, ncclFloat, ncclSum, pair[0], nullptr) == ncclInvalidUsage);
  CHECK(std::string(ncclGetLastError(nullptr)).find("revoked") != std::string::npos);
  CHECK(ncclRecv(c.b, 4, ncclFloat, 1, pair[0], nullptr) == ncclInvalidUsage);
  CHECK(ncclCommFinalize(pair[0]) == ncclInvalidArgument);
  CHECK(ncclCommDestroy(pair[0]) == ncclSuccess);
  CHECK(ncclCommDestroy(pair[1]) == ncclSuccess);

  // ncclGetErrorString for every code and an unknown one.
  for (int r = 0; r < ncclNumResults; ++r) CHECK(std::strlen(ncclGetErrorString(ncclResult_t(r))) > 0);
  CHECK(std::string(ncclGetErrorString(ncclResult_t(99))) == "unknown result code");

  CHECK(ncclMemFree(c.mem) == ncclSuccess);
  CHECK(ncclCommDestroy(c.comm[0]) == ncclSuccess);
  CHECK(ncclCommDestroy(c.comm[1]) == ncclSuccess);
  unsetenv("NCCL_DEBUG");
  unsetenv("NCCL_DEBUG_FILE");
  ncclResetDebugInit();
  std::remove(log_path.c_str());
}

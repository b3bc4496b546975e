// braid's GFD encoder and decoder (src/devapi/gin_gfd.h) against NVIDIA's
// bitfield definitions (nccl_device/gin/proxy/gin_proxy_device_host_common.h).
// device_build below is buildGfd of nccl_device/gin/proxy/gin_proxy.h, the
// device function every put/putValue/signal goes through, written here
// field for field through NVIDIA's union so that it compiles for the host:
// its bit positions are the header's, not braid's.
#include <catch2/catch.hpp>

#include <cstring>

#include <nccl_device/gin/proxy/gin_proxy_device_host_common.h>

#include "src/devapi/gin_gfd.h"

using namespace braid::devapi;

static_assert(int(ncclGinProxyOpPut) == kGfdPut && int(ncclGinProxyOpWithInline) == kGfdWithInline &&
              int(ncclGinProxyOpWithCounter) == kGfdWithCounter &&
              int(ncclGinProxyOpWithSignalInc) == kGfdWithSignalInc &&
              int(ncclGinProxyOpWithSignalAdd) == kGfdWithSignalAdd);
static_assert(sizeof(ncclGinProxyGfd_t) == kGfdBytes && ncclGinProxyGfdQwords == kGfdQwords);

namespace {

// buildGfd, with the device's uninitialised build buffer made explicit:
// `garbage` fills it first, so bits buildGfd leaves alone hold junk.
ncclGinProxyGfd_t device_build(uint8_t garbage, uint8_t op, uint64_t srcVal, size_t valBytes, bool hasInline,
                               size_t srcOff, uint64_t srcHandle, size_t dstOff, uint64_t dstHandle, size_t size,
                               uint16_t counterId, uint16_t signalId, uint64_t signalVal) {
  ncclGinProxyGfd_t gfd;
  std::memset(&gfd, garbage, sizeof(gfd));
  gfd.qword[ncclGinProxyGfdHeader].header.flag = 1;
  gfd.qword[ncclGinProxyGfdHeader].header.op = op;
  gfd.qword[ncclGinProxyGfdHeader].header.size = (uint64_t)size;
  if (hasInline) {
    gfd.qword[ncclGinProxyGfdInlineLow].inlineLow.flag = 1;
    gfd.qword[ncclGinProxyGfdInlineLow].inlineLow.inlineValLow = (uint32_t)srcVal;
    gfd.qword[ncclGinProxyGfdInlineHigh].inlineHigh.flag = 1;
    if (valBytes > 4) gfd.qword[ncclGinProxyGfdInlineLow].inlineLow.inlineValLow2 = srcVal >> 32;
    if (valBytes > 6) gfd.qword[ncclGinProxyGfdInlineHigh].inlineHigh.inlineValHigh = srcVal >> 48;
  } else {
    gfd.qword[ncclGinProxyGfdSrcOff].srcOff.flag = 1;
    gfd.qword[ncclGinProxyGfdSrcOff].srcOff.srcOff = (uint64_t)srcOff;
    gfd.qword[ncclGinProxyGfdSrcHandle].srcHandle.flag = 1;
    gfd.qword[ncclGinProxyGfdSrcHandle].srcHandle.srcHandle = srcHandle;
  }
  gfd.qword[ncclGinProxyGfdDstOff].dstOff.flag = 1;
  gfd.qword[ncclGinProxyGfdDstOff].dstOff.dstOff = (uint64_t)dstOff;
  gfd.qword[ncclGinProxyGfdDstHandle].dstHandle.flag = 1;
  gfd.qword[ncclGinProxyGfdDstHandle].dstHandle.dstHandle = dstHandle;
  gfd.qword[ncclGinProxyGfdCompletion].completion.flag = 1;
  gfd.qword[ncclGinProxyGfdCompletion].completion.counterId = counterId;
  gfd.qword[ncclGinProxyGfdCompletion].completion.signalId = signalId;
  gfd.qword[ncclGinProxyGfdCompletion].completion.signalValLow = (uint16_t)signalVal;
  gfd.qword[ncclGinProxyGfdSignalVal].signalVal.flag = 1;
  gfd.qword[ncclGinProxyGfdSignalVal].signalVal.signalValLow2 = (uint16_t)(signalVal >> 16);
  gfd.qword[ncclGinProxyGfdSignalVal].signalVal.signalValHigh = (uint32_t)(signalVal >> 32);
  gfd.qword[ncclGinProxyGfdReserved].flag.v = 1;
  return gfd;
}

Gfd decode(const ncclGinProxyGfd_t& d) {
  uint64_t q[kGfdQwords];
  std::memcpy(q, &d, sizeof(q));
  Gfd g;
  braid::Status s = decode_gfd(q, &g);
  INFO(s.to_string());
  REQUIRE(s.is_ok());
  return g;
}

}  // namespace

TEST_CASE("GFD: the bit positions are NVIDIA's (the research doc's probe values)", "[devapi][gfd][layout]") {
  ncclGinProxyQword_t w;
  w.raw = 0;
  w.header.flag = 1;
  w.header.op = 0x3f;
  CHECK(w.raw == 0x7f);
  w.raw = 0;
  w.header.size = 1;
  CHECK(w.raw == 0x80);
  w.raw = 0;
  w.completion.counterId = 0xAAAA;
  w.completion.signalId = 0xBBBB;
  w.completion.signalValLow = 0xCCCC;
  CHECK(w.raw == 0x00ccccbbbbaaaa00ull);
}

TEST_CASE("GFD: braid's encoder writes what the device's buildGfd writes", "[devapi][gfd][layout]") {
  // A put with a counter and a signal add of a full 64-bit value.
  Gfd put;
  put.op = kGfdPut | kGfdWithCounter | kGfdWithSignalAdd;
  put.size = (uint64_t(1) << 40) + 3;
  put.src_off = (uint64_t(1) << 62) + 5;
  put.src_handle = 0x7123456789abcdefull;
  put.dst_off = 0x1000;
  put.dst_handle = 0x42;
  put.counter_id = 0xfedc;
  put.signal_id = 0x1234;
  put.signal_value = 0x8877665544332211ull;
  uint64_t mine[kGfdQwords];
  encode_gfd(put, mine);
  ncclGinProxyGfd_t theirs = device_build(0, put.op, 0, 0, false, put.src_off, put.src_handle, put.dst_off,
                                          put.dst_handle, put.size, put.counter_id, put.signal_id, put.signal_value);
  CHECK(std::memcmp(mine, &theirs, sizeof(mine)) == 0);

  // putValue of every width, inline.
  for (size_t bytes : {1, 2, 4, 8}) {
    Gfd v;
    v.op = kGfdPut | kGfdWithInline | kGfdWithSignalInc;
    v.size = bytes;
    v.inline_value = 0x0102030405060708ull & (bytes == 8 ? ~0ull : (1ull << (8 * bytes)) - 1);
    v.dst_off = 24;
    v.dst_handle = 9;
    v.signal_id = 3;
    encode_gfd(v, mine);
    theirs = device_build(0, v.op, v.inline_value, bytes, true, 0, 0, v.dst_off, v.dst_handle, bytes, 0, v.signal_id, 0);
    INFO(bytes << "-byte inline value");
    CHECK(std::memcmp(mine, &theirs, sizeof(mine)) == 0);
  }
}

TEST_CASE("GFD: braid decodes what the device writes, ignoring the bits it leaves as junk", "[devapi][gfd][layout]") {
  for (uint8_t junk : {uint8_t(0), uint8_t(0xff), uint8_t(0xa5)}) {
    INFO("junk byte " << int(junk));
    Gfd g = decode(device_build(junk, kGfdPut | kGfdWithSignalAdd | kGfdWithCounter, 0, 0, false, 128, 0x55, 4096 + 8,
                                0x66, 1000, 7, 9, 0xdeadbeefcafef00dull));
    CHECK(g.size == 1000);
    CHECK(g.src_off == 128);
    CHECK(g.src_handle == 0x55);
    CHECK(g.dst_off == 4096 + 8);
    CHECK(g.dst_handle == 0x66);
    CHECK(g.counter_id == 7);
    CHECK(g.signal_id == 9);
    CHECK(g.signal_add() == 0xdeadbeefcafef00dull);
    CHECK(!g.has_inline());

    // putValue<uint32_t>: buildGfd leaves the value's upper bytes unwritten.
    Gfd v = decode(device_build(junk, kGfdPut | kGfdWithInline, 0x89abcdefu, 4, true, 0, 0, 16, 0x66, 4, 0, 0, 0));
    CHECK(v.inline_value == 0x89abcdefu);
    CHECK(!v.has_signal());
    Gfd v2 = decode(device_build(junk, kGfdPut | kGfdWithInline, 0xbeef, 2, true, 0, 0, 16, 0x66, 2, 0, 0, 0));
    CHECK(v2.inline_value == 0xbeef);
    Gfd v8 = decode(device_build(junk, kGfdPut | kGfdWithInline, 0x1122334455667788ull, 8, true, 0, 0, 16, 0x66, 8,
                                 0, 0, 0));
    CHECK(v8.inline_value == 0x1122334455667788ull);

    // signal(): size 0, null handles, SignalInc.
    Gfd s = decode(device_build(junk, kGfdPut | kGfdWithSignalInc, 0, 0, false, 0, 0, 0, 0, 0, 0, 11, 0));
    CHECK(s.size == 0);
    CHECK(s.signal_id == 11);
    CHECK(s.signal_add() == 1);
  }
}

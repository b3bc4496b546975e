// braid's GFD encoder and decoder (src/devapi/gin_gfd.h) against NVIDIA's
// bitfield definitions (nccl_device/gin/proxy/gin_proxy_device_host_common.h).
// device_build below is buildGfd of nccl_device/gin/proxy/gin_proxy.h, the
// device function every put/putValue/signal goes through, written here
// field for field through NVIDIA's union so that it compiles for the host:
// its bit positions are the header's, not braid's.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include <nccl_device/gin/proxy/gin_proxy_device_host_common.h>

#include "src/devapi/gin_gfd.h"

using namespace braid::devapi;

static_assert(int(ncclGinProxyOpPut) == kGfdPut && int(ncclGinProxyOpWithInline) == kGfdWithInline &&
              int(ncclGinProxyOpWithCounter) == kGfdWithCounter &&
              int(ncclGinProxyOpWithSignalInc) == kGfdWithSignalInc &&
              int(ncclGinProxyOpWithSignalAdd) == kGfdWithSignalAdd);
static_assert(sizeof(ncclGinProxyGfd_t) == gfd_bytes(GfdFormat::kV1) && ncclGinProxyGfdQwords == kGfdQwords);

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
  braid::Status s = decode_gfd(GfdFormat::kV1, q, &g);
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
  encode_gfd(GfdFormat::kV1, put, mine);
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
    encode_gfd(GfdFormat::kV1, v, mine);
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

// NCCL 2.30's 128-byte descriptors.  NVIDIA's installed headers are
// 2.28.9's, so the reference here is numbers: the 16 qwords 2.30.7's
// buildGfd (github NVIDIA/nccl, src/include/nccl_device/gin/proxy) writes
// into a build buffer filled with 0xa5 first, measured by a host probe
// compiled against those headers.  Bits buildGfd leaves alone keep 0xa5.
namespace {

struct Golden {
  const char* what;
  Gfd g;
  uint64_t q[16];
};

Gfd make(uint16_t op, uint64_t size, uint64_t src_off, uint64_t src_handle, uint64_t dst_off, uint64_t dst_handle,
         uint32_t counter, uint32_t signal, uint64_t signal_value, bool strong) {
  Gfd g;
  g.op = op;
  g.size = size;
  g.src_off = src_off;
  g.src_handle = src_handle;
  g.dst_off = dst_off;
  g.dst_handle = dst_handle;
  g.counter_id = counter;
  g.signal_id = signal;
  g.signal_value = signal_value;
  g.strong_signal = strong;
  return g;
}

constexpr uint64_t kA5 = 0xa5a5a5a5a5a5a5a5ull;

std::vector<Golden> goldens() {
  std::vector<Golden> v;
  v.push_back({"put with a counter and a strong signal add, ids past 16 bits",
               make(kGfdPut | kGfdWithCounter | kGfdWithSignalAdd, 4096, 0x123456789a, 7, 0x42, 9, 0x7abcde, 0xfedcba,
                    0x1122334455667788ull, true),
               {0x0000000000080025ull, 0x0000002468acf135ull, 0x000000000000000full, 0x0000000000000085ull,
                0x0000000000000013ull, 0x7788fedcbaf579bdull, 0xa5112233445566a7ull, 0xa5a5a5a5a50015a5ull, kA5, kA5,
                kA5, kA5, kA5, kA5, kA5, kA5}});
  Gfd u64 = make(kGfdPut | kGfdWithInline | kGfdWithSignalInc, 8, 0, 0, 0x10, 3, 0, 5, 0, false);
  u64.inline_value = 0x0807060504030201ull;
  v.push_back({"putValue of 8 bytes with a signal increment", u64,
               {0x0000000000000425ull, 0xa5060504030201a5ull, 0xa5a5a5a5a50807a5ull, 0x0000000000000021ull,
                0x0000000000000007ull, 0x0000000005000001ull, 0xa5000000000000a5ull, 0xa5a5a5a5a5000ba5ull, kA5, kA5,
                kA5, kA5, kA5, kA5, kA5, kA5}});
  Gfd u32 = make(kGfdPut | kGfdWithInline, 4, 0, 0, 0x20, 3, 0, 0, 0, false);
  u32.inline_value = 0xdeadbeef;
  v.push_back({"putValue of 4 bytes", u32,
               {0x0000000000000225ull, 0xa5a5a5deadbeefa5ull, kA5, 0x0000000000000041ull, 0x0000000000000007ull,
                0x0000000000000001ull, 0xa5000000000000a5ull, 0xa5a5a5a5a50003a5ull, kA5, kA5, kA5, kA5, kA5, kA5, kA5,
                kA5}});
  Gfd va = make(kGfdVaSignal | kGfdWithSignalAdd, 0, 0, 0, 0, 0, 0, 0, 77, true);
  va.va_signal_off = 0x1008;
  va.va_signal_handle = 11;
  v.push_back({"a strong VA signal add", va,
               {0x0000000000000025ull, 0x0000000000002011ull, 0x0000000000000017ull, 0x0000000000000001ull,
                0x0000000000000001ull, 0x004d000000000001ull, 0xa5000000000000a7ull, 0xa5a5a5a5a50030a5ull, kA5, kA5,
                kA5, kA5, kA5, kA5, kA5, kA5}});
  v.push_back({"a get", make(kGfdGet, 1000, 0x300, 4, 0x500, 6, 0, 0, 0, false),
               {0x000000000001f425ull, 0x0000000000000601ull, 0x0000000000000009ull, 0x0000000000000a01ull,
                0x000000000000000dull, 0x0000000000000001ull, 0xa5000000000000a5ull, 0xa5a5a5a5a50040a5ull, kA5, kA5,
                kA5, kA5, kA5, kA5, kA5, kA5}});
  v.push_back({"a flush", make(kGfdFlush, 0, 0, 0, 0, 0, 0, 0, 0, false),
               {0x0000000000000025ull, kA5, kA5, kA5, kA5, kA5, kA5, 0xa5a5a5a5a50080a5ull, kA5, kA5, kA5, kA5, kA5,
                kA5, kA5, kA5}});
  return v;
}

}  // namespace

TEST_CASE("GFD v2: braid's encoder writes what 2.30's buildGfd writes", "[devapi][gfd][layout][v230]") {
  for (const Golden& golden : goldens()) {
    INFO(golden.what);
    uint64_t mine[16];
    encode_gfd(GfdFormat::kV2, golden.g, mine);
    for (int i = 0; i < 16; ++i) {
      INFO("qword " << i);
      // Where buildGfd wrote nothing the golden keeps the junk and braid's
      // encoder writes 0: the two may differ only in bits the junk set and
      // braid left clear.
      const uint64_t diff = mine[i] ^ golden.q[i];
      CHECK((diff & (mine[i] | ~kA5)) == 0);
    }
    Gfd back;
    REQUIRE(decode_gfd(GfdFormat::kV2, mine, &back).is_ok());
    CHECK(back.op == golden.g.op);
    CHECK(back.size == golden.g.size);
  }
}

TEST_CASE("GFD v2: braid decodes what 2.30's buildGfd writes, junk included", "[devapi][gfd][layout][v230]") {
  for (const Golden& golden : goldens()) {
    INFO(golden.what);
    Gfd g;
    braid::Status s = decode_gfd(GfdFormat::kV2, golden.q, &g);
    INFO(s.to_string());
    REQUIRE(s.is_ok());
    CHECK(g.op == golden.g.op);
    CHECK(g.size == golden.g.size);
    if (golden.g.is_flush()) continue;
    CHECK(g.dst_off == golden.g.dst_off);
    CHECK(g.dst_handle == golden.g.dst_handle);
    if (g.has_inline()) {
      CHECK(g.inline_value == golden.g.inline_value);
    } else if (g.is_va_signal()) {
      CHECK(g.va_signal_off == golden.g.va_signal_off);
      CHECK(g.va_signal_handle == golden.g.va_signal_handle);
    } else {
      CHECK(g.src_off == golden.g.src_off);
      CHECK(g.src_handle == golden.g.src_handle);
    }
    if (g.has_counter()) CHECK(g.counter_id == golden.g.counter_id);
    if (g.has_signal()) {
      CHECK(g.signal_add() == golden.g.signal_add());
      CHECK(g.strong_signal == golden.g.strong_signal);
      if (!g.is_va_signal()) CHECK(g.signal_id == golden.g.signal_id);
    }
  }
}

// 2.30.3's and 2.30.4's buildGfd (NCCL_GIN_PROXY_GFD_VERSION 1) writes the
// same 128 bytes as 2.30.7's but for the version, and leaves q6's bit 1
// (2.30.7's strong-signal flag, their reserved bits) as junk: each golden
// so changed decodes to the same descriptor, its signal strong.
TEST_CASE("GFD v2: 2.30.3's and 2.30.4's descriptors (version 1) decode as 2.30.7's, every signal strong",
          "[devapi][gfd][v230]") {
  for (const Golden& golden : goldens()) {
    for (uint64_t junk_bit : {0, 2}) {
      INFO(golden.what << ", q6 bit 1 " << junk_bit / 2);
      uint64_t q[16];
      std::memcpy(q, golden.q, sizeof q);
      q[0] = (q[0] & ~uint64_t(0x1e)) | (uint64_t(1) << 1);
      q[6] = (q[6] & ~uint64_t(2)) | junk_bit;
      Gfd early, late;
      REQUIRE(decode_gfd(GfdFormat::kV2, q, &early).is_ok());
      REQUIRE(decode_gfd(GfdFormat::kV2, golden.q, &late).is_ok());
      if (late.has_signal()) CHECK(early.strong_signal);
      // Every other field the op carries alike: the two encode alike.
      late.strong_signal = early.strong_signal;
      uint64_t a[16], b[16];
      encode_gfd(GfdFormat::kV2, early, a);
      encode_gfd(GfdFormat::kV2, late, b);
      CHECK(std::memcmp(a, b, sizeof a) == 0);
    }
  }
}

TEST_CASE("GFD v2: what no 2.30 device posts is refused", "[devapi][gfd][v230]") {
  const std::vector<Golden> all = goldens();
  const uint64_t* put = all[0].q;
  auto refused = [](const uint64_t* q, const char* says) {
    Gfd g;
    braid::Status s = decode_gfd(GfdFormat::kV2, q, &g);
    INFO(s.to_string());
    CHECK(s.code() == ncclInvalidArgument);
    CHECK(s.message().find(says) != std::string::npos);
  };
  uint64_t q[16];
  for (uint64_t version : {0, 3, 15}) {  // 1 is 2.30.3's and 2.30.4's, 2 is 2.30.7's
    std::memcpy(q, put, sizeof q);
    q[0] = (q[0] & ~uint64_t(0x1e)) | (version << 1);
    refused(q, ("version " + std::to_string(version)).c_str());
  }
  std::memcpy(q, put, sizeof q);
  q[7] = (q[7] & ~uint64_t(0xffff00)) | (uint64_t(kGfdPut | kGfdGet) << 8);
  refused(q, "not one of");
  q[7] = (q[7] & ~uint64_t(0xffff00)) | (uint64_t(0x100) << 8);
  refused(q, "unknown op bits");
  q[7] = (q[7] & ~uint64_t(0xffff00)) | (uint64_t(kGfdGet | kGfdWithCounter) << 8);
  refused(q, "no modifiers");
  q[7] = (q[7] & ~uint64_t(0xffff00)) | (uint64_t(kGfdVaSignal) << 8);
  refused(q, "SignalInc or SignalAdd");
  std::memcpy(q, all[3].q, sizeof q);  // the VA signal, its word moved off 8-byte alignment
  q[1] = 1 | (uint64_t(0x1004) << 1);
  refused(q, "8-byte aligned");
  std::memcpy(q, all[4].q, sizeof q);  // the get, from a null window
  q[2] = 1;
  refused(q, "null window");
  // Not complete until all 16 flags are set (the last 8 carry nothing else).
  std::memcpy(q, put, sizeof q);
  q[12] &= ~uint64_t(1);
  CHECK(!gfd_complete(GfdFormat::kV2, q));
  CHECK(gfd_complete(GfdFormat::kV1, q));
}

// The GIN proxy descriptor (GFD): what a kernel posts for each put,
// putValue, signal, get or flush, in the two formats of NCCL's proxy
// backend.  Every qword carries a valid flag in bit 0, and the device
// writes them as 16-byte stores in no promised order
// (nccl_device/gin/proxy/gin_proxy.h, buildGfd/postGfd): the host sees a
// descriptor only once every flag is set.
//
// Format 1, NCCL 2.28.9: 64 bytes, 8 qwords.
//   q0  flag | op:6 | size:57          op bits below; Put always set
//   q1  flag | srcOff:63               with Inline: bytes 1-4 value[0:32),
//                                      bytes 5-6 value[32:48)
//   q2  flag | srcHandle:63            with Inline: bytes 1-2 value[48:64)
//   q3  flag | dstOff:63
//   q4  flag | dstHandle:63
//   q5  flag, bytes 1-2 counterId, 3-4 signalId, 5-6 signal value[0:16)
//   q6  flag, bytes 1-2 signal value[16:32), bytes 3-6 value[32:64)
//   q7  flag
// Format 2, NCCL 2.30 (GFD version 2 from 2.30.7, 1 in 2.30.3-2.30.4):
// 128 bytes, 16 qwords.
//   q0  flag | version:4 (= 2, or 1) | 2 junk bits | size:57
//   q1-q4 as format 1; a VA signal puts its word's offset in q1 and its
//       window in q2
//   q5  flag | counterId:23 | signalId:24 | signal value[0:16)
//   q6  flag, bit 1 strong signal (version 2; version 1's signals are all
//       strong), bytes 1-2 value[16:32), 3-6 value[32:64)
//   q7  flag, bytes 1-2 op (16 bits); q8-q15 flags only
//   The ops: Put (with Inline, Counter, SignalInc or SignalAdd), VASignal
//   (SignalInc or SignalAdd to a 64-bit word in a window; no payload),
//   Get (size bytes of the target's window srcHandle/srcOff into this
//   rank's dstHandle/dstOff), Flush (no fields).
// Bits the device leaves unset hold garbage (its build buffer is not
// cleared), so decode reads only the fields the op says are there.
// encode_gfd writes exactly what buildGfd writes, for braid's own host
// producers and for tests (checked against NVIDIA's bitfields and
// against values measured from 2.30.7's in tests/devapi/test_gfd_layout.cc).
#pragma once

#include <cstddef>
#include <cstdint>

#include "src/base/status.h"

namespace braid::devapi {

enum class GfdFormat : uint8_t {
  kV1,  // NCCL 2.28.9: 64 bytes
  kV2,  // NCCL 2.30: 128 bytes, GFD version 2 (1 before 2.30.7)
};
constexpr int kGfdQwords = 8;  // format 1
constexpr int kGfdMaxQwords = 16;
constexpr int gfd_qwords(GfdFormat f) { return f == GfdFormat::kV2 ? 16 : 8; }
constexpr size_t gfd_bytes(GfdFormat f) { return size_t(gfd_qwords(f)) * 8; }

enum GfdOp : uint16_t {  // ncclGinProxyOp_t
  kGfdPut = 1,
  kGfdWithInline = 2,
  kGfdWithCounter = 4,
  kGfdWithSignalInc = 8,
  kGfdWithSignalAdd = 16,
  kGfdVaSignal = 32,  // format 2 only, as the three below
  kGfdGet = 64,
  kGfdFlush = 128,
};

struct Gfd {
  uint16_t op = kGfdPut;
  uint64_t size = 0;          // bytes; 0 with no handles: signal only
  uint64_t src_off = 0;       // Put without inline: this rank's; Get: the target's
  uint64_t src_handle = 0;
  uint64_t inline_value = 0;  // with inline: the value's `size` low bytes
  uint64_t dst_off = 0;       // Put: the target's; Get: this rank's
  uint64_t dst_handle = 0;
  uint32_t counter_id = 0;    // 16 bits in format 1, 23 in format 2
  uint32_t signal_id = 0;     // 16 bits in format 1, 24 in format 2
  uint64_t signal_value = 0;  // SignalAdd's operand; SignalInc adds 1
  uint64_t va_signal_off = 0;  // VASignal: the word, in the target's window va_signal_handle
  uint64_t va_signal_handle = 0;
  bool strong_signal = false;  // format 2's flag; braid's signals are all strong (in order)

  bool has_inline() const { return op & kGfdWithInline; }
  bool has_counter() const { return op & kGfdWithCounter; }
  bool has_signal() const { return op & (kGfdWithSignalInc | kGfdWithSignalAdd); }
  bool is_put() const { return op & kGfdPut; }
  bool is_va_signal() const { return op & kGfdVaSignal; }
  bool is_get() const { return op & kGfdGet; }
  bool is_flush() const { return op & kGfdFlush; }
  uint64_t signal_add() const { return (op & kGfdWithSignalInc) ? 1 : signal_value; }
};

// Writes the qwords the device's buildGfd writes for `g` (gfd_qwords(f) of them).
void encode_gfd(GfdFormat f, const Gfd& g, uint64_t* out);

// Every valid flag set: the descriptor is complete.
bool gfd_complete(GfdFormat f, const uint64_t* q);

// Decodes a complete descriptor, refusing what no device posts: a wrong
// version, unknown op bits, no kind or two (Put, VASignal, Get, Flush),
// both signal kinds, an inline value of 0 or over 8 bytes, a payload
// without its windows, a VA signal word not 8-byte aligned, offsets or
// sizes that overflow.
Status decode_gfd(GfdFormat f, const uint64_t* q, Gfd* out);

}  // namespace braid::devapi

// The GIN proxy descriptor (GFD) of NCCL 2.28.9, format version 100.
//
// A kernel posts each put, putValue or signal as 64 bytes: 8 little-endian
// qwords, bit 0 of each a valid flag, written as four 16-byte stores in no
// promised order (nccl_device/gin/proxy/gin_proxy.h, buildGfd/postGfd).
// The host sees a descriptor only once all 8 flags are set.  Layout:
//   q0  flag | op:6 | size:57          op bits below; Put always set
//   q1  flag | srcOff:63               with Inline: bytes 1-4 value[0:32),
//                                      bytes 5-6 value[32:48)
//   q2  flag | srcHandle:63            with Inline: bytes 1-2 value[48:64)
//   q3  flag | dstOff:63
//   q4  flag | dstHandle:63
//   q5  flag, bytes 1-2 counterId, 3-4 signalId, 5-6 signal value[0:16)
//   q6  flag, bytes 1-2 signal value[16:32), bytes 3-6 value[32:64)
//   q7  flag
// Bits the device leaves unset hold garbage (its build buffer is not
// cleared), so decode reads only the fields the op says are there.
// encode_gfd writes exactly what buildGfd writes, for braid's own host
// producers and for tests (checked against NVIDIA's bitfields in
// tests/devapi/test_gfd_layout.cc).
#pragma once

#include <cstddef>
#include <cstdint>

#include "src/base/status.h"

namespace braid::devapi {

constexpr int kGfdQwords = 8;
constexpr size_t kGfdBytes = 64;

enum GfdOp : uint8_t {  // ncclGinProxyOp_t
  kGfdPut = 1,
  kGfdWithInline = 2,
  kGfdWithCounter = 4,
  kGfdWithSignalInc = 8,
  kGfdWithSignalAdd = 16,
};

struct Gfd {
  uint8_t op = kGfdPut;
  uint64_t size = 0;          // bytes; 0 with no handles: signal only
  uint64_t src_off = 0;       // not with inline
  uint64_t src_handle = 0;    // not with inline
  uint64_t inline_value = 0;  // with inline: the value's `size` low bytes
  uint64_t dst_off = 0;
  uint64_t dst_handle = 0;
  uint16_t counter_id = 0;
  uint16_t signal_id = 0;
  uint64_t signal_value = 0;  // SignalAdd's operand; SignalInc adds 1

  bool has_inline() const { return op & kGfdWithInline; }
  bool has_counter() const { return op & kGfdWithCounter; }
  bool has_signal() const { return op & (kGfdWithSignalInc | kGfdWithSignalAdd); }
  uint64_t signal_add() const { return (op & kGfdWithSignalInc) ? 1 : signal_value; }
};

// Writes the 8 qwords the device's buildGfd writes for `g`.
void encode_gfd(const Gfd& g, uint64_t out[kGfdQwords]);

// All 8 valid flags set: the descriptor is complete.
bool gfd_complete(const uint64_t q[kGfdQwords]);

// Decodes a complete descriptor, refusing what no device posts: unknown op
// bits, no Put bit, both signal kinds, an inline value of 0 or over 8
// bytes, a payload without a destination, offsets or sizes that overflow.
Status decode_gfd(const uint64_t q[kGfdQwords], Gfd* out);

}  // namespace braid::devapi

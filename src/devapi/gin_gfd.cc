// GFD bit packing.  Byte-granular fields (inline value, completion,
// signal value) sit at byte offsets 1.. of their qword, as NVIDIA's packed
// structs put them after a one-byte flag field.
#include "src/devapi/gin_gfd.h"

namespace braid::devapi {

namespace {

constexpr uint64_t kFlag = 1;
constexpr uint8_t kKnownOps = kGfdPut | kGfdWithInline | kGfdWithCounter | kGfdWithSignalInc | kGfdWithSignalAdd;
constexpr uint64_t kMax63 = (uint64_t(1) << 63) - 1;
constexpr uint64_t kMax57 = (uint64_t(1) << 57) - 1;

uint64_t field(uint64_t q, int byte, int bytes) {
  const uint64_t v = q >> (8 * byte);
  return bytes == 8 ? v : v & ((uint64_t(1) << (8 * bytes)) - 1);
}
uint64_t put_field(uint64_t v, int byte, int bytes) {
  return (v & ((uint64_t(1) << (8 * bytes)) - 1)) << (8 * byte);
}

}  // namespace

void encode_gfd(const Gfd& g, uint64_t q[kGfdQwords]) {
  q[0] = kFlag | (uint64_t(g.op & 0x3f) << 1) | ((g.size & kMax57) << 7);
  if (g.has_inline()) {
    q[1] = kFlag | put_field(g.inline_value, 1, 4);
    // buildGfd fills the upper parts only for values wider than 4 / 6 bytes.
    if (g.size > 4) q[1] |= put_field(g.inline_value >> 32, 5, 2);
    q[2] = kFlag | (g.size > 6 ? put_field(g.inline_value >> 48, 1, 2) : 0);
  } else {
    q[1] = kFlag | ((g.src_off & kMax63) << 1);
    q[2] = kFlag | ((g.src_handle & kMax63) << 1);
  }
  q[3] = kFlag | ((g.dst_off & kMax63) << 1);
  q[4] = kFlag | ((g.dst_handle & kMax63) << 1);
  q[5] = kFlag | put_field(g.counter_id, 1, 2) | put_field(g.signal_id, 3, 2) | put_field(g.signal_value, 5, 2);
  q[6] = kFlag | put_field(g.signal_value >> 16, 1, 2) | put_field(g.signal_value >> 32, 3, 4);
  q[7] = kFlag;
}

bool gfd_complete(const uint64_t q[kGfdQwords]) {
  for (int i = 0; i < kGfdQwords; ++i)
    if (!(q[i] & kFlag)) return false;
  return true;
}

Status decode_gfd(const uint64_t q[kGfdQwords], Gfd* out) {
  if (!gfd_complete(q)) return BRAID_ERROR(ncclInternalError, "GIN descriptor decoded before all 8 flags were set");
  Gfd g;
  const uint8_t op = uint8_t((q[0] >> 1) & 0x3f);
  g.op = op;
  g.size = q[0] >> 7;
  if (op & ~kKnownOps) return BRAID_ERROR(ncclInvalidArgument, "GIN descriptor with unknown op bits {:#x}", op);
  if (!(op & kGfdPut)) return BRAID_ERROR(ncclInvalidArgument, "GIN descriptor op {:#x} lacks the Put bit", op);
  if ((op & kGfdWithSignalInc) && (op & kGfdWithSignalAdd))
    return BRAID_ERROR(ncclInvalidArgument, "GIN descriptor op {:#x} both increments and adds to a signal", op);
  if (g.has_inline()) {
    if (g.size == 0 || g.size > 8)
      return BRAID_ERROR(ncclInvalidArgument, "GIN descriptor with an inline value of {} bytes (1 to 8)", g.size);
    g.inline_value = field(q[1], 1, 4);
    if (g.size > 4) g.inline_value |= field(q[1], 5, 2) << 32;
    if (g.size > 6) g.inline_value |= field(q[2], 1, 2) << 48;
    if (g.size < 8) g.inline_value &= (uint64_t(1) << (8 * g.size)) - 1;
  } else {
    g.src_off = q[1] >> 1;
    g.src_handle = q[2] >> 1;
  }
  g.dst_off = q[3] >> 1;
  g.dst_handle = q[4] >> 1;
  if (g.has_counter()) g.counter_id = uint16_t(field(q[5], 1, 2));
  if (g.has_signal()) {
    g.signal_id = uint16_t(field(q[5], 3, 2));
    g.signal_value = field(q[5], 5, 2) | (field(q[6], 1, 2) << 16) | (field(q[6], 3, 4) << 32);
  }
  // A put of 0 bytes is legal (ncclGin::put posts one for an empty
  // message, hasWins set): it moves nothing, and its counter and signal
  // still count.  Its windows are not looked at.
  if (g.size != 0) {
    if (g.dst_handle == 0)
      return BRAID_ERROR(ncclInvalidArgument, "GIN descriptor puts {} bytes to a null window", g.size);
    if (!g.has_inline() && g.src_handle == 0)
      return BRAID_ERROR(ncclInvalidArgument, "GIN descriptor puts {} bytes from a null window", g.size);
    if (g.dst_off > UINT64_MAX - g.size || g.src_off > UINT64_MAX - g.size)
      return BRAID_ERROR(ncclInvalidArgument, "GIN descriptor offsets overflow with {} bytes", g.size);
  }
  *out = g;
  return Status::ok();
}

}  // namespace braid::devapi

// GFD bit packing.  Byte-granular fields (inline value, completion in
// format 1, signal value, format 2's op) sit at byte offsets 1.. of their
// qword, as NVIDIA's packed structs put them after a one-byte flag field;
// format 2's counter and signal ids are bitfields from bit 1.
#include "src/devapi/gin_gfd.h"

namespace braid::devapi {

namespace {

constexpr uint64_t kFlag = 1;
constexpr uint16_t kV1Ops = kGfdPut | kGfdWithInline | kGfdWithCounter | kGfdWithSignalInc | kGfdWithSignalAdd;
constexpr uint16_t kV2Ops = kV1Ops | kGfdVaSignal | kGfdGet | kGfdFlush;
constexpr uint16_t kSignalOps = kGfdWithSignalInc | kGfdWithSignalAdd;
constexpr uint64_t kMax63 = (uint64_t(1) << 63) - 1;
constexpr uint64_t kMax57 = (uint64_t(1) << 57) - 1;
constexpr uint64_t kV2Version = 2;  // NCCL_GIN_PROXY_GFD_VERSION of 2.30.7
// 2.30.3's and 2.30.4's: the same 128 bytes, with no strong-signal bit
// (their signals were all strong, 2.30.7's "legacy" ones).
constexpr uint64_t kV2EarlyVersion = 1;
constexpr int kCounterQword = 5, kSignalQword = 6, kOpQword = 7;

uint64_t field(uint64_t q, int byte, int bytes) {
  const uint64_t v = q >> (8 * byte);
  return bytes == 8 ? v : v & ((uint64_t(1) << (8 * bytes)) - 1);
}
uint64_t put_field(uint64_t v, int byte, int bytes) { return (v & ((uint64_t(1) << (8 * bytes)) - 1)) << (8 * byte); }
uint64_t bits(uint64_t q, int from, int count) { return (q >> from) & ((uint64_t(1) << count) - 1); }
uint64_t put_bits(uint64_t v, int from, int count) { return (v & ((uint64_t(1) << count) - 1)) << from; }

// What the two formats share: q1-q4, the signal value's upper 48 bits, the inline value.
void encode_common(const Gfd& g, uint64_t* q) {
  if (g.has_inline()) {
    q[1] = kFlag | put_field(g.inline_value, 1, 4);
    // buildGfd fills the upper parts only for values wider than 4 / 6 bytes.
    if (g.size > 4) q[1] |= put_field(g.inline_value >> 32, 5, 2);
    q[2] = kFlag | (g.size > 6 ? put_field(g.inline_value >> 48, 1, 2) : 0);
  } else if (g.is_va_signal()) {
    q[1] = kFlag | ((g.va_signal_off & kMax63) << 1);
    q[2] = kFlag | ((g.va_signal_handle & kMax63) << 1);
  } else {
    q[1] = kFlag | ((g.src_off & kMax63) << 1);
    q[2] = kFlag | ((g.src_handle & kMax63) << 1);
  }
  q[3] = kFlag | ((g.dst_off & kMax63) << 1);
  q[4] = kFlag | ((g.dst_handle & kMax63) << 1);
  q[kSignalQword] = kFlag | put_field(g.signal_value >> 16, 1, 2) | put_field(g.signal_value >> 32, 3, 4);
}

Status decode_inline(const uint64_t* q, Gfd* g) {
  if (g->size == 0 || g->size > 8)
    return BRAID_ERROR(ncclInvalidArgument, "GIN descriptor with an inline value of {} bytes (1 to 8)", g->size);
  g->inline_value = field(q[1], 1, 4);
  if (g->size > 4) g->inline_value |= field(q[1], 5, 2) << 32;
  if (g->size > 6) g->inline_value |= field(q[2], 1, 2) << 48;
  if (g->size < 8) g->inline_value &= (uint64_t(1) << (8 * g->size)) - 1;
  return Status::ok();
}

// The checks of a put (both formats), once its fields are decoded.
Status check_put(const Gfd& g) {
  // A put of 0 bytes is legal (ncclGin::put posts one for an empty
  // message, hasWins set): it moves nothing, and its counter and signal
  // still count.  Its windows are not looked at.
  if (g.size == 0) return Status::ok();
  if (g.dst_handle == 0)
    return BRAID_ERROR(ncclInvalidArgument, "GIN descriptor puts {} bytes to a null window", g.size);
  if (!g.has_inline() && g.src_handle == 0)
    return BRAID_ERROR(ncclInvalidArgument, "GIN descriptor puts {} bytes from a null window", g.size);
  if (g.dst_off > UINT64_MAX - g.size || g.src_off > UINT64_MAX - g.size)
    return BRAID_ERROR(ncclInvalidArgument, "GIN descriptor offsets overflow with {} bytes", g.size);
  return Status::ok();
}

// Format 2's kinds: exactly one of Put, VASignal, Get, Flush, each with
// only the modifiers buildGfd gives it.
Status check_v2_kind(uint16_t op) {
  const int kinds = bool(op & kGfdPut) + bool(op & kGfdVaSignal) + bool(op & kGfdGet) + bool(op & kGfdFlush);
  if (kinds != 1)
    return BRAID_ERROR(ncclInvalidArgument, "GIN descriptor op {:#x} is not one of put, VA signal, get and flush", op);
  if ((op & kGfdVaSignal) && (op & ~(kGfdVaSignal | kSignalOps) || !(op & kSignalOps)))
    return BRAID_ERROR(ncclInvalidArgument, "GIN descriptor op {:#x}: a VA signal takes SignalInc or SignalAdd only",
                       op);
  if ((op & (kGfdGet | kGfdFlush)) && (op & ~(kGfdGet | kGfdFlush)))
    return BRAID_ERROR(ncclInvalidArgument, "GIN descriptor op {:#x}: get and flush take no modifiers", op);
  return Status::ok();
}

}  // namespace

void encode_gfd(GfdFormat f, const Gfd& g, uint64_t* q) {
  for (int i = 0; i < gfd_qwords(f); ++i) q[i] = kFlag;
  if (f == GfdFormat::kV1) {
    q[0] = kFlag | (uint64_t(g.op & 0x3f) << 1) | ((g.size & kMax57) << 7);
    encode_common(g, q);
    q[kCounterQword] =
        kFlag | put_field(g.counter_id, 1, 2) | put_field(g.signal_id, 3, 2) | put_field(g.signal_value, 5, 2);
    return;
  }
  q[0] = kFlag | (kV2Version << 1) | ((g.size & kMax57) << 7);
  q[kOpQword] = kFlag | put_field(g.op, 1, 2);
  if (g.is_flush()) return;  // buildGfd stops after the header
  encode_common(g, q);
  q[kCounterQword] =
      kFlag | put_bits(g.counter_id, 1, 23) | put_bits(g.signal_id, 24, 24) | put_field(g.signal_value, 6, 2);
  q[kSignalQword] |= g.strong_signal ? 2 : 0;
}

bool gfd_complete(GfdFormat f, const uint64_t* q) {
  for (int i = 0; i < gfd_qwords(f); ++i)
    if (!(q[i] & kFlag)) return false;
  return true;
}

Status decode_gfd(GfdFormat f, const uint64_t* q, Gfd* out) {
  if (!gfd_complete(f, q))
    return BRAID_ERROR(ncclInternalError, "GIN descriptor decoded before all its flags were set");
  Gfd g;
  const bool v2 = f == GfdFormat::kV2;
  g.size = q[0] >> 7;
  const uint64_t version = v2 ? bits(q[0], 1, 4) : 0;
  if (v2) {
    if (version != kV2Version && version != kV2EarlyVersion)
      return BRAID_ERROR(ncclInvalidArgument,
                         "GIN descriptor of format version {} where 2.30's is expected (1 from 2.30.3-2.30.4, 2 from "
                         "2.30.7)",
                         version);
    g.op = uint16_t(field(q[kOpQword], 1, 2));
  } else {
    g.op = uint16_t(bits(q[0], 1, 6));
  }
  const uint16_t op = g.op;
  if (op & ~(v2 ? kV2Ops : kV1Ops))
    return BRAID_ERROR(ncclInvalidArgument, "GIN descriptor with unknown op bits {:#x}", op);
  if (v2) {
    BRAID_TRY(check_v2_kind(op));
  } else if (!(op & kGfdPut)) {
    return BRAID_ERROR(ncclInvalidArgument, "GIN descriptor op {:#x} lacks the Put bit", op);
  }
  if ((op & kGfdWithSignalInc) && (op & kGfdWithSignalAdd))
    return BRAID_ERROR(ncclInvalidArgument, "GIN descriptor op {:#x} both increments and adds to a signal", op);
  if (g.is_flush()) {
    *out = g;
    return Status::ok();
  }
  if (g.has_inline()) {
    BRAID_TRY(decode_inline(q, &g));
  } else if (g.is_va_signal()) {
    g.va_signal_off = q[1] >> 1;
    g.va_signal_handle = q[2] >> 1;
  } else {
    g.src_off = q[1] >> 1;
    g.src_handle = q[2] >> 1;
  }
  g.dst_off = q[3] >> 1;
  g.dst_handle = q[4] >> 1;
  const uint64_t completion = q[kCounterQword];
  if (g.has_counter()) g.counter_id = uint32_t(v2 ? bits(completion, 1, 23) : field(completion, 1, 2));
  if (g.has_signal()) {
    if (!g.is_va_signal()) g.signal_id = uint32_t(v2 ? bits(completion, 24, 24) : field(completion, 3, 2));
    g.signal_value =
        field(completion, v2 ? 6 : 5, 2) | (field(q[kSignalQword], 1, 2) << 16) | (field(q[kSignalQword], 3, 4) << 32);
  }
  g.strong_signal = version != kV2Version || (q[kSignalQword] & 2);  // before 2.30.7 every signal was strong
  if (g.is_va_signal()) {
    if (g.va_signal_handle == 0 || g.va_signal_off % 8 != 0)
      return BRAID_ERROR(ncclInvalidArgument, "GIN VA signal to word {} of window {:#x} (a window, 8-byte aligned)",
                         g.va_signal_off, g.va_signal_handle);
  } else if (g.is_get()) {
    if (g.size && (g.src_handle == 0 || g.dst_handle == 0))
      return BRAID_ERROR(ncclInvalidArgument, "GIN descriptor gets {} bytes with a null window", g.size);
    if (g.dst_off > UINT64_MAX - g.size || g.src_off > UINT64_MAX - g.size)
      return BRAID_ERROR(ncclInvalidArgument, "GIN descriptor offsets overflow with {} bytes", g.size);
  } else {
    BRAID_TRY(check_put(g));
  }
  *out = g;
  return Status::ok();
}

}  // namespace braid::devapi

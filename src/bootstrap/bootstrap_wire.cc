// Checks on bootstrap input (see bootstrap_wire.h).
#include "src/bootstrap/bootstrap_wire.h"

#include <cstring>

namespace braid::wire {

Status decode_id(const void* bytes, size_t size, IdLayout* out) {
  *out = IdLayout{};
  if (size < sizeof(IdLayout))
    return BRAID_ERROR(ncclInvalidArgument, "ncclUniqueId too short ({} bytes)", size);
  std::memcpy(out, bytes, sizeof(*out));
  if (out->version != kIdVersion || !out->root.is_ip() || out->root.port() == 0 || out->magic == 0 ||
      out->grow_from < 0 || out->grow_from >= kMaxRanks)
    return BRAID_ERROR(ncclInvalidArgument,
                       "invalid or corrupted ncclUniqueId (not made by ncclGetUniqueId of this library)");
  return Status::ok();
}

const char* root_hello_problem(const RootHello& hello, uint64_t magic, int job_nranks) {
  if (hello.magic != magic) return "wrong magic";
  if (hello.nranks <= 0 || hello.nranks > kMaxRanks) return "impossible rank count";
  if (job_nranks > 0 && hello.nranks != job_nranks) return "rank count differs from the job's";
  if (hello.rank < 0 || hello.rank >= hello.nranks) return "rank out of range";
  if (!hello.listener.is_ip() || hello.listener.port() == 0) return "no usable listener address";
  return nullptr;
}

bool peer_hello_ok(const PeerHello& hello, uint64_t key, int nranks) {
  return hello.key == key && hello.rank >= 0 && hello.rank < nranks;
}

Status check_message_header(const MessageHeader& header) {
  if (header.bytes > kMaxMessageBytes)
    return BRAID_ERROR(ncclRemoteError, "malformed bootstrap message ({} bytes)", header.bytes);
  return Status::ok();
}

}  // namespace braid::wire

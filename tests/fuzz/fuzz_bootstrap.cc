// libFuzzer target: the bootstrap's parsers of untrusted bytes (see
// src/bootstrap/bootstrap_wire.h): a user's ncclUniqueId, the hello a stranger
// sends the root, a peer connection's hello, and message headers.  The input
// is cut into those records; each check must answer without crashing, and
// accepted records must satisfy the invariants the socket code relies on.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "src/bootstrap/bootstrap_wire.h"

using namespace braid::wire;

namespace {
template <class T>
bool take(const uint8_t*& data, size_t& size, T* out) {
  if (size < sizeof(T)) return false;
  std::memcpy(out, data, sizeof(T));
  data += sizeof(T);
  size -= sizeof(T);
  return true;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // An id of any length (the API always passes 128 bytes; shorter must be refused).
  IdLayout id{};
  size_t id_bytes = size < 128 ? size : 128;
  braid::Status s = decode_id(data, id_bytes, &id);
  if (s.is_ok() && (id.magic == 0 || id.root.port() == 0 || !id.root.is_ip() || id.version != kIdVersion)) std::abort();
  if (!s.is_ok() && s.code() != ncclInvalidArgument) std::abort();

  // Then a stream of records, each preceded by a selector byte.
  uint64_t magic = id.magic, key = id.magic ^ 0x9e3779b97f4a7c15ull;
  int job_nranks = -1;
  while (size > 0) {
    uint8_t which = *data++;
    --size;
    switch (which % 3) {
      case 0: {
        RootHello h;
        if (!take(data, size, &h)) return 0;
        if (const char* why = root_hello_problem(h, magic, job_nranks)) {
          if (!*why) std::abort();
        } else {
          if (h.rank < 0 || h.rank >= h.nranks || h.nranks > kMaxRanks) std::abort();
          if (job_nranks > 0 && h.nranks != job_nranks) std::abort();
          job_nranks = h.nranks;
        }
        break;
      }
      case 1: {
        PeerHello h;
        if (!take(data, size, &h)) return 0;
        int n = job_nranks > 0 ? job_nranks : 4;
        if (peer_hello_ok(h, key, n) && (h.rank < 0 || h.rank >= n || h.key != key)) std::abort();
        break;
      }
      default: {
        MessageHeader h;
        if (!take(data, size, &h)) return 0;
        braid::Status m = check_message_header(h);
        if (m.is_ok() && h.bytes > kMaxMessageBytes) std::abort();
        break;
      }
    }
  }
  return 0;
}

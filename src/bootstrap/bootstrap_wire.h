// The bootstrap's wire format and the checks applied to everything that
// arrives from the network or from the user's ncclUniqueId bytes.
//
// Kept apart from the socket code so the parsers can be fuzzed on their own
// (tests/fuzz/fuzz_bootstrap.cc): every byte of these structs may come from a
// stranger on the root's port or from a corrupted id.
#pragma once

#include <cstddef>
#include <cstdint>

#include "nccl.h"
#include "src/base/sock_addr.h"
#include "src/base/status.h"

namespace braid::wire {

constexpr uint32_t kIdVersion = 0x62726432;  // "brd2": IPv4 or IPv6 root ("brd1" held IPv4 only)
constexpr uint32_t kRankZeroHostsRoot = 1;   // NCCL_COMM_ID: rank 0 starts the root in init
constexpr int kMaxRanks = 1 << 20;
constexpr uint64_t kMaxMessageBytes = uint64_t(1) << 32;

// What a unique id holds (the rest of its 128 bytes is zero).
struct IdLayout {
  uint32_t version;
  uint32_t flags;
  uint64_t magic;
  SockAddr root;
  int32_t grow_from;  // an ncclCommGetUniqueId id: the ranks of the communicator it grows (else 0)
  int32_t pad;
};
static_assert(sizeof(IdLayout) <= sizeof(ncclUniqueId));

// rank -> root: who I am and where I listen.
struct RootHello {
  uint64_t magic;
  int32_t rank;
  int32_t nranks;
  SockAddr listener;
};
// root -> rank, followed by nranks SockAddr.
struct RootReply {
  uint64_t magic;
  uint64_t nonce;
};
// rank -> rank, first bytes on a new connection.
struct PeerHello {
  uint64_t key;  // magic ^ nonce: only members of this communicator
  int32_t rank;
  int32_t pad;
};
// Every later message: [header][bytes of payload].
struct MessageHeader {
  int32_t tag;
  int32_t pad;
  uint64_t bytes;
};

// ncclInvalidArgument unless the bytes are an id this library made.  Ids of
// versions without grow_from have zeros there, as the unused bytes of every
// id are zero.
Status decode_id(const void* bytes, size_t size, IdLayout* out);

// Why the root drops this hello, or nullptr to accept it.  job_nranks < 0:
// no rank has arrived yet (any size is possible).
const char* root_hello_problem(const RootHello& hello, uint64_t magic, int job_nranks);

// True when a peer connection's hello names a member of this communicator.
bool peer_hello_ok(const PeerHello& hello, uint64_t key, int nranks);

// ncclRemoteError for a header no braid peer sends.
Status check_message_header(const MessageHeader& header);

}  // namespace braid::wire

// Grouped ncclSend/ncclRecv as one Task (see p2p_task.cc).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "src/exec/host/task.h"
#include "src/transport/transport.h"

namespace braid {

struct P2POp {
  bool is_send = false;
  int peer = 0;
  char* buffer = nullptr;  // const for sends
  size_t bytes = 0;
  size_t elem_bytes = 1;  // datatype size, for messages
  // Slices the message travels in, each a part of it on a connection of its
  // own (channel + slice): HostPaths::p2p_slices, alike at both ends.
  uint32_t slices = 1;
};

// All sends to one peer travel in issue order on its connections, likewise
// all receives, so the k-th send to a peer meets that peer's k-th receive
// from us (NCCL's matching rule): a message in s slices puts its i-th part
// on the i-th connection, and each connection stays in issue order.
// Different peers, and a message's slices, progress concurrently.
Status make_p2p_task(std::vector<P2POp> ops, Transport* transport, int channel, size_t fragment_bytes,
                     std::string label, std::unique_ptr<Task>* out);

}  // namespace braid

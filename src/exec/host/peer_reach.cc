#include "src/exec/host/peer_reach.h"

namespace braid {

HostSignal host_signal_of(const StepBuffers& b, const uint64_t bytes[3], uint64_t pid, uint64_t process) {
  HostSignal s;
  s.buffers = peer_buffers_of(b, pid, process);
  const void* const starts[3] = {b.input, b.output, b.scratch};
  for (int k = 0; k < 3; ++k)
    if (starts[k] && bytes[k]) s.shared[k] = host_shared_handle(starts[k], bytes[k]);
  return s;
}

PeerReach reach_peer(const HostSignal& signal, const PeerBuffers& mine, const StepBuffers& buffers, PeerMemory* cache) {
  PeerReach r;
  r.peer = signal.buffers;
  PeerBuffers at = signal.buffers;
  if (at.pid == mine.pid && at.process == mine.process) {
    r.direct[0] = r.direct[1] = r.direct[2] = true;
  } else if (cache) {
    uint64_t* const addresses[3] = {&at.input, &at.output, &at.scratch};
    for (int k = 0; k < 3; ++k) {
      const SharedHandle& h = signal.shared[k];
      if (h.fd < 0 || *addresses[k] == 0) continue;
      const PeerAllocationKey key{at.pid, at.process, h.serial, *addresses[k] - h.offset};
      const PeerMapping* m = cache->find_or_open(key, [&](const PeerAllocationKey&, std::unique_ptr<PeerMapping>* out) {
        peer_memory_opens().fetch_add(1, std::memory_order_relaxed);
        SharedHandle whole = h;
        whole.offset = 0;
        return map_peer_range(whole, h.allocation_bytes, out);
      });
      if (!m) continue;
      *addresses[k] = uint64_t(uintptr_t(m->base() + h.offset));
      r.direct[k] = true;
    }
  }
  r.at = peer_step_buffers(buffers, at);
  return r;
}

std::atomic<uint64_t>& peer_memory_opens() {
  static std::atomic<uint64_t> n{0};
  return n;
}

}  // namespace braid

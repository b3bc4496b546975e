#include "src/exec/host/host_windows.h"

#include <algorithm>

#include "src/base/env.h"
#include "src/base/log.h"
#include "src/bootstrap/bootstrap.h"
#include "src/transport/fd_passing.h"

namespace braid {

Status HostWindows::add(const TransportContext& comm, Bootstrap& bootstrap, const WindowInfo& info, bool* direct) {
  const int me = comm.rank;
  auto window = std::make_unique<HostWindow>();
  window->seq = info.seq;
  window->ranks = info.ranks;
  window->views.assign(comm.nranks, nullptr);
  // Already mapped by the communicator's symmetric memory, on every rank
  // alike (the runtime agreed on it): nothing to pass or map again.
  if (info.mapped.size() == size_t(comm.nranks)) {
    window->views = info.mapped;
    windows_.push_back(std::move(window));
    *direct = true;
    return Status::ok();
  }
  // The peers' memfds, passed to this process (a peer of another host or
  // whose buffer is not shareable passes none).  If the exchange fails this
  // rank says so in the agreement below, where the others wait for it.
  const int my_fd[1] = {info.handles[me].fd};
  std::vector<std::vector<UniqueFd>> passed;
  int64_t ok = 1;
  if (Status s = exchange_fds(comm, bootstrap, std::span<const int>(my_fd, my_fd[0] >= 0 ? 1 : 0), &passed,
                              Deadline::after(std::chrono::seconds(env_int("BRAID_TIMEOUT"))));
      !s.is_ok()) {
    BRAID_WARN("window {}: passing memory descriptors failed ({}): not direct", info.seq, s.to_string());
    passed.clear();
    passed.resize(size_t(comm.nranks));
    ok = 0;
  }
  for (int r = 0; r < comm.nranks && ok; ++r) {
    const WindowExtent& e = info.ranks[r];
    const SharedHandle& h = info.handles[r];
    if (same_process(comm.peers[size_t(r)], comm.peers[size_t(me)])) {
      window->views[r] = reinterpret_cast<char*>(e.base);
    } else if (passed[r].size() != 1) {  // another host, not shareable, or not passed
      ok = 0;
    } else {
      std::unique_ptr<PeerMapping> mapping;
      Status s = map_shared_fd(passed[r][0].get(), h, e.size, &mapping);
      if (!s.is_ok()) {
        BRAID_INFO(kInit, "window {}: rank {} cannot be mapped ({}): not direct", info.seq, r, s.to_string());
        ok = 0;
        break;
      }
      window->views[r] = mapping->base();
      window->mappings.push_back(std::move(mapping));
    }
  }
  std::vector<int64_t> all(comm.nranks);
  all[me] = ok;
  BRAID_TRY(std::move(bootstrap.allgather(all.data(), sizeof(int64_t))).context("ncclCommWindowRegister"));
  *direct = std::all_of(all.begin(), all.end(), [](int64_t v) { return v != 0; });
  if (*direct) windows_.push_back(std::move(window));
  return Status::ok();
}

void HostWindows::remove(uint64_t seq) {
  std::erase_if(windows_, [&](const std::unique_ptr<HostWindow>& w) { return w->seq == seq; });
}

const HostWindow* HostWindows::by_seq(uint64_t seq) const {
  for (const auto& w : windows_)
    if (w->seq == seq) return w.get();
  return nullptr;
}

const HostWindow* HostWindows::holding(int rank, const void* p, uint64_t bytes) const {
  const uint64_t addr = reinterpret_cast<uint64_t>(p);
  for (const auto& w : windows_) {
    const WindowExtent& e = w->ranks[rank];
    if (addr >= e.base && addr + bytes <= e.base + e.size) return w.get();
  }
  return nullptr;
}

}  // namespace braid

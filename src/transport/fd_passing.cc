#include "src/transport/fd_passing.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include "src/base/log.h"
#include "src/bootstrap/bootstrap.h"

namespace braid {
namespace {

struct SocketName {
  char text[32] = {};  // empty: this rank takes no messages
};

// What a message carries besides its descriptors.
struct Header {
  int32_t rank = -1;
  uint32_t count = 0;
};

socklen_t abstract_address(const SocketName& name, sockaddr_un* out) {
  *out = sockaddr_un{};
  out->sun_family = AF_UNIX;
  const size_t len = strnlen(name.text, sizeof name.text);
  std::memcpy(out->sun_path + 1, name.text, len);  // sun_path[0] == 0: the abstract namespace
  return socklen_t(offsetof(sockaddr_un, sun_path) + 1 + len);
}

Status listen_on_fresh_name(int backlog, UniqueFd* listener, SocketName* name) {
  std::random_device rd;
  const uint64_t token = (uint64_t(rd()) << 32) ^ rd();
  std::snprintf(name->text, sizeof name->text, "braid-fd-%016llx", static_cast<unsigned long long>(token));
  UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return BRAID_ERROR(ncclSystemError, "socket(AF_UNIX): {}", std::strerror(errno));
  sockaddr_un addr;
  const socklen_t len = abstract_address(*name, &addr);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(fd.get(), backlog) != 0)
    return BRAID_ERROR(ncclSystemError, "listening on @{}: {}", name->text, std::strerror(errno));
  *listener = std::move(fd);
  return Status::ok();
}

Status send_fds(const SocketName& to, int my_rank, std::span<const int> fds) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return BRAID_ERROR(ncclSystemError, "socket(AF_UNIX): {}", std::strerror(errno));
  sockaddr_un addr;
  const socklen_t len = abstract_address(to, &addr);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0)
    return BRAID_ERROR(ncclSystemError, "connect to @{}: {}", to.text, std::strerror(errno));
  Header header{my_rank, uint32_t(fds.size())};
  iovec iov{&header, sizeof header};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxPassedFds)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (!fds.empty()) {  // SCM_RIGHTS with no descriptors is not a valid message
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  if (::sendmsg(fd.get(), &msg, MSG_NOSIGNAL) != ssize_t(sizeof header))
    return BRAID_ERROR(ncclSystemError, "sendmsg to @{}: {}", to.text, std::strerror(errno));
  return Status::ok();  // closing leaves the message queued for the receiver
}

// One message from the listener: its sender and descriptors.
Status receive_fds(int listener, Deadline deadline, Header* header, std::vector<UniqueFd>* fds) {
  pollfd p{listener, POLLIN, 0};
  for (;;) {
    const int r = ::poll(&p, 1, deadline.remaining_ms());
    if (r > 0) break;
    if (r < 0 && errno != EINTR) return BRAID_ERROR(ncclSystemError, "poll: {}", std::strerror(errno));
    if (r == 0) return BRAID_ERROR(ncclRemoteError, "timed out waiting for a peer's file descriptors");
  }
  UniqueFd conn(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC));
  if (conn.get() < 0) return BRAID_ERROR(ncclSystemError, "accept: {}", std::strerror(errno));
  iovec iov{header, sizeof *header};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxPassedFds)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  const ssize_t got = ::recvmsg(conn.get(), &msg, MSG_CMSG_CLOEXEC);
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      const size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < n; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        fds->emplace_back(fd);  // owned from here on, whatever follows
      }
    }
  if (got != ssize_t(sizeof *header))
    return BRAID_ERROR(ncclSystemError, "a peer's descriptor message: {} bytes, not {}", got, sizeof *header);
  if (msg.msg_flags & MSG_CTRUNC)
    return BRAID_ERROR(ncclSystemError, "a peer passed more than {} descriptors", kMaxPassedFds);
  if (fds->size() != header->count)
    return BRAID_ERROR(ncclSystemError, "rank {} announced {} descriptors and passed {}", header->rank, header->count,
                       fds->size());
  return Status::ok();
}

}  // namespace

void UniqueFd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Status exchange_fds(const TransportContext& comm, Bootstrap& bootstrap, std::span<const int> mine,
                    std::vector<std::vector<UniqueFd>>* theirs, Deadline deadline) {
  const int me = comm.rank, n = comm.nranks;
  if (mine.size() > kMaxPassedFds)
    return BRAID_ERROR(ncclInternalError, "{} descriptors to pass, more than {}", mine.size(), kMaxPassedFds);
  theirs->clear();
  theirs->resize(size_t(n));
  // Whether rank a passes to rank b: one host, another process.
  auto passes = [&](int a, int b) {
    return a != b && comm.peers[a].host_hash == comm.peers[b].host_hash && !same_process(comm.peers[a], comm.peers[b]);
  };
  bool any = false;  // the same answer on every rank (one peer table): all take part, or none
  for (int a = 0; a < n && !any; ++a)
    for (int b = 0; b < n && !any; ++b) any = passes(a, b);
  if (!any) return Status::ok();

  // 1. Listen, and learn where the others listen.  A rank that cannot
  // listen publishes no name and is sent nothing.
  std::vector<SocketName> names(static_cast<size_t>(n));
  UniqueFd listener;
  if (Status s = listen_on_fresh_name(std::max(n, 16), &listener, &names[size_t(me)]); !s.is_ok()) {
    BRAID_WARN("rank {} cannot take file descriptors from its peers: {}", me, s.to_string());
    names[size_t(me)] = SocketName{};
  }
  BRAID_TRY(std::move(bootstrap.allgather(names.data(), sizeof(SocketName))).context("passing file descriptors"));

  // 2. Send to every rank of this host in another process.
  std::vector<uint8_t> sent(size_t(n) * size_t(n), 0);  // [sender * n + receiver]
  for (int r = 0; r < n; ++r) {
    if (!passes(me, r) || names[size_t(r)].text[0] == 0) continue;
    if (Status s = send_fds(names[size_t(r)], me, mine); !s.is_ok())
      BRAID_WARN("rank {} cannot pass file descriptors to rank {}: {}", me, r, s.to_string());
    else
      sent[size_t(me) * n + r] = 1;
  }

  // 3. Learn who sent to whom, and take what was sent here.
  BRAID_TRY(std::move(bootstrap.allgather(sent.data(), size_t(n))).context("passing file descriptors"));
  int expected = 0;
  for (int r = 0; r < n; ++r) expected += sent[size_t(r) * n + me];
  std::vector<bool> received(size_t(n), false);
  for (int k = 0; k < expected; ++k) {
    Header header;
    std::vector<UniqueFd> fds;
    BRAID_TRY(receive_fds(listener.get(), deadline, &header, &fds));
    if (header.rank < 0 || header.rank >= n || !sent[size_t(header.rank) * n + me] || received[size_t(header.rank)])
      return BRAID_ERROR(ncclSystemError, "a descriptor message said to be from rank {}, which sent none here",
                         header.rank);
    received[size_t(header.rank)] = true;
    (*theirs)[size_t(header.rank)] = std::move(fds);
  }
  return Status::ok();
}

}  // namespace braid

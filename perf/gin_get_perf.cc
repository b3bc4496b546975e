// gin_get_perf: GIN gets over braid's TCP link (src/devapi/gin_tcp.h), the
// way a proxy serves a kernel that posts k gets to one peer and then waits
// (its Wait posts a flush, which holds until every get has landed):
//   pipelined  the k gets asked for back to back, their answers landed as
//              they arrive (what the link does);
//   serial     each get landed before the next is asked for (one round trip
//              per get: what the link did before its gets were asynchronous).
// Both on one loopback TCP connection to a GinTcpReceiver on its own
// thread, in one run; per size, -r rounds of -n iterations alternate
// between the two, and the table gives each one's median round, in us per
// k gets, and serial / pipelined (> 1: pipelining is faster).
//   gin_get_perf [-k gets] [-b min] [-e max] [-f factor] [-n iters] [-w warmup] [-r rounds]
#include <arpa/inet.h>
#include <getopt.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "perf/options.h"
#include "src/base/net.h"
#include "src/devapi/gin_tcp.h"

using namespace braid;
using namespace braid::devapi;

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kWindow = 1;  // the target's window token

struct Options {
  int gets = 16;
  perf::Sweep sweep{.factor = 8, .rounds = 7};
};

bool parse(int argc, char** argv, Options* o) {
  int c;
  while ((c = getopt(argc, argv, "k:b:e:f:n:w:r:")) != -1) {
    switch (c) {
      case 'k':
        o->gets = std::atoi(optarg);
        break;
      default:
        if (!perf::sweep_flag(c, optarg, &o->sweep)) return false;
    }
  }
  return o->gets >= 1 && o->sweep.valid();
}

void check(const Status& s, const char* what) {
  if (s.is_ok()) return;
  std::fprintf(stderr, "gin_get_perf: %s: %s\n", what, s.to_string().c_str());
  std::exit(1);
}

void land_all(TcpGinLink& link) {
  while (link.gets_landed() < link.gets_issued()) check(link.progress(), "landing gets");
}

// One iteration: k gets of `bytes` each into consecutive parts of `dst`.
void gets(TcpGinLink& link, int k, size_t bytes, char* dst, bool pipelined) {
  for (int i = 0; i < k; ++i) {
    check(link.get(kWindow, uint64_t(i) * bytes, dst + size_t(i) * bytes, bytes), "get");
    if (!pipelined) land_all(link);
  }
  land_all(link);
}

// Mean us per iteration over `iters`, after `warmup` untimed ones.
double time_gets(TcpGinLink& link, const Options& o, size_t bytes, char* dst, bool pipelined) {
  for (int i = 0; i < o.sweep.warmup; ++i) gets(link, o.gets, bytes, dst, pipelined);
  const auto start = Clock::now();
  for (int i = 0; i < o.sweep.iters; ++i) gets(link, o.gets, bytes, dst, pipelined);
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count() / o.sweep.iters;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, &o)) {
    std::fprintf(stderr,
                 "usage: gin_get_perf [-k gets] [-b min] [-e max] [-f factor] [-n iters] [-w warmup] "
                 "[-r rounds]\n");
    return 2;
  }
  // A loopback TCP connection: the link's end here, the receiver's there.
  int listener = -1, link_fd = -1;
  SockAddr bound;
  check(listen_tcp(SockAddr::loopback(AF_INET), &listener, &bound), "listen");
  check(connect_tcp(bound, Deadline::after(std::chrono::seconds(10)), nullptr, &link_fd), "connect");
  const int served_fd = ::accept(listener, nullptr, nullptr);
  ::close(listener);
  if (served_fd < 0) return 1;
  set_nodelay(link_fd);
  set_nodelay(served_fd);

  std::vector<char> window(size_t(o.gets) * o.sweep.max_bytes), dst(window.size());
  for (size_t i = 0; i < window.size(); ++i) window[i] = char(i * 7 + 1);
  GinWindowTable windows;
  check(windows.add(kWindow, window.data(), window.size()), "window");
  std::vector<uint64_t> words(1, 0);
  GinFault fault;
  GinTcpReceiver receiver({served_fd}, {0}, &windows, GinSignals{words.data(), 1, &host_gin_memory()}, &fault,
                          std::chrono::seconds(30));
  TcpGinLink link(link_fd, 1, std::chrono::seconds(30));

  std::printf("# gin_get_perf: %d gets to one peer over loopback TCP, then landed; %d rounds of %d iterations\n",
              o.gets, o.sweep.rounds, o.sweep.iters);
  std::printf("# %10s %14s %14s %10s %8s\n", "bytes", "serial us", "pipelined us", "ratio", "wrong");
  for (size_t bytes = o.sweep.min_bytes; bytes <= o.sweep.max_bytes; bytes *= o.sweep.factor) {
    std::vector<double> serial, pipelined;
    for (int r = 0; r < o.sweep.rounds; ++r) {  // alternating, so both see the same machine
      serial.push_back(time_gets(link, o, bytes, dst.data(), false));
      pipelined.push_back(time_gets(link, o, bytes, dst.data(), true));
    }
    const long n = long(size_t(o.gets) * bytes);
    const int wrong = std::equal(dst.begin(), dst.begin() + n, window.begin()) ? 0 : 1;
    const double s = median(serial), p = median(pipelined);
    std::printf("  %10zu %14.1f %14.1f %10.2f %8d\n", bytes, s, p, s / p, wrong);
    if (wrong || fault.failed()) return 1;
  }
  check(link.close(), "close");
  receiver.stop();
  return 0;
}

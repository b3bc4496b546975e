// ncclras: queries a running job's RAS service (src/runtime/ras_service.h),
// with NCCL's options and behaviour, so that scripts written for NCCL's
// client work unchanged:
//   ncclras [-h host] [-p port] [-t secs] [-v] [-f text|json] [-m[groups]] [-D] [COMMAND...]
// It connects to NCCL_RAS_ADDR's socket (localhost:28028 by default), asks
// for the status (or monitors), and copies the answer to standard output
// until the job closes the connection.  Words after the options are one
// command (NCCL 2.31's, e.g. `ncclras CONTROL PROFILER_MASK none`), whose
// one-line reply is printed.  Exit status 0 once the answer ended, 1 on any
// failure (or a command's ERROR reply).
#include <getopt.h>
#include <netdb.h>
#include <sys/socket.h>
#include <strings.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "nccl.h"

namespace {

const char kUsage[] =
    "Usage: %s [OPTION]...\n"
    "Query the state of a running NCCL job.\n"
    "\nOptions:\n"
    "  -h, --host=HOST      Host name or IP address of the RAS client socket of the\n"
    "                       NCCL job to connect to (localhost by default)\n"
    "  -p, --port=PORT      TCP port of the RAS client socket of the NCCL job\n"
    "                       (28028 by default)\n"
    "  -f, --format=FMT     Output format: text or json (text by default)\n"
    "  -m, --monitor[=GRP]  Watch the job's processes and print events as they happen;\n"
    "                       GRP: lifecycle (default), trace, all, or a comma list\n"
    "  -t, --timeout=SECS   Seconds to wait for each process (5 by default, scaled by\n"
    "                       NCCL_RAS_TIMEOUT_FACTOR); 0 disables the timeout\n"
    "  -v, --verbose        Report more of the outlying ranks\n"
    "  -D, --diagnostics    Ask for on-demand diagnostics\n"
    "  COMMAND...           Send one command (e.g. CONTROL PROFILER_MASK none) and print\n"
    "                       its reply\n"
    "      --help           Print this help and exit\n"
    "      --version        Print the version and exit\n";

double timeout_factor() {
  const char* text = std::getenv("NCCL_RAS_TIMEOUT_FACTOR");
  if (!text || !*text) return 1;
  char* end = nullptr;
  const double f = std::strtod(text, &end);
  return *end == '\0' && std::isfinite(f) && f > 0 ? f : 1;
}

void set_timeout(int fd, int option, double seconds) {
  timeval tv{};
  if (seconds > 0) {
    tv.tv_sec = time_t(seconds);
    tv.tv_usec = suseconds_t((seconds - double(tv.tv_sec)) * 1e6);
  }
  setsockopt(fd, SOL_SOCKET, option, &tv, sizeof tv);
}

bool send_line(int fd, const std::string& line) {
  const std::string text = line + "\n";
  return ::send(fd, text.data(), text.size(), MSG_NOSIGNAL) == ssize_t(text.size());
}

// One reply line (without its '\n'); `rest` gets what arrived after it.
bool read_line(int fd, std::string* line, std::string* rest) {
  std::string buffer;
  for (;;) {
    const size_t nl = buffer.find('\n');
    if (nl != std::string::npos) {
      *line = buffer.substr(0, nl);
      if (rest) *rest = buffer.substr(nl + 1);
      return true;
    }
    char chunk[256];
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n <= 0) return false;
    buffer.append(chunk, size_t(n));
  }
}

int connect_to(const std::string& host, const std::string& port, double factor, bool timeouts) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found)) {
    std::fprintf(stderr, "Resolving %s:%s: %s\n", host.c_str(), port.c_str(), gai_strerror(rc));
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, SOCK_STREAM, 0);
    if (fd < 0) continue;
    if (timeouts) set_timeout(fd, SO_SNDTIMEO, factor), set_timeout(fd, SO_RCVTIMEO, factor);
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      std::fprintf(stderr, "Connecting to %s:%s: %s\n", host.c_str(), port.c_str(), std::strerror(errno));
      ::close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0)
    std::fprintf(stderr, "Failed to connect to the NCCL RAS service!\nPlease make sure that the NCCL job has the RAS "
                 "service enabled and that\n%s.\n", host == "localhost" && port == "28028"
                     ? "the RAS client was started on a node where the NCCL job is running"
                     : "the host/port arguments are correct and match NCCL_RAS_ADDR");
  return fd;
}

// Copies everything the job sends to standard output until it closes.
int stream_to_stdout(int fd, const std::string& already) {
  std::fwrite(already.data(), 1, already.size(), stdout);
  for (;;) {
    char chunk[4096];
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n == 0) return 0;
    if (n < 0) {
      if (errno == EINTR) continue;
      std::fprintf(stderr, errno == EAGAIN || errno == EWOULDBLOCK ? "Connection timed out\n" : "recv: %s\n",
                   std::strerror(errno));
      return 1;
    }
    std::fwrite(chunk, 1, size_t(n), stdout);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string host = "localhost", port = "28028", format, monitor_groups;
  double timeout = -1;
  bool verbose = false, monitor = false, diagnostics = false;
  const option options[] = {{"diagnostics", no_argument, nullptr, 'D'}, {"format", required_argument, nullptr, 'f'},
                            {"host", required_argument, nullptr, 'h'},   {"monitor", optional_argument, nullptr, 'm'},
                            {"port", required_argument, nullptr, 'p'},   {"timeout", required_argument, nullptr, 't'},
                            {"verbose", no_argument, nullptr, 'v'},      {"help", no_argument, nullptr, 'H'},
                            {"version", no_argument, nullptr, 'V'},      {nullptr, 0, nullptr, 0}};
  for (int c; (c = getopt_long(argc, argv, "Df:h:m::p:t:v", options, nullptr)) != -1;) {
    switch (c) {
      case 'D': diagnostics = true; break;
      case 'f':
        format = optarg;
        if (strcasecmp(optarg, "text") != 0 && strcasecmp(optarg, "json") != 0) {
          std::fprintf(stderr, "Invalid format: %s (must be text or json)\n", optarg);
          return 1;
        }
        break;
      case 'h': host = optarg; break;
      case 'm': monitor = true, monitor_groups = optarg ? optarg : ""; break;
      case 'p': port = optarg; break;
      case 't': {
        char* end = nullptr;
        timeout = std::strtod(optarg, &end);
        if (*end != '\0' || !std::isfinite(timeout) || timeout < 0) {
          std::fprintf(stderr, "Invalid timeout: %s\n", optarg);
          return 1;
        }
        break;
      }
      case 'v': verbose = true; break;
      case 'H': std::fprintf(stderr, kUsage, argv[0]); return 0;
      case 'V':
        std::fprintf(stderr, "NCCL RAS client version %d.%d.%d%s (braid %d.%d.%d)\n", NCCL_MAJOR, NCCL_MINOR,
                     NCCL_PATCH, NCCL_SUFFIX, BRAID_VERSION_MAJOR, BRAID_VERSION_MINOR, BRAID_VERSION_PATCH);
        return 0;
      default: std::fprintf(stderr, kUsage, argv[0]); return 1;
    }
  }
  const double factor = timeout_factor();
  const bool timeouts = timeout != 0;
  const int fd = connect_to(host, port, factor, timeouts);
  if (fd < 0) return 1;
  std::string line, rest;
  if (!send_line(fd, "CLIENT PROTOCOL 2") || !read_line(fd, &line, nullptr)) {
    std::fprintf(stderr, "Connection timed out\n");
    return 1;
  }
  if (strncasecmp(line.c_str(), "SERVER PROTOCOL ", 16) != 0) {
    std::fprintf(stderr, "Unexpected response from NCCL: %s\n", line.c_str());
    return 1;
  }
  if (line.substr(16) != "2")
    std::fprintf(stderr, "NCCL RAS protocol version mismatch (NCCL: %s; RAS client: 2)!\nWill try to continue in "
                 "spite of that...\n", line.substr(16).c_str());
  auto expect_ok = [&](const std::string& command) {
    if (send_line(fd, command) && read_line(fd, &line, nullptr) && strcasecmp(line.c_str(), "OK") == 0) return true;
    std::fprintf(stderr, "Unexpected response from NCCL to %s: %s\n", command.c_str(), line.c_str());
    return false;
  };
  // Whole seconds, rounded up: NCCL's server reads the value with strtol,
  // so "1e+06" or "1.5" would be refused there.
  char number[64];
  std::snprintf(number, sizeof number, "%.0f", std::ceil(timeout));
  if (timeout >= 0 && !expect_ok(std::string("TIMEOUT ") + number)) return 1;
  // The whole answer may take each process's timeout, and then some.
  if (timeouts) set_timeout(fd, SO_RCVTIMEO, factor + (timeout > 0 ? timeout : 5 * factor) + 5 * factor);
  if (!format.empty() && !expect_ok("SET FORMAT " + format)) return 1;
  if (optind < argc) {  // a command: its one-line reply
    std::string command;
    for (int i = optind; i < argc; ++i) {
      if (i > optind) command += ' ';
      command += argv[i];
    }
    if (command.size() > 4000) {
      std::fprintf(stderr, "Command too long\n");
      return 1;
    }
    if (!send_line(fd, command) || !read_line(fd, &line, nullptr)) {
      std::fprintf(stderr, "Connection timed out\n");
      return 1;
    }
    std::printf("%s\n", line.c_str());
    return strncasecmp(line.c_str(), "ERROR", 5) == 0 ? 1 : 0;
  }
  if (monitor) {
    if (!send_line(fd, monitor_groups.empty() ? "MONITOR" : "MONITOR " + monitor_groups) ||
        !read_line(fd, &line, &rest) || strcasecmp(line.c_str(), "OK") != 0) {
      std::fprintf(stderr, "Monitor mode activation failed: %s\n", line.c_str());
      return 1;
    }
    set_timeout(fd, SO_RCVTIMEO, 0);
    std::fprintf(stderr, "RAS Monitor Mode - watching for peer changes (Ctrl+C to exit)...\n%s\n",
                 std::string(64, '=').c_str());
    const int rc = stream_to_stdout(fd, rest);
    if (rc == 0) std::fprintf(stderr, "Connection closed by the NCCL job.\n");
    return rc;
  }
  if (!send_line(fd, diagnostics ? "DIAGNOSTICS" : verbose ? "VERBOSE STATUS" : "STATUS")) {
    std::fprintf(stderr, "send: %s\n", std::strerror(errno));
    return 1;
  }
  const int rc = stream_to_stdout(fd, "");
  return ::close(fd) == 0 ? rc : 1;
}

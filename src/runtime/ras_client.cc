// A RAS client's connection (ras_node.h): NCCL's line protocol (version 2).
//
// Lines end in '\n' (a '\r' before it is dropped); commands are
// case-insensitive:
//   CLIENT PROTOCOL n   -> SERVER PROTOCOL 2
//   TIMEOUT secs        -> OK: the status query's wait per process (0: none)
//   SET FORMAT text|json -> OK
//   STATUS, VERBOSE STATUS -> the report, then the connection closes
//   MONITOR [groups]    -> OK, then an event line whenever a peer is new,
//                          dies, stops or starts answering (lifecycle:
//                          PEER_NEW, PEER_DEAD; trace: PEER_UNRESPONSIVE,
//                          PEER_RECOVERED), probing the peers each second
//   DIAGNOSTICS         -> NCCL DIAG lines (ras_diagnostics.cc), then close
//   CONTROL PROFILER_MASK v -> OK once every process that answers has set its
//                          profiler activation mask to v (NCCL replies at
//                          once, before its broadcast is done)
// Anything else gets "ERROR: ..." and the connection stays open.  A line
// longer than 1024 bytes closes it, as NCCL does.
#include <poll.h>
#include <strings.h>
#include <sys/socket.h>

#include <chrono>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>

#include <fmt/format.h>

#include "src/base/net.h"
#include "src/runtime/profiler.h"
#include "src/runtime/ras_node.h"

namespace braid {
namespace {

constexpr size_t kMaxLine = 1024;
constexpr int kIdleLimitMs = 10 * 60 * 1000;  // a client that says nothing for this long is dropped
constexpr int kLifecycle = 0x01, kTrace = 0x02;

bool starts_with(const std::string& line, const char* prefix) {
  return strncasecmp(line.c_str(), prefix, std::strlen(prefix)) == 0;
}
bool is(const std::string& line, const char* command) { return strcasecmp(line.c_str(), command) == 0; }

std::string trimmed(const std::string& s) {
  const size_t first = s.find_first_not_of(' ');
  return first == std::string::npos ? "" : s.substr(first, s.find_last_not_of(' ') - first + 1);
}

// NCCL's profiler mask values: none, all, a number (0x.., decimal, 0..
// octal), or a comma list of event names (case-insensitive).
bool parse_profiler_mask(const std::string& value, int* mask) {
  static const char* const kNames[] = {"group",    "coll",     "p2p",    "proxyop",      "proxystep",
                                       "proxyctrl", "kernelch", "netplugin", "groupapi", "collapi",
                                       "p2papi",   "kernellaunch", "cecoll", "cesync", "cebatch"};
  constexpr int kAll = (1 << 15) - 1;
  if (is(value, "none")) return *mask = 0, true;
  if (is(value, "all")) return *mask = kAll, true;
  char* end = nullptr;
  const long n = std::strtol(value.c_str(), &end, 0);
  if (!value.empty() && *end == '\0') return n >= 0 && n <= 0x7fffffff ? (*mask = int(n), true) : false;
  int bits = 0;
  for (size_t at = 0; at <= value.size();) {
    const size_t comma = std::min(value.find(',', at), value.size());
    const std::string name = trimmed(value.substr(at, comma - at));
    int bit = -1;
    for (int i = 0; i < 15; ++i)
      if (is(name, kNames[i])) bit = i;
    if (bit < 0) return false;
    bits |= 1 << bit;
    at = comma + 1;
  }
  *mask = bits;
  return true;
}

class ClientSession {
 public:
  ClientSession(RasNode& node, int fd) : node_(node), fd_(fd), timeout_sec_(5 * node.timeout_factor()) {}

  void run() {
    for (;;) {
      while (take_line()) {
        if (!handle(line_)) return;
      }
      if (buffer_.size() > kMaxLine) return;
      if (!read_some(monitoring_ ? probe_interval_ms() : kIdleLimitMs)) return;
      if (monitoring_ && due()) probe();
    }
  }

 private:
  // False: the connection is done.
  bool handle(const std::string& line) {
    if (starts_with(line, "client protocol ")) return send("SERVER PROTOCOL 2\n");
    if (starts_with(line, "timeout ")) {
      const std::string value = line.substr(8);
      char* end = nullptr;
      const double t = value.empty() ? 0 : std::strtod(value.c_str(), &end);  // empty: 0, as NCCL's strtol reads it
      if ((end && *end != '\0') || !std::isfinite(t) || t < 0)
        return send("ERROR: Invalid timeout value " + value + "\n");
      timeout_sec_ = t;
      return send("OK\n");
    }
    if (starts_with(line, "set format ")) {
      const std::string value = line.substr(11);
      if (!is(value, "text") && !is(value, "json")) return send("ERROR: Invalid format " + value + "\n");
      json_ = is(value, "json");
      return send("OK\n");
    }
    if (is(line, "status") || is(line, "verbose status")) {
      const ras::JobView view = ras_status(node_, timeout_sec_);
      send(json_ ? ras::render_json(view) : ras::render_text(view, is(line, "verbose status")));
      return false;
    }
    if (is(line, "monitor") || starts_with(line, "monitor "))
      return start_monitor(line.size() > 8 ? line.substr(8) : "");
    if (is(line, "diagnostics")) {
      if (json_) return send("ERROR: diagnostics only supports text output\n"), false;
      static std::atomic<bool> running{false};  // one at a time per process, as NCCL
      if (running.exchange(true)) return send("BUSY: diagnostics already in progress\n"), false;
      struct Done {
        ~Done() { running = false; }
      } done;
      send(ras_diagnostics(node_, timeout_sec_));
      return false;
    }
    if (starts_with(line, "control ")) return control(trimmed(line.substr(8)));
    return send("ERROR: Unknown command " + line + "\n");
  }

  // CONTROL PROFILER_MASK value: every process's profiler activation mask
  // (none, all, a number, or a comma list of event names), then OK.
  bool control(const std::string& command) {
    if (!starts_with(command, "profiler_mask "))
      return send("ERROR: Unknown CONTROL subcommand '" + command.substr(0, command.find(' ')) + "'\n");
    const std::string value = trimmed(command.substr(14));
    int mask = 0;
    if (!parse_profiler_mask(value, &mask)) return send("ERROR: Invalid profiler mask value '" + value + "'\n");
    profiler_override_mask(mask);
    std::vector<std::string> others;
    for (const ras::ProcessReport& r : ras_collect(node_, timeout_sec_).answered)
      if (r.process.addr != node_.self().addr) others.push_back(r.process.addr);
    (void)ras_ask_all(others, RasRequest::Mask, ras_deadline(timeout_sec_), {{"mask", mask}});
    return send("OK\n");
  }

  bool start_monitor(const std::string& groups) {
    int mask = 0;
    size_t at = 0;
    while (at <= groups.size() && !groups.empty()) {
      const size_t comma = std::min(groups.find(',', at), groups.size());
      std::string token = groups.substr(at, comma - at);
      at = comma + 1;
      // NCCL's strtok: spaces around a group, and empty groups, are skipped.
      token.erase(0, token.find_first_not_of(' '));
      token.erase(token.find_last_not_of(' ') + 1);
      if (token.empty()) continue;
      if (is(token, "lifecycle")) mask |= kLifecycle;
      else if (is(token, "trace")) mask |= kTrace;
      else if (is(token, "all")) mask |= 0xff;
      else return send("ERROR: Invalid event group '" + token + "'\n");
    }
    mask_ = mask ? mask : kLifecycle;
    for (const ras::ProcessInfo& p : node_.peers()) seen_.insert(p.addr);
    for (const ras::ProcessInfo& p : node_.dead()) seen_.insert(p.addr), reported_dead_.insert(p.addr);
    monitoring_ = true;
    next_probe_ = std::chrono::steady_clock::now();
    return send("OK\n");
  }

  int probe_interval_ms() const { return int(1000 * node_.timeout_factor()); }
  bool due() const { return std::chrono::steady_clock::now() >= next_probe_; }

  // One round of the monitor: peers learned since, and each one's answer.
  void probe() {
    next_probe_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(probe_interval_ms());
    const std::vector<ras::ProcessInfo> peers = node_.peers();
    for (const ras::ProcessInfo& p : peers)
      if (seen_.insert(p.addr).second) event(kLifecycle, "PEER_NEW", p, "");
    std::vector<std::string> addrs;
    for (const ras::ProcessInfo& p : peers) addrs.push_back(p.addr);
    const auto answers = ras_ask_all(addrs, RasRequest::Ping,
                                     Deadline::after(std::chrono::milliseconds(probe_interval_ms())));
    for (size_t i = 0; i < peers.size(); ++i) {
      const ras::ProcessInfo& p = peers[i];
      if (answers[i].status.code() == ncclRemoteError) {
        node_.mark_dead(p.addr);
      } else if (!answers[i].status.is_ok()) {
        if (silent_.insert(p.addr).second)
          event(kTrace, "PEER_UNRESPONSIVE", p, "peer not responding (keepalive warning)");
      } else if (silent_.erase(p.addr)) {
        event(kTrace, "PEER_RECOVERED", p, "peer responding again");
      }
    }
    for (const ras::ProcessInfo& p : node_.dead())
      if (reported_dead_.insert(p.addr).second) event(kLifecycle, "PEER_DEAD", p, "");
  }

  void event(int group, const char* name, const ras::ProcessInfo& p, const std::string& details) {
    if (!(mask_ & group)) return;
    if (!json_) {
      send(fmt::format("[{}] {}: {} {}\n", ras_local_time(), name, ras::process_text(p), details));
      return;
    }
    const nlohmann::ordered_json doc = {
        {"timestamp", ras_local_time()},
        {"group", group == kLifecycle ? "LIFECYCLE" : "TRACE"},
        {"event", name},
        {"peer", {{"host", p.host}, {"pid", p.pid}, {"cuda_devs", p.cuda_devs}, {"nvml_devs", p.cuda_devs}}},
        {"details", details}};
    send(ras::dump(doc, 2) + "\n");
  }

  // The next complete line of buffer_ into line_, if there is one.
  bool take_line() {
    const size_t nl = buffer_.find('\n');
    if (nl == std::string::npos) return false;
    line_ = buffer_.substr(0, nl);
    buffer_.erase(0, nl + 1);
    if (!line_.empty() && line_.back() == '\r') line_.pop_back();
    return true;
  }

  // Waits up to `ms` for input; false when the client is gone (or idle past the limit).
  bool read_some(int ms) {
    pollfd p{fd_, POLLIN, 0};
    const int ready = ::poll(&p, 1, ms);
    if (ready < 0) return errno == EINTR;
    if (ready == 0) return monitoring_;
    char chunk[512];
    const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
    if (n <= 0) return n < 0 && errno == EINTR;
    buffer_.append(chunk, size_t(n));
    return true;
  }

  bool send(const std::string& text) {
    return send_all(fd_, text.data(), text.size(), Deadline::after(std::chrono::seconds(30)), nullptr).is_ok();
  }

  RasNode& node_;
  int fd_;
  double timeout_sec_;
  bool json_ = false;
  std::string buffer_, line_;
  bool monitoring_ = false;
  int mask_ = 0;
  std::chrono::steady_clock::time_point next_probe_;
  std::set<std::string> seen_, reported_dead_, silent_;  // silent_: stopped answering the probes
};

}  // namespace

void ras_serve_client(RasNode& node, int fd) { ClientSession(node, fd).run(); }

}  // namespace braid

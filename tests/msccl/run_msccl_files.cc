// Runs every MSCCL XML file of a directory through braid as an MSCCL user
// would: BRAID_SCHEDULES=<dir>, then on each rank count the files are for,
// calls inside each file's size range (as msccl-executor measures it: the
// whole message, maxBytes="0" unbounded) in each placement it declares,
// with threads and with processes.  Every call must be exact, and the
// BRAID_DEBUG=INFO line must show that the file the call should take (the
// first in path order whose declared collective, ranks, placement and range
// fit it, as msccl-executor picks) is the one that ran.  A call in the
// placement a file does not declare must be exact too (braid may run the
// file there if it verified so, or a built-in).
//
// The file attributes are read here with pugixml, not with braid's parser:
// the test's expectations come from the files, not from the code under test.
//
// Usage: braid_msccl_files DIR [--max-bytes N] [--max-ranks N]   (exit 77 if
// DIR is absent).  --max-bytes caps the largest message tried per file
// (default 1 MiB); --max-ranks leaves out files for more ranks (CI time).
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <pugixml.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "collective_check.h"

namespace fs = std::filesystem;
using namespace mp;

namespace {

struct File {
  std::string path, name;
  Coll coll = Coll::AllReduce;
  int nranks = 0;
  bool in_place = false, out_of_place = false;
  uint64_t min_bytes = 0, max_bytes = UINT64_MAX;  // inclusive, whole messages
};

struct Call {
  const File* file = nullptr;  // the file it must run, or nullptr: only exactness is checked
  CollCase c;
  uint64_t message = 0;
};

uint64_t per_count_bytes(Coll c, int n) {
  return c == Coll::AllGather || c == Coll::ReduceScatter || c == Coll::AlltoAll ? 4ull * uint64_t(n) : 4;
}

bool read_file(const std::string& path, File* f, std::string* why) {
  pugi::xml_document doc;
  if (!doc.load_file(path.c_str())) return *why = "not XML", false;
  pugi::xml_node algo = doc.child("algo");
  if (!algo) return *why = "no <algo>", false;
  static const std::map<std::string, Coll> colls = {{"allreduce", Coll::AllReduce},
                                                    {"allgather", Coll::AllGather},
                                                    {"reducescatter", Coll::ReduceScatter},
                                                    {"reduce_scatter", Coll::ReduceScatter},
                                                    {"alltoall", Coll::AlltoAll}};
  auto it = colls.find(algo.attribute("coll").as_string());
  if (it == colls.end()) return *why = fmt::format("collective {} not run here", algo.attribute("coll").as_string()), false;
  f->path = path;
  f->name = algo.attribute("name").as_string();
  f->coll = it->second;
  f->nranks = algo.attribute("ngpus").as_int();
  f->in_place = algo.attribute("inplace").as_int() != 0;
  const bool current = bool(algo.attribute("outofplace"));
  f->out_of_place = current ? algo.attribute("outofplace").as_int() != 0 : !f->in_place;
  f->min_bytes = algo.attribute("minBytes").as_ullong(0);
  const long long max = algo.attribute("maxBytes").as_llong(-1);
  // msccl-executor: maxBytes 0 is unbounded, inclusive; the older runtime: exclusive, 128 MiB without one.
  if (max == 0 || (max < 0 && current)) f->max_bytes = UINT64_MAX;
  else if (max < 0) f->max_bytes = (1ull << 27) - 1;
  else f->max_bytes = current ? uint64_t(max) : uint64_t(max) - 1;
  return true;
}

// The file msccl-executor would pick for this call among the declared ones.
const File* first_fit(const std::vector<File>& files, Coll coll, int n, bool in_place, uint64_t message) {
  for (const File& f : files)
    if (f.coll == coll && f.nranks == n && (in_place ? f.in_place : f.out_of_place) && message >= f.min_bytes &&
        message <= f.max_bytes)
      return &f;
  return nullptr;
}

// Calls for one file: the smallest count in its range and a larger, uneven
// one (at most max_bytes of message), each where the file is the one to
// run; plus one in the placement it does not declare.
void calls_for(const File& f, const std::vector<File>& files, uint64_t max_bytes, std::vector<Call>* out) {
  const uint64_t unit = per_count_bytes(f.coll, f.nranks);
  const uint64_t lo = std::max<uint64_t>(1, (f.min_bytes + unit - 1) / unit);
  const uint64_t top = std::min(f.max_bytes, std::max(f.min_bytes, max_bytes)) / unit;
  std::vector<uint64_t> counts = {lo};
  if (top > lo) counts.push_back(top % 2 ? top : top - 1);  // odd: trailing chunks shorter or empty
  for (bool in_place : {false, true}) {
    const bool declared = in_place ? f.in_place : f.out_of_place;
    for (uint64_t count : counts) {
      const uint64_t message = count * unit;
      if (message < f.min_bytes || message > f.max_bytes) continue;
      if (declared && first_fit(files, f.coll, f.nranks, in_place, message) != &f) continue;
      Call call;
      call.file = declared ? &f : nullptr;
      call.c.coll = f.coll;
      call.c.count = count;
      call.c.in_place = in_place;
      call.message = message;
      out->push_back(call);
      if (!declared) break;  // one is enough there
    }
  }
}

// Runs `body` in a fresh child process (no braid state, no threads), so each
// run loads the schedule files itself; returns its exit status.
int in_child(unsigned timeout_s, const std::function<int()>& body) {
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    alarm(timeout_s);
    int code = body();
    std::fflush(nullptr);
    _exit(code);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

std::string read_logs(const std::string& dir) {
  std::string all;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::ifstream in(e.path());
    std::stringstream s;
    s << in.rdbuf();
    all += s.str();
  }
  return all;
}

std::string expected_line(const Call& call, int n) {
  return fmt::format("{} of {} B ({}, {} B message) on {} ranks: schedule '{}' from {}", coll_name(call.c.coll),
                     call.c.count * 4, call.c.in_place ? "in place" : "out of place", call.message, n,
                     call.file->name, call.file->path);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc % 2) return std::fprintf(stderr, "usage: %s DIR [--max-bytes N] [--max-ranks N]\n", argv[0]), 2;
  const std::string dir = argv[1];
  uint64_t max_bytes = 1 << 20;
  int max_ranks = 1 << 20;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--max-bytes") max_bytes = std::strtoull(argv[i + 1], nullptr, 0);
    else if (std::string(argv[i]) == "--max-ranks") max_ranks = std::atoi(argv[i + 1]);
    else return std::fprintf(stderr, "unknown option %s\n", argv[i]), 2;
  }
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return std::printf("SKIP: %s is absent\n", dir.c_str()), 77;

  // Files in the order braid's directory search takes them.
  std::vector<std::string> paths;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".xml") paths.push_back(e.path().string());
  std::sort(paths.begin(), paths.end());
  std::vector<File> files;
  for (const std::string& p : paths) {
    File f;
    std::string why;
    if (read_file(p, &f, &why)) files.push_back(f);
    else std::printf("not run: %s (%s)\n", p.c_str(), why.c_str());
  }
  std::map<int, std::vector<Call>> by_ranks;
  for (const File& f : files)
    if (f.nranks <= max_ranks) calls_for(f, files, max_bytes, &by_ranks[f.nranks]);
    else std::printf("not run: %s (%d ranks, --max-ranks %d)\n", f.path.c_str(), f.nranks, max_ranks);

  char tmpl[] = "/tmp/braid_msccl_files_XXXXXX";
  if (!mkdtemp(tmpl)) return std::perror("mkdtemp"), 1;
  const std::string logs = tmpl;
  setenv("BRAID_SCHEDULES", dir.c_str(), 1);
  setenv("BRAID_DEBUG", "INFO", 1);
  setenv("BRAID_DEBUG_FILE", (logs + "/%p.log").c_str(), 1);
  setenv("BRAID_TIMEOUT", "60", 1);  // a deadlock fails in a minute, not five
  // MSCCL files spread their thread blocks over up to 32 channels: a rank
  // count's files open ~1800 connections, each a shared-memory ring of
  // BRAID_SHM_SLOTS x 2 x BRAID_SHM_SLOT_BYTES (4 MiB by default, 7 GiB in
  // all).  Small rings keep the test to seconds; they also make the
  // framed messages of multi-chunk steps small, so calls span many tiles.
  setenv("BRAID_SHM_SLOTS", "4", 0);
  setenv("BRAID_SHM_SLOT_BYTES", "16384", 0);

  int failed = 0;
  std::map<const File*, std::vector<std::string>> ran;  // per file: "count in place (threads)", ...
  std::string refusals;
  for (Mode mode : {Mode::Threads, Mode::Processes}) {
    for (const auto& [n, calls] : by_ranks) {
      for (const auto& e : fs::directory_iterator(logs)) fs::remove(e.path());
      RankBody body = [&calls](int rank, int nranks, ncclComm_t comm, Failures& f) {
        for (const Call& call : calls) run_and_check(call.c, rank, nranks, comm, f);
      };
      const auto started = std::chrono::steady_clock::now();
      int status = in_child(300, [&] {
        ncclResetDebugInit();
        return mode == Mode::Threads ? std::min(run_ranks_as_threads(n, body), 100)
                                     : run_ranks_as_processes(n, body, 240, [](int) { ncclResetDebugInit(); });
      });
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      const std::string log = read_logs(logs);
      std::printf("%s, %d ranks: %zu calls, %s (%.1f s)\n", mode_name(mode), n, calls.size(),
                  status == 0 ? "exact" : "FAILED", seconds);
      if (status != 0) ++failed;
      for (const Call& call : calls) {
        if (!call.file) continue;
        if (log.find(expected_line(call, n)) == std::string::npos) {
          std::printf("FAIL: no log line \"%s\"\n", expected_line(call, n).c_str());
          ++failed;
        } else if (status == 0) {
          ran[call.file].push_back(fmt::format("{} {} ({})", call.c.count, call.c.in_place ? "in place" : "out of place",
                                               mode_name(mode)));
        }
      }
      for (size_t at = log.find("skipping "); at != std::string::npos; at = log.find("skipping ", at + 1)) {
        std::string line = log.substr(at, log.find('\n', at) - at);
        if (refusals.find(line) == std::string::npos) refusals += "  " + line + "\n";
      }
    }
  }
  std::printf("\n%-56s %s\n", "file", "outcome");
  for (const File& f : files) {
    if (f.nranks > max_ranks) continue;
    const auto it = ran.find(&f);
    std::string counts;
    if (it != ran.end())
      for (const std::string& r : it->second) counts += (counts.empty() ? "" : ", ") + r;
    std::printf("%-56s %s\n", fs::path(f.path).filename().c_str(),
                counts.empty() ? "NOT CHOSEN" : ("chosen, exact: " + counts).c_str());
    if (counts.empty()) ++failed;
  }
  if (!refusals.empty()) {
    std::printf("refused:\n%s", refusals.c_str());
    ++failed;
  }
  fs::remove_all(logs);
  std::printf("%s\n", failed ? "FAILED" : "all files chosen and exact");
  return failed ? 1 : 0;
}

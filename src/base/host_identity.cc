#include "src/base/host_identity.h"

#include <pthread.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <random>
#include <string>

#include "src/base/env.h"
#include "src/base/hash.h"

namespace braid {
namespace {

}  // namespace

uint64_t machine_hash() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  return fnv1a(std::string(host) + "/" + boot);
}

uint64_t shm_identity() {
  struct stat st {};
  return ::stat("/dev/shm", &st) == 0 ? uint64_t(st.st_dev) : 0;
}

uint64_t host_hash() {
  std::string id = env_string("BRAID_HOSTID");
  return id.empty() ? fnv1a(std::to_string(machine_hash()) + "/" + std::to_string(shm_identity())) : fnv1a(id);
}

namespace {
std::atomic<uint64_t> process_id{0};
std::atomic<int> known_pid{0};
}  // namespace

uint64_t this_process() {
  static const bool forget_in_children = pthread_atfork(nullptr, nullptr, [] { process_id = 0; }) == 0;
  (void)forget_in_children;  // without the handler a child keeps its parent's value, told apart by its pid
  uint64_t id = process_id.load(std::memory_order_relaxed);
  if (id != 0) return id;
  std::random_device rd;
  uint64_t drawn = ((uint64_t(rd()) << 32) ^ rd()) | 1;  // never 0, which means "not drawn yet"
  // Threads that draw at once agree on the first value stored.
  return process_id.compare_exchange_strong(id, drawn, std::memory_order_relaxed) ? drawn : id;
}

int this_pid() {
  static const bool forget_in_children = pthread_atfork(nullptr, nullptr, [] { known_pid = 0; }) == 0;
  int pid = known_pid.load(std::memory_order_relaxed);
  if (pid == 0 || !forget_in_children) {
    pid = int(getpid());
    known_pid.store(pid, std::memory_order_relaxed);
  }
  return pid;
}

uint64_t pid_namespace() {
  struct stat st {};
  return ::stat("/proc/self/ns/pid", &st) == 0 ? uint64_t(st.st_ino) : 0;
}

bool host_oversubscribed(int local_ranks) {
  cpu_set_t cpus;
  int mine = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
  int online = int(sysconf(_SC_NPROCESSORS_ONLN));
  return local_ranks > (mine > online ? mine : online);
}

}  // namespace braid

/* braid's library loaded late, with dlopen, as Python's ctypes, PyTorch's
 * `import torch` (libnccl.so.2 is a dependency of a module it dlopens),
 * CuPy and JAX load NCCL.  A library whose thread-locals need the static
 * TLS block (initial-exec) fails there with "cannot allocate memory in
 * static TLS block" once they outgrow glibc's small reserve; NVIDIA's
 * libnccl.so.2 has none.  Each library also makes, uses and destroys a
 * communicator through dlsym, and is then closed: its RAS thread (started
 * by the first communicator, serving until the process exits) must still
 * answer a query afterwards, so the library must stay mapped (-z nodelete).
 * Usage: late_dlopen_test LIB... (each must load and answer ncclGetVersion). */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct {
  char internal[128];
} unique_id;
typedef int (*get_version_fn)(int*);
typedef int (*get_id_fn)(unique_id*);
typedef int (*init_fn)(void**, int, unique_id, int);
typedef int (*all_reduce_fn)(const void*, void*, size_t, int, int, void*, void*);
typedef int (*destroy_fn)(void*);

static int free_port(void) {
  struct sockaddr_in a = {0};
  socklen_t len = sizeof a;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, (struct sockaddr*)&a, sizeof a);
  getsockname(fd, (struct sockaddr*)&a, &len);
  close(fd);
  return ntohs(a.sin_port);
}

/* A one-rank communicator: init, one AllReduce, destroy. */
static int use_once(void* lib, const char* name) {
  get_id_fn get_id = (get_id_fn)dlsym(lib, "ncclGetUniqueId");
  init_fn init = (init_fn)dlsym(lib, "ncclCommInitRank");
  all_reduce_fn all_reduce = (all_reduce_fn)dlsym(lib, "ncclAllReduce");
  destroy_fn destroy = (destroy_fn)dlsym(lib, "ncclCommDestroy");
  unique_id id;
  void* comm = NULL;
  float x = 3, y = 0;
  if (!get_id || !init || !all_reduce || !destroy || get_id(&id) != 0 || init(&comm, 1, id, 0) != 0 ||
      all_reduce(&x, &y, 1, 7 /* ncclFloat */, 0 /* ncclSum */, comm, NULL) != 0 || y != 3 || destroy(comm) != 0) {
    printf("%s: a one-rank communicator did not work\n", name);
    return 1;
  }
  return 0;
}

/* Whether the RAS client socket at 127.0.0.1:port answers a status query. */
static int ras_answers(int port) {
  struct sockaddr_in a = {0};
  char buf[4096];
  int fd = socket(AF_INET, SOCK_STREAM, 0), got = 0;
  ssize_t n;
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons((unsigned short)port);
  if (connect(fd, (struct sockaddr*)&a, sizeof a) != 0 || send(fd, "STATUS\n", 7, 0) != 7) return 0;
  while ((n = recv(fd, buf, sizeof buf - 1, 0)) > 0) {
    buf[n] = 0;
    got |= strstr(buf, "Job summary") != NULL;
  }
  close(fd);
  return got;
}

int main(int argc, char** argv) {
  int failed = 0;
  char addr[64];
  const int port = free_port();
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  setenv("NCCL_RAS_ADDR", addr, 1);
  for (int i = 1; i < argc; ++i) {
    void* lib = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      printf("%s: dlopen failed: %s\n", argv[i], dlerror());
      failed = 1;
      continue;
    }
    get_version_fn get_version = (get_version_fn)dlsym(lib, "ncclGetVersion");
    int version = 0;
    if (!get_version || get_version(&version) != 0 || version <= 0) {
      printf("%s: ncclGetVersion did not answer\n", argv[i]);
      failed = 1;
      continue;
    }
    failed |= use_once(lib, argv[i]);
    dlclose(lib);
    printf("%s: loaded late, version %d, used and closed\n", argv[i], version);
  }
  if (!ras_answers(port)) {
    printf("no RAS answer at %s after the libraries were closed\n", addr);
    failed = 1;
  }
  return failed;
}

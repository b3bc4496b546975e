/* braid's library loaded late, with dlopen, as Python's ctypes, PyTorch's
 * `import torch` (libnccl.so.2 is a dependency of a module it dlopens),
 * CuPy and JAX load NCCL.  A library whose thread-locals need the static
 * TLS block (initial-exec) fails there with "cannot allocate memory in
 * static TLS block" once they outgrow glibc's small reserve; NVIDIA's
 * libnccl.so.2 has none.  Usage: late_dlopen_test LIB... (each must load
 * and answer ncclGetVersion). */
#include <dlfcn.h>
#include <stdio.h>

typedef int (*get_version_fn)(int*);

int main(int argc, char** argv) {
  int failed = 0;
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
    printf("%s: loaded late, version %d\n", argv[i], version);
  }
  return failed;
}

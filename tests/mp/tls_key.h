// ncclSetEncryption for the tests, from a translation unit that sees
// braid's nccl.h: the device API tests compile against NVIDIA's installed
// 2.28.9 nccl.h, which predates it.
#pragma once

#include <nccl.h>

namespace mp {

// Sets the process's pre-shared key (TLS on), or with nullptr turns TLS off.
ncclResult_t set_tls_key(const char* psk);

// Holds a key for a scope (a test's parent process, whose key its forked
// ranks inherit and whose bootstrap root serves them).
struct ScopedTlsKey {
  explicit ScopedTlsKey(const char* psk) : ok(set_tls_key(psk) == ncclSuccess) {}
  ~ScopedTlsKey() { set_tls_key(nullptr); }
  ScopedTlsKey(const ScopedTlsKey&) = delete;
  ScopedTlsKey& operator=(const ScopedTlsKey&) = delete;
  const bool ok;
};

}  // namespace mp

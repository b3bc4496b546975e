// OpenSSL 3, opened at run time (dlopen) instead of linked: only processes
// that turn TLS on (ncclSetEncryption) need libssl.so.3, and a machine
// without it (an older distribution has libssl.so.1.1) still loads
// libnccl.so.2 and runs everything else, as NCCL does.  tls_session.cc
// calls OpenSSL's functions as usual; openssl_loader.cc defines them as
// forwarders (src/base/dl_forward.h).
#pragma once

#include "src/base/status.h"

namespace braid {

// Opens libssl.so.3 (and through it libcrypto.so.3) once and finds every
// entry point braid calls.  ncclSystemError saying why not.  Call it before
// any OpenSSL function; until it succeeded they fail (0, null, ENOSYS).
Status load_openssl();

}  // namespace braid

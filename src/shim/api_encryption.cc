// Entry point of NCCL 2.32's TCP encryption: ncclSetEncryption.
//
// Process-wide, as in NCCL: connections made after the call (bootstrap,
// socket transport, the one-sided RMA's sockets) run TLS 1.3 keyed by the
// pre-shared key (src/base/tls.h); those made before stay as they were.
// Every process of a job must set the same key before its first
// ncclGetUniqueId or init.  Shared-memory and device transports carry no
// network traffic and are not encrypted (NCCL: "non-Socket transports remain
// outside that protection boundary").
#include <cstring>

#include "src/base/tls.h"
#include "src/shim/api.h"

using namespace braid;

namespace {

Status set_encryption(const ncclEncryptionConfig_t* user) {
  if (!user) return BRAID_ERROR(ncclInvalidArgument, "config is NULL");
  const auto [size, magic, version] = versioned_header(user);
  if (magic != NCCL_API_MAGIC)
    return BRAID_ERROR(ncclInvalidArgument, "config was not initialised with NCCL_ENCRYPTION_CONFIG_INITIALIZER "
                       "(bad magic {:#x})", magic);
  if (version < NCCL_VERSION(2, 32, 0) || size < sizeof(ncclEncryptionConfig_t))
    return BRAID_ERROR(ncclInvalidArgument, "config of size {} and version {} is not an ncclEncryptionConfig_t "
                       "(2.32's is {} bytes)", size, version, sizeof(ncclEncryptionConfig_t));
  ncclEncryptionConfig_t config;
  std::memcpy(&config, user, sizeof(config));
  switch (config.mode) {
    case NCCL_ENCRYPTION_MODE_NONE: return tls_configure(nullptr);
    case NCCL_ENCRYPTION_MODE_PSK:
      if (!config.psk) return BRAID_ERROR(ncclInvalidArgument, "mode NCCL_ENCRYPTION_MODE_PSK with psk NULL");
      return tls_configure(config.psk);
    default:
      return BRAID_ERROR(ncclInvalidArgument, "mode {} (expected NCCL_ENCRYPTION_MODE_NONE or _PSK)", config.mode);
  }
}

}  // namespace

BRAID_API ncclResult_t ncclSetEncryption(const ncclEncryptionConfig_t* config) {
  return guarded(nullptr, "ncclSetEncryption", [&] { return set_encryption(config); });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclSetEncryption, (const ncclEncryptionConfig_t*))

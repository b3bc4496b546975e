#include "tls_key.h"

namespace mp {

ncclResult_t set_tls_key(const char* psk) {
  ncclEncryptionConfig_t e = NCCL_ENCRYPTION_CONFIG_INITIALIZER;
  if (psk) {
    e.mode = NCCL_ENCRYPTION_MODE_PSK;
    e.psk = psk;
  }
  return ncclSetEncryption(&e);
}

}  // namespace mp

#include "src/base/openssl_loader.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>

#include <string>

#include "src/base/dl_forward.h"

namespace braid {
namespace {

constexpr const char* kLibrary = "libssl.so.3";

// Every OpenSSL function braid's TLS code leaves undefined (nm -u on its
// objects; the ctest no_hard_library_deps fails when one is missing here):
// X(name, parameters, required).  libcrypto's come through libssl's
// handle, which reaches the libraries libssl needs.
#define BRAID_OPENSSL_ENTRIES(X)                    \
  X(BIO_clear_flags, 2, true)                       \
  X(BIO_get_data, 1, true)                          \
  X(BIO_get_new_index, 0, true)                     \
  X(BIO_meth_free, 1, true)                         \
  X(BIO_meth_new, 2, true)                          \
  X(BIO_meth_set_create, 2, true)                   \
  X(BIO_meth_set_ctrl, 2, true)                     \
  X(BIO_meth_set_read_ex, 2, true)                  \
  X(BIO_meth_set_write_ex, 2, true)                 \
  X(BIO_new, 1, true)                               \
  X(BIO_set_data, 2, true)                          \
  X(BIO_set_flags, 2, true)                         \
  X(BIO_set_init, 2, true)                          \
  X(ERR_clear_error, 0, true)                       \
  X(ERR_error_string_n, 3, true)                    \
  X(ERR_get_error, 0, true)                         \
  X(ERR_peek_error, 0, true)                        \
  X(EVP_Digest, 6, true)                            \
  X(EVP_MD_get_type, 1, true)                       \
  X(EVP_sha256, 0, true)                            \
  X(OPENSSL_cleanse, 2, true)                       \
  X(OPENSSL_init_ssl, 2, true)                      \
  X(SSL_CIPHER_find, 2, true)                       \
  X(SSL_CIPHER_get_handshake_digest, 1, true)       \
  X(SSL_CTX_ctrl, 4, true)                          \
  X(SSL_CTX_new, 1, true)                           \
  X(SSL_CTX_set_ciphersuites, 2, true)              \
  X(SSL_CTX_set_default_read_buffer_len, 2, true)   \
  X(SSL_CTX_set_num_tickets, 2, true)               \
  X(SSL_CTX_set_options, 2, true)                   \
  X(SSL_CTX_set_psk_find_session_callback, 2, true) \
  X(SSL_CTX_set_psk_use_session_callback, 2, true)  \
  X(SSL_SESSION_free, 1, true)                      \
  X(SSL_SESSION_get0_cipher, 1, true)               \
  X(SSL_SESSION_new, 0, true)                       \
  X(SSL_SESSION_set1_master_key, 3, true)           \
  X(SSL_SESSION_set_cipher, 2, true)                \
  X(SSL_SESSION_set_protocol_version, 2, true)      \
  X(SSL_do_handshake, 1, true)                      \
  X(SSL_free, 1, true)                              \
  X(SSL_get_error, 2, true)                         \
  X(SSL_has_pending, 1, true)                       \
  X(SSL_new, 1, true)                               \
  X(SSL_pending, 1, true)                           \
  X(SSL_read_ex, 4, true)                           \
  X(SSL_set_accept_state, 1, true)                  \
  X(SSL_set_bio, 3, true)                           \
  X(SSL_set_connect_state, 1, true)                 \
  X(SSL_shutdown, 1, true)                          \
  X(SSL_write_ex, 4, true)                          \
  X(TLS_client_method, 0, true)                     \
  X(TLS_server_method, 0, true)

BRAID_DL_TABLE(BRAID_OPENSSL_ENTRIES, kLibrary, "OpenSSL 3, which TLS needs")

}  // namespace

Status load_openssl() {
  const Table& t = table();
  if (!t.error.empty()) return BRAID_ERROR(ncclSystemError, "TLS: {}", t.error);
  return Status::ok();
}

// The forwarders: OpenSSL's int results are 0 on failure.
#define BRAID_OPENSSL_FORWARD(name, n, required) BRAID_DL_FORWARD(table, 0, name, n)
BRAID_OPENSSL_ENTRIES(BRAID_OPENSSL_FORWARD)
#undef BRAID_OPENSSL_FORWARD

}  // namespace braid

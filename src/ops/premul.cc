// Element loop for PreMulSum scaling (see premul.h), over the element
// semantics of reduce_ops.h so every datatype is handled the same way as Prod.
#include "src/ops/premul.h"

#include <cstring>

#include "src/ops/reduce_ops.h"

namespace braid {

void scale_by(void* dst, const void* src, size_t count, ncclDataType_t type, const void* scalar) {
  with_storage_type(type, [&](auto storage) {
    using S = decltype(storage);
    S k;
    std::memcpy(&k, scalar, sizeof(S));
    const S* in = static_cast<const S*>(src);
    S* out = static_cast<S*>(dst);
    for (size_t i = 0; i < count; ++i) out[i] = reduce_elem<ReduceKind::Prod>(in[i], k);
  });
}

}  // namespace braid

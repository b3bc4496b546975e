// NCCL datatypes and reduction operators as braid sees them: sizes and names.
// (The host loops over them are in host_kernels.h.)
#pragma once

#include <cstddef>
#include <cstdint>

#include "nccl.h"

namespace braid {

size_t datatype_size(ncclDataType_t t);  // 0 for an invalid type
const char* datatype_name(ncclDataType_t t);  // "float", "bfloat16", ... as nccl-tests names them
const char* redop_name(ncclRedOp_t op);       // "sum", "prod", "max", "min", "avg"

}  // namespace braid

// NCCL's environment plugin ABI, as NCCL 2.28.9 (ncclEnvPlugin_v1) and 2.30
// (ncclEnvPlugin_v2) define it in src/include/plugin/env/env_v{1,2}.h: a
// table a library exports under that symbol.  Written from the documented
// layout; braid's own names, so that nothing clashes with a plugin's header.
#pragma once

#include <cstdint>

#include "nccl.h"

extern "C" {

// ncclDebugLogger_t: NCCL's level (ncclDebugLogLevel, an int) and subsystem
// flags, the caller's file and line, and printf arguments.
typedef void (*braidNcclDebugLogger_t)(int level, unsigned long flags, const char* file, int line, const char* fmt,
                                       ...);

// getEnv's value stays valid until the next getEnv of that name or
// finalize; null is "not set".
typedef struct {
  const char* name;
  ncclResult_t (*init)(uint8_t ncclMajor, uint8_t ncclMinor, uint8_t ncclPatch, const char* suffix);
  ncclResult_t (*finalize)(void);
  const char* (*getEnv)(const char* name);
} braidNcclEnv_v1_t;

// v2: init also takes NCCL's logger.
typedef struct {
  const char* name;
  ncclResult_t (*init)(uint8_t ncclMajor, uint8_t ncclMinor, uint8_t ncclPatch, const char* suffix,
                       braidNcclDebugLogger_t logFunction);
  ncclResult_t (*finalize)(void);
  const char* (*getEnv)(const char* name);
} braidNcclEnv_v2_t;

}  // extern "C"

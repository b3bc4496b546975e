// Entry points of NCCL 2.30's parameter API (ncclParam*) over braid's
// configuration: every BRAID_* variable of src/base/env_registry.h and the
// NCCL_* ones braid honours (src/base/env.h, nccl_env_vars), by their names.
//
// A parameter's value is what braid reads: the environment's, else its
// registered default.  A parameter whose default is a whole number is an
// integer (the typed getters read it, each checking that the value fits its
// type); the others are strings.  ncclParamGetStr and ncclParamGetParameter
// give any parameter's text.  NCCL hands out a pointer into its registry as
// the handle, and so does braid: the table below lives for the process.
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <optional>
#include <set>
#include <type_traits>
#include <string>
#include <vector>

#include "src/base/env.h"
#include "src/shim/api.h"

struct ncclParamHandle {
  const braid::EnvVar* var;
  bool integer;  // its default is a whole number
};

using namespace braid;

namespace {

bool parse_integer(const std::string& text, int64_t* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str(), &end, 0);
  if (errno || *end != '\0') return false;
  *out = v;
  return true;
}

const std::vector<ncclParamHandle>& parameters() {
  static const std::vector<ncclParamHandle> table = [] {
    std::vector<ncclParamHandle> t;
    int64_t ignored = 0;
    for (const EnvVar& v : env_registry()) t.push_back({&v, parse_integer(v.default_value, &ignored)});
    for (const EnvVar& v : nccl_env_vars()) t.push_back({&v, false});
    return t;
  }();
  return table;
}

const ncclParamHandle* find(const char* key) {
  for (const ncclParamHandle& p : parameters())
    if (std::string_view(p.var->name) == key) return &p;
  return nullptr;
}

bool is_handle(ncclParamHandle_t h) {
  const auto& t = parameters();
  return h >= t.data() && h < t.data() + t.size();
}

std::string text_of(const ncclParamHandle& p) {
  const std::string set = env_raw(p.var->name);
  return set.empty() ? p.var->default_value : set;
}

// The value braid uses: a malformed setting falls back to the default, as env_int does.
int64_t integer_of(const ncclParamHandle& p) {
  int64_t v = 0;
  if (!parse_integer(text_of(p), &v)) parse_integer(p.var->default_value, &v);
  return v;
}

Status check_handle(ncclParamHandle_t h, const void* out) {
  if (!h) return BRAID_ERROR(ncclInvalidArgument, "parameter handle is NULL");
  if (!is_handle(h)) return BRAID_ERROR(ncclInvalidArgument, "parameter handle {} did not come from ncclParamBind",
                                        static_cast<const void*>(h));
  if (!out) return BRAID_ERROR(ncclInvalidArgument, "output pointer is NULL");
  return Status::ok();
}

template <class T>
Status get_integer(ncclParamHandle_t h, T* out, const char* type) {
  BRAID_TRY(check_handle(h, out));
  if (!h->integer)
    return BRAID_ERROR(ncclInvalidArgument, "parameter {} is a string (\"{}\"): read it with ncclParamGetStr",
                       h->var->name, text_of(*h));
  const int64_t v = integer_of(*h);
  const bool fits = std::is_signed_v<T> ? v >= int64_t(std::numeric_limits<T>::min()) &&
                                              v <= int64_t(std::numeric_limits<T>::max())
                                        : v >= 0 && uint64_t(v) <= uint64_t(std::numeric_limits<T>::max());
  if (!fits) return BRAID_ERROR(ncclInvalidArgument, "parameter {} = {} does not fit {}", h->var->name, v, type);
  *out = T(v);
  return Status::ok();
}

}  // namespace

BRAID_API ncclResult_t ncclParamBind(ncclParamHandle_t* out, const char* key) {
  return guarded(nullptr, "ncclParamBind", [&] {
    if (!out) return BRAID_ERROR(ncclInvalidArgument, "handle pointer is NULL");
    if (!key) return BRAID_ERROR(ncclInvalidArgument, "key is NULL");
    const ncclParamHandle* p = find(key);
    if (!p) return BRAID_ERROR(ncclInvalidArgument, "no parameter named \"{}\" (`braid env` lists them)", key);
    *out = const_cast<ncclParamHandle*>(p);
    return Status::ok();
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclParamBind, (ncclParamHandle_t*, const char*))

#define BRAID_PARAM_GETTER(Suffix, T)                                                              \
  BRAID_API ncclResult_t ncclParamGet##Suffix(ncclParamHandle_t h, T* out) {                       \
    return guarded(nullptr, "ncclParamGet" #Suffix, [&] { return get_integer(h, out, #T); });      \
  }                                                                                                \
  BRAID_PROFILING_ALIAS(ncclResult_t, ncclParamGet##Suffix, (ncclParamHandle_t, T*))
BRAID_PARAM_GETTER(I8, int8_t)
BRAID_PARAM_GETTER(I16, int16_t)
BRAID_PARAM_GETTER(I32, int32_t)
BRAID_PARAM_GETTER(I64, int64_t)
BRAID_PARAM_GETTER(U8, uint8_t)
BRAID_PARAM_GETTER(U16, uint16_t)
BRAID_PARAM_GETTER(U32, uint32_t)
BRAID_PARAM_GETTER(U64, uint64_t)
#undef BRAID_PARAM_GETTER

// Valid until this thread's next ncclParamGetStr (NCCL's rule).
BRAID_API ncclResult_t ncclParamGetStr(ncclParamHandle_t h, const char** out) {
  return guarded(nullptr, "ncclParamGetStr", [&] {
    BRAID_TRY(check_handle(h, out));
    thread_local std::string text;
    text = text_of(*h);
    *out = text.c_str();
    return Status::ok();
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclParamGetStr, (ncclParamHandle_t, const char**))

// The raw bytes: an integer parameter as an int64_t, a string one as its
// NUL-terminated text.
BRAID_API ncclResult_t ncclParamGet(ncclParamHandle_t h, void* out, int maxLen, int* len) {
  return guarded(nullptr, "ncclParamGet", [&] {
    BRAID_TRY(check_handle(h, out));
    if (!len) return BRAID_ERROR(ncclInvalidArgument, "len pointer is NULL");
    *len = 0;
    const int64_t v = h->integer ? integer_of(*h) : 0;
    const std::string text = h->integer ? std::string() : text_of(*h);
    const void* bytes = h->integer ? static_cast<const void*>(&v) : text.c_str();
    const int need = h->integer ? int(sizeof(v)) : int(text.size() + 1);
    if (maxLen < need)
      return BRAID_ERROR(ncclInvalidArgument, "parameter {} needs {} bytes, maxLen is {}", h->var->name, need, maxLen);
    std::memcpy(out, bytes, size_t(need));
    *len = need;
    return Status::ok();
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclParamGet, (ncclParamHandle_t, void*, int, int*))

// Valid until this thread's next ncclParamGetParameter.
BRAID_API ncclResult_t ncclParamGetParameter(const char* key, const char** value, int* valueLen) {
  return guarded(nullptr, "ncclParamGetParameter", [&] {
    if (!key || !value || !valueLen) return BRAID_ERROR(ncclInvalidArgument, "key, value or valueLen is NULL");
    *value = nullptr;
    *valueLen = 0;
    const ncclParamHandle* p = find(key);
    if (!p) return BRAID_ERROR(ncclInvalidArgument, "no parameter named \"{}\" (`braid env` lists them)", key);
    thread_local std::string text;
    text = text_of(*p);
    *value = text.c_str();
    *valueLen = int(text.size());
    return Status::ok();
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclParamGetParameter, (const char*, const char**, int*))

// Every key (braid documents them all: NCCL_PARAM_DUMP_ALL changes nothing).
BRAID_API ncclResult_t ncclParamGetAllParameterKeys(const char*** table, int* tableLen) {
  return guarded(nullptr, "ncclParamGetAllParameterKeys", [&] {
    if (!table || !tableLen) return BRAID_ERROR(ncclInvalidArgument, "table or tableLen is NULL");
    thread_local std::vector<const char*> keys;
    keys.clear();
    for (const ncclParamHandle& p : parameters()) keys.push_back(p.var->name);
    *table = keys.data();
    *tableLen = int(keys.size());
    return Status::ok();
  });
}
BRAID_PROFILING_ALIAS(ncclResult_t, ncclParamGetAllParameterKeys, (const char***, int*))

// To standard output, as NCCL prints it: each key, its type, what it does,
// its value and where the value came from.
BRAID_API void ncclParamDumpAll() {
  try {
    std::printf("=== braid parameters (ncclParamDumpAll) ===\n");
    for (const ncclParamHandle& p : parameters()) {
      const bool set = !env_raw(p.var->name).empty();
      std::printf("%s (%s) %s\n    Current value=%s set_by=%s default=%s\n", p.var->name,
                  p.integer ? "int64" : "string", p.var->description, text_of(p).empty() ? "<unset>" : text_of(p).c_str(),
                  set ? "environment" : "default", *p.var->default_value ? p.var->default_value : "<unset>");
    }
    std::fflush(stdout);
  } catch (...) {
  }
}
BRAID_PROFILING_ALIAS(void, ncclParamDumpAll, ())

// NCCL 2.30's helper for code built with its ncclParam<T> (NCCL's
// src/include/param/utils.h; libnccl exports it for plugins): a variable's
// value as the env plugin, else the environment, gives it; null where unset.
// braid reads every variable through its env plugin once one is loaded, and
// loads it at the first read either way, so `env_init` changes nothing.
// The text lives for the process: each distinct value is kept once.
BRAID_API const char* ncclParamEnvPluginGet(const char* key, bool env_init) {
  (void)env_init;
  if (!key) return nullptr;
  try {
    const std::optional<std::string> value = env_value(key);
    if (!value) return nullptr;
    static std::mutex mutex;
    static auto* kept = new std::set<std::string>();  // never destroyed: callers may read at exit
    std::lock_guard<std::mutex> lock(mutex);
    return kept->insert(*value).first->c_str();
  } catch (...) {
    return nullptr;  // no exception crosses the C ABI; an allocation that failed reads as unset
  }
}

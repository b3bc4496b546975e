// Forwarders into a library opened at run time (dlopen), for code written
// against the library's header as if it were linked.  Where a dependency
// must not be needed just to load libnccl.so.2 (libibverbs, OpenSSL: a
// machine without them must still run everything else, as NCCL does),
// braid's code calls the library's functions as usual, and a loader file
// defines each of them as a forwarder to the entry point dlsym found.  The
// forwarders take their types from the header's own declarations (so they
// cannot drift from it), and they are hidden (the library's visibility
// preset and export map), so nothing else in the process binds to them.
//
// A loader lists its entry points as X(name, number of parameters,
// required), has BRAID_DL_TABLE(ENTRIES, library, what) make its `Table`
// and `table()` (loaded once, thread-safe), and defines
//   BRAID_DL_FORWARD(table, int_failure, name, n)
// for each entry.  A forwarder whose entry point was not found sets errno to
// ENOSYS and returns `int_failure` for an int result, else zero (null).
#pragma once

#include <dlfcn.h>

#include <cerrno>
#include <cstddef>
#include <string>
#include <tuple>
#include <type_traits>

#include "src/base/status.h"

namespace braid::dl {

template <class F>
struct Signature;
template <class R, class... A>
struct Signature<R (*)(A...)> {
  using Ret = R;
  using Args = std::tuple<A...>;
};
template <class R, class... A>
struct Signature<R (*)(A...) noexcept> : Signature<R (*)(A...)> {};
template <class F>
using Ret = typename Signature<F>::Ret;
template <class F, size_t I>
using Arg = std::tuple_element_t<I, typename Signature<F>::Args>;

template <class R, int IntFailure>
R missing() {
  errno = ENOSYS;
  if constexpr (std::is_void_v<R>) return;
  else if constexpr (std::is_same_v<R, int>) return IntFailure;
  else return R{};
}

// The entry point `name` of the library `lib` (a dlopen handle), typed as
// its header declares it; null if absent.
template <class F>
F find(void* lib, const char* name) {
  return reinterpret_cast<F>(dlsym(lib, name));
}

// dlopen(library) for a loader's table (kept open for the process); null
// and *error saying why (`what`: what the library is, for whom) if it fails.
inline void* open(const char* library, const char* what, std::string* error) {
  void* lib = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    *error = fmt::format("cannot load {} ({}): {}", library, what, why ? why : "unknown error");
  }
  return lib;
}

}  // namespace braid::dl

// A member of a loader's table: the entry point, typed by the header.
#define BRAID_DL_POINTER(name, n, required) decltype(&::name) name = nullptr;
// In table(), with `t` the table, `lib` the open library and `library` its
// name: finds one entry; a required one missing sets t.error.
#define BRAID_DL_FIND(name, n, required)                     \
  t.name = ::braid::dl::find<decltype(&::name)>(lib, #name); \
  if (!t.name && (required) && t.error.empty())              \
    t.error = fmt::format("{} has no {} (too old a version)", library, #name);
// `Table` (the entries of ENTRIES, and `error`, empty once loaded) and
// `table()`, which opens `library` (`what`: what it is, for whom) once.
#define BRAID_DL_TABLE(ENTRIES, library_name, what)                  \
  struct Table {                                                     \
    ENTRIES(BRAID_DL_POINTER)                                        \
    std::string error;                                               \
  };                                                                 \
  const Table& table() {                                             \
    static const Table loaded = [] {                                 \
      Table t;                                                       \
      const char* library = library_name;                            \
      if (void* lib = ::braid::dl::open(library, what, &t.error)) {  \
        ENTRIES(BRAID_DL_FIND)                                       \
      }                                                              \
      return t;                                                      \
    }();                                                             \
    return loaded;                                                   \
  }

#define BRAID_DL_ARG(name, i) ::braid::dl::Arg<decltype(&::name), i> a##i
#define BRAID_DL_DEFINE(table, int_failure, name, params, args)                              \
  extern "C" ::braid::dl::Ret<decltype(&::name)>(name) params {                              \
    const auto f = table().name;                                                             \
    if (!f) return ::braid::dl::missing<::braid::dl::Ret<decltype(&::name)>, int_failure>(); \
    return f args;                                                                           \
  }
// The name is parenthesised past the header's function-like macros of the
// same name (verbs.h has some).
#define BRAID_DL_FORWARD_0(t, fail, name) BRAID_DL_DEFINE(t, fail, name, (), ())
#define BRAID_DL_FORWARD_1(t, fail, name) BRAID_DL_DEFINE(t, fail, name, (BRAID_DL_ARG(name, 0)), (a0))
#define BRAID_DL_FORWARD_2(t, fail, name) \
  BRAID_DL_DEFINE(t, fail, name, (BRAID_DL_ARG(name, 0), BRAID_DL_ARG(name, 1)), (a0, a1))
#define BRAID_DL_FORWARD_3(t, fail, name) \
  BRAID_DL_DEFINE(t, fail, name, (BRAID_DL_ARG(name, 0), BRAID_DL_ARG(name, 1), BRAID_DL_ARG(name, 2)), (a0, a1, a2))
#define BRAID_DL_FORWARD_4(t, fail, name)                                                                      \
  BRAID_DL_DEFINE(t, fail, name,                                                                               \
                  (BRAID_DL_ARG(name, 0), BRAID_DL_ARG(name, 1), BRAID_DL_ARG(name, 2), BRAID_DL_ARG(name, 3)), \
                  (a0, a1, a2, a3))
#define BRAID_DL_FORWARD_5(t, fail, name)                                                                      \
  BRAID_DL_DEFINE(t, fail, name,                                                                               \
                  (BRAID_DL_ARG(name, 0), BRAID_DL_ARG(name, 1), BRAID_DL_ARG(name, 2), BRAID_DL_ARG(name, 3), \
                   BRAID_DL_ARG(name, 4)),                                                                     \
                  (a0, a1, a2, a3, a4))
#define BRAID_DL_FORWARD_6(t, fail, name)                                                                      \
  BRAID_DL_DEFINE(t, fail, name,                                                                               \
                  (BRAID_DL_ARG(name, 0), BRAID_DL_ARG(name, 1), BRAID_DL_ARG(name, 2), BRAID_DL_ARG(name, 3), \
                   BRAID_DL_ARG(name, 4), BRAID_DL_ARG(name, 5)),                                              \
                  (a0, a1, a2, a3, a4, a5))
#define BRAID_DL_FORWARD(t, fail, name, n) BRAID_DL_FORWARD_##n(t, fail, name)

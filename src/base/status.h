// Status: the error type used everywhere inside braid.
//
// A Status is either ok (no allocation) or carries an ncclResult_t code, a
// message, and the file:line trail it travelled through.  It is [[nodiscard]]
// so an error cannot be dropped silently; the C ABI turns it into a result
// code and the text ncclGetLastError returns.
#pragma once

#include <fmt/format.h>

#include <memory>
#include <string>
#include <utility>

#include "nccl.h"

namespace braid {

// The enumerator's name ("ncclInvalidUsage"), for messages about codes a
// plugin returned.  By number: a client of 2.28's nccl.h (some tests) has
// no ncclTimeout (8).
inline const char* nccl_result_name(ncclResult_t r) {
  static const char* const kNames[] = {"ncclSuccess",         "ncclUnhandledCudaError", "ncclSystemError",
                                       "ncclInternalError",   "ncclInvalidArgument",    "ncclInvalidUsage",
                                       "ncclRemoteError",     "ncclInProgress",         "ncclTimeout"};
  const int i = int(r);
  return i >= 0 && i < int(sizeof(kNames) / sizeof(kNames[0])) ? kNames[i] : "an unknown result code";
}

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status ok() { return Status(); }
  static Status error(ncclResult_t code, std::string message, const char* file = nullptr, int line = 0) {
    Status s;
    s.rep_ = std::make_shared<Rep>(Rep{code, std::move(message), {}});
    if (file) s.rep_->trail = fmt::format("{}:{}", short_file(file), line);
    return s;
  }

  bool is_ok() const { return rep_ == nullptr; }
  explicit operator bool() const { return is_ok(); }
  ncclResult_t code() const { return rep_ ? rep_->code : ncclSuccess; }
  const std::string& message() const {
    static const std::string empty;
    return rep_ ? rep_->message : empty;
  }
  // "message (at a.cc:10 <- b.cc:20)": what ncclGetLastError shows.
  std::string to_string() const {
    if (!rep_) return "success";
    return rep_->trail.empty() ? rep_->message : fmt::format("{} (at {})", rep_->message, rep_->trail);
  }
  // Adds a frame to the trail; used by BRAID_TRY as the error travels up.
  Status&& at(const char* file, int line) && {
    if (rep_) rep_->trail += fmt::format(" <- {}:{}", short_file(file), line);
    return std::move(*this);
  }
  // Prefixes context ("allreduce: " + message).
  Status&& context(const std::string& what) && {
    if (rep_) rep_->message = what + ": " + rep_->message;
    return std::move(*this);
  }

 private:
  struct Rep {
    ncclResult_t code;
    std::string message;
    std::string trail;
  };
  static const char* short_file(const char* f) {
    const char* s = f;
    for (const char* p = f; *p; ++p)
      if (*p == '/') s = p + 1;
    return s;
  }
  std::shared_ptr<Rep> rep_;
};

}  // namespace braid

// BRAID_ERROR(ncclInvalidArgument, "bad root {}", root)
#define BRAID_ERROR(code, ...) ::braid::Status::error((code), ::fmt::format(__VA_ARGS__), __FILE__, __LINE__)

// Propagate a failed Status to the caller, recording where it passed.
#define BRAID_TRY(expr)                                            \
  do {                                                             \
    ::braid::Status braid_try_status_ = (expr);                    \
    if (!braid_try_status_.is_ok())                                \
      return std::move(braid_try_status_).at(__FILE__, __LINE__);  \
  } while (0)

// Names for braid's threads (NCCL_SET_THREAD_NAME).
//
// With NCCL_SET_THREAD_NAME=1 every thread braid starts is named for what
// it does ("braid socket", "braid gin proxy"), as NCCL names its own
// ("NCCL Progress"), so top -H, ps -L, gdb, perf and py-spy tell them apart.
// Off by default, as in NCCL: a thread then keeps the name it inherits, the
// program's.  The setting is read once per process, on the first call,
// which is on the application's thread: the first thread braid starts is
// started there, and every start names its thread.
#pragma once

#include <thread>
#include <utility>

namespace braid {

// Names `thread` (just started by the caller), where NCCL_SET_THREAD_NAME=1;
// past 15 characters (the kernel's limit) the name is cut.
void name_thread(std::thread& thread, const char* name);

// Starts a thread running `body`, named `name` (as above): how braid starts
// every thread of its own.
template <class Body>
std::thread named_thread(const char* name, Body&& body) {
  std::thread thread(std::forward<Body>(body));
  name_thread(thread, name);
  return thread;
}

}  // namespace braid

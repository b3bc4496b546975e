// The host's thread blocks for MoE: `blocks` agents per rank, the calling
// thread being block 0 and the others helper threads kept for the
// handle's life (starting threads per call would cost more than the call).
// run(fn) runs fn(0) .. fn(blocks - 1) concurrently and returns when all are
// done, which is also what orders their effects before the caller's next step.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace braid::moe {

class BlockPool {
 public:
  explicit BlockPool(int blocks);
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  int blocks() const { return blocks_; }
  // fn must not throw.
  void run(const std::function<void(int block)>& fn);

 private:
  void helper(int block);

  const int blocks_;
  std::mutex mutex_;
  std::condition_variable start_, done_;
  uint64_t generation_ = 0;
  int running_ = 0;
  bool stop_ = false;
  const std::function<void(int)>* fn_ = nullptr;
  std::vector<std::thread> threads_;
};

}  // namespace braid::moe

#include "src/moe/blocks.h"

#include "src/base/thread_name.h"

namespace braid::moe {

BlockPool::BlockPool(int blocks) : blocks_(blocks < 1 ? 1 : blocks) {
  for (int b = 1; b < blocks_; ++b) threads_.push_back(named_thread("braid moe block", [this, b] { helper(b); }));
}

BlockPool::~BlockPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  start_.notify_all();
  for (auto& t : threads_) t.join();
}

void BlockPool::run(const std::function<void(int)>& fn) {
  if (blocks_ == 1) return fn(0);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    fn_ = &fn;
    running_ = blocks_ - 1;
    ++generation_;
  }
  start_.notify_all();
  fn(0);
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return running_ == 0; });
  fn_ = nullptr;
}

void BlockPool::helper(int block) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* fn;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      fn = fn_;
    }
    (*fn)(block);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      --running_;
    }
    done_.notify_one();
  }
}

}  // namespace braid::moe

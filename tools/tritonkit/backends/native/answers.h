// The native backend's answer thread (config parameter ``answer_thread: true``): a computed batch's
// responses are written, its statistics reported and its requests released on a thread of the
// instance's own while the instance's thread gathers and runs the next batch. Why: through gRPC,
// Triton builds and queues each answer inside TRITONBACKEND_ResponseSend on the calling thread (about
// 30 us an answer on an H100 host: 1.6 ms per execution of MiniLM's ~56-row batches at c1024, a fifth
// of the instance's time per execution, during which it runs nothing). On a GPU the thread also waits
// for the batch's GPU work, so the instance gathers the next batch meanwhile; a lone request taken
// while nothing is in flight is answered by its taker (a hand-over would only add a thread's wake-up,
// about 0.06 ms for MiniLM's one request on an H100 host, with nothing to overlap). Answering every
// batch taken while idle by its taker cost MiniLM 12 % at c512: bursts lost their overlap.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace tk {

// Batches handed over for answering, answered in order on one thread. Each names the output slot
// it reads; a slot is taken before the batch is computed into it and freed once answered, so at
// most ``slots`` batches are computed ahead of their answers. Destroyed: answers what it holds, then
// joins its thread. ``answer`` must not throw.
template <typename Batch>
class Outbox {
 public:
  Outbox(size_t slots, std::function<void(Batch&)> answer) : busy_(slots, false), answer_(std::move(answer)) {
    thread_ = std::thread([this] { loop(); });
  }
  Outbox(const Outbox&) = delete;
  Outbox& operator=(const Outbox&) = delete;
  ~Outbox() {
    {
      std::lock_guard<std::mutex> guard(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }

  // A free slot, marked busy (waits while every slot's batch is still being answered).
  size_t take_slot() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      for (size_t s = 0; s < busy_.size(); ++s) {
        if (!busy_[s]) {
          busy_[s] = true;
          return s;
        }
      }
      changed_.wait(lock);
    }
  }

  // Whether nothing is posted or being answered (a batch taken now would overlap with nothing).
  bool idle() {
    std::lock_guard<std::mutex> guard(mutex_);
    return queue_.empty() && !answering_;
  }

  // Frees ``slot`` of a batch answered by its taker instead of being posted.
  void release(size_t slot) {
    {
      std::lock_guard<std::mutex> guard(mutex_);
      busy_[slot] = false;
    }
    changed_.notify_all();
  }

  void post(Batch batch) {
    {
      std::lock_guard<std::mutex> guard(mutex_);
      queue_.push_back(std::move(batch));
    }
    changed_.notify_all();
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      changed_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      Batch batch = std::move(queue_.front());
      queue_.pop_front();
      answering_ = true;
      lock.unlock();
      answer_(batch);
      lock.lock();
      answering_ = false;
      busy_[batch.slot] = false;
      changed_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Batch> queue_;
  std::vector<bool> busy_;
  bool stop_ = false;
  bool answering_ = false;
  std::function<void(Batch&)> answer_;
  std::thread thread_;
};

}  // namespace tk

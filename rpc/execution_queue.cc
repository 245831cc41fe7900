#include "rpc/execution_queue.h"

#include <algorithm>

namespace cubicle::rpc {

ExecutionQueue::ExecutionQueue(size_t slots, size_t max_waiting)
    : slots_(std::max<size_t>(1, slots)), max_waiting_(max_waiting) {
  workers_.reserve(slots_);
  for (size_t i = 0; i < slots_; ++i) workers_.emplace_back([this] { Work(); });
}

ExecutionQueue::~ExecutionQueue() { Stop(); }

bool ExecutionQueue::Submit(uint64_t ticket, Job job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Busy only when every slot is taken and the waiting line is full: a
    // free slot takes the job at once.
    if (stopping_ || waiting_.size() >= max_waiting_ + (slots_ - std::min(running_, slots_))) return false;
    waiting_.push_back(Waiting{ticket, std::move(job)});
  }
  turn_.notify_one();
  return true;
}

bool ExecutionQueue::Withdraw(uint64_t ticket) {
  Job job;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::find_if(waiting_.begin(), waiting_.end(), [&](const Waiting& w) { return w.ticket == ticket; });
    if (it == waiting_.end()) return false;
    job = std::move(it->job);
    waiting_.erase(it);
  }
  std::move(job)(false);
  return true;
}

void ExecutionQueue::WithdrawAll() {
  std::deque<Waiting> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    all.swap(waiting_);
  }
  for (Waiting& w : all) std::move(w.job)(false);
}

ExecutionQueue::CallerSlot::~CallerSlot() {
  if (queue_ != nullptr) queue_->Release();
}

std::optional<ExecutionQueue::CallerSlot> ExecutionQueue::TryRunHere() {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_ || running_ > 0 || !waiting_.empty()) return std::nullopt;
  ++running_;
  return CallerSlot(this);
}

void ExecutionQueue::Release() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    --running_;
  }
  turn_.notify_one();
}

size_t ExecutionQueue::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return running_;
}

size_t ExecutionQueue::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return waiting_.size();
}

void ExecutionQueue::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && workers_.empty()) return;
    stopping_ = true;
  }
  WithdrawAll();
  turn_.notify_all();
  for (std::thread& t : workers_) {
    if (t.joinable()) t.join();
  }
  workers_.clear();
}

void ExecutionQueue::Work() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    turn_.wait(lock, [&] { return stopping_ || (!waiting_.empty() && running_ < slots_); });
    if (waiting_.empty() || running_ >= slots_) {
      if (stopping_) return;
      continue;
    }
    Job job = std::move(waiting_.front().job);
    waiting_.pop_front();
    ++running_;
    lock.unlock();
    std::move(job)(true);
    job = nullptr;  // what it holds goes before the slot is free
    lock.lock();
    --running_;
    turn_.notify_one();
  }
}

}  // namespace cubicle::rpc

#include "rpc/running_executions.h"

#include <unistd.h>

#include <cstdint>

namespace cubicle::rpc {
namespace {

void Signal(int fd) {
  uint64_t one = 1;
  (void)!::write(fd, &one, sizeof(one));  // an eventfd: fails only when it would overflow
}

}  // namespace

RunningExecutions::RunningExecutions() = default;

RunningExecutions::Tracked::~Tracked() {
  if (owner_ == nullptr) return;
  std::lock_guard<std::mutex> lock(owner_->mu_);
  owner_->tracked_.erase(owner_->tracked_.find(fd_));
}

RunningExecutions::Tracked RunningExecutions::Track(int fd) {
  std::lock_guard<std::mutex> lock(mu_);
  tracked_.insert(fd);
  if (abandoned_) Signal(fd);
  return Tracked(this, fd);
}

void RunningExecutions::CancelAll() {
  std::lock_guard<std::mutex> lock(mu_);
  abandoned_ = true;
  for (int fd : tracked_) Signal(fd);
}

bool RunningExecutions::abandoned() const {
  std::lock_guard<std::mutex> lock(mu_);
  return abandoned_;
}

}  // namespace cubicle::rpc
